//! inspect-checkpoint: list what a checkpoint holds. Thin: arguments → library → print.

use super::run::parse;
use crate::formats::OpenOptions;
use crate::jobs::inspect_checkpoint::{self, Options};
use clap::Parser;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "inspect-checkpoint",
    version,
    about = "Show what a checkpoint holds: tensors, dtypes, shapes, sizes, digests (--hash), and which tensors are the vocabulary matrices.",
    after_help = "Examples:\n  inspect-checkpoint testdata/chatterbox_t3/t3_bf16.safetensors\n  inspect-checkpoint testdata/gpt2_sharded/ --json\n  inspect-checkpoint model.safetensors --hash --filter 'emb|head'\n  inspect-checkpoint checkpoint.pt --allow-global argparse.Namespace\n  inspect-checkpoint model.gguf --json\n  inspect-checkpoint megatron-run/ --json\n\nPATH may be a .safetensors file, a *.safetensors.index.json, a torch .pt/.pth/.bin/.ckpt (zip or legacy), a GGUF file (metadata, tensors with ggml types, shapes rows first, the tokenizer), a Megatron-Core torch_dist save root or iteration folder (iteration, TP/PP sizes, padded vocabulary and its TP row chunks, the distributed optimizer's layout), or a model folder; the format is read from the content, not the extension. Nothing in a pickle is ever executed.\nExit codes: 0 success, 2 unreadable or invalid input."
)]
pub(super) struct Args {
    /// Checkpoint files or model folders.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    print: super::args::PrintArgs,
    /// The digest of every listed tensor (parallel, progress on stderr): BLAKE3, or sha256 with
    /// --sha256.
    #[arg(long)]
    hash: bool,
    /// Only list tensors whose name matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
    #[command(flatten)]
    globals: super::args::GlobalsArgs,
    #[command(flatten)]
    manifest: super::args::ManifestArgs,
}

/// Run the tool on `args` (the program name first), printing to `out` and `err`; the exit code.
pub fn main(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let args: Args = match parse(args, out, err) {
        Ok(a) => a,
        Err(code) => return code,
    };
    args.manifest.apply();
    let filter = match args
        .filter
        .as_deref()
        .map(inspect_checkpoint::parse_filter)
        .transpose()
    {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(err, "inspect-checkpoint: {}", e.line());
            return 2;
        }
    };
    let globals = match args.globals.policy() {
        Ok(g) => g,
        Err(e) => {
            return super::run::fail_with("inspect-checkpoint", &e, args.print.json, out, err)
        }
    };
    let opts = Options {
        hash: args.hash,
        filter,
        open: OpenOptions { globals },
    };
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    for path in &args.paths {
        // ZeRO, GGUF and the Megatron layouts have reports of their own.
        let result = crate::formats::open(path, &opts.open).and_then(|ckpt| match &ckpt {
            crate::formats::Checkpoint::Zero { zero: z, .. } => {
                z.get().and_then(|z| inspect_checkpoint::zero(z, &opts))
            }
            crate::formats::Checkpoint::Gguf(g) => {
                g.get().and_then(|g| inspect_checkpoint::gguf(g, &opts))
            }
            crate::formats::Checkpoint::Megatron(m) => inspect_checkpoint::megatron(m, &opts),
            crate::formats::Checkpoint::MegatronLegacy(l) => {
                inspect_checkpoint::megatron_legacy::inspect(l, &opts)
            }
            _ => inspect_checkpoint::report(&ckpt, &opts).map(|r| {
                let text = inspect_checkpoint::render(&r);
                (serde_json::to_value(&r).unwrap_or_default(), text)
            }),
        });
        match result {
            Ok(r) => reports.push(r),
            Err(e) => {
                let _ = writeln!(err, "inspect-checkpoint: {}", e.line());
                errors.push(
                    serde_json::json!({"path": path, "error": e.to_string(), "kind": e.kind()}),
                );
            }
        }
    }
    if args.print.json {
        let docs: Vec<&serde_json::Value> = reports.iter().map(|(v, _)| v).collect();
        let doc = serde_json::json!({"checkpoints": docs, "errors": errors});
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        );
    } else {
        for (i, (_, text)) in reports.iter().enumerate() {
            if i > 0 {
                let _ = writeln!(out);
            }
            let _ = write!(out, "{text}");
        }
    }
    if errors.is_empty() {
        0
    } else {
        2
    }
}
