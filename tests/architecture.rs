//! The house rule of docs/architecture.md, checked on the source: no module imports one that
//! imports it back — neither between the crate's top-level modules (`output` ↔ `tokenizer` was
//! one) nor between sibling modules inside one (`optimizer::sanitize` ↔ `optimizer::trainer`).
//! Imports are read from `crate::…` and `super::…` paths outside `#[cfg(test)]` code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every library source file with its module path (`src/output/folder.rs` → [output, folder]).
fn modules(dir: &Path, base: &Path, out: &mut Vec<(PathBuf, Vec<String>)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            modules(&p, base, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(base).unwrap().with_extension("");
            let mut m: Vec<String> = rel
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if m.last().is_some_and(|l| l == "mod") {
                m.pop();
            }
            if m != ["lib"] {
                out.push((p, m));
            }
        }
    }
}

/// The module paths a file's non-test code names through `crate::` and `super::`.
fn imports(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let word = |s: &str| -> Vec<String> {
        s.split("::")
            .take_while(|w| {
                !w.is_empty()
                    && w.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        out.push(word(&code[at + 7..]));
    }
    // `super` is the module holding this one (a mod.rs file is its folder's module).
    let parent = &module[..module.len().saturating_sub(1)];
    for (at, _) in code.match_indices("super::") {
        let mut p = parent.to_vec();
        p.extend(word(&code[at + 7..]));
        out.push(p);
    }
    out
}

/// Groups of nodes that reach each other (Tarjan), those of more than one node.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        found: Vec<Vec<String>>,
    }
    fn visit(t: &mut T<'_>, v: &str) {
        let i = t.index.len();
        t.index.insert(v.into(), i);
        t.low.insert(v.into(), i);
        t.stack.push(v.into());
        t.on.insert(v.into());
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = w == v;
                group.push(w);
                if done {
                    break;
                }
            }
            if group.len() > 1 {
                t.found.push(group);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.found
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    modules(&src, &src, &mut files);
    let known: BTreeSet<Vec<String>> = files.iter().map(|(_, m)| m.clone()).collect();
    // The longest known module a path names ([output, folder, AtomicFolder] → [output, folder]).
    let resolve = |p: &[String]| -> Option<Vec<String>> {
        (1..=p.len())
            .rev()
            .map(|n| p[..n].to_vec())
            .find(|c| known.contains(c))
    };
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut siblings: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, m) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for target in imports(&text, m).iter().filter_map(|p| resolve(p)) {
            if target[0] != m[0] {
                top.entry(m[0].clone())
                    .or_default()
                    .insert(target[0].clone());
            } else if m.len() > 1 && target.len() > 1 && target[1] != m[1] {
                // Two children of one top-level module (its mod.rs, the parent, aside).
                let (a, b) = (
                    format!("{}::{}", m[0], m[1]),
                    format!("{}::{}", target[0], target[1]),
                );
                siblings.entry(a).or_default().insert(b);
            }
        }
    }
    assert!(top.len() > 5, "the scan found the modules: {top:?}");
    assert!(
        top.get("cli").is_some_and(|s| s.contains("output")),
        "the scan reads imports: {top:?}"
    );
    assert_eq!(
        cycles(&top),
        Vec::<Vec<String>>::new(),
        "top-level modules importing each other"
    );
    assert_eq!(
        cycles(&siblings),
        Vec::<Vec<String>>::new(),
        "sibling modules importing each other"
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    g.entry("d".into()).or_default().insert("a".into());
    let mut found = cycles(&g);
    found[0].sort();
    assert_eq!(found, vec![vec!["a".to_string(), "b".into(), "c".into()]]);
}
