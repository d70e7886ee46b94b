//! The house rules of docs/architecture.md, checked on the source.
//!
//! - Faces: every job is a folder `src/jobs/<job>/`; its binary is `bin/<job with - for _>.rs`,
//!   which runs `cli::main_of("<tool>")`; `src/cli/<job>.rs` is its command line, and the cli's
//!   tool table sends `"<tool>"` to it. The job list is read from `src/jobs/`, never written here.
//! - Layers: floor (`dtype`, `error`, `rng`, `nonfinite`, `mapped`, `vocab`, `rowmap`, `plan`) < `output` < `formats` < knowledge
//!   (every other top-level module) < `jobs` < `cli`. Arrows point down or stay in a layer; no
//!   job names another job.
//! - No cycles at any depth: with every module path cut to its first d names, for every d, no
//!   module reaches itself. At d = 1 that is the top-level modules; deeper, it is siblings and
//!   a parent (its `mod.rs`) with its children: a parent may name a child, a child may then not
//!   name its parent (`super::sniff`, `crate::formats::Checkpoint` from inside `formats`).
//!
//! Imports are the module paths a file names: `crate::…`, `super::…` (chains of them),
//! `self::child`, and a child named by a relative path from its parent (`dcp::is_dcp` in
//! `formats/mod.rs`); a `pub use` is followed to what it re-exports. Comments are left out (an
//! intra-doc link is not an import). The cycle check reads the code before `#[cfg(test)]` (a
//! test may reach up); the layer and job checks read test code too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;
type Graph = BTreeMap<String, BTreeSet<String>>;

/// One library source file: its path under `src/`, its module path, its text.
struct Source {
    path: String,
    module: Module,
    text: String,
}

/// One import: the module `from` names the module `to` (in `file`, as `named`).
#[derive(Clone)]
struct Arrow {
    from: Module,
    to: Module,
    file: String,
    named: String,
}

/// The module path of a file under `src/` (`output/folder.rs` → [output, folder],
/// `formats/mod.rs` → [formats]); None for the crate root.
fn module_of(rel: &str) -> Option<Module> {
    let rel = rel.strip_suffix(".rs")?;
    let mut m: Module = rel.split('/').map(str::to_string).collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    (m != ["lib"] && !m.is_empty()).then_some(m)
}

/// Every `.rs` file under `dir`, as (path relative to `base` with `/`, text).
fn read_tree(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            read_tree(&p, base, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(base).unwrap();
            let rel: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into()).collect();
            out.push((rel.join("/"), std::fs::read_to_string(&p).unwrap()));
        }
    }
    out.sort();
}

fn sources(files: &[(String, String)]) -> Vec<Source> {
    files
        .iter()
        .filter_map(|(path, text)| {
            module_of(path).map(|module| Source {
                path: path.clone(),
                module,
                text: text.clone(),
            })
        })
        .collect()
}

/// The text without comments, and without what follows `#[cfg(test)]` (or
/// `#[cfg(all(test, …))]`) unless `tests`.
fn code_of(text: &str, tests: bool) -> String {
    let cut = ["#[cfg(test)]", "#[cfg(all(test,"]
        .iter()
        .filter_map(|m| text.find(m))
        .min();
    let text = match cut {
        Some(at) if !tests => &text[..at],
        _ => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `rest` names after `base`: `a::b`, or each item of `a::{b, c::{d, self}}`.
fn expand(base: &[String], rest: &str) -> Vec<Module> {
    let mut path = base.to_vec();
    let mut rest = rest.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            return items(group)
                .into_iter()
                .flat_map(|it| expand(&path, it))
                .collect();
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            return vec![path];
        }
        if &rest[..end] != "self" {
            path.push(rest[..end].to_string());
        }
        match rest[end..].trim_start().strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => return vec![path],
        }
    }
}

/// The top-level items of a `{…}` group, its `{` left off.
fn items(group: &str) -> Vec<&str> {
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
}

/// Where `word` starts a path in `code`: not inside a longer name, not after `::` or `.`.
fn path_starts<'c>(code: &'c str, word: &str) -> Vec<&'c str> {
    code.match_indices(word)
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            !before.is_some_and(|c| {
                c.is_alphanumeric() || c == '_' || c == ':' || c == '$' || c == '.'
            })
        })
        .map(|(at, _)| &code[at + word.len()..])
        .collect()
}

/// Every module path `code` (of the file of `module`) names, before resolving: `crate::…`,
/// `super::…` chains, `self::…`, and `child::…` for each child of `module`.
fn named_paths(code: &str, module: &[String], children: &[String]) -> Vec<Module> {
    let mut out = Vec::new();
    for rest in path_starts(code, "crate::") {
        out.extend(expand(&[], rest));
    }
    for rest in path_starts(code, "super::") {
        let (mut base, mut rest) = (module.to_vec(), rest);
        base.pop();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        out.extend(expand(&base, rest));
    }
    for rest in path_starts(code, "self::") {
        out.extend(expand(module, rest));
    }
    for child in children {
        let base = [module, std::slice::from_ref(child)].concat();
        for rest in path_starts(code, &format!("{child}::")) {
            out.extend(expand(&base, rest));
        }
    }
    out
}

/// What each module re-exports (`pub use plan::{plan, Plan}` in `embeddings` →
/// ([embeddings], Plan) → [embeddings, plan, Plan]), so that `super::Plan` names `plan`.
fn reexports(files: &[Source], known: &BTreeSet<Module>) -> BTreeMap<(Module, String), Module> {
    let mut out = BTreeMap::new();
    for s in files.iter().chain([&Source {
        path: "lib.rs".into(),
        module: Module::new(),
        text: String::new(),
    }]) {
        let children = children_of(&s.module, known);
        let code = code_of(&s.text, false);
        for (at, _) in code.match_indices("use ") {
            let head = code[..at].trim_end();
            if !(head.ends_with("pub") || head.ends_with(')')) {
                continue;
            }
            let statement = &code[at + 4..code[at..].find(';').map_or(code.len(), |e| at + e)];
            // `pub use serde_json::Value` names no path into the crate: nothing.
            for p in named_paths(statement, &s.module, &children) {
                if let Some(name) = p.last().filter(|n| *n != "self") {
                    out.insert((s.module.clone(), name.clone()), p.clone());
                }
            }
        }
    }
    out
}

/// The names of the modules just below `module`.
fn children_of(module: &[String], known: &BTreeSet<Module>) -> Vec<String> {
    known
        .iter()
        .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
        .map(|m| m[m.len() - 1].clone())
        .collect()
}

/// The longest module a path reaches, through re-exports ([output, folder, AtomicFolder] →
/// [output, folder]; [embeddings, Plan] → [embeddings, plan]); None for the crate root or a
/// path out of the crate.
fn resolve(
    mut p: Module,
    known: &BTreeSet<Module>,
    reexports: &BTreeMap<(Module, String), Module>,
) -> Option<Module> {
    for _ in 0..8 {
        let n = (0..=p.len())
            .rev()
            .find(|n| *n == 0 || known.contains(&p[..*n].to_vec()))?;
        match p
            .get(n)
            .and_then(|w| reexports.get(&(p[..n].to_vec(), w.clone())))
        {
            Some(to) if *to != p[..=n] => p = [to.as_slice(), &p[n + 1..]].concat(),
            _ => return (n > 0).then(|| p[..n].to_vec()),
        }
    }
    None
}

/// Every arrow between two modules of `files` (test code read when `tests`), each named path
/// resolved to the module it reaches.
fn arrows(files: &[Source], tests: bool) -> Vec<Arrow> {
    let known: BTreeSet<Module> = files.iter().map(|s| s.module.clone()).collect();
    let reexports = reexports(files, &known);
    let mut out = Vec::new();
    for s in files {
        let children = children_of(&s.module, &known);
        for p in named_paths(&code_of(&s.text, tests), &s.module, &children) {
            let named = p.join("::");
            match resolve(p, &known, &reexports) {
                Some(to) if to != s.module => out.push(Arrow {
                    from: s.module.clone(),
                    to,
                    file: s.path.clone(),
                    named,
                }),
                _ => {}
            }
        }
    }
    out
}

/// Groups of nodes that reach each other (Tarjan), those of more than one node.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g Graph,
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

/// Every cycle of modules at any depth, each as `a ⇄ b: a → b (file: named); …` with the arrows
/// that close it. An arrow counts at the depth where its two paths part (`formats::dcp` →
/// `formats`: depth 2, with both cut to 2 names), so a cycle of paths cut to any depth shows at
/// the shallowest depth it is seen, among one parent and its children, once.
fn cycles_at_every_depth(arrows: &[Arrow]) -> Vec<String> {
    let parting = |a: &Arrow| {
        let same = a.from.iter().zip(&a.to).take_while(|(x, y)| x == y).count();
        same + 1
    };
    let cut = |m: &Module, d: usize| m[..m.len().min(d)].join("::");
    let mut by_depth: BTreeMap<usize, Vec<&Arrow>> = BTreeMap::new();
    for a in arrows {
        by_depth.entry(parting(a)).or_default().push(a);
    }
    let mut found = Vec::new();
    for (d, arrows) in by_depth {
        let mut graph = Graph::new();
        for a in &arrows {
            graph
                .entry(cut(&a.from, d))
                .or_default()
                .insert(cut(&a.to, d));
        }
        for mut group in cycles(&graph) {
            group.sort();
            // One line per file and module named: `a → b (file: X, Y)`.
            let mut inside: BTreeMap<(String, String, &str), BTreeSet<String>> = BTreeMap::new();
            for a in &arrows {
                let (from, to) = (cut(&a.from, d), cut(&a.to, d));
                if group.contains(&from) && group.contains(&to) {
                    // What is named in `to` (`sniff`), or the last name of a re-export.
                    let item = a.named.strip_prefix(&format!("{to}::"));
                    let last = a.named.rsplit("::").next().unwrap_or_default();
                    let item = item.unwrap_or(last).to_string();
                    inside.entry((from, to, &a.file)).or_default().insert(item);
                }
            }
            let inside: Vec<String> = inside
                .into_iter()
                .map(|((from, to, file), items)| {
                    let items: Vec<String> = items.into_iter().collect();
                    format!("{from} → {to} ({file}: {})", items.join(", "))
                })
                .collect();
            found.push(format!(
                "{}:\n    {}",
                group.join(" ⇄ "),
                inside.join("\n    ")
            ));
        }
    }
    found
}

/// The layer of a module: floor 0, output 1, formats 2, knowledge 3, jobs 4, cli 5.
fn layer(m: &Module) -> (usize, &'static str) {
    match m[0].as_str() {
        "dtype" | "error" | "rng" | "nonfinite" | "mapped" | "vocab" | "rowmap" | "plan"
        | "release" => (0, "floor"),
        "output" => (1, "output"),
        "formats" => (2, "formats"),
        "jobs" => (4, "jobs"),
        "cli" => (5, "cli"),
        _ => (3, "knowledge"),
    }
}

/// `file: <layer> names <higher layer> (path)` for every arrow pointing up, and
/// `file: job A names job B (path)` for every arrow from one job to another.
fn layer_violations(arrows: &[Arrow]) -> Vec<String> {
    let job = |m: &Module| (m[0] == "jobs" && m.len() > 1).then(|| m[1].clone());
    let mut found = BTreeSet::new();
    for a in arrows {
        let ((from, from_name), (to, to_name)) = (layer(&a.from), layer(&a.to));
        if to > from {
            found.insert(format!(
                "{}: {from_name} names {to_name} ({})",
                a.file, a.named
            ));
        }
        if let (Some(x), Some(y)) = (job(&a.from), job(&a.to)) {
            if x != y {
                found.insert(format!("{}: job {x} names job {y} ({})", a.file, a.named));
            }
        }
    }
    found.into_iter().collect()
}

/// The jobs: the modules just under `jobs` (`src/jobs/<job>/`).
fn jobs(files: &[Source]) -> BTreeSet<String> {
    files
        .iter()
        .filter(|s| s.module.len() > 1 && s.module[0] == "jobs")
        .map(|s| s.module[1].clone())
        .collect()
}

/// What breaks `bin/<tool>` → `src/cli/<job>.rs` → `src/jobs/<job>/` for some job, and every
/// binary without a job. `bins` are (file name under bin/, text).
fn face_violations(files: &[Source], bins: &[(String, String)]) -> Vec<String> {
    let jobs = jobs(files);
    let mut found = Vec::new();
    if jobs.is_empty() {
        found.push("no job: src/jobs/ holds no module".to_string());
    }
    let table: String = files
        .iter()
        .find(|s| s.module == ["cli"])
        .map(|s| code_of(&s.text, false))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    for job in &jobs {
        let tool = job.replace('_', "-");
        match bins.iter().find(|(name, _)| *name == format!("{tool}.rs")) {
            None => found.push(format!("job {job}: no bin/{tool}.rs")),
            Some((_, text)) if !text.contains(&format!("cli::main_of(\"{tool}\")")) => found.push(
                format!("bin/{tool}.rs does not run cli::main_of(\"{tool}\")"),
            ),
            Some(_) => {}
        }
        if !files.iter().any(|s| s.module == ["cli", job]) {
            found.push(format!("job {job}: no src/cli/{job}.rs"));
        }
        if !table.contains(&format!("\"{tool}\",{job}::")) {
            found.push(format!(
                "src/cli/mod.rs: the tool table does not send \"{tool}\" to cli::{job}"
            ));
        }
    }
    for (name, _) in bins {
        let job = name.trim_end_matches(".rs").replace('-', "_");
        if !jobs.contains(&job) {
            found.push(format!("bin/{name}: no src/jobs/{job}/"));
        }
    }
    found
}

/// The library's sources and the binaries' (file name, text).
fn tree() -> (Vec<Source>, Vec<(String, String)>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut src, mut bin) = (Vec::new(), Vec::new());
    read_tree(&root.join("src"), &root.join("src"), &mut src);
    read_tree(&root.join("bin"), &root.join("bin"), &mut bin);
    (sources(&src), bin)
}

#[test]
fn no_module_imports_one_that_imports_it_back_at_any_depth() {
    let (files, _) = tree();
    let arrows = arrows(&files, false);
    assert!(files.len() > 50, "the scan found the modules");
    assert!(
        arrows
            .iter()
            .any(|a| a.from[0] == "cli" && a.to[0] == "output"),
        "the scan reads imports"
    );
    let found = cycles_at_every_depth(&arrows);
    assert!(
        found.is_empty(),
        "modules importing each other:\n{}",
        found.join("\n")
    );
}

#[test]
fn arrows_point_down_the_layers_and_no_job_names_another() {
    let (files, _) = tree();
    let found = layer_violations(&arrows(&files, true));
    assert!(
        found.is_empty(),
        "arrows pointing up:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_job_is_one_name_from_binary_to_cli_to_jobs_folder() {
    let (files, bins) = tree();
    assert!(!bins.is_empty(), "the scan found bin/");
    assert_eq!(face_violations(&files, &bins), Vec::<String>::new());
}

/// Where code outside `src/formats/` looks at what a path is: a file's magic bytes or a
/// format's detector named (`formats::open` is the way in).
fn detector_uses(files: &[Source]) -> Vec<String> {
    const SIGNS: [&str; 9] = [
        "b\"GGUF\"",
        "b\"PK",
        "sniff",
        "is_dcp",
        "is_trainer",
        "zero::locate",
        "megatron::recognise",
        "legacy::locate",
        "b\"\\x80\\x02",
    ];
    let mut found = Vec::new();
    for f in files.iter().filter(|f| f.module[0] != "formats") {
        let code = code_of(&f.text, true);
        for sign in SIGNS.iter().filter(|s| code.contains(*s)) {
            found.push(format!("{}: {sign}", f.path));
        }
    }
    found
}

#[test]
fn only_formats_decides_what_a_path_is() {
    let (files, _) = tree();
    let planted = Source {
        path: "jobs/x/gguf.rs".into(),
        module: vec!["jobs".into(), "x".into(), "gguf".into()],
        text: "fn is_gguf(h: &[u8]) -> bool { h == b\"GGUF\" }\n".into(),
    };
    assert_eq!(detector_uses(&[planted]).len(), 1, "the scan sees a magic");
    let found = detector_uses(&files);
    assert!(
        found.is_empty(),
        "detectors outside formats:\n{}",
        found.join("\n")
    );
}

/// The format modules: the folders under `src/formats/`, one per format (the files beside them,
/// `json`, `sniff`, `store`, `tensor`, `vocabulary`, are what every format shares).
fn format_modules(files: &[Source]) -> BTreeSet<String> {
    files
        .iter()
        .filter_map(|f| {
            let (dir, _) = f.path.strip_prefix("formats/")?.split_once('/')?;
            Some(dir.to_string())
        })
        .collect()
}

/// The writers a job reaches only through `rows::layout` (or `rows::apply`).
const WRITERS: [&str; 2] = ["write_torch_scanning", "AtomicFolder"];

/// `file: job J names format F (path)` for every path a file of a job of `held` writes into a
/// format module (`crate::formats::torch::…`, or `torch` in a `crate::formats::{…}` group), and
/// `file: job J names writer W` for every writer a job's file names. What the layer below hands
/// up under its own name (`formats::GlobalPolicy`, a layout's `rows::layout::dcp::Dcp`) is not
/// the job naming a format: the rule is about where the job's own paths lead.
fn jobs_naming_a_format(files: &[Source], held: &[&str]) -> Vec<String> {
    let formats = format_modules(files);
    let in_held = |m: &Module| m[0] == "jobs" && m.len() > 1 && held.contains(&m[1].as_str());
    let mut found = BTreeSet::new();
    for a in arrows(files, true).iter().filter(|a| in_held(&a.from)) {
        let mut named = a.named.split("::");
        if let (Some("formats"), Some(format)) = (named.next(), named.next()) {
            if formats.contains(format) {
                let job = &a.from[1];
                found.insert(format!(
                    "{}: job {job} names format {format} ({})",
                    a.file, a.named
                ));
            }
        }
    }
    for f in files.iter().filter(|f| in_held(&f.module)) {
        let code = code_of(&f.text, true);
        for w in WRITERS.iter().filter(|w| code.contains(*w)) {
            found.insert(format!("{}: job {} names writer {w}", f.path, f.module[1]));
        }
    }
    found.into_iter().collect()
}

/// The jobs that still name a format: the two readers, whose per-format modules report what
/// each format holds and check its own rules (docs/architecture.md, "Where the code is not there
/// yet"). The list only shrinks: a job listed here that names none any more fails the test too.
const STILL_NAMING_A_FORMAT: [&str; 2] = ["check_vocab", "inspect_checkpoint"];

#[test]
fn no_job_names_a_format_or_a_writer_but_those_listed() {
    let (files, _) = tree();
    let formats = format_modules(&files);
    assert!(
        ["torch", "trainer", "dcp", "zero", "megatron", "gguf"]
            .iter()
            .all(|f| formats.contains(*f)),
        "the scan found the format folders: {formats:?}"
    );
    let all = jobs(&files);
    let held: Vec<&str> = all
        .iter()
        .map(String::as_str)
        .filter(|j| !STILL_NAMING_A_FORMAT.contains(j))
        .collect();
    assert!(held.contains(&"sanitize_checkpoint"), "{held:?}");
    let found = jobs_naming_a_format(&files, &held);
    assert!(
        found.is_empty(),
        "a job names a format or a writer (plan against the interface, write through rows):\n{}",
        found.join("\n")
    );
    for j in STILL_NAMING_A_FORMAT {
        assert!(all.contains(j), "{j} is no job");
        assert!(
            !jobs_naming_a_format(&files, &[j]).is_empty(),
            "{j} names no format any more: take it off STILL_NAMING_A_FORMAT"
        );
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    g.entry("d".into()).or_default().insert("a".into());
    let mut found = cycles(&g);
    found[0].sort();
    assert_eq!(found, vec![vec!["a".to_string(), "b".into(), "c".into()]]);
}

/// A small tree with one fault of each kind the checks exist for.
fn planted() -> (Vec<Source>, Vec<(String, String)>) {
    let src = [
        ("lib.rs", "pub mod jobs;\n"),
        ("jobs/mod.rs", "pub mod extend_embeddings;\n"),
        (
            "jobs/extend_embeddings/mod.rs",
            "use crate::jobs::sanitize_checkpoint::{self, Options};\nuse crate::vocab;\n",
        ),
        ("jobs/sanitize_checkpoint/mod.rs", "mod plan;\npub use plan::Plan;\n"),
        (
            "jobs/sanitize_checkpoint/plan.rs",
            "use crate::{rows::init::Init, vocab};\nuse crate::formats::{Checkpoint, torch::Archive};\n// crate::jobs::extend_embeddings in a comment\n",
        ),
        (
            "ties.rs",
            "use crate::formats::Checkpoint;\n#[cfg(test)]\nmod tests { use crate::jobs::extend_embeddings::plan; }\n",
        ),
        ("rows/init.rs", "use super::super::dtype::DType;\n"),
        ("dtype.rs", "pub enum DType {}\n"),
        ("formats/mod.rs", "mod dcp;\npub fn sniff() {}\nfn open() { dcp::is_dcp(); }\n"),
        ("formats/dcp.rs", "pub fn is_dcp() -> bool { super::sniff() }\n"),
        ("formats/sharded.rs", "use super::dcp;\nuse crate::tokenizer::Form;\n"),
        ("tokenizer/mod.rs", "pub struct Form;\n"),
        ("formats/torch/mod.rs", "mod pickle;\nuse self::pickle::Value;\npub struct Archive;\n"),
        ("formats/torch/pickle.rs", "use crate::formats::torch::Archive;\n"),
        ("output/atomic.rs", "use crate::{dtype, formats::safetensors::Header};\n"),
        (
            "cli/mod.rs",
            "const TABLE: [Tool; 2] = [\n    tool::<extend_embeddings::Args>(\"extend-embeddings\", extend_embeddings::main),\n    tool::<sanitize::Args>(\"sanitize-checkpoint\", sanitize::main),\n];\n",
        ),
        ("cli/extend_embeddings.rs", "use crate::jobs::extend_embeddings;\n"),
    ];
    let bin = [
        (
            "extend-embeddings.rs",
            "fn main() { ckpt_surgery::cli::main_of(\"extend-embeddings\") }",
        ),
        (
            "sanitize-checkpoint.rs",
            "fn main() { ckpt_surgery::cli::main_of(\"extend-embeddings\") }",
        ),
        (
            "trim-vocab.rs",
            "fn main() { ckpt_surgery::cli::main_of(\"trim-vocab\") }",
        ),
    ];
    let own = |l: &[(&str, &str)]| -> Vec<(String, String)> {
        l.iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    };
    (sources(&own(&src)), own(&bin))
}

#[test]
fn the_checks_catch_a_planted_fault_of_each_kind() {
    let (files, bins) = planted();
    assert_eq!(
        cycles_at_every_depth(&arrows(&files, false)),
        [
            "formats ⇄ formats::dcp:\n    formats → formats::dcp (formats/mod.rs: is_dcp)\n    \
             formats::dcp → formats (formats/dcp.rs: sniff)",
            "formats::torch ⇄ formats::torch::pickle:\n    \
             formats::torch → formats::torch::pickle (formats/torch/mod.rs: Value)\n    \
             formats::torch::pickle → formats::torch (formats/torch/pickle.rs: Archive)",
        ]
    );
    assert_eq!(
        layer_violations(&arrows(&files, true)),
        [
            "formats/sharded.rs: formats names knowledge (tokenizer::Form)",
            "jobs/extend_embeddings/mod.rs: job extend_embeddings names job sanitize_checkpoint \
             (jobs::sanitize_checkpoint)",
            "jobs/extend_embeddings/mod.rs: job extend_embeddings names job sanitize_checkpoint \
             (jobs::sanitize_checkpoint::Options)",
            "output/atomic.rs: output names formats (formats::safetensors::Header)",
            "ties.rs: knowledge names jobs (jobs::extend_embeddings::plan)",
        ]
    );
    assert_eq!(
        jobs_naming_a_format(&files, &["sanitize_checkpoint", "extend_embeddings"]),
        [
            "jobs/sanitize_checkpoint/plan.rs: job sanitize_checkpoint names format torch \
          (formats::torch::Archive)"
        ]
    );
    assert_eq!(
        face_violations(&files, &bins),
        [
            "bin/sanitize-checkpoint.rs does not run cli::main_of(\"sanitize-checkpoint\")",
            "job sanitize_checkpoint: no src/cli/sanitize_checkpoint.rs",
            "src/cli/mod.rs: the tool table does not send \"sanitize-checkpoint\" to \
             cli::sanitize_checkpoint",
            "bin/trim-vocab.rs: no src/jobs/trim_vocab/",
        ]
    );
}
