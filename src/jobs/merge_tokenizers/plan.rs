//! The merge decided before anything is written: [`plan`] reads BASE and the additions, assigns
//! ids, builds the merged tokenizer in memory and verifies it; the [`PlannedMerge`] holds the report
//! the run will give and the bytes [`super::execute`] writes.

use super::addition::{load_addition, mark_special, Addition};
use super::assign::{assign, id_space};
use super::build::{build_hf, build_sp, Built, HfBase, Parts};
use super::options::Options;
use super::report::{base_format, Report};
use super::trained::{trained_addition, Trained, TRAINED_KIND};
use super::verify::{refuse_base_change, refuse_shadowed, refuse_unreachable};
use super::{bpe, merged};
use crate::error::{Error, Result};
use crate::output::{self, manifest::sha256};
use crate::tokenizer::base::{is_json_file, load_base_unloaded, Base};
use crate::tokenizer::form::Form;
use crate::tokenizer::sample::Coverage;
use crate::tokenizer::sentencepiece::{self as sp, check as sp_check, SpModel};
use crate::tokenizer::train;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What merge-tokenizers will write, decided and verified before anything is written
/// ([`plan`] only reads): the report as the run gives it (`--dry-run --json` prints it: every new
/// token with its id, the skipped ones with why, the merges) and the merged tokenizer's bytes.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedMerge {
    #[serde(flatten)]
    pub report: Report,
    /// The merged tokenizer, in BASE's format.
    #[serde(skip)]
    pub(super) bytes: Vec<u8>,
    /// Where it goes.
    #[serde(skip)]
    pub(super) out: PathBuf,
    /// Every file read: none of them may be the output.
    #[serde(skip)]
    pub(super) inputs: Vec<PathBuf>,
    #[serde(skip)]
    pub(super) destination: Destination,
}

impl PlannedMerge {
    /// The merged tokenizer's bytes, exactly as [`super::execute`] writes them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The merge as a [`crate::plan::Plan`]: no tensor edits; the one side file, the merged
    /// tokenizer written at the output.
    pub fn to_plan(&self) -> crate::plan::Plan {
        use crate::plan::{Plan, SideEdit, SideWhat};
        let r = &self.report;
        let mut plan = Plan::new(
            "merge-tokenizers",
            &r.base,
            &self.out,
            r.base_format.clone(),
            &self,
        );
        plan.side_files.push(SideEdit {
            file: self.out.clone(),
            what: SideWhat::Written {
                why: format!(
                    "the merged tokenizer: {} ids, {} of them new",
                    r.merged_size,
                    r.merged_size.saturating_sub(r.base_size)
                ),
            },
        });
        plan
    }
}

/// Decide the merge of `base_path` with the additions at `add_paths` (and `--train`,
/// `--special`) into `out`: reads and verifies, writes nothing. Unless it is a dry run, a
/// destination that could not be written is refused first, before the work.
pub fn plan(
    base_path: &Path,
    add_paths: &[PathBuf],
    out: &Path,
    opts: &Options,
) -> Result<PlannedMerge> {
    // A large BASE or long tokens take seconds: say so on stderr meanwhile.
    let _merging = output::progress::Phase::start("merging");
    let mut read: Vec<&Path> = vec![base_path];
    read.extend(add_paths.iter().map(PathBuf::as_path));
    read.extend(opts.check_text.iter().map(PathBuf::as_path));
    read.extend(opts.train.iter().map(PathBuf::as_path));
    crate::output::atomic::refuse_overlap(out, &read)?;
    // Base text is encoded with BASE in `tokenizers` too: load it meanwhile on the other core.
    let mut hf_base = HfBase::start(base_path, is_json_file(base_path));
    let base = load_base_unloaded(base_path)?;
    match &base {
        Base::Hf(t) => hf_base.check_base(t)?,
        Base::Sp(m) => refuse_sp_layout(m, base_path)?,
    }
    let mut inputs: Vec<PathBuf> = vec![base_path.to_path_buf()];
    inputs.extend(add_paths.iter().cloned());
    let destination = Destination::of(&base, opts);
    if !opts.dry_run {
        destination.check(out, &inputs)?;
    }
    // BASE's model entries for the merged tokenizer are copied on another core meanwhile.
    let (report, bytes) = std::thread::scope(|s| {
        let prepared = s.spawn(|| match &base {
            Base::Hf(t) => merged::prepare(t),
            Base::Sp(_) => None,
        });
        let prepared = || prepared.join().ok().flatten();
        decide(
            &base,
            &mut hf_base,
            prepared,
            base_path,
            add_paths,
            out,
            opts,
        )
    })?;
    inputs.extend(opts.check_text.iter().cloned());
    crate::release::later(base);
    Ok(PlannedMerge {
        report,
        bytes,
        out: out.to_path_buf(),
        inputs,
        destination,
    })
}

/// A SentencePiece BASE whose model or whitespace settings this merge does not write new pieces
/// for: a char or word model (it never joins characters / only looks up whole words), `▁` ending
/// words (`treat_whitespace_as_suffix`) or spaces kept as spaces (`escape_whitespaces: false`).
/// New pieces are written `▁word`, as unigram and BPE models with the default settings split.
fn refuse_sp_layout(m: &SpModel, base_path: &Path) -> Result<()> {
    let flags = sp_check::trainer_flags(&m.bytes);
    let why = match m.model_type {
        Some(3) => Some("a word model (it looks up whole words only)"),
        Some(4) => Some("a char model (it never joins characters into pieces)"),
        _ if flags.whitespace_as_suffix => {
            Some("a model whose '\u{2581}' ends words (trainer_spec.treat_whitespace_as_suffix)")
        }
        _ if !sp::normalizer(m).escape_whitespaces => {
            Some("a model that keeps spaces as spaces (normalizer_spec.escape_whitespaces: false)")
        }
        _ => None,
    };
    match why {
        Some(w) => Err(Error::unsupported(
            base_path,
            format!("BASE is {w}: merge-tokenizers adds pieces to unigram and BPE models that start words with '\u{2581}', as SentencePiece trains by default"),
        )),
        None => Ok(()),
    }
}

/// The merge of the loaded BASE with the additions: ids, the BPE step, the merged tokenizer
/// built and verified; the report and the bytes. `prepared` gives BASE's model entries for a
/// merged BPE ([`merged::prepare`]).
fn decide(
    base: &Base,
    hf_base: &mut HfBase,
    prepared: impl FnOnce() -> Option<merged::Prepared>,
    base_path: &Path,
    add_paths: &[PathBuf],
    out: &Path,
    opts: &Options,
) -> Result<(Report, Vec<u8>)> {
    let (adds, corpus) = additions(base, add_paths, hf_base, opts)?;
    let ids = id_space(base, base_path)?;
    let mut assigned = assign(base, &adds, hf_base.loaded(), &ids, opts.score);
    let bpe = bpe::plan(base, &adds, &mut assigned.added, &mut assigned.next);
    refuse_past_last_id(base_path, ids.base_size, assigned.added.len())?;
    let base_form = base.form();
    let cover_texts: Vec<String> = assigned
        .added
        .iter()
        .map(|a| base_form.text_of(&a.token))
        .collect();
    let cover = Coverage::new(cover_texts.iter().map(String::as_str));
    let parts = Parts {
        out,
        added: &assigned.added,
        bpe: &bpe,
        default_score: ids.default_score,
        corpus: &corpus,
        cover: &cover,
        opts,
    };
    let mut built = match base {
        Base::Hf(t) => build_hf(t, hf_base, prepared, &parts)?,
        Base::Sp(m) => build_sp(m, base_path, &parts)?,
    };
    // Asked for, but BASE has them as pieces SentencePiece never produces: unreachable too.
    let asked = assigned.added.len() + assigned.never_produced.len();
    built
        .unreachable
        .extend(assigned.never_produced.iter().cloned());
    // The input's problem first (exit 2): fixing it changes the merge the checks judge.
    refuse_unreachable(base, base_path, &built.unreachable, asked, opts)?;
    refuse_base_change(&built.base_sample, &built.check_text, opts)?;
    refuse_shadowed(base_path, &built.shadowed, opts)?;
    let Built {
        bytes,
        unreachable,
        not_checked,
        pinned,
        fertility,
        base_sample,
        check_text,
        shadowed,
    } = built;
    let mut warnings = assigned.warnings;
    warnings.extend(shadowed.iter().take(20).map(|(piece, winner)| {
        format!("BASE's piece '{piece}' is no longer what its text encodes to: '{winner}' beats it")
    }));
    if shadowed.len() > 20 {
        warnings.push(format!(
            "… and {} more of BASE's pieces beaten so",
            shadowed.len() - 20
        ));
    }
    let report = Report {
        base: base_path.to_path_buf(),
        base_format: base_format(base),
        base_size: ids.base_size,
        merged_size: assigned.next,
        additions: adds
            .iter()
            .map(|a| format!("{} ({})", a.path.display(), a.kind))
            .collect(),
        added: assigned.added,
        skipped: assigned.skipped,
        base_form,
        converted: assigned.converted,
        merges_appended: bpe.appended,
        merges_not_appended: bpe.not_appended,
        merges_synthesized: bpe.synthesized,
        intermediates: bpe.intermediates,
        became_added_tokens: bpe.became_added_tokens,
        pinned,
        unreachable,
        not_checked,
        warnings,
        base_sample,
        check_text,
        trained: fertility.map(|f| trained(&adds, &corpus, f, opts)),
        dry_run: opts.dry_run,
        output: None,
        output_sha256: opts.dry_run.then(|| sha256(&bytes)),
    };
    Ok((report, bytes))
}

/// The new tokens take ids from `base_size` on: refused where they would pass 2^32 − 1, the
/// largest id a tokenizer.json or SentencePiece model holds (the ids would wrap onto BASE's).
fn refuse_past_last_id(base_path: &Path, base_size: u32, new: usize) -> Result<()> {
    if u64::from(base_size) + new as u64 <= 1 << 32 {
        return Ok(());
    }
    Err(Error::format(
        base_path,
        format!(
            "BASE's largest id is {}: {new} new tokens would need ids past 2^32 − 1 (no flag changes this: check BASE's ids)",
            base_size.saturating_sub(1)
        ),
    ))
}

/// What the output must be: BASE's format, and an extension that says so (a SentencePiece model
/// written to o.json would be a protobuf in a .json file); not an input, and not replacing a file
/// unless `--overwrite`.
#[derive(Debug, Clone)]
pub(super) struct Destination {
    writes: &'static str,
    ext: &'static [&'static str],
    overwrite: bool,
}

impl Destination {
    fn of(base: &Base, opts: &Options) -> Self {
        let (writes, ext): (&str, &[&str]) = match base {
            Base::Hf(_) => ("a tokenizer.json, as BASE is", &["json"]),
            Base::Sp(_) => ("a SentencePiece model, as BASE is", &["model"]),
        };
        Destination {
            writes,
            ext,
            overwrite: opts.overwrite,
        }
    }

    /// Refuse `out` where it cannot be written.
    pub(super) fn check(&self, out: &Path, inputs: &[PathBuf]) -> Result<()> {
        let (writes, ext) = (self.writes, self.ext);
        let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        output::folder::file_destination(out, &inputs, writes, ext, self.overwrite)?;
        let lower = out.to_string_lossy().to_lowercase();
        if !ext.iter().any(|e| lower.ends_with(&format!(".{e}"))) {
            return Err(Error::arg(
                "--output",
                format!(
                    "{}: the merged tokenizer is {writes}: name the output *.{}",
                    out.display(),
                    ext[0]
                ),
            ));
        }
        Ok(())
    }
}

/// The additions in order: each `--add`, then the one `--train` learns, with the `--special`
/// tokens marked (or appended); and the `--train` corpus's words (empty without it).
fn additions(
    base: &Base,
    add_paths: &[PathBuf],
    hf_base: &mut HfBase,
    opts: &Options,
) -> Result<(Vec<Addition>, train::Words)> {
    let mut adds: Vec<Addition> = add_paths
        .iter()
        .map(|p| load_addition(p))
        .collect::<Result<_>>()?;
    let mut corpus = train::Words::new();
    // Entries for a WordPiece base are normalised by it (an uncased BERT lowercases).
    if matches!(base, Base::Hf(_)) && (!opts.train.is_empty() || base.form() == Form::WordPiece) {
        hf_base.load()?;
    }
    if !opts.train.is_empty() {
        let (add, words) = trained_addition(base, hf_base.loaded(), opts)?;
        adds.push(add);
        corpus = words;
    }
    mark_special(&mut adds, &opts.special, matches!(base, Base::Sp(_)));
    Ok((adds, corpus))
}

/// The report's account of `--train`.
fn trained(
    adds: &[Addition],
    corpus: &train::Words,
    fertility: (f64, f64),
    opts: &Options,
) -> Trained {
    Trained {
        corpus: opts.train.clone(),
        words: corpus.values().sum(),
        distinct_words: corpus.len(),
        learned: adds
            .iter()
            .find(|a| a.kind == TRAINED_KIND)
            .map_or(0, |a| a.tokens.len()),
        fertility_before: fertility.0,
        fertility_after: fertility.1,
    }
}
