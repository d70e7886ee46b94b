//! check-vocab: do tokenizer, config, weights, special tokens, optimizer and data agree?

use super::parse;
use crate::doctor::{self, Inputs};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::OpenOptions;
use clap::Parser;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "check-vocab",
    version,
    about = "One report on whether tokenizer, config, embedding, head, special-token ids, optimizer and tokenised data agree on the vocabulary — before CUDA finds out with 'device-side assert triggered'.",
    after_help = "Examples:\n  check-vocab testdata/check_vocab/seed000\n  check-vocab model/ --tokenizer merged.json --freeze-until 2454 --base-tokenizer base.json\n  check-vocab ckpt.pt --tokenizer sp.model --config config.json --allow-global argparse.Namespace\n  check-vocab model/ --token-ids train_ids.npy\n  check-vocab --token-ids batch.pt --codebook-size 1026   (a multi-codebook batch on its own)\n\nPaths may be a model folder: tokenizer.json/tokenizer.model, config.json, tokenizer_config.json, special_tokens_map.json and generation_config.json beside it are found.\nEach finding says what is wrong with the numbers and, where one exists, the fix: a command, or the exact config key and value to set. A fix is offered only when it makes the finding pass and keeps everything a smaller fix would keep; less likely explanations follow as 'or:'.\nExit codes: 0 no error, 1 at least one error, 2 bad input."
)]
pub(super) struct Args {
    /// Checkpoint file or model folder (or give it with --checkpoint).
    #[arg(value_name = "CHECKPOINT")]
    input: Option<PathBuf>,
    /// Checkpoint file or model folder, as the positional argument.
    #[arg(long, value_name = "CHECKPOINT", conflicts_with = "input")]
    checkpoint: Option<PathBuf>,
    /// Tokenizer(s): tokenizer.json, SentencePiece .model, or a model folder holding one; two or
    /// more are also compared.
    #[arg(long)]
    tokenizer: Vec<PathBuf>,
    /// The model's config.json, or a model folder holding one (default: the one beside the
    /// checkpoint).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The training script's freeze_until_index.
    #[arg(long)]
    freeze_until: Option<u64>,
    /// The tokenizer before the merge (its size is the right freeze_until_index).
    #[arg(long)]
    base_tokenizer: Option<PathBuf>,
    /// A training checkpoint whose optimizer state must fit.
    #[arg(long)]
    training_checkpoint: Option<PathBuf>,
    /// Already-tokenised data: a .npy of integers, raw little-endian ids (see --token-ids-dtype),
    /// or a saved batch (torch or safetensors: every integer tensor in it).
    #[arg(long)]
    token_ids: Option<PathBuf>,
    /// u16, u32, i32 or i64, for raw --token-ids files.
    #[arg(long)]
    token_ids_dtype: Option<String>,
    /// Multi-codebook audio data: each row of a [C, T] id tensor in --token-ids (a saved batch,
    /// torch or safetensors) must hold ids below this codebook size. With a saved batch and no
    /// checkpoint, only the batch is checked (codebooks, and widths differing by C − 1: a delay
    /// pattern applied to one tensor).
    #[arg(long, value_name = "S")]
    codebook_size: Option<u64>,
    /// Trust one more pickle global in torch files (e.g. argparse.Namespace); repeatable.
    #[arg(long, value_name = "MODULE.NAME")]
    allow_global: Vec<String>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Run the tool on `args` (the program name first), printing to `out` and `err`; the exit code.
pub fn main(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let a: Args = match parse(args, out, err) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let globals = match GlobalPolicy::with_allowed(&a.allow_global) {
        Ok(g) => g,
        Err(why) => {
            let _ = writeln!(err, "check-vocab: {why}");
            return 2;
        }
    };
    let checkpoint = match a.input.or(a.checkpoint) {
        Some(c) => c,
        // A saved batch checked on its own (multi-codebook data).
        None if a.token_ids.is_some() && a.codebook_size.is_some() => PathBuf::new(),
        None => {
            let _ =
                writeln!(err,
                "check-vocab: give the checkpoint (a file or model folder): check-vocab CHECKPOINT"
            );
            return 2;
        }
    };
    if crate::formats::dcp::is_dcp(&checkpoint) {
        let rest = a.config.is_some()
            || a.freeze_until.is_some()
            || a.base_tokenizer.is_some()
            || a.training_checkpoint.is_some()
            || a.token_ids.is_some();
        if rest {
            let _ = writeln!(err, "check-vocab: {}: a torch Distributed Checkpoint folder is checked on its own or with --tokenizer only", checkpoint.display());
            return 2;
        }
        return report(
            crate::dcp::check::run(&checkpoint, &a.tokenizer),
            a.json,
            out,
            err,
        );
    }
    let inp = Inputs {
        checkpoint,
        tokenizers: a.tokenizer,
        config: a.config,
        freeze_until: a.freeze_until,
        base_tokenizer: a.base_tokenizer,
        training_checkpoint: a.training_checkpoint,
        token_ids: a.token_ids,
        token_ids_dtype: a.token_ids_dtype,
        codebook_size: a.codebook_size,
        open: OpenOptions { globals },
    };
    report(doctor::run(&inp), a.json, out, err)
}

/// Print a report (or the error); the exit code.
fn report(
    r: crate::error::Result<doctor::Report>,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    match r {
        Ok(r) => {
            super::print(out, json, &r, || doctor::render(&r));
            if r.errors > 0 {
                1
            } else {
                0
            }
        }
        Err(e) => super::fail_with("check-vocab", &e, json, out, err),
    }
}
