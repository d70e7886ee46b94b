//! vocab-blocks: split a vocabulary matrix into a frozen and a trainable block, or join them.

use super::run::parse;
use crate::error::Error;
use crate::jobs::vocab_blocks::{self, Op, Options};
use clap::Parser;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "vocab-blocks",
    version,
    about = "Split one vocabulary matrix into a frozen block [0, N) and a trainable block [N, V) under two names (train only the new rows, Higgs-audio style weight_frozen + weight_unfrozen joined by torch.cat), or join two blocks back into one matrix to serve. Every other tensor is untouched; a split then a join gives back the file byte for byte.",
    after_help = "Examples:\n  vocab-blocks model.safetensors --output split.safetensors --split model.embed_tokens.weight --at 2454\n    (→ model.embed_tokens.weight_frozen [2454, d] and model.embed_tokens.weight_unfrozen [V-2454, d])\n  vocab-blocks split.safetensors --output served.safetensors --join model.embed_tokens.weight\n  vocab-blocks state.pt --output joined.pt --join text_emb.weight --names text_emb.frozen,text_emb.trainable\n\nDefault block names: NAME_frozen and NAME_unfrozen. Files: one safetensors file or torch state dict (a training checkpoint with optimizer state is refused: resuming across a split or join is not supported).\nExit codes: 0 success, 2 bad input."
)]
pub(super) struct Args {
    /// The checkpoint: one safetensors file or torch state dict.
    input: PathBuf,
    /// Where to write (a new file; never the input).
    #[arg(long)]
    output: PathBuf,
    /// Split this matrix (give --at).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "join",
        required_unless_present = "join"
    )]
    split: Option<String>,
    /// Rows of the first (frozen) block: the old vocabulary's size, e.g. freeze_until_index.
    #[arg(long, value_name = "N", requires = "split")]
    at: Option<u64>,
    /// Join the two blocks into this matrix.
    #[arg(long, value_name = "NAME")]
    join: Option<String>,
    /// The two block names, first (rows [0, N)) then second (default: NAME_frozen,NAME_unfrozen).
    #[arg(long, value_name = "FIRST,SECOND", value_delimiter = ',')]
    names: Vec<String>,
    /// Replace an existing output file.
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    globals: super::args::GlobalsArgs,
    /// Report what would change; write nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    print: super::args::PrintArgs,
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
                "vocab-blocks",
                &Error::arg($flag, $msg),
                a.print.json,
                out,
                err,
            )
        };
    }
    let globals = match a.globals.policy() {
        Ok(g) => g,
        Err(e) => return super::run::fail_with("vocab-blocks", &e, a.print.json, out, err),
    };
    if !matches!(a.names.len(), 0 | 2) {
        return fail!("--names", "--names takes two names: FIRST,SECOND");
    }
    let names = |base: &str| match &a.names[..] {
        [x, y] => (x.clone(), y.clone()),
        _ => vocab_blocks::default_names(base),
    };
    let op = match (&a.split, &a.join) {
        (Some(n), _) => match a.at {
            Some(at) => Op::Split {
                tensor: n.clone(),
                at,
                names: names(n),
            },
            None => return fail!("--at", "--split needs --at N (the rows of the first block)"),
        },
        (None, Some(n)) => Op::Join {
            names: names(n),
            into: n.clone(),
        },
        (None, None) => return fail!("--split", "give --split NAME --at N, or --join NAME"),
    };
    let opts = Options {
        op,
        overwrite: a.overwrite,
        dry_run: a.dry_run,
        open: crate::formats::OpenOptions { globals },
    };
    match vocab_blocks::run(&a.input, &a.output, &opts) {
        Ok(r) if a.dry_run && a.print.json => {
            super::run::print(
                out,
                true,
                &vocab_blocks::to_plan(&r, &a.output),
                String::new,
            );
            0
        }
        Ok(r) => {
            if a.print.json {
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&r).unwrap_or_default()
                );
            } else {
                let list = |v: &[vocab_blocks::Block]| -> String {
                    v.iter()
                        .map(|b| format!("{} {:?}", b.name, b.shape))
                        .collect::<Vec<_>>()
                        .join(" + ")
                };
                let _ = writeln!(
                    out,
                    "{}: {} {} → {}; untouched tensors: {}",
                    r.input.display(),
                    r.op,
                    list(&r.from),
                    list(&r.to),
                    r.untouched_tensors
                );
                if r.dry_run {
                    let _ = writeln!(out, "dry run: nothing written");
                }
                for m in &r.manifest {
                    let _ = writeln!(out, "{}", m.wrote());
                }
            }
            0
        }
        Err(e) => super::run::fail_with("vocab-blocks", &e, a.print.json, out, err),
    }
}
