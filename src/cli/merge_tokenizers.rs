//! merge-tokenizers: base tokenizer + additions → merged tokenizer, every base id unchanged.

use super::run::parse;
use crate::jobs::merge_tokenizers::{self, Options};
use clap::Parser;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "merge-tokenizers",
    version,
    about = "Merge new tokens into a tokenizer without changing any id it already has.",
    after_help = "Examples:\n  merge-tokenizers --base testdata/tokenizers/chatterbox_base.json \\\n    --add testdata/tokenizers/amharic_vocab.json --output merged.json \\\n    --check-text testdata/tokenizers/english.txt --check-text testdata/tokenizers/amharic.txt\n  merge-tokenizers --base sp_english.model --add sp_amharic.model --output merged.model\n\nBASE: tokenizer.json (BPE, WordPiece, WordLevel, Unigram) or SentencePiece .model; OUT has BASE's format.\nADD: tokenizer.json, vocab.json (token → id; only the id order is used), .model, or one token per line.\nNew tokens take the first free ids above every id BASE uses, in the additions' order.\nEntries are written in BASE's form (byte-level Ġ, SentencePiece ▁): a plain word gives its bare and word-start tokens, made reachable with merges after BASE's.\nThe result is verified (it loads in the tokenizers crate; base ids unchanged; every new token is produced by the merged model, or for plain bases encodes alone to its id, else exit 2 unless --allow-unreachable) before it is written. OUT is named for BASE's format (.json or .model).\nEvery merge encodes built-in lines in many scripts (those BASE cannot encode are skipped and counted) and each --check-text line with BASE and the result: lines no new token covers are base text and must keep their ids.\nExit codes: 0 success, 1 base text changed, 2 bad input."
)]
pub(super) struct Args {
    /// The tokenizer whose ids must not change.
    #[arg(long)]
    base: PathBuf,
    /// An addition; repeat to merge several, in order.
    #[arg(long = "add", required_unless_present = "train")]
    add: Vec<PathBuf>,
    /// Where to write the merged tokenizer (never over an input).
    #[arg(long)]
    output: PathBuf,
    /// Encode each line with BASE and with the result; report changed lines and tokens per char.
    #[arg(long, value_name = "FILE")]
    check_text: Vec<PathBuf>,
    /// Score for new Unigram/SentencePiece pieces when the addition has none.
    #[arg(long)]
    score: Option<f64>,
    /// Plan, verify and report; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Write the merge even when some new tokens do not encode alone to their id (otherwise
    /// that is an error, exit 2, listing them and why).
    #[arg(long)]
    allow_unreachable: bool,
    /// Write the merge even when base text (built-in lines and --check-text lines that no new
    /// token covers) encodes to other ids after it (otherwise that is a failed check, exit 1,
    /// naming the first such line).
    #[arg(long)]
    allow_base_change: bool,
    /// Train an addition from this corpus (text, one or more lines) in BASE's own form: BPE
    /// training continued from BASE's merges (a BPE-type .model: over its pieces), learning only
    /// tokens BASE lacks, on the corpus's words as BASE splits them (in `▁` form split at every
    /// `▁`, as SentencePiece trains); the report gives tokens per word before and after. Repeat
    /// for several files.
    #[arg(long, value_name = "CORPUS")]
    train: Vec<PathBuf>,
    /// How many new tokens --train learns at most.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    train_size: usize,
    /// Let --train learn tokens across words (each corpus line one word, spaces as `▁` inside
    /// tokens). Only for a base that keeps a line whole (a Metaspace pre-tokenizer with
    /// `split: false`, as transformers converts Llama/Mistral; a SentencePiece .model); without
    /// it words are split at whitespace and `▁` only starts a token, as SentencePiece trains.
    #[arg(long, requires = "train")]
    train_across_words: bool,
    /// Add TOKEN as a special token (matched whole, never split, `special: true`; a SentencePiece
    /// piece of type USER_DEFINED): marks it where an addition lists it, else adds it after them.
    /// Repeat for several. extend-embeddings lists new special tokens in a model folder's
    /// tokenizer_config.json and special_tokens_map.json.
    #[arg(long = "special", value_name = "TOKEN")]
    special: Vec<String>,
    /// Replace an existing output file.
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    print: super::args::PrintArgs,
}

/// Run the tool on `args` (the program name first), printing to `out` and `err`; the exit code.
pub fn main(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let a: Args = match parse(args, out, err) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let opts = Options {
        score: a.score,
        check_text: a.check_text,
        dry_run: a.dry_run,
        allow_unreachable: a.allow_unreachable,
        allow_base_change: a.allow_base_change,
        special: a.special,
        train: a.train,
        train_size: a.train_size,
        train_across_words: a.train_across_words,
        overwrite: a.overwrite,
    };
    // The plan is the dry run's report; a run executes it.
    let planned = merge_tokenizers::plan(&a.base, &a.add, &a.output, &opts);
    if let (Ok(plan), true) = (&planned, a.dry_run && a.print.json) {
        super::run::print(out, true, &plan.to_plan(), String::new);
        return 0;
    }
    let written = planned.and_then(|plan| {
        if a.dry_run {
            Ok(plan.report)
        } else {
            let written = merge_tokenizers::execute(&plan);
            crate::release::later(plan);
            written
        }
    });
    match written {
        Ok(r) => {
            super::run::print(out, a.print.json, &r, || merge_tokenizers::render(&r));
            0
        }
        Err(e) => super::run::fail_with("merge-tokenizers", &e, a.print.json, out, err),
    }
}
