//! The core's modules form layers: no module of `broker/src/core` uses a module that uses it
//! back, directly or through others, and no submodule reaches up for an item of
//! `core/mod.rs`, which only composes the core. A folder (`queue/`, `engine/`) counts as one
//! module, and so does `core/mod.rs`.
//!
//! Read from the sources: every `super::` path that climbs to the core's level and every
//! `crate::core::` path names the module it uses (its first segment, or each first segment of
//! a `{...}` group); a segment that is no module is an item of `core/mod.rs`. Comments are
//! skipped (a documentation link is no use), and so are a file's unit tests (`#[cfg(test)]`
//! at the start of a line and what follows), whose `super::` is the file's own module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MOD: &str = "mod.rs";

#[test]
fn core_modules_never_use_a_module_that_uses_them() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let modules = module_names(&core);
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&core) {
        let relative = file.strip_prefix(&core).expect("under src/core");
        let (module, depth) = module_of(relative);
        let text = std::fs::read_to_string(&file).expect("readable source");
        let code: String = text
            .lines()
            .take_while(|line| *line != "#[cfg(test)]")
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let used = uses.entry(module.clone()).or_default();
        for name in used_at_core_level(&code, depth, module == MOD) {
            let target = if modules.contains(&name) { name } else { MOD.to_owned() };
            if target != module {
                used.insert(target);
            }
        }
        if module == MOD {
            // `core/mod.rs` declares and composes every module.
            used.extend(modules.iter().cloned());
        }
    }
    let reaching_up: Vec<&String> =
        uses.iter().filter(|(m, used)| *m != MOD && used.contains(MOD)).map(|(m, _)| m).collect();
    let cycles = cycles(&uses);
    assert!(
        reaching_up.is_empty() && cycles.is_empty(),
        "modules using an item of core/mod.rs: {reaching_up:?}\nmodules using each other in a \
         circle: {cycles:?}\nwhat each module uses: {uses:#?}"
    );
}

/// The core's modules: its `.rs` files and folders, by name (`mod.rs` for itself).
fn module_names(core: &Path) -> BTreeSet<String> {
    std::fs::read_dir(core)
        .expect("src/core")
        .map(|entry| entry.expect("entry").path())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_owned();
            if path.is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").filter(|stem| *stem != "mod").map(str::to_owned)
            }
        })
        .collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("readable folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The core module a file belongs to, and how many `super::` its code needs to reach the
/// core's level minus one (0 for `core/x.rs` and `core/x/mod.rs`, 1 for `core/x/y.rs`, ...).
fn module_of(relative: &Path) -> (String, usize) {
    let parts: Vec<&str> = relative.iter().filter_map(|p| p.to_str()).collect();
    if parts == [MOD] {
        return (MOD.to_owned(), 0);
    }
    let module = parts[0].strip_suffix(".rs").unwrap_or(parts[0]).to_owned();
    let mut depth = parts.len() - 1;
    if parts.last() == Some(&MOD) {
        depth -= 1;
    }
    (module, depth)
}

/// The first segments of every path in `code` that starts at the core's level.
fn used_at_core_level(code: &str, depth: usize, is_core_mod: bool) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let preceded_by_ident = at > 0 && is_ident_byte(bytes[at - 1]);
        if !preceded_by_ident && rest.starts_with("crate::core::") {
            at += "crate::core::".len();
            at = first_segments(code, at, &mut names);
        } else if !preceded_by_ident && rest.starts_with("super::") && !is_core_mod {
            let mut climbs = 0;
            while code[at..].starts_with("super::") {
                climbs += 1;
                at += "super::".len();
            }
            if climbs == depth + 1 {
                at = first_segments(code, at, &mut names);
            }
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    names
}

/// Reads an identifier, or a `{...}` group's top-level first identifiers, at `at`.
fn first_segments(code: &str, at: usize, names: &mut Vec<String>) -> usize {
    let bytes = code.as_bytes();
    if bytes.get(at) != Some(&b'{') {
        let end = ident_end(bytes, at);
        if end > at {
            names.push(code[at..end].to_owned());
        }
        return end;
    }
    let (mut depth, mut expect_name, mut i) = (0usize, true, at + 1);
    while i < bytes.len() {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' if depth == 0 => return i + 1,
            b'}' => depth -= 1,
            b',' if depth == 0 => expect_name = true,
            byte if expect_name && depth == 0 && is_ident_byte(byte) => {
                let end = ident_end(bytes, i);
                names.push(code[i..end].to_owned());
                expect_name = false;
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    i
}

fn ident_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && is_ident_byte(bytes[at]) {
        at += 1;
    }
    at
}

fn is_ident_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Every group of modules that use each other in a circle (strongly connected components of
/// more than one module, or a module using itself).
fn cycles(uses: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(module) = stack.pop() {
            for next in uses.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        uses.keys().map(|module| (module, reach(module))).collect();
    let mut groups: BTreeSet<Vec<String>> = BTreeSet::new();
    for (module, reached) in &reachable {
        if !reached.contains(*module) {
            continue;
        }
        let group: Vec<String> = reached
            .iter()
            .filter(|other| reachable.get(other).is_some_and(|back| back.contains(*module)))
            .cloned()
            .collect();
        groups.insert(group);
    }
    groups.into_iter().collect()
}
