//! inspect-checkpoint: list what a checkpoint holds. Thin: arguments → library → print.

use ckpt_surgery::formats::torch::pickle::GlobalPolicy;
use ckpt_surgery::formats::OpenOptions;
use ckpt_surgery::inspect::{self, Options};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "inspect-checkpoint",
    version,
    about = "Show what a checkpoint holds: tensors, dtypes, shapes, sizes, sha256, and which tensors are the vocabulary matrices.",
    after_help = "Examples:\n  inspect-checkpoint testdata/chatterbox_t3/t3_bf16.safetensors\n  inspect-checkpoint testdata/gpt2_sharded/ --json\n  inspect-checkpoint model.safetensors --hash --filter 'emb|head'\n  inspect-checkpoint checkpoint.pt --allow-global argparse.Namespace\n\nPATH may be a .safetensors file, a *.safetensors.index.json, a torch .pt/.pth/.bin/.ckpt (zip or legacy), or a model folder; the format is read from the content, not the extension. Nothing in a pickle is ever executed.\nExit codes: 0 success, 2 unreadable or invalid input."
)]
struct Args {
    /// Checkpoint files or model folders.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
    /// sha256 of every listed tensor (parallel, progress on stderr).
    #[arg(long)]
    hash: bool,
    /// Only list tensors whose name matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
    /// Trust one more pickle global in torch files (e.g. argparse.Namespace); repeatable.
    /// Globals that run code (os.*, subprocess.*, builtins.eval, pickle.loads, …) are never allowed.
    #[arg(long, value_name = "MODULE.NAME")]
    allow_global: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = match args
        .filter
        .as_deref()
        .map(inspect::parse_filter)
        .transpose()
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("inspect-checkpoint: {e}");
            return ExitCode::from(2);
        }
    };
    let globals = match GlobalPolicy::with_allowed(&args.allow_global) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("inspect-checkpoint: {why}");
            return ExitCode::from(2);
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
        match inspect::inspect(path, &opts) {
            Ok(r) => reports.push(r),
            Err(e) => {
                eprintln!("inspect-checkpoint: {e}");
                errors.push(serde_json::json!({"path": path, "error": e.to_string()}));
            }
        }
    }
    if args.json {
        let doc = serde_json::json!({"checkpoints": reports, "errors": errors});
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for (i, r) in reports.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print!("{}", inspect::render(r));
        }
    }
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
