//! check-vocab: do tokenizer, config, weights, special tokens, optimizer and data agree? With
//! `--fix --output OUT`, the fixes are carried out by the tools' own planners (`fix`).

use super::run::parse;
use crate::error::Error;
use crate::formats::{Checkpoint, OpenOptions};
use crate::jobs::check_vocab::{self, Inputs};
use crate::plan::GgufEdit;
use clap::Parser;
use open::open;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

mod fix;
mod fix_gguf;
mod open;

#[derive(Parser)]
#[command(
    name = "check-vocab",
    version,
    about = "One report on whether tokenizer, config, embedding, head, special-token ids, optimizer and tokenised data agree on the vocabulary — before CUDA finds out with 'device-side assert triggered'.",
    after_help = "Examples:\n  check-vocab testdata/check_vocab/seed000\n  check-vocab model/ --tokenizer merged.json --freeze-until 2454 --base-tokenizer base.json\n  check-vocab ckpt.pt --tokenizer sp.model --config config.json --allow-global argparse.Namespace\n  check-vocab model/ --token-ids train_ids.npy\n  check-vocab --token-ids batch.pt --codebook-size 1026   (a multi-codebook batch on its own)\n  check-vocab model/ --fix --output model-fixed   (carry out every fix that agrees with fix 1)\n  check-vocab ckpt.pt --tokenizer sp.model --fix --fix-only 2 --output ckpt-fixed.pt\n  check-vocab megatron-run/ --tokenizer tokenizer.json   (a Megatron-Core torch_dist save: tokenizer vs true vs padded size, args vs tensors; a table too small gets a sanitize-checkpoint fix, which --fix carries out)\n  check-vocab model/ --fix --output model-fixed --dry-run --json   (the plans; nothing written)\n  check-vocab model.gguf   (a GGUF file: its tokenizer is in the file)\n  check-vocab model.gguf --fix --output fixed.gguf --special eos='<|im_end|>' --token-type '<|im_start|>=control'\n\nPaths may be a model folder: tokenizer.json/tokenizer.model, config.json, tokenizer_config.json, special_tokens_map.json and generation_config.json beside it are found. A GGUF file is checked on its own: tokens vs token_embd / output rows vs <arch>.vocab_size, special ids, the chat template's special tokens; its metadata fixes are check-vocab commands (--fix writes them: --special ROLE=TOKEN, --token-type TOKEN=TYPE, --chat-template FILE, --vocab-size N, --remove-key KEY, --pad-tokens, tensor bytes copied).\nEach finding says what is wrong with the numbers and, where one exists, the fix: a command, or the exact config key and value to set. A fix is offered only when it makes the finding pass and keeps everything a smaller fix would keep; less likely explanations follow as 'or:'.\n--fix carries the fixes out with the tools' own planners (extend-embeddings, sanitize-checkpoint, the JSON edits) into --output, never over the input: a folder gives a complete folder, a file a file. By default every fix of an error that agrees with fix 1 (the same target rows; edits of different keys); fixes of warnings, and any other, only when named with --fix-only N. The output is then checked again.\nExit codes: 0 no error (with --fix: none left in the output), 1 at least one error (left), 2 bad input."
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
    #[command(flatten)]
    globals: super::args::GlobalsArgs,
    #[command(flatten)]
    print: super::args::PrintArgs,
    /// Carry out the report's fixes into --output (the input is never written): every fix of an
    /// error that agrees with fix 1, or the one --fix-only names; then check the output again
    /// (exit 0 only if it has no errors). Nothing to fix: nothing is written.
    #[arg(long, requires = "output")]
    fix: bool,
    /// Where --fix writes: a file for a file input; a new folder for a model folder, complete
    /// (weights, tokenizer, config.json with its edited keys, every other file).
    #[arg(long, value_name = "OUT", requires = "fix")]
    output: Option<PathBuf>,
    /// With --fix: carry out only fix N, as the report numbers them ("fix 1", "fix 2", …),
    /// a warning's fix included.
    #[arg(long, value_name = "N", requires = "fix")]
    fix_only: Option<usize>,
    /// With --fix: print the plans (what each tool would write, the JSON edits) and write nothing.
    #[arg(long, requires = "fix")]
    dry_run: bool,
    /// GGUF, with --fix: set a special-token id by its token, ROLE=TOKEN (bos, eos, eot, pad,
    /// unk, …): `--special eos='<|im_end|>'`. These edits are carried out instead of the report's.
    #[arg(
        long,
        value_name = "ROLE=TOKEN",
        requires = "fix",
        conflicts_with = "fix_only"
    )]
    special: Vec<String>,
    /// GGUF, with --fix: set a token's type, TOKEN=TYPE (control, user-defined or normal).
    #[arg(
        long,
        value_name = "TOKEN=TYPE",
        requires = "fix",
        conflicts_with = "fix_only"
    )]
    token_type: Vec<String>,
    /// GGUF, with --fix: set tokenizer.chat_template to this file's text.
    #[arg(
        long,
        value_name = "FILE",
        requires = "fix",
        conflicts_with = "fix_only"
    )]
    chat_template: Option<PathBuf>,
    /// GGUF, with --fix: set `<arch>.vocab_size`.
    #[arg(long, value_name = "N", requires = "fix", conflicts_with = "fix_only")]
    vocab_size: Option<u64>,
    /// GGUF, with --fix: remove a metadata key.
    #[arg(
        long,
        value_name = "KEY",
        requires = "fix",
        conflicts_with = "fix_only"
    )]
    remove_key: Vec<String>,
    /// GGUF, with --fix: give each padding row of the table a [PAD{id}] token (type unused), as
    /// convert_hf_to_gguf.py does: llama.cpp refuses a table with more rows than tokens.
    #[arg(long, requires = "fix", conflicts_with = "fix_only")]
    pad_tokens: bool,
}

impl Args {
    /// The GGUF edits the command line names, in flag order of kinds.
    fn gguf_edits(&self) -> Result<Vec<GgufEdit>, Error> {
        let pair = |flag: &'static str, v: &str| -> Result<(String, String), Error> {
            v.split_once('=')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| Error::arg(flag, format!("{flag} {v}: give NAME=VALUE")))
        };
        let mut edits = Vec::new();
        for v in &self.special {
            let (role, token) = pair("--special", v)?;
            edits.push(GgufEdit::Special { role, token });
        }
        for v in &self.token_type {
            // The type never holds '=', a token may: split at the last one.
            let (token, kind) = v
                .rsplit_once('=')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| {
                    Error::arg("--token-type", format!("--token-type {v}: give TOKEN=TYPE"))
                })?;
            edits.push(GgufEdit::TokenType { token, kind });
        }
        if let Some(file) = &self.chat_template {
            edits.push(GgufEdit::ChatTemplate { file: file.clone() });
        }
        if let Some(rows) = self.vocab_size {
            edits.push(GgufEdit::VocabSize { rows });
        }
        for key in &self.remove_key {
            edits.push(GgufEdit::Remove { key: key.clone() });
        }
        if self.pad_tokens {
            edits.push(GgufEdit::PadTokens);
        }
        Ok(edits)
    }
}

/// Run the tool on `args` (the program name first), printing to `out` and `err`; the exit code.
pub fn main(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let a: Args = match parse(args, out, err) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let named = match a.gguf_edits() {
        Ok(e) => e,
        Err(e) => return super::run::fail_with("check-vocab", &e, a.print.json, out, err),
    };
    let globals = match a.globals.policy() {
        Ok(g) => g,
        Err(e) => return super::run::fail_with("check-vocab", &e, a.print.json, out, err),
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
    let opened = match open(&inp) {
        Ok(o) => o,
        Err(e) => return super::run::fail_with("check-vocab", &e, a.print.json, out, err),
    };
    if let Some(Checkpoint::Dcp(_)) = &opened.checkpoint {
        let rest = inp.config.is_some()
            || inp.freeze_until.is_some()
            || inp.base_tokenizer.is_some()
            || inp.training_checkpoint.is_some()
            || inp.token_ids.is_some();
        if rest {
            let _ = writeln!(err, "check-vocab: {}: a torch Distributed Checkpoint folder is checked on its own or with --tokenizer only", crate::error::one_line(&inp.checkpoint.display().to_string()));
            return 2;
        }
    }
    if let Some(e) = megatron_refusal(&inp, opened.checkpoint.as_ref()) {
        return super::run::fail_with("check-vocab", &e, a.print.json, out, err);
    }
    let is_gguf = matches!(&opened.checkpoint, Some(Checkpoint::Gguf(_)));
    if !named.is_empty() && !is_gguf {
        let e = Error::arg("--special", format!("{}: --special, --token-type, --chat-template, --vocab-size, --remove-key and --pad-tokens edit a GGUF file's metadata; this is not a GGUF file", inp.checkpoint.display()));
        return super::run::fail_with("check-vocab", &e, a.print.json, out, err);
    }
    if a.fix {
        let req = fix::Request {
            output: a.output.unwrap_or_default(),
            only: a.fix_only,
            dry_run: a.dry_run,
        };
        let done = match &opened.checkpoint {
            Some(Checkpoint::Gguf(g)) => g
                .get()
                .and_then(|g| fix_gguf::run(&inp, &opened, g, &req, &named)),
            _ => fix::run(&inp, &opened, &req),
        };
        return match done {
            Ok(r) => {
                super::run::print(out, a.print.json, &r, || fix::render(&r));
                r.exit_code()
            }
            Err(e) => super::run::fail_with("check-vocab", &e, a.print.json, out, err),
        };
    }
    report(check_vocab::run(&inp, &opened), a.print.json, out, err)
}

/// Print a report (or the error); the exit code.
fn report(
    r: crate::error::Result<check_vocab::Report>,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    match r {
        Ok(r) => {
            super::run::print(out, json, &r, || check_vocab::render(&r));
            if r.errors > 0 {
                1
            } else {
                0
            }
        }
        Err(e) => super::run::fail_with("check-vocab", &e, json, out, err),
    }
}

/// A Megatron save is checked on its own or with `--tokenizer` (its fixes, sanitize-checkpoint
/// to the tokenizer, are carried out by `--fix` too).
fn megatron_refusal(inp: &Inputs, ckpt: Option<&Checkpoint>) -> Option<Error> {
    let what = match ckpt {
        Some(Checkpoint::Megatron(_)) => "a Megatron-Core checkpoint",
        Some(Checkpoint::MegatronLegacy(_)) => "a Megatron-LM legacy checkpoint",
        _ => return None,
    };
    let at = inp.checkpoint.display();
    let rest = inp.config.is_some()
        || inp.freeze_until.is_some()
        || inp.base_tokenizer.is_some()
        || inp.training_checkpoint.is_some()
        || inp.token_ids.is_some();
    rest.then(|| {
        Error::arg(
            "--tokenizer",
            format!("{at}: {what} is checked on its own or with --tokenizer only"),
        )
    })
}
