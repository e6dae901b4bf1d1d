//! What a NetworkManager keyfile can carry: [`unsafe_strings`] finds the strings of an nmstate
//! document that would change the meaning of the keyfiles nmstate writes from it, and
//! [`check_keyfile`] checks that a generated keyfile reads back as the groups and keys it was
//! written with.
//!
//! nmstate's `gen_conf` writes each setting as `key=value` with the value copied as it is: no
//! escaping, list items joined by `;` (nmstate 2.2, `nm_dbus/gen_conf/keyfile.rs`). NetworkManager
//! reads keyfiles with GLib's GKeyFile, which splits lines at `\n` (dropping a `\r` before it),
//! takes lines starting with `[` as group headers and with `#` as comments, splits `key=value`
//! at the first `=`, trims blanks around the key and before the value, and un-escapes `\s`,
//! `\n`, `\t`, `\r`, `\\` (and `\;` in lists) in values. So, in a string that nmstate may copy into
//! a keyfile:
//!
//! - a control character (C0, DEL, C1) is refused: `\n` and `\r` end the line, so the rest of
//!   the value becomes keys or groups of its own (`search: ["x\n[ipv4]\nmethod=disabled"]`); NUL
//!   cuts the C string; the others have no business in a network setting, and show as terminal
//!   escapes wherever the value is printed.
//! - a backslash is refused: GKeyFile would read `\n` in a value as a line break, `\s` as a blank,
//!   and a trailing `\` of a list item as escaping the `;` after it (two items become one).
//! - `;` is refused in an item of a list: nmstate joins items with `;`, so `a;b` would be two items.
//!   In a single value it is safe: GKeyFile reads a string to the end of its line.
//! - a leading blank is refused: GKeyFile drops it, so NetworkManager would read another value.
//!   A trailing blank is kept by GKeyFile, so it is safe.
//! - in a mapping key (nmstate writes some maps' keys as keyfile keys, e.g. OVS `external_ids` as
//!   `data.<key>`): also `=` (it would end the key early), `[` and `]` (GKeyFile reads `key[x]` as a
//!   translation of `key`), a leading `#` (a comment line), blanks at either end (trimmed), and the
//!   empty key.
//!
//! Safe in values: `=` (GKeyFile splits at the first `=`, which is the key's), and `#`, `[`, `]`
//! (they mean something only at the start of a line, where nmstate always writes a key). Other
//! Unicode (the line and paragraph separators U+2028 and U+2029, bidirectional controls, …) is
//! safe too: GKeyFile and NetworkManager split lines at `\n` only and take every other character
//! of a UTF-8 value as part of it. A document is a Rust string, so never invalid UTF-8. The boot
//! script reads keyfiles line by line (`read -r`) and only ever expands what it read in quotes,
//! so what keeps the lines of a keyfile keeps its lines too.

use std::collections::HashSet;
use std::fmt;

use yaml_serde::Value;

/// Why a string of an nmstate document cannot go into a keyfile.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TextFault {
    /// A control character (C0, DEL or C1).
    Control(char),
    Backslash,
    /// `;` in an item of a list.
    ListSeparator,
    LeadingBlank,
    /// In a mapping key: `=`, `[` or `]`.
    KeyCharacter(char),
    /// A mapping key starting with `#`.
    KeyComment,
    /// A mapping key with a blank at either end.
    KeyBlank,
    EmptyKey,
}

impl fmt::Display for TextFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextFault::Control(c) => {
                write!(f, "contains the control character '{}' (U+{:04X})", c.escape_debug(), u32::from(*c))
            }
            TextFault::Backslash => f.write_str("contains a backslash, which NetworkManager would read as an escape"),
            TextFault::ListSeparator => f.write_str("contains ';', which separates list items in a keyfile"),
            TextFault::LeadingBlank => f.write_str("starts with a blank, which NetworkManager would drop"),
            TextFault::KeyCharacter(c) => write!(f, "contains '{c}', which a keyfile key cannot carry"),
            TextFault::KeyComment => f.write_str("starts with '#', which would make a comment line"),
            TextFault::KeyBlank => f.write_str("starts or ends with a blank, which NetworkManager would drop"),
            TextFault::EmptyKey => f.write_str("is empty"),
        }
    }
}

/// One string of a document that cannot go into a keyfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsafeString {
    /// Where, as `dns-resolver.config.search[0]`; the empty path is the document itself.
    pub path: String,
    /// The mapping key at `path` that is at fault, when it is a key rather than a value.
    pub key: Option<String>,
    pub fault: TextFault,
}

impl fmt::Display for UnsafeString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() { "the document" } else { &self.path };
        match &self.key {
            // Debug quotes the key and escapes whatever in it is not printable.
            Some(key) => write!(f, "{path} has a key {key:?} that {}", self.fault),
            None => write!(f, "{path} {}", self.fault),
        }
    }
}

/// Every string (value or mapping key) of `doc` that cannot go into a keyfile, in document order,
/// each with its path. The whole tree is walked, whatever the field: nmstate copies strings of
/// many fields into keyfiles, and which ones changes between its versions.
pub fn unsafe_strings(doc: &Value) -> Vec<UnsafeString> {
    let mut found = Vec::new();
    walk(doc, &mut String::new(), false, &mut found);
    found
}

fn walk(value: &Value, path: &mut String, list_item: bool, found: &mut Vec<UnsafeString>) {
    match value {
        Value::String(s) => {
            if let Some(fault) = value_fault(s, list_item) {
                found.push(UnsafeString { path: path.clone(), key: None, fault });
            }
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(item, path, true, found);
                path.truncate(len);
            }
        }
        Value::Mapping(map) => {
            for (key, item) in map {
                let key = untagged(key);
                if let Value::String(k) = key
                    && let Some(fault) = key_fault(k)
                {
                    found.push(UnsafeString { path: path.clone(), key: Some(k.clone()), fault });
                    // The key is reported; a path through it would repeat what is wrong with it.
                    continue;
                }
                let len = path.len();
                push_key(path, key);
                // A key that is itself a collection (YAML allows it) is checked as a value.
                if !matches!(key, Value::String(_)) {
                    walk(key, path, false, found);
                }
                walk(item, path, false, found);
                path.truncate(len);
            }
        }
        Value::Tagged(tagged) => walk(&tagged.value, path, list_item, found),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The value under any tags: a tagged key is checked as the string it tags.
fn untagged(mut value: &Value) -> &Value {
    while let Value::Tagged(tagged) = value {
        value = &tagged.value;
    }
    value
}

/// `.name` for plain keys, `["…"]` (escaped) for others.
fn push_key(path: &mut String, key: &Value) {
    match key {
        Value::String(k) if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) => {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(k);
        }
        Value::String(k) => path.push_str(&format!("[{k:?}]")),
        Value::Number(n) => path.push_str(&format!("[{n}]")),
        Value::Bool(b) => path.push_str(&format!("[{b}]")),
        Value::Null => path.push_str("[null]"),
        // A sequence or mapping as a key: walked as a value under this placeholder.
        Value::Sequence(_) | Value::Mapping(_) | Value::Tagged(_) => path.push_str("[?]"),
    }
}

fn value_fault(s: &str, list_item: bool) -> Option<TextFault> {
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Some(TextFault::Control(c));
    }
    if s.contains('\\') {
        return Some(TextFault::Backslash);
    }
    if list_item && s.contains(';') {
        return Some(TextFault::ListSeparator);
    }
    if s.starts_with(' ') {
        return Some(TextFault::LeadingBlank);
    }
    None
}

fn key_fault(k: &str) -> Option<TextFault> {
    if k.is_empty() {
        return Some(TextFault::EmptyKey);
    }
    if let Some(fault) = value_fault(k, false) {
        return Some(fault);
    }
    if let Some(c) = k.chars().find(|c| matches!(c, '=' | '[' | ']')) {
        return Some(TextFault::KeyCharacter(c));
    }
    if k.starts_with('#') {
        return Some(TextFault::KeyComment);
    }
    if k.ends_with(' ') {
        return Some(TextFault::KeyBlank);
    }
    None
}

/// The first line of a keyfile that does not read back as written: its number (from 1), what is
/// wrong with it, and the line itself (quoted, escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {number} {fault}: {line:?}")]
pub struct KeyfileError {
    pub number: usize,
    pub fault: LineFault,
    pub line: String,
}

/// What is wrong with a line of a keyfile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineFault {
    #[error("has the control character '{}'", .0.escape_debug())]
    ControlCharacter(char),
    #[error("starts with a blank")]
    StartsWithBlank,
    #[error("is not a group header")]
    NotAGroupHeader,
    #[error("repeats a group")]
    RepeatedGroup,
    #[error("is neither a group, a key nor a comment")]
    NoKey,
    #[error("has a key before the first group")]
    KeyBeforeGroup,
    #[error("has no valid key")]
    InvalidKey,
    #[error("repeats a key of its group")]
    RepeatedKey,
}

/// Checks that `keyfile` reads back, line by line, as the groups and keys it was written with:
/// every line is blank, a `#` comment, a `[group]` header or `key=value`; the first group comes
/// before any key; no group appears twice and no key twice in its group; no control character
/// but the line breaks. `Err` names the first line that breaks this (its number, from 1).
///
/// nmstate's values are checked before it runs ([`unsafe_strings`]); this is what stands behind
/// that check, so that a value it missed refuses the build rather than ship a keyfile whose
/// settings are not the ones asked for.
pub fn check_keyfile(keyfile: &str) -> Result<(), KeyfileError> {
    let mut groups: HashSet<&str> = HashSet::new();
    let mut keys: HashSet<&str> = HashSet::new();
    let mut in_group = false;
    for (index, line) in keyfile.split('\n').enumerate() {
        let number = index + 1;
        let bad = |fault| Err(KeyfileError { number, fault, line: line.to_string() });
        if let Some(c) = line.chars().find(|c| c.is_control()) {
            return bad(LineFault::ControlCharacter(c));
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            return bad(LineFault::StartsWithBlank);
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some(name) = rest.strip_suffix(']') else { return bad(LineFault::NotAGroupHeader) };
            if name.is_empty() || name.contains(['[', ']']) {
                return bad(LineFault::NotAGroupHeader);
            }
            if !groups.insert(name) {
                return bad(LineFault::RepeatedGroup);
            }
            keys.clear();
            in_group = true;
            continue;
        }
        let Some((key, _)) = line.split_once('=') else { return bad(LineFault::NoKey) };
        if !in_group {
            return bad(LineFault::KeyBeforeGroup);
        }
        if key.is_empty() || key.ends_with(char::is_whitespace) || key.contains(['[', ']']) {
            return bad(LineFault::InvalidKey);
        }
        if !keys.insert(key) {
            return bad(LineFault::RepeatedKey);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(yaml: &str) -> Vec<String> {
        unsafe_strings(&yaml_serde::from_str(yaml).unwrap()).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn every_string_of_the_tree_is_walked_with_its_path() {
        assert_eq!(
            found(
                "interfaces:\n- name: eth0\n  description: \"a\\nb\"\n  ipv4: {address: [{ip: \"1.2.3.4\\r\"}]}\n\
                 dns-resolver: {config: {search: [ok, \"x;y\", \"\\\\s\"]}}\n\
                 routes: {config: [{destination: \" 0.0.0.0/0\"}]}\n"
            ),
            [
                "interfaces[0].description contains the control character '\\n' (U+000A)",
                "interfaces[0].ipv4.address[0].ip contains the control character '\\r' (U+000D)",
                "dns-resolver.config.search[1] contains ';', which separates list items in a keyfile",
                "dns-resolver.config.search[2] contains a backslash, which NetworkManager would read as an escape",
                "routes.config[0].destination starts with a blank, which NetworkManager would drop",
            ]
        );
        // ';' is fine outside lists; '=', '#', '[', ']' and trailing blanks in values, and other
        // Unicode, everywhere.
        assert!(found("a: {b: \"x;y\", c: \"k=v #[g] \", d: [\"u\\u2028\\u202e\\u00a0v\"]}\n").is_empty());
    }

    #[test]
    fn keys_and_the_characters_shown() {
        assert_eq!(
            found(
                "ovs-db:\n  external_ids: {\"a=b\": x, \"[g]\": y, \"#c\": z, \"t \": w, \"\": v, \"e\\u001b\": u, fine: \"\\u0085\"}\n"
            ),
            [
                "ovs-db.external_ids has a key \"a=b\" that contains '=', which a keyfile key cannot carry",
                "ovs-db.external_ids has a key \"[g]\" that contains '[', which a keyfile key cannot carry",
                "ovs-db.external_ids has a key \"#c\" that starts with '#', which would make a comment line",
                "ovs-db.external_ids has a key \"t \" that starts or ends with a blank, which NetworkManager would drop",
                "ovs-db.external_ids has a key \"\" that is empty",
                "ovs-db.external_ids has a key \"e\\u{1b}\" that contains the control character '\\u{1b}' (U+001B)",
                "ovs-db.external_ids.fine contains the control character '\\u{85}' (U+0085)",
            ]
        );
        // Keys that are not plain names are quoted in the path; a tagged value is looked into.
        assert_eq!(
            found("\"a b\": {c: !tag \"\\0\"}\n"),
            ["[\"a b\"].c contains the control character '\\0' (U+0000)"]
        );
        // No message carries a control character as it is.
        for message in found("\"\\u009b\\n\": {\"\\r\": [\"\\u001b[2J\"]}\n") {
            assert!(!message.chars().any(char::is_control), "{message:?}");
        }
    }

    #[test]
    fn keyfiles_that_read_back_and_those_that_do_not() {
        let good = "[connection]\nid=eth0\n# note\n\n[ipv4]\naddress1=192.0.2.1/24\nmethod=manual\ndns-search=a;b;\n";
        assert_eq!(check_keyfile(good), Ok(()));
        assert_eq!(check_keyfile("[user]\nx=a=b [c] #d \n"), Ok(()));
        let cases = [
            ("[connection]\nid=a\n[connection]\nautoconnect=false\n", "line 3 repeats a group: \"[connection]\""),
            ("[ipv4]\ndns-search=x\n[ipv6]\n[ipv4]\nmethod=disabled\n", "line 4 repeats a group: \"[ipv4]\""),
            ("[user]\nd=x\nd=y\n", "line 3 repeats a key of its group: \"d=y\""),
            ("[user]\nd=x\nstray\n", "line 3 is neither a group, a key nor a comment: \"stray\""),
            ("id=x\n[connection]\n", "line 1 has a key before the first group: \"id=x\""),
            ("[connection]\nid=x\r\n", "line 2 has the control character '\\r': \"id=x\\r\""),
            ("[a]b\n", "line 1 is not a group header: \"[a]b\""),
            ("[a]\n x=1\n", "line 2 starts with a blank: \" x=1\""),
            ("[a]\nk[de]=1\n", "line 2 has no valid key: \"k[de]=1\""),
        ];
        for (text, error) in cases {
            assert_eq!(check_keyfile(text).unwrap_err().to_string(), error, "{text:?}");
        }
    }
}
