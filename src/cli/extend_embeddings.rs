//! extend-embeddings: grow embedding/head matrices (and bias) to a new vocabulary size.

use super::run::parse;
use crate::error::Error;
use crate::jobs::extend_embeddings::{self, Options, Target};
use crate::rows::donor::K;
use crate::rows::Method;
use clap::Parser;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "extend-embeddings",
    version,
    about = "Grow a checkpoint's vocabulary matrices (embedding, head, head bias) to a new row count, with initialised rows; every old row and every other tensor kept bit for bit.",
    after_help = "Examples:\n  extend-embeddings model.gguf --tokenizer merged.json --output grown.gguf   (a GGUF file: tokens, merges and rows in each table's own ggml type)\n  extend-embeddings model.gguf --tokenizer merged.model --output grown.gguf   (a SentencePiece GGUF: the merged .model's pieces, scores and types)\n  extend-embeddings testdata/chatterbox_t3/t3_f32.safetensors --output t3_2535.safetensors \\\n    --tokenizer merged.json\n  extend-embeddings testdata/gpt2 --output gpt2_grown --new-rows 2535 --pad-to-multiple-of 64\n  extend-embeddings model_dir --output model_am --tokenizer merged.json   (the whole add-a-language step)\n  extend-embeddings ckpt.pt --output ckpt_ext.pt --new-rows 24001 --init hewitt --seed 1\n\n--new-rows N is the total row count wanted; --tokenizer uses the tokenizer's largest id + 1.\nInit methods: mean (default), hewitt, zeros, normal, subword-mean (needs --tokenizer, and --base-tokenizer unless MODEL is a folder with its tokenizer), copy:TOKEN, omp (needs --donor: each new token's donor row rebuilt from at most --omp-k shared tokens, the same combination of the base's rows).\nThe output has the input's format: a file for a file; for a model folder (or a sharded set) a folder, complete: weights in the input's layout, config.json with the new vocab size, the merged tokenizer (--tokenizer) in place of the old one, every other file carried over. OUT must not exist or be empty (--overwrite to replace). Nothing is written outside OUT.\nExit codes: 0 success, 2 bad input."
)]
pub(super) struct Args {
    /// Checkpoint file, sharded index, or model folder.
    checkpoint: PathBuf,
    /// Where to write: a file for a file input; a new (or empty) folder for a model folder or
    /// sharded input, which comes out complete (config, tokenizer, every other file).
    #[arg(long)]
    output: PathBuf,
    /// The matrices are C equal segments (codebooks of a multi-codebook audio model: codebook c
    /// at rows [c·S, (c+1)·S)); each grows at its end to --new-rows / C rows, its new rows
    /// initialised from its own rows. Name the tensors with --tensor.
    #[arg(long, value_name = "C", default_value_t = 1)]
    segments: u64,
    /// Replace an existing output file or non-empty output folder (only once the new one is
    /// complete and verified).
    #[arg(long)]
    overwrite: bool,
    /// Total rows wanted.
    #[arg(
        long,
        conflicts_with = "tokenizer",
        required_unless_present = "tokenizer"
    )]
    new_rows: Option<u64>,
    /// Rows = the merged tokenizer's largest id + 1 (a tokenizer.json or a SentencePiece .model,
    /// told by content).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Round the row count up to a multiple of M (e.g. 64 for tensor cores).
    #[arg(long, value_name = "M")]
    pad_to_multiple_of: Option<u64>,
    /// Change these tensors (instead of the detected vocabulary matrices); repeatable.
    #[arg(long = "tensor", value_name = "NAME")]
    tensors: Vec<String>,
    /// How new rows are initialised.
    #[arg(long, default_value = "mean", value_parser = Method::parse)]
    init: Method,
    /// hewitt's ε (covariance scale).
    #[arg(long, default_value_t = 1e-9)]
    scale: f64,
    /// normal's standard deviation.
    #[arg(long, default_value_t = 0.02)]
    std: f64,
    /// Seed of hewitt and normal (the same seed gives the same bytes), and of the shared tokens
    /// --init omp holds out for its quality report.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The tokenizer before the merge (subword-mean, copy:TOKEN, omp); a model folder's own
    /// tokenizer.json or .model when not given.
    #[arg(long)]
    base_tokenizer: Option<PathBuf>,
    /// config.json to update (default: the one beside the input).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Allow a target smaller than the current rows (drops rows).
    #[arg(long)]
    allow_shrink: bool,
    /// Sharded inputs: hard-link unchanged shards instead of copying them.
    #[arg(long)]
    link: bool,
    /// Also report each written file's whole digest, with the manifest's algorithm (every
    /// tensor's digest is always reported; the whole-file hash is a second pass over every byte).
    #[arg(long = "file-hash", alias = "file-sha256")]
    file_sha256: bool,
    /// Where new rows are computed: cpu (the reference), cuda (a build with --features cuda and a
    /// GPU; else exit 2), or auto (the GPU for matrices of 256 MiB and more when there is one,
    /// else the CPU, saying why in one line).
    #[arg(long, value_enum, default_value_t = super::args::DeviceArg::Auto)]
    device: super::args::DeviceArg,
    #[command(flatten)]
    globals: super::args::GlobalsArgs,
    /// Report what would change (tensors, shapes, config keys) and write nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    print: super::args::PrintArgs,
    /// For --init omp: the donor model whose tokenizer has the new tokens (a model folder with its
    /// tokenizer.json or .model, or a weight file with --donor-tokenizer). Each new row is the
    /// combination of the base's rows of shared tokens that orthogonal matching pursuit finds
    /// for the donor's row; tokens the donor lacks get subword-mean.
    #[arg(long, value_name = "DONOR")]
    donor: Option<PathBuf>,
    /// For --init omp: the donor's tokenizer (tokenizer.json or SentencePiece .model), for a donor
    /// weight file, or to override the donor folder's own.
    #[arg(long, value_name = "TOKENIZER")]
    donor_tokenizer: Option<PathBuf>,
    /// For --init omp: at most this many shared tokens per new token (clipped to the donor's
    /// width), or auto: the k of 8, 16, 32, 64, 128 whose held-out median embedding cosine is
    /// best (ties: the smaller), said in the report.
    #[arg(long, value_name = "K|auto", default_value = "64", value_parser = K::parse)]
    omp_k: K,
    /// Also print what is long: --init omp's decompositions of the first new tokens (atoms and
    /// coefficients; --json always has them under donor.sample).
    #[arg(long)]
    verbose: bool,
    #[command(flatten)]
    manifest: super::args::ManifestArgs,
}

/// Run the tool on `args` (the program name first), printing to `out` and `err`; the exit code.
pub fn main(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let a: Args = match parse(args, out, err) {
        Ok(a) => a,
        Err(code) => return code,
    };
    a.manifest.apply();
    // A flag that cannot be carried out: one line naming it, and its kind in `--json`.
    macro_rules! fail {
        ($flag:expr, $msg:expr) => {
            super::run::fail_with(
                "extend-embeddings",
                &Error::arg($flag, $msg),
                a.print.json,
                out,
                err,
            )
        };
    }
    let device = a.device.request();
    let mut opts = Options {
        target: match (&a.new_rows, &a.tokenizer) {
            (Some(n), _) => Target::Rows(*n),
            (None, Some(t)) => Target::Tokenizer(t.clone()),
            (None, None) => return fail!("--new-rows", "give --new-rows N or --tokenizer MERGED"),
        },
        pad_to_multiple_of: a.pad_to_multiple_of,
        tensors: a.tensors.clone(),
        method: a.init.clone(),
        epsilon: a.scale,
        std: a.std,
        seed: a.seed,
        base_tokenizer: a.base_tokenizer.clone(),
        config: a.config.clone(),
        allow_shrink: a.allow_shrink,
        link: a.link,
        file_sha256: a.file_sha256,
        dry_run: a.dry_run,
        overwrite: a.overwrite,
        device,
        segments: a.segments,
        open: Default::default(),
        donor: a.donor.clone().map(|path| extend_embeddings::donor::Donor {
            path,
            tokenizer: a.donor_tokenizer.clone(),
            k: a.omp_k,
        }),
    };
    match a.globals.policy() {
        Ok(g) => opts.open.globals = g,
        Err(e) => return super::run::fail_with("extend-embeddings", &e, a.print.json, out, err),
    }
    let r = match extend_embeddings::run_any(&a.checkpoint, &a.output, &opts) {
        Ok(r) => r,
        Err(e) => return super::run::fail_with("extend-embeddings", &e, a.print.json, out, err),
    };
    let json_plan = a.dry_run && a.print.json;
    match r {
        extend_embeddings::Outcome::Gguf(r) if json_plan => {
            let plan = extend_embeddings::gguf::to_plan(&r, &a.checkpoint, &a.output);
            super::run::print(out, true, &plan, String::new);
        }
        extend_embeddings::Outcome::Gguf(r) => {
            super::run::print(out, a.print.json, &r, || {
                extend_embeddings::gguf::render(&r)
            });
        }
        extend_embeddings::Outcome::Tensors(r) if json_plan => {
            let plan = extend_embeddings::to_plan(&r, &a.checkpoint, &a.output, &opts);
            super::run::print(out, true, &plan, String::new);
        }
        extend_embeddings::Outcome::Tensors(r) => {
            super::run::print(out, a.print.json, &r, || {
                extend_embeddings::render_verbose(&r, a.verbose)
            });
        }
    }
    0
}
