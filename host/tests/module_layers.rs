//! The host crate's modules form layers: every module uses only modules of lower layers (the
//! table in `src/lib.rs`), and no two files of the crate import each other, directly or
//! through others. Read from the source: each `crate::…` and `super::…` path outside comments
//! and `#[cfg(test)]` modules is an edge from the file to the module it names. Calls of methods
//! that a higher layer adds to a lower layer's type (`impl Gpu` in `launch::workspace`) name no
//! module and are not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`launch::sm90`, `plan`, `` for the root) → its source text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            (parts.join("::"), std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The code of `text` without comments and without its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `text` names after `prefix` (`crate::` or `super::`), with `use` groups expanded at
/// every depth: `crate::{a, b::{c, d}}` gives `a`, `b::c` and `b::d`.
fn paths(text: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        tree(rest, String::new(), &mut out);
    }
    out
}

/// The paths of one `use` tree at the start of `text` (a path, or a path ending in a `{...}`
/// group), each after `base`.
fn tree(text: &str, base: String, out: &mut Vec<String>) {
    let head: String = text
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    let path = format!("{base}{head}");
    let Some(group) = text[head.len()..].strip_prefix('{') else {
        if !path.is_empty() {
            out.push(path);
        }
        return;
    };
    // Split the group at its top-level commas.
    let (mut depth, mut start) = (0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                tree(group[start..i].trim_start(), path.clone(), out);
                return;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                tree(group[start..i].trim_start(), path.clone(), out);
                start = i + 1;
            }
            _ => {}
        }
    }
}

/// The module a path names: its longest prefix that is a module, after the root's re-exports
/// (`crate::Gpu` is `gpu`).
fn resolve(
    path: &str,
    mods: &BTreeMap<String, String>,
    reexports: &BTreeMap<String, String>,
) -> String {
    let parts: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    if let [one] = parts[..]
        && let Some(m) = reexports.get(one)
    {
        return m.clone();
    }
    (0..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|p| mods.contains_key(p))
        .unwrap_or_default()
}

/// Edges between the crate's modules (file → named module), without self-edges and edges to
/// the root.
fn edges() -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, u32>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let lib = &mods[""];
    // `pub use module::{A, B};` at the root.
    let mut reexports = BTreeMap::new();
    for line in lib.lines().filter(|l| l.starts_with("pub use ")) {
        let rest = line.trim_start_matches("pub use ").trim_end_matches(';');
        if let Some((m, items)) = rest.split_once("::") {
            for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
                reexports.insert(item.trim().to_string(), m.to_string());
            }
        }
    }
    // `//! | layer | [`module`] | what |` rows of the crate docs.
    let mut layers = BTreeMap::new();
    for line in lib.lines().filter(|l| l.starts_with("//! | ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if let (Ok(n), Some(name)) = (cells[1].parse::<u32>(), cells[2].split('`').nth(1)) {
            layers.insert(name.to_string(), n);
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, text) in &mods {
        if m.is_empty() {
            continue;
        }
        let text = code(text);
        let named =
            paths(&text, "crate::")
                .into_iter()
                .chain(paths(&text, "super::").into_iter().map(|p| {
                    // `super::super::x` climbs once more per `super::`.
                    let mut base: Vec<&str> = m.split("::").collect();
                    base.pop();
                    let mut rest = p.as_str();
                    while let Some(r) = rest.strip_prefix("super::") {
                        base.pop();
                        rest = r;
                    }
                    base.push(rest);
                    base.join("::")
                }));
        // A module's own children, named by `mod x; pub use x::…`.
        let children = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                ["pub use ", "pub(crate) use ", "use "]
                    .iter()
                    .find_map(|p| l.strip_prefix(p))
            })
            .map(|p| format!("{m}::{}", p.split("::").next().unwrap_or("")));
        for target in named.chain(children) {
            let t = resolve(&target, &mods, &reexports);
            if !t.is_empty() && t != *m {
                graph.entry(m.clone()).or_default().insert(t);
            }
        }
    }
    (graph, layers)
}

#[test]
fn paths_expand_nested_groups() {
    let got = paths(
        "use crate::{a, b::{c, d::E}, f::G};\nlet x = crate::h::i(); y::crate::no;",
        "crate::",
    );
    assert_eq!(got, ["a", "b::c", "b::d::E", "f::G", "h::i"]);
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap_or(m)
}

#[test]
fn every_module_uses_only_lower_layers() {
    let (graph, layers) = edges();
    let mut wrong = Vec::new();
    for (from, tos) in &graph {
        let Some(&lf) = layers.get(top(from)) else {
            wrong.push(format!(
                "`{}` is not in the layer table of src/lib.rs",
                top(from)
            ));
            continue;
        };
        for to in tos.iter().filter(|t| top(t) != top(from)) {
            match layers.get(top(to)) {
                Some(&lt) if lt < lf => {}
                Some(&lt) => wrong.push(format!("{from} (layer {lf}) uses {to} (layer {lt})")),
                None => wrong.push(format!("`{}` is not in the layer table", top(to))),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_file_imports_its_importers() {
    let (graph, _) = edges();
    // Depth-first search for a back edge; reports the first cycle found.
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for t in graph.get(n).into_iter().flatten() {
            match state.get(t.as_str()) {
                Some(1) => {
                    let i = stack.iter().position(|s| s == t).unwrap();
                    let mut cycle = stack[i..].to_vec();
                    cycle.push(t.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(t, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if !state.contains_key(n.as_str())
            && let Some(c) = visit(n, &graph, &mut state, &mut Vec::new())
        {
            panic!("import cycle: {}", c.join(" → "));
        }
    }
    // The check sees the crate's real structure, not an empty graph.
    assert!(graph.len() > 20, "{graph:?}");
    assert!(
        graph["launch::dispatch"].contains("launch::sm90"),
        "{graph:?}"
    );
}
