//! What a merge reports (the same value `--dry-run` shows and the run returns) and its human
//! rendering.

use super::assign::{Assigned, Skipped};
use super::trained::Trained;
use crate::tokenizer::base::Base;
use crate::tokenizer::form::Form;
use crate::tokenizer::sample::TextCheck;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Everything the merge did and checked.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub base: PathBuf,
    pub base_format: String,
    /// Largest id BASE uses + 1.
    pub base_size: u32,
    /// Largest id the output uses + 1.
    pub merged_size: u32,
    pub additions: Vec<String>,
    pub added: Vec<Assigned>,
    pub skipped: Vec<Skipped>,
    /// How BASE writes text; entries of additions in another form were converted into it.
    pub base_form: Form,
    /// Tokens written in BASE's form from entries in another (a word gives a bare and a
    /// word-start token).
    pub converted: usize,
    pub merges_appended: Vec<(String, String)>,
    pub merges_not_appended: usize,
    /// Merges made here so that BPE produces each new token (after the appended ones).
    pub merges_synthesized: Vec<(String, String)>,
    /// Pieces those merges pass through that neither BASE nor the additions had: new ids, after
    /// the additions' tokens.
    pub intermediates: Vec<String>,
    /// Multi-character BPE tokens no merge produces: written as (non-special) added tokens.
    pub became_added_tokens: Vec<String>,
    /// BASE's added tokens that were outside model.vocab, written into it at their ids so that
    /// `tokenizers` (which numbers such tokens after the vocab) keeps their ids.
    pub pinned: Vec<String>,
    /// New tokens that do not encode alone to their id.
    pub unreachable: Vec<String>,
    /// What could not be checked here.
    pub not_checked: Vec<String>,
    pub warnings: Vec<String>,
    /// The built-in lines (base text in many scripts; those the new tokens cover are new text).
    pub base_sample: TextCheck,
    pub check_text: Vec<TextCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trained: Option<Trained>,
    pub dry_run: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
}

/// BASE's format as the report names it.
pub(super) fn base_format(base: &Base) -> String {
    match base {
        Base::Hf(t) => format!("tokenizer.json ({})", t.model_type),
        Base::Sp(m) => format!(
            "SentencePiece model ({})",
            match m.model_type {
                Some(2) => "BPE",
                Some(3) => "word",
                Some(4) => "char",
                _ => "unigram",
            }
        ),
    }
}

/// The human report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    render_tokens(r, &mut s);
    render_bpe(r, &mut s);
    render_verified(r, &mut s);
    render_text(r, &mut s);
    render_end(r, &mut s);
    s
}

/// BASE, the additions, the tokens added and skipped.
fn render_tokens(r: &Report, s: &mut String) {
    let _ = writeln!(
        s,
        "base: {} ({}), {} ids",
        r.base.display(),
        r.base_format,
        r.base_size
    );
    for (i, a) in r.additions.iter().enumerate() {
        let _ = writeln!(s, "add #{}: {a}", i + 1);
    }
    let first = r.added.first().map_or(r.base_size, |a| a.id);
    let _ = writeln!(
        s,
        "added {} tokens (ids {}–{}), skipped {}; merged size {} (was {})",
        r.added.len(),
        first,
        r.merged_size.saturating_sub(1),
        r.skipped.len(),
        r.merged_size,
        r.base_size
    );
    let show: Vec<String> = r
        .added
        .iter()
        .take(12)
        .map(|a| format!("{}={}", a.token, a.id))
        .collect();
    if !show.is_empty() {
        let more = if r.added.len() > 12 { " …" } else { "" };
        let _ = writeln!(s, "  new: {}{more}", show.join(" "));
    }
    if !r.skipped.is_empty() {
        let show: Vec<String> = r
            .skipped
            .iter()
            .take(8)
            .map(|k| format!("'{}' ({})", k.token, k.reason))
            .collect();
        let more = if r.skipped.len() > 8 { " …" } else { "" };
        let _ = writeln!(s, "  skipped: {}{more}", show.join(", "));
    }
}

/// The forms converted and the merges or pieces the BPE step wrote.
fn render_bpe(r: &Report, s: &mut String) {
    if !r.merges_appended.is_empty() || r.merges_not_appended > 0 {
        let _ = writeln!(
            s,
            "merges: {} appended after BASE's, {} of the additions' not appended (already in BASE, or parts/result missing)",
            r.merges_appended.len(),
            r.merges_not_appended
        );
    }
    if r.converted > 0 {
        let _ = writeln!(
            s,
            "converted: {} tokens written in BASE's {} form from entries in another (a word gives its bare and word-start forms)",
            r.converted,
            match r.base_form {
                Form::ByteLevel => "byte-level",
                Form::Metaspace => "\u{2581}",
                Form::WordPiece => "WordPiece (##)",
                Form::Plain => "plain",
            }
        );
    }
    if !r.merges_synthesized.is_empty() {
        let _ = writeln!(
            s,
            "merges: {} synthesized after those so that the model produces every new token, through {} new intermediate pieces",
            r.merges_synthesized.len(),
            r.intermediates.len()
        );
    }
    if r.merges_synthesized.is_empty() && !r.intermediates.is_empty() {
        let _ =
            writeln!(
            s,
            "pieces: {} added after the additions' so that BPE's joins reach every new piece ({})",
            r.intermediates.len(),
            r.intermediates.iter().take(12).cloned().collect::<Vec<_>>().join(" ")
        );
    }
    if !r.became_added_tokens.is_empty() {
        let _ = writeln!(
            s,
            "no merge produces {} new multi-character tokens: written as added tokens ({})",
            r.became_added_tokens.len(),
            r.became_added_tokens.join(" ")
        );
    }
}

/// What verification found, what it could not check, and the warnings.
fn render_verified(r: &Report, s: &mut String) {
    if r.unreachable.is_empty() {
        let _ = writeln!(
            s,
            "verified: every base token keeps its id; every new token {}",
            if r.base_form == Form::Plain {
                "encodes alone to its id"
            } else {
                "is what the merged model produces for its symbols"
            }
        );
    } else {
        let _ = writeln!(
            s,
            "verified: every base token keeps its id; {} new tokens do not encode alone to their id: {}",
            r.unreachable.len(),
            r.unreachable.join(" ")
        );
    }
    for n in &r.not_checked {
        let _ = writeln!(s, "not checked: {n}");
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
}

/// Base text and new text, before and after.
fn render_text(r: &Report, s: &mut String) {
    for c in &r.check_text {
        let _ = writeln!(
            s,
            "check {}: {} of {} lines changed ids ({:.1} %); tokens per character {:.3} → {:.3}",
            c.file.display(),
            c.changed_lines,
            c.lines,
            c.changed_percent,
            c.tokens_per_char_before,
            c.tokens_per_char_after
        );
    }
    let b = &r.base_sample;
    if let Some(why) = &b.skipped_because {
        let _ = writeln!(
            s,
            "built-in sample: {} of {} lines skipped: BASE cannot encode them ({why})",
            b.skipped_lines,
            b.lines + b.skipped_lines
        );
    }
    let all: Vec<&TextCheck> = std::iter::once(&r.base_sample)
        .chain(&r.check_text)
        .collect();
    let sum = |f: fn(&TextCheck) -> usize| all.iter().map(|c| f(c)).sum::<usize>();
    let (lines, changed) = (sum(|c| c.base_lines), sum(|c| c.base_changed));
    let _ = writeln!(
        s,
        "base text: {changed} of {lines} lines no new token covers changed ids ({:.1} %; {} built-in lines, {} from --check-text)",
        if lines == 0 { 0.0 } else { 100.0 * changed as f64 / lines as f64 },
        r.base_sample.base_lines,
        lines - r.base_sample.base_lines
    );
    let (n, before, after) = (
        sum(|c| c.new_lines),
        sum(|c| c.new_tokens_before),
        sum(|c| c.new_tokens_after),
    );
    if n > 0 {
        let _ =
            writeln!(
            s,
            "new text: {n} lines the new tokens cover: {before} → {after} tokens ({:.2}× fewer)",
            if after == 0 { 0.0 } else { before as f64 / after as f64 }
        );
    }
}

/// Training and what was written.
fn render_end(r: &Report, s: &mut String) {
    if let Some(t) = &r.trained {
        let _ = writeln!(
            s,
            "trained: {} new tokens from {} words ({} distinct) of the corpus; tokens per word {:.3} → {:.3}",
            t.learned, t.words, t.distinct_words, t.fertility_before, t.fertility_after
        );
    }
    match (&r.output, r.dry_run) {
        (_, true) => {
            let _ = writeln!(s, "dry run: nothing written");
        }
        (Some(o), _) => {
            let _ = writeln!(
                s,
                "wrote {} (sha256 {})",
                o.display(),
                r.output_sha256.as_deref().unwrap_or("")
            );
        }
        _ => {}
    }
}
