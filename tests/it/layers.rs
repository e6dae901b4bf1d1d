//! The layers of `src/` (see `src/lib.rs`) as a rule the build keeps: a layer's production code
//! uses only layers below it, nothing but tests uses the testkit, and no two modules depend on each
//! other in a circle. Test code (`#[cfg(test)]` items and modules) may reach anywhere.
//!
//! The check reads the source, not the compiler's output: it removes comments, string literals and
//! test-only items, then takes every `crate::…` path (including those inside `use crate::{…}`
//! groups) and every `super::`/`self::` path, and resolves each to the module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, lowest first. A layer may use those of a lower rank only; layers of one rank are
/// independent of each other.
const LAYERS: &[(&str, u32)] = &[
    ("keylocks", 0),
    ("errors", 1),
    ("plan", 1),
    ("auth", 1),
    ("formats", 2),
    ("hosts", 2),
    ("resources", 3),
    ("content", 4),
    ("store", 4),
    ("image", 5),
    ("http", 6),
    ("pool", 7),
    ("controllers", 8),
    ("api", 9),
    ("cli", 10),
];

/// Compiled for tests only: nothing in a layer may use it outside test code.
const TEST_ONLY: &[&str] = &["testkit"];

#[test]
fn every_layer_uses_only_the_layers_below_it_and_no_modules_form_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = check(&src);
    assert!(problems.is_empty(), "layer rules broken:\n{}", problems.join("\n"));
}

#[test]
fn the_check_finds_an_upward_use_a_testkit_use_and_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "lib.rs",
        "pub mod formats;\npub mod image;\npub mod api;\n#[cfg(any(test, feature = \"testkit\"))]\npub mod testkit;\n",
    );
    write("formats/mod.rs", "pub mod iso;\npub mod kargs;\n");
    // An upward use hidden in a group, next to a legal one; a comment and a string that name
    // higher layers are not uses.
    write(
        "formats/iso.rs",
        "use crate::{formats::kargs, image::Images};\n// crate::api::x\nconst S: &str = \"crate::api::y\";\n",
    );
    // A cycle between siblings.
    write("formats/kargs.rs", "use super::iso::X;\n#[cfg(test)]\nmod tests { use crate::api::Z; }\n");
    write("image/mod.rs", "use crate::testkit::Hub;\npub struct Images;\n");
    write("api/mod.rs", "#[cfg(test)]\nmod tests { use crate::testkit::Hub; }\n");
    write("testkit/mod.rs", "use crate::api::Thing;\n");
    let problems = check(dir.path());
    let text = problems.join("\n");
    assert!(text.contains("formats::iso uses image"), "{text}");
    assert!(text.contains("image uses testkit"), "{text}");
    assert!(text.contains("cycle: formats::iso -> formats::kargs"), "{text}");
    assert!(!text.contains("api"), "test code and comments are not uses: {text}");
    assert_eq!(problems.len(), 3, "{text}");
}

/// A module of the crate: its path (`controllers::metal3::bmac`) and whether it is test-only.
struct Module {
    code: String,
    test_only: bool,
}

/// The crate's one policy for poisoned `std::sync` locks (`src/keylocks.rs`): production code takes
/// them through `Locked`/`LockedRw`, never by unwrapping (a panic elsewhere would then fail every later
/// caller) nor by recovering by hand (the policy in many spellings).
#[test]
fn production_code_takes_std_locks_only_through_the_policy() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = lock_policy_breaches(&load(&src));
    assert!(problems.is_empty(), "locks taken outside keylocks::Locked:\n{}", problems.join("\n"));
}

#[test]
fn the_lock_policy_check_finds_an_unwrap_and_a_hand_recovery() {
    let module = |code: &str| Module { code: blank_comments_and_literals(code), test_only: false };
    let modules = BTreeMap::from([
        ("a".to_string(), module("fn f(m: &Mutex<u8>) { let g = m.lock().unwrap(); }")),
        ("b".to_string(), module("fn f(m: &RwLock<u8>) { m.write().unwrap_or_else(|p| p.into_inner()); }")),
        ("c".to_string(), module("fn f(m: &Mutex<u8>) { let g = m.locked(); } // m.lock().unwrap()")),
    ]);
    assert_eq!(lock_policy_breaches(&modules), ["a: .lock().unwrap()", "b: p.into_inner()"]);
}

/// The error policy (`src/errors.rs`): no function answers `Result<_, String>`; an error is a type
/// that says where it came from and keeps its cause.
#[test]
fn production_code_returns_no_string_errors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = string_error_breaches(&load(&src));
    assert!(problems.is_empty(), "Result<_, String> (see src/errors.rs):\n{}", problems.join("\n"));
}

#[test]
fn the_string_error_check_finds_one() {
    let module = |code: &str| Module { code: blank_comments_and_literals(code), test_only: false };
    let modules = BTreeMap::from([
        ("a".to_string(), module("fn f() -> Result<Vec<u8>, String> { todo!() }")),
        ("b".to_string(), module("fn f() -> Result<u8, MyError> { todo!() } // Result<(), String>")),
        ("c".to_string(), module("type R = Result<(),\n    String>;")),
    ]);
    assert_eq!(string_error_breaches(&modules), ["a", "c"]);
}

fn string_error_breaches(modules: &BTreeMap<String, Module>) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, module) in modules {
        if module.test_only {
            continue;
        }
        let code: String = module.code.split_whitespace().collect::<Vec<_>>().join("");
        let found = code.match_indices("Result<").any(|(at, _)| {
            // The Result's own arguments: up to the `>` that closes it.
            let mut depth = 0;
            let args: String = code[at + "Result".len()..]
                .chars()
                .take_while(|c| {
                    match c {
                        '<' => depth += 1,
                        '>' => depth -= 1,
                        _ => {}
                    }
                    depth > 0
                })
                .collect();
            args.ends_with(",String")
        });
        if found {
            problems.push(path.clone());
        }
    }
    problems
}

fn lock_policy_breaches(modules: &BTreeMap<String, Module>) -> Vec<String> {
    const TAKEN_BY_HAND: [&str; 5] =
        [".lock().unwrap()", ".read().unwrap()", ".write().unwrap()", "p.into_inner()", "PoisonError::into_inner"];
    let mut problems = Vec::new();
    for (path, module) in modules {
        if module.test_only || path == "keylocks" || path.starts_with("testkit") {
            continue;
        }
        let code: String = module.code.split_whitespace().collect::<Vec<_>>().join("");
        for pattern in TAKEN_BY_HAND {
            if code.contains(&pattern.replace(' ', "")) {
                problems.push(format!("{path}: {pattern}"));
            }
        }
    }
    problems
}

fn check(src: &Path) -> Vec<String> {
    let modules = load(src);
    let rank: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut problems = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, module) in &modules {
        if path.is_empty() {
            continue;
        }
        let layer = path.split("::").next().unwrap();
        for used in uses(path, &module.code, &modules) {
            let used_layer = used.split("::").next().unwrap();
            if module.test_only {
                continue;
            }
            if TEST_ONLY.contains(&used_layer) && !TEST_ONLY.contains(&layer) {
                problems.push(format!("{path} uses {used_layer}, which is built for tests only"));
            } else if used_layer != layer {
                match (rank.get(layer), rank.get(used_layer)) {
                    (Some(a), Some(b)) if b < a => {}
                    (Some(_), Some(_)) => {
                        problems.push(format!("{path} uses {used_layer}, which is not below {layer}"))
                    }
                    (None, _) if TEST_ONLY.contains(&layer) => {}
                    (None, _) => problems.push(format!("{layer} is in no layer (add it to LAYERS)")),
                    (_, None) => problems.push(format!("{used_layer} is in no layer (add it to LAYERS)")),
                }
            }
            let related = used.starts_with(&format!("{path}::")) || path.starts_with(&format!("{used}::"));
            if used != *path && !related {
                edges.entry(path.clone()).or_default().insert(used);
            }
        }
    }
    for cycle in cycles(&edges) {
        problems.push(format!("cycle: {}", cycle.join(" -> ")));
    }
    problems.sort();
    problems.dedup();
    problems
}

/// Every module under `src`, by path, with its code stripped of comments, literals and test items.
fn load(src: &Path) -> BTreeMap<String, Module> {
    let mut out = BTreeMap::new();
    let mut pending = vec![(String::new(), src.join("lib.rs"), false)];
    while let Some((path, file, test_only)) = pending.pop() {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = blank_comments_and_literals(&text);
        let (code, children) = without_test_items(&code);
        for (child, child_test_only) in children {
            let dir = if file.ends_with("mod.rs") || file.ends_with("lib.rs") {
                file.parent().unwrap().to_path_buf()
            } else {
                file.with_extension("")
            };
            let child_file = [dir.join(format!("{child}.rs")), dir.join(&child).join("mod.rs")]
                .into_iter()
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("module {child} of {} not found", file.display()));
            let child_path = if path.is_empty() { child.clone() } else { format!("{path}::{child}") };
            pending.push((child_path, child_file, test_only || child_test_only));
        }
        if !path.is_empty() && file.file_name().is_some_and(|n| n == "main.rs") {
            continue;
        }
        out.insert(path, Module { code, test_only });
    }
    out
}

/// The modules `code` (of module `path`) names, resolved to the longest module path that exists.
fn uses(path: &str, code: &str, modules: &BTreeMap<String, Module>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let parent = path.rsplit_once("::").map(|(p, _)| p).unwrap_or("");
    for (prefix, base) in [("crate::", ""), ("super::", parent), ("self::", path)] {
        let mut from = 0;
        while let Some(at) = code[from..].find(prefix) {
            let start = from + at;
            from = start + prefix.len();
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            for tail in paths_after(&code[from..]) {
                let full = if base.is_empty() { tail } else { format!("{base}::{tail}") };
                if let Some(module) = longest_module(&full, modules) {
                    out.insert(module);
                }
            }
        }
    }
    out
}

/// The paths that follow `crate::` at the start of `rest`: one, or each of a `{…}` group's.
fn paths_after(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 1;
        let end = group
            .char_indices()
            .find(|&(_, c)| {
                depth += (c == '{') as i32 - (c == '}') as i32;
                depth == 0
            })
            .map(|(i, _)| i)
            .unwrap_or(group.len());
        let inner = &group[..end];
        let mut parts = Vec::new();
        let (mut depth, mut part_start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[part_start..i]);
                    part_start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[part_start..]);
        return parts.into_iter().flat_map(paths_after).collect();
    }
    let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
    let path = path.trim_end_matches(':').to_string();
    if path.is_empty() { Vec::new() } else { vec![path] }
}

fn longest_module(full: &str, modules: &BTreeMap<String, Module>) -> Option<String> {
    let segments: Vec<&str> = full.split("::").collect();
    (1..=segments.len()).rev().map(|n| segments[..n].join("::")).find(|p| modules.contains_key(p))
}

/// `text` with comments blanked and string and char literals emptied, lengths kept.
fn blank_comments_and_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
                blank(&mut out, i, end);
                i = end;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let body = i + 2 + hashes;
                let end = text[body..].find(&close).map_or(b.len(), |p| body + p + close.len());
                blank(&mut out, body, end - close.len());
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j.min(b.len()));
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{7f}'), or else a lifetime.
                let end = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..].iter().position(|&c| c == b'\'').map(|p| i + 2 + p)
                } else {
                    let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 1 + len)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i + 1, end);
                        i = end + 1;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8: only ASCII is written over whole characters")
}

/// `code` without its `#[cfg(test)]` items, and the child modules it declares (`mod x;`), each
/// with whether it is test-only.
fn without_test_items(code: &str) -> (String, Vec<(String, bool)>) {
    let mut out = String::new();
    let mut children = Vec::new();
    let mut rest = code;
    loop {
        let test_attr = ["#[cfg(test)]", "#[cfg(any(test"].iter().filter_map(|a| rest.find(a)).min();
        let (kept, item) = match test_attr {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        out.push_str(kept);
        children.extend(declared_modules(kept).into_iter().map(|m| (m, false)));
        if item.is_empty() {
            break;
        }
        let end = item_end(item);
        children.extend(declared_modules(&item[..end]).into_iter().map(|m| (m, true)));
        rest = &item[end..];
    }
    (out, children)
}

/// Where the item starting with an attribute at the start of `item` ends: after its `;` or its
/// closing brace, whichever comes first at depth 0.
fn item_end(item: &str) -> usize {
    let after_attr = item.find(']').map_or(0, |p| p + 1);
    let mut depth = 0;
    for (i, c) in item[after_attr..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return after_attr + i + 1;
                }
            }
            ';' if depth == 0 => return after_attr + i + 1,
            _ => {}
        }
    }
    item.len()
}

/// The `mod x;` declarations in `code` (not inline `mod x { … }` blocks).
fn declared_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.trim();
        let decl = ["pub(crate) mod ", "pub mod ", "mod "].iter().find_map(|p| line.strip_prefix(p));
        if let Some(name) = decl.and_then(|d| d.strip_suffix(';')) {
            out.push(name.trim().to_string());
        }
    }
    out
}

/// Each cycle among `edges`, as the modules of one strongly connected component, sorted.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: finishing order on the graph, then components on the reversed graph.
    let mut nodes: BTreeSet<&String> = edges.keys().collect();
    nodes.extend(edges.values().flatten());
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for &start in &nodes {
        if !seen.insert(start) {
            continue;
        }
        let mut stack = vec![(start, edges.get(start).map(|s| s.iter().collect::<Vec<_>>()).unwrap_or_default())];
        while let Some((node, next)) = stack.last_mut() {
            match next.pop() {
                Some(n) if seen.insert(n) => {
                    stack.push((n, edges.get(n).map(|s| s.iter().collect()).unwrap_or_default()));
                }
                Some(_) => {}
                None => {
                    order.push(*node);
                    stack.pop();
                }
            }
        }
    }
    let mut reversed: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reversed.entry(to).or_default().push(from);
        }
    }
    let mut assigned = BTreeSet::new();
    let mut out = Vec::new();
    for &start in order.iter().rev() {
        if !assigned.insert(start) {
            continue;
        }
        let mut component = vec![start.clone()];
        let mut stack = vec![start];
        while let Some(n) = stack.pop() {
            for &m in reversed.get(n).into_iter().flatten() {
                if assigned.insert(m) {
                    component.push(m.clone());
                    stack.push(m);
                }
            }
        }
        if component.len() > 1 {
            component.sort();
            out.push(component);
        }
    }
    out
}
