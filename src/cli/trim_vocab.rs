//! trim-vocab: keep the tokens a language or a corpus needs.

use super::run::parse;
use crate::jobs::trim_vocab::{self, Options};
use clap::Parser;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "trim-vocab",
    version,
    about = "Trim a model's vocabulary to the tokens a corpus, a script or a list needs: the tokenizer pruned per family so every kept token stays reachable (checked on the corpus), every vocabulary matrix, bias and optimizer moment (Trainer folder, torch training file, DeepSpeed ZeRO 1/2/3 master copies and moments, DCP folder) gathered by one old → new id map, written with the output.",
    after_help = "Examples:\n  trim-vocab testdata/gpt2 --keep-corpus testdata/tokenizers/english.txt --output gpt2_en --allow-shrink\n  trim-vocab model_dir --keep-corpus am.txt --keep-script Ethiopic,Latin --output model_am --allow-shrink \\\n    --pad-to-multiple-of 64\n  trim-vocab model_dir --keep-list tokens.txt --output out --allow-shrink --dry-run --json\n  trim-vocab model.gguf --tokenizer tokenizer.json --keep-corpus en.txt --output model_en.gguf --allow-shrink   (a GGUF file: --tokenizer is the one it was made from)\n\nAlways kept: special and added tokens, the byte alphabet (byte-level BPE) or byte-fallback pieces, what merges need to build a kept token (BPE), the ## forms words need (WordPiece), every id config.json and generation_config.json name, the tokens of the chat template's literal text (turn markers, role headers, the generation prompt; tokenizer_config.json, chat_template.jinja, a GGUF's tokenizer.chat_template). New ids are dense, in the old order; token_map.json (old id → new id) is written in the output folder, or beside a file output as OUT.token_map.json.\nBefore anything is written, every line of the keep corpus must tokenize to the same token strings with the trimmed tokenizer (exit 1 otherwise); --check-text lines must get no new unknown tokens.\nTrimming drops trained rows: it needs --allow-shrink.\nA GGUF file needs --tokenizer, the tokenizer.json or SentencePiece .model it was made from (its tokens must be the file's tokenizer.ggml.tokens, id for id; exit 2 otherwise): the tokenizer arrays (tokens, token types, scores, merges), the special ids and <arch>.vocab_size follow the map, token_embd.weight and output.weight keep the kept rows' bytes in their own ggml type (quantized rows copied, not requantized), every other key and tensor is kept; OUT.token_map.json beside it.\nExit codes: 0 success, 1 a check failed, 2 bad input."
)]
pub(super) struct Args {
    /// The model: a model folder (with its tokenizer), a Trainer checkpoint folder, a weight file,
    /// a sharded index, or a GGUF file (with --tokenizer).
    checkpoint: PathBuf,
    /// Where to write: a new (or empty) folder for a folder input, a file for a file input.
    #[arg(long)]
    output: PathBuf,
    /// The model's tokenizer (tokenizer.json or SentencePiece .model), when CHECKPOINT is not a
    /// folder that holds it; for a GGUF file, the one it was made from.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Keep the tokens this text uses (one or more files; its lines are checked after).
    #[arg(long, value_name = "FILE")]
    keep_corpus: Vec<PathBuf>,
    /// With --keep-corpus: only tokens used at least N times.
    #[arg(long, value_name = "N", default_value_t = 1)]
    min_count: u64,
    /// Keep the tokens whose text is in these Unicode scripts (by blocks: Latin, Greek, Cyrillic,
    /// Arabic, Hebrew, Ethiopic, Han, Hiragana, Katakana, Hangul, Devanagari, Thai, …).
    #[arg(long, value_name = "SCRIPT", value_delimiter = ',')]
    keep_script: Vec<String>,
    /// With --keep-corpus: keep only the N tokens it uses most.
    #[arg(long, value_name = "N")]
    keep_top: Option<usize>,
    /// Keep the tokens listed in FILE, one per line (the token as the tokenizer writes it, or its id).
    #[arg(long, value_name = "FILE")]
    keep_list: Option<PathBuf>,
    /// Text that must still tokenize without new unknown tokens (text outside the kept set).
    #[arg(long, value_name = "FILE")]
    check_text: Vec<PathBuf>,
    /// Round the row count up to a multiple of M (padding rows: the column mean).
    #[arg(long, value_name = "M")]
    pad_to_multiple_of: Option<u64>,
    /// Change these tensors (instead of the detected vocabulary matrices); repeatable.
    #[arg(long = "tensor", value_name = "NAME")]
    tensors: Vec<String>,
    /// config.json to update (default: the one beside the input).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Allow dropping the trained rows of the tokens not kept (every trim does).
    #[arg(long)]
    allow_shrink: bool,
    /// Replace an existing output (only once the new one is complete and verified).
    #[arg(long)]
    overwrite: bool,
    /// Sharded inputs: hard-link unchanged shards instead of copying them.
    #[arg(long)]
    link: bool,
    /// Also report each written file's whole digest (tensors' digests are always reported).
    #[arg(long = "file-hash", alias = "file-sha256")]
    file_sha256: bool,
    #[command(flatten)]
    globals: super::args::GlobalsArgs,
    /// Report what would change (tokens kept and why, rows and bytes saved, the corpus check) and
    /// write nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    print: super::args::PrintArgs,
    /// A Trainer folder or torch training file: the optimizer parameter index that holds NAME's state, for one
    /// that does not say which is which; repeatable.
    #[arg(long, value_name = "NAME=INDEX", value_parser = super::args::parse_pin)]
    optimizer_param: Vec<(String, u64)>,
    /// A Trainer folder or torch training file: what becomes of the optimizer state — trim (its
    /// moments follow their tokens) or drop (left out: a fresh optimizer).
    #[arg(long, value_enum, default_value_t = OptimizerArg::Trim)]
    optimizer: OptimizerArg,
    #[command(flatten)]
    manifest: super::args::ManifestArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OptimizerArg {
    Trim,
    Drop,
}

/// Run the tool on `args` (the program name first), printing to `out` and `err`; the exit code.
pub fn main(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let a: Args = match parse(args, out, err) {
        Ok(a) => a,
        Err(code) => return code,
    };
    a.manifest.apply();
    let mut opts = Options {
        tokenizer: a.tokenizer.clone(),
        keep_corpus: a.keep_corpus.clone(),
        min_count: a.min_count,
        keep_script: a.keep_script.clone(),
        keep_top: a.keep_top,
        keep_list: a.keep_list.clone(),
        check_text: a.check_text.clone(),
        pad_to_multiple_of: a.pad_to_multiple_of,
        tensors: a.tensors.clone(),
        config: a.config.clone(),
        allow_shrink: a.allow_shrink,
        link: a.link,
        file_sha256: a.file_sha256,
        dry_run: a.dry_run,
        overwrite: a.overwrite,
        optimizer_params: a.optimizer_param.clone(),
        drop_optimizer: matches!(a.optimizer, OptimizerArg::Drop),
        ..Options::default()
    };
    match a.globals.policy() {
        Ok(g) => opts.open.globals = g,
        Err(e) => return super::run::fail_with("trim-vocab", &e, a.print.json, out, err),
    }
    let r = match trim_vocab::run_any(&a.checkpoint, &a.output, &opts) {
        Ok(r) => r,
        Err(e) => return super::run::fail_with("trim-vocab", &e, a.print.json, out, err),
    };
    let json_plan = a.dry_run && a.print.json;
    match r {
        trim_vocab::Outcome::Gguf(r) if json_plan => {
            let plan = trim_vocab::gguf::to_plan(&r, &a.checkpoint, &a.output);
            super::run::print(out, true, &plan, String::new);
        }
        trim_vocab::Outcome::Gguf(r) => {
            super::run::print(out, a.print.json, &r, || trim_vocab::gguf::render(&r));
        }
        trim_vocab::Outcome::Tensors(r) if json_plan => {
            let plan = trim_vocab::to_plan(&r, &a.checkpoint, &a.output);
            super::run::print(out, true, &plan, String::new);
        }
        trim_vocab::Outcome::Tensors(r) => {
            super::run::print(out, a.print.json, &r, || trim_vocab::render(&r));
        }
    }
    0
}
