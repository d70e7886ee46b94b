//! The house rule of docs/architecture.md, checked on the source: no module imports one that
//! imports it back — neither between the crate's top-level modules (`output` ↔ `tokenizer` was
//! one) nor between sibling modules inside one (`optimizer::sanitize` ↔ `optimizer::trainer`).
//! Imports are read from `crate::…` and `super::…` paths outside `#[cfg(test)]` code. And the
//! layers: no job module names another job, and no knowledge module names a job.

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

/// The jobs of docs/architecture.md's middle floor, as module paths: a top-level module, or a
/// module inside a knowledge one (`tokenizer::merge`). Only the cli may name several.
const JOBS: [&str; 7] = [
    "embeddings",
    "optimizer",
    "dcp",
    "blocks",
    "tokenizer::merge",
    "doctor",
    "inspect",
];

/// The job a module path belongs to, if any (`optimizer::plan::x` → `optimizer`).
fn job_of(path: &[String]) -> Option<&'static str> {
    let joined = path.join("::");
    JOBS.iter()
        .copied()
        .find(|j| joined == *j || joined.starts_with(&format!("{j}::")))
}

/// Every module path a file names, test code and `use crate::{a, b::c}` groups included:
/// `crate::…`, and `super::…` (chains of them) resolved against the file's module. Comments
/// are left out (an intra-doc link is not an import).
fn named_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let words = |s: &str| -> Vec<String> {
        s.split("::")
            .map(str::trim)
            .take_while(|w| {
                !w.is_empty()
                    && w.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            .map(str::to_string)
            .collect()
    };
    // `a::b`, or each top-level item of `{a, b::{c, d}}`, with `base` before it.
    let expand = |base: Vec<String>, rest: &str| -> Vec<Vec<String>> {
        let Some(group) = rest.strip_prefix('{') else {
            let mut p = base;
            p.extend(words(rest));
            return vec![p];
        };
        let (mut depth, mut items, mut start) = (0usize, Vec::new(), 0usize);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&group[start..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items
            .into_iter()
            .map(|it| {
                let mut p = base.clone();
                p.extend(words(it.trim()));
                p
            })
            .collect()
    };
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        out.extend(expand(Vec::new(), &code[at + 7..]));
    }
    // `super` is the module holding this one (a mod.rs file is its folder's module).
    let mut at = 0;
    while let Some(i) = code[at..].find("super::") {
        let mut rest = &code[at + i..];
        let mut base = module.to_vec();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        out.extend(expand(base, rest));
        at = code.len() - rest.len();
    }
    out
}

/// `file: job A names job B (path)` for every file of a job naming another job, and for every
/// file outside the jobs and the cli naming a job (knowledge points down, never up).
fn job_violations(files: &[(String, Vec<String>, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (name, module, text) in files {
        let own = job_of(module);
        if own.is_none() && module[0] == "cli" {
            continue;
        }
        for p in named_paths(text, module) {
            match (own, job_of(&p)) {
                (Some(a), Some(b)) if a != b => {
                    found.push(format!("{name}: job {a} names job {b} ({})", p.join("::")))
                }
                (None, Some(b)) => found.push(format!(
                    "{name}: knowledge names job {b} ({})",
                    p.join("::")
                )),
                _ => {}
            }
        }
    }
    found
}

#[test]
fn no_job_imports_another_job_and_knowledge_imports_no_job() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    modules(&src, &src, &mut files);
    let read: Vec<(String, Vec<String>, String)> = files
        .into_iter()
        .map(|(p, m)| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.strip_prefix(&src).unwrap().display().to_string(), m, text)
        })
        .collect();
    // Every job is a module that exists (a renamed job would make this check vacuous).
    for j in JOBS {
        let path: Vec<String> = j.split("::").map(str::to_string).collect();
        assert!(
            read.iter().any(|(_, m, _)| *m == path),
            "job module {j} not found under src/"
        );
    }
    assert_eq!(job_violations(&read), Vec::<String>::new());
}

#[test]
fn the_job_import_check_finds_planted_imports() {
    let m = |s: &str| -> Vec<String> { s.split("::").map(str::to_string).collect() };
    let files = vec![
        (
            "optimizer/plan.rs".to_string(),
            m("optimizer::plan"),
            "use crate::jobs::extend_embeddings::{self, Target};\nuse crate::rows::init::Init;\n".to_string(),
        ),
        (
            "blocks.rs".into(),
            m("blocks"),
            "use crate::{model, tokenizer::merge::run};\n// crate::jobs::check_vocab in a comment\n".into(),
        ),
        (
            "doctor/dcp.rs".into(),
            m("doctor::dcp"),
            "use super::{Finding, Report};\nfn f() { super::super::dcp::sanitize::run(); }\n"
                .into(),
        ),
        (
            "rows/select.rs".into(),
            m("rows::select"),
            "use crate::vocab;\n#[cfg(test)]\nmod tests { use crate::jobs::sanitize_checkpoint::Options; }\n"
                .into(),
        ),
        (
            "cli/check_vocab.rs".into(),
            m("cli::check_vocab"),
            "use crate::{doctor, embeddings, optimizer};\n".into(),
        ),
    ];
    assert_eq!(
        job_violations(&files),
        vec![
            "optimizer/plan.rs: job optimizer names job embeddings (embeddings)".to_string(),
            "blocks.rs: job blocks names job tokenizer::merge (tokenizer::merge::run)".into(),
            "doctor/dcp.rs: job doctor names job dcp (dcp::sanitize)".into(),
            "rows/select.rs: knowledge names job optimizer (optimizer)".into(),
        ]
    );
}
