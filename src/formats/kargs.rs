//! Kernel-argument editing and the byte format of a live ISO's karg embed areas.
//!
//! A CoreOS live ISO keeps its kernel command line in fixed-size areas inside the boot loader
//! configs (`<kargs><end><pad...>`, spec-images.md §3.3). Customizing an image means rendering a
//! new area of exactly the same size, so the change is a same-length byte overlay and every
//! other byte of the image is served unchanged. Editing follows coreos-installer's semantics
//! (spec-images.md §3.6) so that an image we customize reads back, with `coreos-installer iso kargs show`, as
//! the user asked.

/// Why an edit or an area could not be produced or parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KargsError {
    /// The new command line plus its end character does not fit. Wording is coreos-installer's.
    #[error("kargs too large for area: {needed} vs {size}")]
    TooLarge { needed: usize, size: usize },
    #[error("Wrong input, format should be: KEY=OLD=NEW")]
    BadReplace(String),
    /// A line break or other control character would end the boot loader line early and turn
    /// the rest of the argument into boot loader commands.
    #[error("kernel arguments must not contain control characters (found {byte:#04x} at byte {at})")]
    ControlCharacter { byte: u8, at: usize },
    #[error("karg area {what} byte {byte:#04x} is not ASCII")]
    NonAsciiFill { what: &'static str, byte: u8 },
    #[error("invalid UTF-8 in karg area")]
    InvalidUtf8,
    /// An argument that is not one plain kernel argument (see [`check_argument`]). The value is
    /// shown escaped, so that a control character in it cannot reach a log line or a condition raw.
    #[error(
        "{arg:?} is not a kernel argument bootstream can write into boot loader configs and iPXE scripts: {reason}"
    )]
    Unsafe { arg: String, reason: &'static str },
}

/// Characters no argument may hold anywhere, quoted or not: each means something to one of the
/// parsers a kernel argument passes through before the kernel's. iPXE expands `${...}`, ends a
/// command at a `;`, `&&` or `||` token and skips from a token starting with `#`; GRUB's script
/// syntax (the ISO's `grub.cfg` carries the karg area) treats `$ ; & | < > { }`, quotes and `\` as
/// syntax and `#` as a comment; ISOLINUX and the kernel know only spaces and double quotes.
const BOOT_LOADER_METACHARACTERS: &[u8] = b"$;&|<>{}#\\'`";

/// Checks that `arg` is one kernel argument (`param` or `param=value`) that every parser on its way
/// reads the same: printable ASCII; spaces only between double quotes, which must pair up (the
/// kernel's own quoting, as assisted-service's API pattern `^(?:(?:[^ \t\n\r"]+)|(?:"[^"]*"))+$`
/// allows); and none of [`BOOT_LOADER_METACHARACTERS`]. assisted-service's pattern lets a line
/// break or an iPXE command through between quotes (`x="a ; chain http://... #"`); this does not.
pub fn check_argument(arg: &str) -> Result<(), KargsError> {
    let refuse = |reason| Err(KargsError::Unsafe { arg: arg.to_string(), reason });
    if arg.is_empty() {
        return refuse("it is empty");
    }
    if arg.bytes().any(|b| b.is_ascii_control()) {
        return refuse("control characters (line breaks, tabs...) would end or split the boot loader line");
    }
    if !arg.is_ascii() {
        return refuse("only printable ASCII is written into boot loader configs");
    }
    if arg.bytes().any(|b| BOOT_LOADER_METACHARACTERS.contains(&b)) {
        return refuse("$ ; & | < > { } # \\ ' and ` mean something to iPXE or GRUB");
    }
    let mut quoted = false;
    for b in arg.bytes() {
        match b {
            b'"' => quoted = !quoted,
            b' ' if !quoted => return refuse("a space outside double quotes makes two arguments"),
            _ => {}
        }
    }
    if quoted {
        return refuse("an unpaired double quote would take in the arguments after it");
    }
    Ok(())
}

/// Checks one requested edit: its argument, and for `replace` the `KEY=OLD=NEW` form.
pub fn check_op(op: &KargOp) -> Result<(), KargsError> {
    match op {
        KargOp::Append(arg) | KargOp::Delete(arg) => check_argument(arg.trim()),
        KargOp::Replace(spec) => {
            check_argument(spec.trim())?;
            parse_replace(spec).map(drop)
        }
    }
}

/// One requested change to a kernel command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KargOp {
    /// Add an argument at the end.
    Append(String),
    /// `KEY=OLD=NEW`: change `KEY=OLD` into `KEY=NEW` wherever it appears.
    Replace(String),
    /// Remove every occurrence of an argument (matched exactly, e.g. `quiet` or `console=ttyS0`).
    Delete(String),
}

/// Applies `ops` to `current` the way coreos-installer does: all deletes, then all appends, then
/// all replaces, whatever their order in `ops`; matching is plain substring matching on
/// space-delimited arguments (no quoting awareness). The result is trimmed.
pub fn apply_ops(current: &str, ops: &[KargOp]) -> Result<String, KargsError> {
    // Padding with spaces lets ` arg ` match the first and last arguments too.
    let mut kargs = format!(" {current} ");
    for op in ops {
        if let KargOp::Delete(arg) = op {
            kargs = kargs.replace(&format!(" {} ", arg.trim()), " ");
        }
    }
    for op in ops {
        if let KargOp::Append(arg) = op {
            kargs.push_str(arg.trim());
            kargs.push(' ');
        }
    }
    for op in ops {
        if let KargOp::Replace(spec) = op {
            let (key, old, new) = parse_replace(spec)?;
            kargs = kargs.replace(&format!(" {key}={old} "), &format!(" {key}={new} "));
        }
    }
    Ok(kargs.trim().to_string())
}

/// Splits `KEY=OLD=NEW`: exactly three non-empty `=`-separated parts (not trimmed).
fn parse_replace(spec: &str) -> Result<(&str, &str, &str), KargsError> {
    let parts: Vec<&str> = spec.split('=').collect();
    match parts[..] {
        [key, old, new] if !key.is_empty() && !old.is_empty() && !new.is_empty() => Ok((key, old, new)),
        _ => Err(KargsError::BadReplace(spec.to_string())),
    }
}

/// Longest command line (in bytes, after trimming) an area of `size` bytes can hold: one byte
/// is always taken by the end character.
pub fn capacity(size: usize) -> usize {
    size.saturating_sub(1)
}

/// Renders a whole area: the trimmed `kargs`, the `end` byte, then `pad` up to `size` bytes.
pub fn render_area(kargs: &str, size: usize, end: u8, pad: u8) -> Result<Vec<u8>, KargsError> {
    check_fill(end, pad)?;
    let kargs = kargs.trim();
    if let Some(at) = kargs.bytes().position(|b| b.is_ascii_control()) {
        return Err(KargsError::ControlCharacter { byte: kargs.as_bytes()[at], at });
    }
    if kargs.len() >= size {
        return Err(KargsError::TooLarge { needed: kargs.len() + 1, size });
    }
    let mut area = Vec::with_capacity(size);
    area.extend_from_slice(kargs.as_bytes());
    area.push(end);
    area.resize(size, pad);
    Ok(area)
}

/// Reads the command line out of an area: strips trailing `pad` bytes, then trailing `end`
/// bytes, then surrounding whitespace (spec-images.md §3.4).
pub fn parse_area(area: &[u8], end: u8, pad: u8) -> Result<String, KargsError> {
    check_fill(end, pad)?;
    let text = std::str::from_utf8(area).map_err(|_| KargsError::InvalidUtf8)?;
    Ok(text.trim_end_matches(char::from(pad)).trim_end_matches(char::from(end)).trim().to_string())
}

/// End and pad bytes are single characters in kargs.json; only ASCII ones are both one byte on
/// disk and one `char` when parsing, so only those can round-trip.
fn check_fill(end: u8, pad: u8) -> Result<(), KargsError> {
    for (what, byte) in [("end", end), ("pad", pad)] {
        if !byte.is_ascii() {
            return Err(KargsError::NonAsciiFill { what, byte });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::KargOp::*;
    use super::*;

    #[test]
    fn real_kernel_arguments_pass() {
        for arg in [
            "quiet",
            "rd.net.timeout.carrier=60",
            "isolcpus=1,2,10-20,100-2000:2/25",
            "console=ttyS0,115200n8",
            "ip=192.168.1.10::192.168.1.1:255.255.255.0:host-0:ens3:none",
            "ip=[fd00::10]::[fd00::1]:64:host-0:ens3:none",
            "nameserver=[fd00::53]",
            "rd.znet=qeth,0.0.bdf0,0.0.bdf1,0.0.bdf2,layer2=1,portno=0",
            "vfio-pci.ids=10de:1eb8",
            "coreos.inst.persistent-kargs=\"console=tty1 console=ttyS1,115200n8\"",
            "systemd.unit=multi-user.target",
            "module_blacklist=nouveau,i915",
            "coreos.live.rootfs_url=http://hub.example:8080/boot-artifacts/4.20/x86_64/rootfs.img",
        ] {
            assert_eq!(check_argument(arg), Ok(()), "{arg}");
        }
        assert_eq!(check_op(&Replace("console=tty0=ttyS0".into())), Ok(()));
    }

    #[test]
    fn arguments_other_parsers_would_read_differently_are_refused() {
        for (arg, reason) in [
            ("x=\"a ; chain http://127.0.0.1:9/pwned.ipxe #\"", "mean something to iPXE or GRUB"),
            ("x=\"a\nb\"", "control characters"),
            ("a\tb", "control characters"),
            ("a b", "a space outside double quotes"),
            ("x=\"a b", "unpaired double quote"),
            ("x=${net0/mac}", "mean something to iPXE or GRUB"),
            ("x=a;reboot", "mean something to iPXE or GRUB"),
            ("url=http://h/p?a=1&b=2", "mean something to iPXE or GRUB"),
            ("x=a||y", "mean something to iPXE or GRUB"),
            ("#x", "mean something to iPXE or GRUB"),
            ("x=\\n", "mean something to iPXE or GRUB"),
            ("x='a'", "mean something to iPXE or GRUB"),
            ("x=caf\u{e9}", "printable ASCII"),
            ("", "empty"),
        ] {
            let err = check_argument(arg).expect_err(arg).to_string();
            assert!(err.contains(reason), "{arg:?}: {err}");
            // The value is quoted escaped: no raw control character reaches a condition or a log.
            assert!(!err.bytes().any(|b| b.is_ascii_control()), "{err:?}");
        }
        assert!(check_op(&Replace("a=b".into())).is_err(), "a replace must be KEY=OLD=NEW");
        assert!(check_op(&Delete("a;b".into())).is_err());
    }

    fn apply(current: &str, ops: &[KargOp]) -> String {
        apply_ops(current, ops).unwrap()
    }

    #[test]
    fn delete_matches_whole_arguments() {
        let base = "foo bar foobar";
        assert_eq!(apply(base, &[Delete("foo".into())]), "bar foobar");
        assert_eq!(apply(base, &[Delete("bar".into())]), "foo foobar");
        assert_eq!(apply(base, &[Delete("foobar".into())]), "foo bar");
        assert_eq!(apply(base, &[Delete("foo bar".into())]), "foobar");
        assert_eq!(apply(base, &[Delete("bar".into()), Delete("foo".into())]), "foobar");
        assert_eq!(apply(base, &[Delete("fo".into())]), base);
        assert_eq!(apply("a=1 b a=1", &[Delete("  a=1 ".into())]), "b");
    }

    #[test]
    fn append_and_replace() {
        assert_eq!(apply("a b", &[Append(" c ".into())]), "a b c");
        assert_eq!(apply("", &[Append("c".into())]), "c");
        assert_eq!(
            apply("console=tty0 x console=tty0", &[Replace("console=tty0=ttyS0".into())]),
            "console=ttyS0 x console=ttyS0"
        );
        assert_eq!(apply("console=tty00", &[Replace("console=tty0=ttyS0".into())]), "console=tty00");
        for bad in ["a=b", "a=b=c=d", "=b=c", "a==c", "a=b=", "abc"] {
            assert_eq!(
                apply_ops("a=b", &[Replace(bad.into())]).unwrap_err().to_string(),
                "Wrong input, format should be: KEY=OLD=NEW",
                "{bad}"
            );
        }
    }

    #[test]
    fn fixed_order_regardless_of_given_order() {
        // Replace listed first still runs after the append, and delete before both.
        let ops = [
            Replace("foobar=oldval=newval".into()),
            Append("foobar=oldval".into()),
            Append("dodo".into()),
            Delete("mitigations=auto,nosmt".into()),
        ];
        assert_eq!(apply("mitigations=auto,nosmt ignition.firstboot", &ops), "ignition.firstboot foobar=newval dodo");
        // Delete listed after the append cannot remove the appended argument.
        assert_eq!(apply("a", &[Append("b".into()), Delete("b".into())]), "a b");
    }

    #[test]
    fn render_and_parse() {
        let area = render_area("  a b  ", 10, b'\n', b'#').unwrap();
        assert_eq!(area, b"a b\n######");
        assert_eq!(parse_area(&area, b'\n', b'#').unwrap(), "a b");
        let area = render_area("a", 4, 0, 0).unwrap();
        assert_eq!(area, b"a\0\0\0");
        assert_eq!(parse_area(&area, 0, 0).unwrap(), "a");
        assert_eq!(parse_area(b"\xff#", b'\n', b'#').unwrap_err().to_string(), "invalid UTF-8 in karg area");
        assert!(matches!(render_area("a", 4, b'\n', 0xff), Err(KargsError::NonAsciiFill { .. })));
        assert!(matches!(
            render_area("a\nset root=evil", 100, b'\n', b'#'),
            Err(KargsError::ControlCharacter { byte: b'\n', at: 1 })
        ));
    }

    /// spec-images.md §8.3 item 3: with `usable = size - (len(default) + 1) - 1`, appending a karg
    /// of `usable` characters fits and one more character does not.
    #[test]
    fn capacity_rule() {
        let default = "mitigations=auto,nosmt coreos.liveiso=fedora-coreos-38.20230718.dev.0 ignition.firstboot ignition.platform.id=metal";
        let size = 1139;
        let usable = size - (default.len() + 1) - 1;
        let fits = "x".repeat(usable);
        let kargs = apply(default, &[Append(fits.clone())]);
        assert!(kargs.ends_with(&format!(" {fits}")));
        let area = render_area(&kargs, size, b'\n', b'#').unwrap();
        assert_eq!(area.len(), size);
        assert_eq!(area[size - 1], b'\n');
        let kargs = apply(default, &[Append("x".repeat(usable + 1))]);
        let err = render_area(&kargs, size, b'\n', b'#').unwrap_err();
        assert_eq!(err, KargsError::TooLarge { needed: size + 1, size });
        assert_eq!(err.to_string(), format!("kargs too large for area: {} vs {size}", size + 1));
        assert_eq!(capacity(size), size - 1);
    }

    #[test]
    fn too_large_message_matches_coreos_installer() {
        // coreos-installer's verified message for a 1216-byte command line in a 1139-byte area
        let err = render_area(&"y".repeat(1216), 1139, b'\n', b'#').unwrap_err();
        assert_eq!(err.to_string(), "kargs too large for area: 1217 vs 1139");
    }

    /// spec-images.md §8.3 item 5 against the fixtures: a pristine area holds exactly the rendered
    /// default, and `-a foobar=val` gives `<default> foobar=val` + end + pad fill.
    #[test]
    fn ground_truth_against_fixtures() {
        use crate::formats::iso9660::IsoFs;
        use crate::formats::iso9660::fixtures::fixture;
        use crate::formats::liveiso::LiveIso;

        for name in [
            "embed-areas-2021-09.iso",
            "embed-areas-2021-12.iso",
            "embed-areas-2022-02.iso",
            "embed-areas-2022-09.iso",
            "embed-areas-2023-03.x86_64.iso",
            "embed-areas-2023-07.x86_64.iso",
        ] {
            let iso = IsoFs::open(fixture(name)).unwrap();
            let live = LiveIso::from_iso(&iso).unwrap();
            let kargs = live.kargs.expect(name);
            assert_eq!(kargs.current, kargs.default, "{name} is pristine");
            for area in &kargs.areas {
                let mut on_disk = vec![0u8; kargs.size];
                iso.read_at(area.offset, &mut on_disk, "karg area").unwrap();
                let rendered = render_area(&kargs.default, kargs.size, area.end, area.pad).unwrap();
                assert_eq!(rendered, on_disk, "{name} area at {}", area.offset);

                let modified = apply(&kargs.current, &[Append("foobar=val".into())]);
                let rendered = render_area(&modified, kargs.size, area.end, area.pad).unwrap();
                let mut expected = format!("{} foobar=val\n", kargs.default).into_bytes();
                expected.resize(kargs.size, b'#');
                assert_eq!(rendered, expected, "{name}");
                assert_eq!(parse_area(&rendered, area.end, area.pad).unwrap(), modified);
            }
        }
    }
}
