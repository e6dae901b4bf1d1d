//! The iPXE script of an InfraEnv and the kernel command line it carries, checked to read back as
//! exactly what was meant.

use std::sync::Arc;

use super::{DiscoveryContent, ImageError};

/// Fixed kernel arguments of the iPXE boot script (spec-controllers.md §8.1).
const IPXE_KARGS: &str = "random.trust_cpu=on rd.luks.options=discard ignition.firstboot ignition.platform.id=metal console=tty1 console=ttyS1,115200n8 coreos.inst.persistent-kargs=\"console=tty1 console=ttyS1,115200n8\"";

/// The longest kernel command line the kernel reads whole (`COMMAND_LINE_SIZE` of x86 and arm64,
/// the terminating NUL included); a longer one is cut short without a word.
pub const KERNEL_COMMAND_LINE_MAX: usize = 2048;

/// The kernel command line of the iPXE script: the fixed arguments with the rootfs URL, then the
/// InfraEnv's `spec.kernelArguments` edits, which fail here when they cannot apply or the line would
/// be longer than the kernel reads.
pub fn ipxe_kernel_arguments(rootfs_url: &str, content: &DiscoveryContent) -> Result<String, ImageError> {
    let kargs = format!("initrd=initrd coreos.live.rootfs_url={rootfs_url} {IPXE_KARGS}");
    let kargs = if content.karg_ops.is_empty() {
        kargs
    } else {
        crate::formats::kargs::apply_ops(&kargs, &content.karg_ops)
            .map_err(|source| ImageError::KernelArguments { index: None, source })?
    };
    if kargs.len() >= KERNEL_COMMAND_LINE_MAX {
        return Err(ImageError::Invalid(format!(
            "spec.kernelArguments: the iPXE kernel command line would be {} bytes, and the kernel reads at most {}",
            kargs.len(),
            KERNEL_COMMAND_LINE_MAX - 1
        )));
    }
    Ok(kargs)
}

/// The iPXE script that boots `kernel_url` with `kargs` and `initrd_url`, checked to read back as
/// exactly those four commands (see [`check_ipxe_script`]).
pub fn render_ipxe_script(initrd_url: &str, kernel_url: &str, kargs: &str) -> Result<String, ImageError> {
    static TEMPLATE: std::sync::LazyLock<Result<minijinja::Environment<'static>, Arc<minijinja::Error>>> =
        std::sync::LazyLock::new(|| {
            let mut env = minijinja::Environment::new();
            env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
            env.add_template("boot.ipxe", include_str!("../../templates/ipxe/boot.ipxe"))?;
            Ok(env)
        });
    let template_error = |e| ImageError::IpxeTemplate(Arc::new(e));
    let template = TEMPLATE
        .as_ref()
        .map_err(|e| ImageError::IpxeTemplate(e.clone()))?
        .get_template("boot.ipxe")
        .map_err(template_error)?;
    let mut script = template
        .render(minijinja::context! { initrd_url => initrd_url, kernel_url => kernel_url, kargs => kargs })
        .map_err(template_error)?;
    // The template engine drops the file's final newline; iPXE wants complete lines.
    script.push('\n');
    check_ipxe_script(&script).map_err(ImageError::IpxeScript)?;
    Ok(script)
}

/// Checks that an iPXE boot script reads, as iPXE reads it, as exactly `#!ipxe`, one `initrd`, one
/// `kernel` and `boot`: each line one command (no `;`, `&&` or `||` token chaining another, no
/// comment token cutting one short, no `${...}` expansion). The inputs are checked where they come
/// in (kernel arguments, URLs); this is the last word before a script leaves.
pub fn check_ipxe_script(script: &str) -> Result<(), IpxeScriptError> {
    let lines: Vec<&str> = script.split('\n').collect();
    let commands = ["#!ipxe", "initrd", "kernel", "boot"];
    if lines.len() != commands.len() + 1 || lines.last() != Some(&"") {
        return Err(IpxeScriptError::Lines { found: lines.len().saturating_sub(1), expected: commands.len() });
    }
    for (line, command) in lines.iter().zip(commands) {
        if line.bytes().any(|b| b.is_ascii_control()) {
            return Err(IpxeScriptError::ControlCharacter { command });
        }
        let mut tokens = line.split_ascii_whitespace();
        if tokens.next() != Some(command) {
            return Err(IpxeScriptError::NotTheCommand { command });
        }
        if command == "#!ipxe" {
            continue;
        }
        if let Some(t) = tokens.find(|t| matches!(*t, ";" | "&&" | "||") || t.starts_with('#') || t.contains('$')) {
            return Err(IpxeScriptError::Token { command, token: t.to_string() });
        }
    }
    Ok(())
}

/// How an iPXE script would not read as the four commands it is meant to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpxeScriptError {
    #[error("{found} lines, expected {expected}")]
    Lines { found: usize, expected: usize },
    #[error("a control character in the {command} line")]
    ControlCharacter { command: &'static str },
    #[error("the {command} line does not start with {command}")]
    NotTheCommand { command: &'static str },
    #[error("the {command} line holds {token:?}, which iPXE would not pass to {command}")]
    Token { command: &'static str, token: String },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Part;
    use std::sync::Arc;
    /// Splits a kernel command line as the kernel does (`next_arg`): at spaces outside double quotes.
    fn kernel_arguments_of(cmdline: &str) -> Vec<String> {
        let mut args = vec![String::new()];
        let mut quoted = false;
        for c in cmdline.chars() {
            match c {
                '"' => {
                    quoted = !quoted;
                    args.last_mut().unwrap().push(c);
                }
                ' ' if !quoted => {
                    if !args.last().unwrap().is_empty() {
                        args.push(String::new());
                    }
                }
                c => args.last_mut().unwrap().push(c),
            }
        }
        args.retain(|a| !a.is_empty());
        args
    }

    use crate::formats::kargs::KargOp;

    const ROOTFS: &str = "http://hub.example:8080/boot-artifacts/rootfs?arch=x86_64&version=4.20";

    fn content_with(karg_ops: Vec<KargOp>) -> DiscoveryContent {
        DiscoveryContent {
            ignition: Arc::from("{}"),
            archive: Arc::new(Part::new(vec![])),
            ramdisk: None,
            static_hosts: 0,
            static_network: None,
            karg_appends: vec![],
            karg_ops,
            digest: [0; 32],
            verified: Default::default(),
        }
    }

    /// Words that make kernel arguments, and the characters iPXE, GRUB, the kernel and text formats
    /// treat specially.
    fn arbitrary_argument() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            4 => "[a-z0-9._-]{1,6}",
            2 => Just("=".to_string()),
            2 => Just("\"".to_string()),
            2 => Just(" ".to_string()),
            1 => Just(",".to_string()),
            1 => prop::sample::select(vec![";", "&&", "||", "#", "$", "${net0/mac}", "\\", "'", "`", "{", "}", "<", ">", "|", "&"])
                .prop_map(str::to_string),
            1 => prop::sample::select(vec!["\n", "\r", "\t", "\u{0}", "\u{1b}", "\u{7f}", "\u{85}", "\u{2028}", "é"])
                .prop_map(str::to_string),
            1 => Just(" chain http://127.0.0.1:9/pwned.ipxe ".to_string()),
        ];
        proptest::collection::vec(piece, 1..8).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        /// Any kernel argument is either refused, or reads back as itself, one argument, wherever it
        /// goes: the iPXE script (line by line, as iPXE splits it), the kernel command line, and the
        /// ISO's karg areas (GRUB and ISOLINUX lines).
        #[test]
        fn a_kernel_argument_is_refused_or_reads_back_as_itself(arg in arbitrary_argument()) {
            let op = KargOp::Append(arg.clone());
            if crate::formats::kargs::check_op(&op).is_err() {
                return Ok(());
            }
            let wanted = arg.trim().to_string();
            let fixed = ipxe_kernel_arguments(ROOTFS, &content_with(vec![])).unwrap();
            let kargs = ipxe_kernel_arguments(ROOTFS, &content_with(vec![op.clone()])).unwrap();
            let script = render_ipxe_script("http://hub.example:8080/initrd?api_key=t", "http://hub.example:8080/kernel", &kargs).unwrap();
            let lines: Vec<&str> = script.lines().collect();
            proptest::prop_assert_eq!(lines.len(), 4, "{}", script);
            let cmdline = lines[2].strip_prefix("kernel http://hub.example:8080/kernel ").unwrap();
            let mut expected = kernel_arguments_of(&fixed);
            expected.push(wanted.clone());
            proptest::prop_assert_eq!(kernel_arguments_of(cmdline), expected.clone());
            // The ISO's areas: one line, the same arguments, nothing for GRUB to expand or run.
            let base = "coreos.liveiso=rhcos-420 ignition.firstboot ignition.platform.id=metal";
            let line = crate::formats::kargs::apply_ops(base, &[op]).unwrap();
            let area = crate::formats::kargs::render_area(&line, 1024, b'\n', b'#').unwrap();
            let text = std::str::from_utf8(&area).unwrap();
            proptest::prop_assert_eq!(text.matches('\n').count(), 1);
            let read_back = kernel_arguments_of(&crate::formats::kargs::parse_area(&area, b'\n', b'#').unwrap());
            proptest::prop_assert_eq!(read_back.last(), Some(&wanted));
        }
    }
}
