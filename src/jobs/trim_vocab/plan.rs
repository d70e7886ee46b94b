//! trim-vocab's planner: every decision, read-only — the keep set, the pruned tokenizer and its
//! corpus check, the row map, every vocabulary tensor's gather, the files beside them.

use super::files::{self, CONFIG_FILES, MAP_FILE};
use super::keep::{corpus_and_templates, corpus_pass, keep_set, read_lines, KeepSet};
use super::options::Options;
use super::report::{Changed, Report};
use crate::error::{Error, Result};
use crate::formats::Tensors;
use crate::output::folder::NewFile;
use crate::rowmap::RowMap;
use crate::rows::apply::FolderEdits;
use crate::rows::device::Device;
use crate::rows::init::Init;
use crate::rows::resize::Resize;
use crate::rows::select::vocabulary;
use crate::ties::{self, Tie};
use crate::tokenizer::base::{folder_sentencepiece, folder_tokenizer, load_tokenizer, Base};
use crate::tokenizer::trim::{check_corpus, prune, CorpusCheck, CorpusPass, Pruned};
use crate::vocab::Role;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What trim-vocab will do, decided before anything is written.
pub struct Planned<'c> {
    pub report: Report,
    pub(super) resizes: Vec<Resize<'c>>,
    /// A folder output's files besides the weights.
    pub(super) folder: Option<FolderEdits>,
    /// The map file's bytes (a file output writes it beside the output).
    pub(super) map_bytes: Vec<u8>,
    pub(super) inputs: Vec<PathBuf>,
}

/// The model's tokenizer: `--tokenizer`, else the folder's own.
fn tokenizer_path(input: &Path, folder: Option<&Path>, opts: &Options) -> Result<PathBuf> {
    if let Some(t) = &opts.tokenizer {
        return Ok(t.clone());
    }
    folder.and_then(folder_tokenizer).ok_or_else(|| {
        Error::arg(
            "--tokenizer",
            format!(
                "{}: no tokenizer beside the model: name it with --tokenizer",
                input.display()
            ),
        )
    })
}

/// The config files beside the model (config.json may be `--config`, which must be a file).
fn config_paths(
    input: &Path,
    folder: Option<&Path>,
    opts: &Options,
) -> Result<Vec<(&'static str, PathBuf)>> {
    if let Some(c) = opts.config.as_ref().filter(|c| !c.is_file()) {
        return Err(Error::arg(
            "--config",
            format!("--config {}: no such file", c.display()),
        ));
    }
    let dir = folder
        .map(Path::to_path_buf)
        .or_else(|| input.parent().map(Path::to_path_buf));
    Ok(CONFIG_FILES
        .iter()
        .filter_map(|&n| {
            let p = match (&opts.config, n) {
                (Some(c), "config.json") => c.clone(),
                _ => dir.as_ref()?.join(n),
            };
            p.is_file().then_some((n, p))
        })
        .collect())
}

/// The pruned tokenizer, checked on the keep corpus (the same token strings, line by line) and
/// on `--check-text` (no new unknown tokens): a failed check writes nothing (exit 1).
pub(super) fn pruned(
    tok_path: &Path,
    keep: &KeepSet,
    (corpus, pass): (&[String], Option<&CorpusPass>),
    opts: &Options,
    (corpus_check, text_check): (&mut Option<CorpusCheck>, &mut Option<CorpusCheck>),
) -> Result<(Pruned, Option<Beside>)> {
    let (p, other) = agreed(tok_path, keep)?;
    // --keep-top / --min-count leave some of the corpus's tokens out on purpose.
    let partial = opts.keep_top.is_some() || opts.min_count > 1;
    let partial = partial.then_some(p.map.as_slice());
    if let Some((model, q)) = &other {
        let c = CorpusPass::new(model, corpus)?.check(&q.file, partial)?;
        if c.mismatches + c.new_unknown > 0 {
            return Err(Error::Check {
                path: model.clone(),
                problem: format!("the trimmed {} splits {} lines of the keep corpus differently; nothing written: please report this", file_name(model), c.mismatches + c.new_unknown),
            });
        }
    }
    if let Some(pass) = pass {
        let c = pass.check(&p.file, partial)?;
        if c.mismatches + c.new_unknown > 0 {
            return Err(Error::Check {
                path: tok_path.to_path_buf(),
                problem: format!("the trimmed tokenizer splits {} lines of the keep corpus differently and gives {} lines new unknown tokens (first: {}); nothing written: please report this", c.mismatches, c.new_unknown, c.first_mismatches.first().or(c.first_new_unknown.first()).map_or("none".into(), |m| format!("{:?}", m.text))),
            });
        }
        *corpus_check = Some(c);
    }
    if !opts.check_text.is_empty() {
        let c = check_corpus(tok_path, &p.file, &read_lines(&opts.check_text)?)?;
        if c.new_unknown > 0 {
            return Err(Error::Check {
                path: opts.check_text[0].clone(),
                problem: format!("{} lines would get unknown tokens the full tokenizer does not give (first: {}); nothing written", c.new_unknown, c.first_new_unknown.first().map_or("none".into(), |m| format!("{:?}", m.text))),
            });
        }
        *text_check = Some(c);
    }
    Ok((p, other))
}

/// The SentencePiece model beside a folder's tokenizer.json, pruned with it: its path and the
/// pruned model.
pub(super) type Beside = (PathBuf, Pruned);

/// The SentencePiece model beside `tok_path` when that is a folder's tokenizer.json
/// (transformers saves both: tokenizer.model, T5's spiece.model).
fn sentencepiece_beside(tok_path: &Path) -> Option<PathBuf> {
    if tok_path.file_name()? != "tokenizer.json" {
        return None;
    }
    folder_sentencepiece(tok_path.parent()?)
}

/// The tokenizer pruned to `keep`; when it is a folder's tokenizer.json with a SentencePiece
/// model beside it, the .model pruned too, to a keep set grown until both give the same ids
/// (each family may keep more with the set: its closure) — or None when they do not agree
/// within a few rounds, or when the .model has other ids than tokenizer.json (tokens added to
/// tokenizer.json only: transformers loads tokenizer.json), and the .model is left out.
fn agreed(tok_path: &Path, keep: &KeepSet) -> Result<(Pruned, Option<Beside>)> {
    let model = match sentencepiece_beside(tok_path) {
        Some(m) if load_tokenizer(&m)?.size() == keep.size => Some(m),
        _ => None,
    };
    let mut ids = keep.ids.clone();
    for _ in 0..4 {
        let p = prune(tok_path, &ids)?;
        let Some(model) = &model else {
            return Ok((p, None));
        };
        let q = prune(model, &ids)?;
        if p.map == q.map {
            return Ok((p, Some((model.clone(), q))));
        }
        let kept = |m: &[Option<u32>]| -> Vec<u32> {
            m.iter()
                .enumerate()
                .filter(|(_, n)| n.is_some())
                .map(|(i, _)| i as u32)
                .collect()
        };
        let mut union: Vec<u32> = kept(&p.map).into_iter().chain(kept(&q.map)).collect();
        union.sort_unstable();
        union.dedup();
        ids = union;
    }
    Ok((prune(tok_path, &ids)?, None))
}

/// new id → old row, from the pruner's old → new map, then padding rows (made: the mean).
fn row_map(p: &Pruned, old_rows: u64, pad_to: Option<u64>, source: &Path) -> Result<RowMap> {
    let mut ids: Vec<Option<u64>> = vec![None; p.map.iter().flatten().count()];
    for (old, new) in p.map.iter().enumerate() {
        if let Some(n) = new {
            ids[*n as usize] = Some(old as u64);
        }
    }
    let rows = match pad_to {
        Some(0) => {
            return Err(Error::arg(
                "--pad-to-multiple-of",
                "--pad-to-multiple-of must be at least 1",
            ))
        }
        Some(m) => (ids.len() as u64).div_ceil(m) * m,
        None => ids.len() as u64,
    };
    ids.resize(rows as usize, None);
    RowMap::from_ids(&ids, old_rows, source)
}

/// Each tensor's gather and its line in the report.
fn changes<'c>(
    ckpt: &'c Tensors,
    selected: &[(String, Role)],
    ties: &[Tie],
    map: &RowMap,
) -> Result<(Vec<Resize<'c>>, Vec<Changed>)> {
    let followers = ties::followers(ties);
    let (mut resizes, mut changed) = (Vec::new(), Vec::new());
    for (name, role) in selected {
        let Some(t) = ckpt.tensor(name) else { continue };
        if followers.contains_key(name) {
            continue;
        }
        let view = t.rows_view();
        let rows = view.shape[0];
        resizes.push(Resize::mapped(view, *role, map)?);
        let row_bytes = (t.nbytes() / rows.max(1)) as i64;
        let saved = rows as i64 - map.new_rows() as i64;
        changed.push(Changed {
            name: name.clone(),
            role: *role,
            dtype: t.dtype,
            old_shape: t.shape.to_vec(),
            new_shape: crate::vocab::with_rows(name, t.shape, map.new_rows()),
            rows_saved: saved,
            bytes_saved: saved * row_bytes,
            tied: ties
                .iter()
                .filter(|x| x.first() == name)
                .flat_map(|x| x.names[1..].iter().cloned())
                .collect(),
        });
    }
    Ok((resizes, changed))
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A folder output's edits: config files, the pruned tokenizer under the base's name, its
/// tokenizer_config re-keyed, the map file; the base's other tokenizer files left out.
fn folder_edits(
    dir: &Path,
    configs: &[(&'static str, PathBuf)],
    (tok_path, tok, p, model): (&Path, &Base, &Pruned, Option<&Beside>),
    new_rows: u64,
    map_bytes: &[u8],
) -> Result<FolderEdits> {
    let mut json = Vec::new();
    for (name, path) in configs {
        json.push((
            name.to_string(),
            files::config_edit(path, name, new_rows, &p.map)?,
        ));
    }
    for n in ["tokenizer_config.json", "special_tokens_map.json"] {
        let path = dir.join(n);
        if path.is_file() {
            if let Some(e) = files::rekeyed(&path, &p.map, tok)? {
                json.push((n.to_string(), e));
            }
        }
    }
    // The folder's own SentencePiece model keeps its name (T5's spiece.model).
    let own = (tok_path.parent() == Some(dir)).then(|| file_name(tok_path));
    let (name, file) = files::tokenizer_file(&p.file, own);
    let mut written: Vec<(String, NewFile)> = vec![(name.clone(), file)];
    let mut stale = Vec::new();
    // A folder with both forms (transformers saves tokenizer.json beside tokenizer.model or
    // spiece.model): the .model pruned to the same ids (`agreed`).
    match (model, folder_sentencepiece(dir)) {
        (Some((path, q)), _) => written.push(files::tokenizer_file(&q.file, Some(file_name(path)))),
        (None, Some(m)) if name == "tokenizer.json" => {
            let why = match load_tokenizer(&m)?.size() {
                n if n != tok.size() => format!("it has {n} ids, tokenizer.json {} (tokens added to tokenizer.json only; transformers loads tokenizer.json): left out rather than disagree", tok.size()),
                _ => "pruned to the same keep set it gives other ids than tokenizer.json (left out rather than disagree)".to_string(),
            };
            stale.push((file_name(&m), why));
        }
        (None, _) => {}
    }
    let why = format!("the full tokenizer's file: {name} is the trimmed one");
    let names: Vec<String> = written.iter().map(|(n, _)| n.to_string()).collect();
    stale.extend(
        [
            "tokenizer.json",
            "tokenizer.model",
            "vocab.json",
            "merges.txt",
            "added_tokens.json",
            "vocab.txt",
            "spiece.model",
            "sentencepiece.bpe.model",
        ]
        .iter()
        .filter(|n| {
            !names.iter().any(|w| w == *n)
                && !stale.iter().any(|(s, _)| s == *n)
                && dir.join(n).exists()
        })
        .map(|n| (n.to_string(), why.clone()))
        .collect::<Vec<_>>(),
    );
    let mut files = written;
    files.push((MAP_FILE.to_string(), NewFile::Bytes(map_bytes.to_vec())));
    Ok(FolderEdits {
        dir: dir.to_path_buf(),
        json,
        files,
        stale,
    })
}

/// Trimming drops trained rows: refused without `--allow-shrink`, naming the first dropped tokens.
pub(super) fn refuse_drop(
    path: &Path,
    tensor: &str,
    old_rows: u64,
    p: &Pruned,
    tok: &Base,
    opts: &Options,
) -> Result<()> {
    let dropped = p.map.iter().filter(|m| m.is_none()).count() as u64;
    if dropped == 0 || opts.allow_shrink {
        return Ok(());
    }
    let names = crate::tokenizer::surface::by_id(tok);
    let first: Vec<String> = p
        .map
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_none())
        .take(10)
        .map(|(i, _)| format!("'{}'", names.get(&(i as u32)).cloned().unwrap_or_default()))
        .collect();
    Err(Error::Dropped {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        rows: old_rows,
        target: p.map.len() as u64 - dropped,
        dropped,
        first: first.join(", "),
    })
}

/// The counts of the report: tokens kept beyond the asked set, by reason.
pub(super) fn beyond(p: &Pruned) -> BTreeMap<&'static str, u64> {
    let mut out = BTreeMap::new();
    for (_, why) in &p.added {
        *out.entry(*why).or_insert(0) += 1;
    }
    out
}

/// Decide everything: reads the checkpoint, the tokenizer, the corpora and the config files.
pub fn plan<'c>(ckpt: &'c Tensors, input: &Path, opts: &Options) -> Result<Planned<'c>> {
    let _planning = crate::output::progress::Phase::start("planning the trim");
    let mut inputs: Vec<PathBuf> = ckpt.input_paths().iter().map(|p| p.to_path_buf()).collect();
    inputs.extend(opts.input_paths(input).into_iter().map(Path::to_path_buf));
    let folder_in = ckpt.input_folder(input);
    let tok_path = tokenizer_path(input, folder_in.as_deref(), opts)?;
    let tok = load_tokenizer(&tok_path)?;
    let configs = config_paths(input, folder_in.as_deref(), opts)?;
    inputs.extend(configs.iter().map(|c| c.1.clone()));
    inputs.push(tok_path.clone());
    let config_value = configs
        .iter()
        .find(|c| c.0 == "config.json")
        .and_then(|c| std::fs::read_to_string(&c.1).ok())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    let (selected, old_rows, ties) =
        vocabulary(ckpt, &opts.tensors, config_value.as_ref(), tok.size())?;
    if tok.size() > old_rows {
        return Err(Error::format(
            &tok_path,
            format!("the tokenizer has {} ids but the vocabulary matrices {old_rows} rows: fix that first (check-vocab)", tok.size()),
        ));
    }
    let named = files::named_ids(&configs.iter().map(|c| c.1.as_path()).collect::<Vec<_>>())?;
    let templates = match &folder_in {
        Some(dir) => files::chat_templates(dir)?,
        None => Vec::new(),
    };
    let (corpus, n) = corpus_and_templates(opts, &templates)?;
    let pass = corpus_pass(&tok_path, (&corpus, n))?;
    let keep = keep_set(&tok_path, &tok, opts, &named, pass.as_ref())?;
    let mut report = new_report(ckpt, &tok_path, old_rows, opts, &keep);
    let (p, model) = pruned(
        &tok_path,
        &keep,
        (&corpus, pass.as_ref()),
        opts,
        (&mut report.corpus_check, &mut report.text_check),
    )?;
    if let Some((first, _)) = selected.first() {
        refuse_drop(&ckpt.path, first, old_rows, &p, &tok, opts)?;
    }
    let map = row_map(&p, old_rows, opts.pad_to_multiple_of, &tok_path)?;
    let (resizes, changed) = changes(ckpt, &selected, &ties, &map)?;
    let map_bytes = files::map_file(&p.map, map.new_rows());
    let folder = match &folder_in {
        Some(dir) => Some(folder_edits(
            dir,
            &configs,
            (&tok_path, &tok, &p, model.as_ref()),
            map.new_rows(),
            &map_bytes,
        )?),
        None => {
            report.warnings.push("a file output is that one file (and its map file beside it): config.json, generation_config.json and the tokenizer are not written; give the model folder for a complete output folder".into());
            None
        }
    };
    report.kept_tokens = p.map.iter().flatten().count() as u64;
    report.dropped_tokens = p.map.len() as u64 - report.kept_tokens;
    report.dropped_padding_rows = old_rows - p.map.len() as u64;
    report.padding_rows = map.new_rows() - report.kept_tokens;
    report.new_rows = map.new_rows();
    report.kept_beyond = beyond(&p);
    report.changed = changed;
    report.ties = ties;
    report.row_map = Some(map);
    report.folder_out = folder.is_some();
    Ok(Planned {
        report,
        resizes,
        folder,
        map_bytes,
        inputs,
    })
}

fn new_report(ckpt: &Tensors, tok: &Path, old_rows: u64, opts: &Options, keep: &KeepSet) -> Report {
    Report {
        input: ckpt.path.clone(),
        format: ckpt.format,
        layout: ("", false),
        output: None,
        tokenizer: tok.to_path_buf(),
        old_rows,
        new_rows: 0,
        kept_tokens: 0,
        dropped_tokens: 0,
        dropped_padding_rows: 0,
        padding_rows: 0,
        asked: keep.asked.clone(),
        kept_beyond: BTreeMap::new(),
        changed: Vec::new(),
        ties: Vec::new(),
        corpus_check: None,
        text_check: None,
        optimizer: Vec::new(),
        edited: Vec::new(),
        map_file: None,
        folder_out: false,
        left_planned: Vec::new(),
        carried: Vec::new(),
        left_out: Vec::new(),
        warnings: Vec::new(),
        dry_run: opts.dry_run,
        manifest: Vec::new(),
        row_map: None,
    }
}

/// The init of padding rows (the only rows a trim makes): the column mean, on the CPU.
pub(super) fn padding_init() -> (Init, Device) {
    (Init::Mean, Device::cpu(None))
}
