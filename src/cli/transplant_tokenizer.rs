//! transplant-tokenizer: give a model another tokenizer's vocabulary, ids and all.

use super::run::parse;
use crate::jobs::transplant_tokenizer::{self, Donor, Options};
use crate::rows::Method;
use clap::Parser;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "transplant-tokenizer",
    version,
    about = "Give a model another tokenizer's vocabulary, with that tokenizer's ids: each new id takes the model's row of the same token (bit for bit), or of the same special role; rows of tokens the model lacks are made by --init; every other tensor and file kept.",
    after_help = "Examples:\n  transplant-tokenizer testdata/gpt2 --tokenizer testdata/tokenizers/bytelevel_bpe.json \\\n    --output gpt2_new --allow-shrink\n  transplant-tokenizer model_dir --tokenizer new_tokenizer_dir --output model_new --allow-shrink \\\n    --pad-to-multiple-of 64\n  transplant-tokenizer model.safetensors --base-tokenizer tokenizer.json --tokenizer new.json \\\n    --output new.safetensors --allow-shrink --dry-run\n\nTokens are matched by their text as bytes, whatever each tokenizer writes it as (GPT-2's byte symbols, SentencePiece's ▁ and <0xNN> pieces); a special token the model lacks takes the row of the model's token of the same role (eos, bos, pad, unk, … from tokenizer_config.json / special_tokens_map.json and config.json's ids).\nBase tokens the new tokenizer lacks are dropped with their trained rows: that needs --allow-shrink.\nA model folder gives a complete folder: weights in the input's layout, config.json (vocab size, special ids found again by their text) and generation_config.json, the new tokenizer's files (all of them when --tokenizer is a folder; else its tokenizer file, with the model's tokenizer_config.json re-keyed to the new ids), every other file carried over. A file gives that one file. OUT must not exist or be empty (--overwrite to replace).\nA training checkpoint's optimizer state follows the tokens: a Trainer folder's optimizer.pt, a torch training file's, a DeepSpeed ZeRO (1/2) save root's master copies and moments, a DCP folder's moments (--optimizer drop: a fresh optimizer, not for ZeRO or DCP).\nExit codes: 0 success, 2 bad input."
)]
pub(super) struct Args {
    /// The model: a model folder (with its tokenizer), a weight file, or a sharded index.
    checkpoint: PathBuf,
    /// The new tokenizer: a tokenizer.json, a SentencePiece .model, or a folder holding one (its
    /// tokenizer_config.json and special_tokens_map.json then come along).
    #[arg(long)]
    tokenizer: PathBuf,
    /// Where to write: a new (or empty) folder for a folder input, a file for a file input.
    #[arg(long)]
    output: PathBuf,
    /// The model's own tokenizer, when CHECKPOINT is not a folder that holds it.
    #[arg(long)]
    base_tokenizer: Option<PathBuf>,
    /// How rows of tokens the model lacks are made: mean (default), hewitt, zeros or normal.
    #[arg(long, default_value = "mean", value_parser = Method::parse)]
    init: Method,
    /// Seed of hewitt and normal: the same seed gives the same bytes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Round the row count up to a multiple of M (the padding rows get the init).
    #[arg(long, value_name = "M")]
    pad_to_multiple_of: Option<u64>,
    /// Change these tensors (instead of the detected vocabulary matrices); repeatable. For a
    /// model with several vocabularies, name the ones the tokenizer indexes.
    #[arg(long = "tensor", value_name = "NAME")]
    tensors: Vec<String>,
    /// config.json to update (default: the one beside the input).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Allow dropping the trained rows of tokens the new tokenizer lacks.
    #[arg(long)]
    allow_shrink: bool,
    /// Replace an existing output file or non-empty output folder (only once the new one is
    /// complete and verified).
    #[arg(long)]
    overwrite: bool,
    /// Sharded inputs: hard-link unchanged shards instead of copying them.
    #[arg(long)]
    link: bool,
    /// Also report each written file's whole digest (tensors' digests are always reported).
    #[arg(long = "file-hash", alias = "file-sha256")]
    file_sha256: bool,
    /// Where made rows are computed: cpu, cuda, or auto.
    #[arg(long, value_enum, default_value_t = super::args::DeviceArg::Auto)]
    device: super::args::DeviceArg,
    #[command(flatten)]
    globals: super::args::GlobalsArgs,
    /// Report what would change (rows, tokens matched and dropped, config keys) and write nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    print: super::args::PrintArgs,
    /// For --init omp or knn: the donor model whose tokenizer has the new tokens (a model folder,
    /// or a weight file with --donor-tokenizer).
    #[arg(long, value_name = "DONOR")]
    donor: Option<PathBuf>,
    /// For --init omp or knn: the donor's tokenizer, for a donor weight file.
    #[arg(long, value_name = "TOKENIZER")]
    donor_tokenizer: Option<PathBuf>,
    /// For --init omp (at most K shared tokens per new token) and knn (the K nearest): a number,
    /// or auto (the k of 8, 16, 32, 64, 128 with the best held-out score, reported).
    #[arg(long, value_name = "K|auto", default_value = "64", value_parser = crate::rows::donor::K::parse)]
    omp_k: crate::rows::donor::K,
    /// A Trainer folder or torch training file: the optimizer parameter index that holds NAME's state (e.g.
    /// transformer.wte.weight=0), for one that does not say which is which (a vocabulary matrix
    /// and a position table of one shape); repeatable.
    #[arg(long, value_name = "NAME=INDEX", value_parser = super::args::parse_pin)]
    optimizer_param: Vec<(String, u64)>,
    /// A Trainer folder or torch training file: what becomes of the optimizer state — move (its
    /// moments follow their tokens) or drop (left out: training resumes with a fresh optimizer).
    #[arg(long, value_enum, default_value_t = OptimizerArg::Move)]
    optimizer: OptimizerArg,
    #[command(flatten)]
    manifest: super::args::ManifestArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OptimizerArg {
    Move,
    Drop,
}

/// Run the tool on `args` (the program name first), printing to `out` and `err`; the exit code.
pub fn main(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let a: Args = match parse(args, out, err) {
        Ok(a) => a,
        Err(code) => return code,
    };
    a.manifest.apply();
    let mut opts = Options::new(a.tokenizer.clone());
    opts.base_tokenizer = a.base_tokenizer.clone();
    opts.method = a.init.clone();
    opts.seed = a.seed;
    opts.pad_to_multiple_of = a.pad_to_multiple_of;
    opts.tensors = a.tensors.clone();
    opts.config = a.config.clone();
    opts.allow_shrink = a.allow_shrink;
    opts.overwrite = a.overwrite;
    opts.link = a.link;
    opts.file_sha256 = a.file_sha256;
    opts.dry_run = a.dry_run;
    opts.device = a.device.request();
    opts.optimizer_params = a.optimizer_param.clone();
    opts.drop_optimizer = matches!(a.optimizer, OptimizerArg::Drop);
    opts.donor = a.donor.clone().map(|path| Donor {
        path,
        tokenizer: a.donor_tokenizer.clone(),
        k: a.omp_k,
    });
    match a.globals.policy() {
        Ok(g) => opts.open.globals = g,
        Err(e) => return super::run::fail_with("transplant-tokenizer", &e, a.print.json, out, err),
    }
    match transplant_tokenizer::run(&a.checkpoint, &a.output, &opts) {
        Ok(r) if a.dry_run && a.print.json => {
            let plan = transplant_tokenizer::to_plan(&r, &a.checkpoint, &a.output);
            super::run::print(out, true, &plan, String::new);
            0
        }
        Ok(r) => {
            super::run::print(out, a.print.json, &r, || transplant_tokenizer::render(&r));
            0
        }
        Err(e) => super::run::fail_with("transplant-tokenizer", &e, a.print.json, out, err),
    }
}
