//! sanitize-checkpoint: make a training checkpoint safe to resume after a vocabulary change.

use super::run::parse;
use crate::error::{Error, Result};
use crate::formats::dcp::Dcp;
use crate::formats::zero::Zero;
use crate::formats::GlobalPolicy;
use crate::formats::{Checkpoint, OpenOptions};
use crate::jobs::sanitize_checkpoint::to_plan;
use crate::jobs::sanitize_checkpoint::{
    self as sanitize, OptimizerAction, Options, RowsFrom, SchedulerAction,
};
use crate::rows::layout::zero_beside as zero_trainer;
use crate::rows::Method;
use clap::{Parser, ValueEnum};
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;

#[derive(Clone, Copy, ValueEnum)]
enum Opt {
    Repair,
    Drop,
    Keep,
}

#[derive(Clone, Copy, ValueEnum)]
enum Sched {
    Keep,
    Drop,
}

#[derive(Parser)]
#[command(
    name = "sanitize-checkpoint",
    version,
    about = "Make a torch training checkpoint safe to resume after a vocabulary change: resize the model's vocabulary matrices and the optimizer moments that belong to them (or drop the optimizer), keep everything else byte for byte, and scan for NaN/Inf.",
    after_help = "Examples:\n  sanitize-checkpoint ckpt.pt --output ckpt_24000.pt --vocab-rows 24000 --allow-global argparse.Namespace\n  sanitize-checkpoint ckpt.pt --output fresh.pt --tokenizer merged.json --optimizer drop\n  sanitize-checkpoint out/checkpoint-500 --output out/checkpoint-500-am --tokenizer merged.json   (a Trainer checkpoint folder; then trainer.train(resume_from_checkpoint=...))\n  sanitize-checkpoint run/ --output run-am/ --vocab-rows 150   (a Megatron-Core torch_dist save root: 150 true tokens, padded by the run's rule; the distributed optimizer's dp_reshardable buckets re-laid or fully_reshardable states resized, moments kept; or --optimizer drop and resume with --no-load-optim)\n  sanitize-checkpoint legacy-run/ --output legacy-run-am/ --vocab-rows 150   (a Megatron-LM legacy save, mp_rank_XX/model_optim_rng.pt: the moments and master copies resized with the rows, or each rank's distrib_optim.pt re-laid)\n\nWhy: torch's Optimizer.load_state_dict checks only counts, never shapes; moments sized for the old vocabulary load silently and break step() or stop learning (seed 001).\nExit codes: 0 success, 1 NaN/Inf found with --fail-on-nonfinite (nothing written), 2 bad input."
)]
pub(super) struct Args {
    /// The training checkpoint: a torch file ({"model": …, "optimizer": …, "scheduler": …,
    /// "step": …}), or a Hugging Face Trainer checkpoint folder (checkpoint-N/).
    input: PathBuf,
    /// Where to write: a new file for a file; a new (or empty) folder for a folder.
    #[arg(long)]
    output: PathBuf,
    /// Replace an existing output file or non-empty output folder.
    #[arg(long)]
    overwrite: bool,
    /// A vocabulary tensor of the model by its dotted path (e.g. for audio tables, which are
    /// never detected as the text vocabulary); repeatable.
    #[arg(long = "tensor", value_name = "NAME")]
    tensors: Vec<String>,
    /// The vocabulary matrices are C equal segments (codebooks), each grown at its end, and the
    /// optimizer state with them (as extend-embeddings --segments).
    #[arg(long, value_name = "C", default_value_t = 1)]
    segments: u64,
    /// Target vocabulary rows.
    #[arg(long, conflicts_with_all = ["tokenizer", "model"])]
    vocab_rows: Option<u64>,
    /// Target = the tokenizer's largest id + 1.
    #[arg(long, conflicts_with = "model")]
    tokenizer: Option<PathBuf>,
    /// Target = the vocabulary rows of this (new) model checkpoint.
    #[arg(long)]
    model: Option<PathBuf>,
    /// repair (default): resize the moments of resized parameters; drop: remove optimizer and
    /// scheduler; keep: leave them (only when they already fit).
    #[arg(long, value_enum, default_value = "repair")]
    optimizer: Opt,
    /// keep (default): the scheduler's state is left as it was; drop: remove it.
    #[arg(long, value_enum, default_value = "keep")]
    scheduler: Sched,
    /// How new model rows are initialised (as extend-embeddings; moments get zero rows).
    #[arg(long, default_value = "mean", value_parser = Method::parse)]
    init: Method,
    /// Seed of the random init methods (normal, hewitt): the same seed gives the same bytes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Exit 1 (and write nothing) when any weight or moment holds NaN or Inf.
    #[arg(long)]
    fail_on_nonfinite: bool,
    #[command(flatten)]
    globals: super::args::GlobalsArgs,
    /// A tensor (dotted path, e.g. ema.text_emb.weight) that keeps the old vocabulary rows on
    /// purpose; without it, any tensor left at the old rows stops the write (exit 2). Repeatable.
    #[arg(long, value_name = "NAME")]
    keep: Vec<String>,
    /// The optimizer parameter index that holds NAME's state (NAME a vocabulary matrix, e.g.
    /// model.embed_tokens.weight=0), for a checkpoint that does not say which is which (a
    /// vocabulary matrix and a position table of one shape); refused when the index's moments
    /// show it is another matrix's (an embedding's rows never seen as input); repeatable.
    #[arg(long, value_name = "NAME=INDEX", value_parser = super::args::parse_pin)]
    optimizer_param: Vec<(String, u64)>,
    /// Let a target below the weights' rows drop trained rows of the vocabulary matrices (and
    /// their moments). Without it such a target is refused (exit 2). Cutting only moments down
    /// to the rows their weights already have (seed 001) needs no flag.
    #[arg(long)]
    allow_shrink: bool,
    /// Print what would change; write nothing.
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
    // A DCP folder and a DeepSpeed ZeRO checkpoint have jobs of their own.
    let done = globals(&a)
        .and_then(|globals| crate::formats::open(&a.input, &OpenOptions { globals }))
        .and_then(|ckpt| match &ckpt {
            Checkpoint::Dcp(d) => dcp(&a, d, out),
            Checkpoint::Megatron(m) => megatron(&a, m, out),
            Checkpoint::MegatronLegacy(l) => megatron_legacy(&a, l, out),
            Checkpoint::Zero { zero: z, .. } => {
                let side = zero_trainer::beside(&ckpt, a.tokenizer.as_deref());
                sanitize_zero(&a, z.get()?, side.as_ref(), out)
            }
            _ => sanitize(&a, &ckpt, out),
        });
    match done {
        Ok(code) => code,
        Err(e) => super::run::fail_with("sanitize-checkpoint", &e, a.print.json, out, err),
    }
}

/// `--allow-global`: the pickle globals trusted beyond the defaults.
fn globals(a: &Args) -> Result<GlobalPolicy> {
    a.globals.policy()
}

/// A torch training checkpoint file or a Trainer folder; the exit code (1: NaN/Inf found with
/// `--fail-on-nonfinite`).
fn sanitize(a: &Args, ckpt: &Checkpoint, out: &mut dyn Write) -> Result<u8> {
    let target = match (a.vocab_rows, &a.tokenizer, &a.model) {
        (Some(n), _, _) => RowsFrom::Rows(n),
        (_, Some(t), _) => RowsFrom::Tokenizer(t.clone()),
        (_, _, Some(m)) => RowsFrom::Model(m.clone()),
        _ => {
            return Err(Error::arg(
                "--vocab-rows",
                "give --vocab-rows N, --tokenizer TOK or --model NEW_MODEL",
            ))
        }
    };
    let mut opts = Options {
        target,
        optimizer: match a.optimizer {
            Opt::Repair => OptimizerAction::Repair,
            Opt::Drop => OptimizerAction::Drop,
            Opt::Keep => OptimizerAction::Keep,
        },
        scheduler: match a.scheduler {
            Sched::Keep => SchedulerAction::Keep,
            Sched::Drop => SchedulerAction::Drop,
        },
        method: a.init.clone(),
        seed: a.seed,
        fail_on_nonfinite: a.fail_on_nonfinite,
        dry_run: a.dry_run,
        keep: a.keep.clone(),
        overwrite: a.overwrite,
        tensors: a.tensors.clone(),
        segments: a.segments,
        optimizer_params: a.optimizer_param.clone(),
        allow_shrink: a.allow_shrink,
        open: Default::default(),
    };
    opts.open.globals = globals(a)?;
    let r = crate::jobs::sanitize_checkpoint::run(ckpt, &a.output, &opts)?;
    if a.dry_run && a.print.json {
        let plan = to_plan::to_plan(&r, ckpt, &a.output, &opts);
        super::run::print(out, true, &plan, String::new);
        return Ok(if r.failed { 1 } else { 0 });
    }
    super::run::print(out, a.print.json, &r, || sanitize::render(&r));
    Ok(if r.failed { 1 } else { 0 })
}

/// The target rows of a DCP or ZeRO folder: `--vocab-rows N`, or the tokenizer's size;
/// `missing` says what to give when neither is.
fn rows_of(a: &Args, missing: &str) -> Result<u64> {
    match (a.vocab_rows, &a.tokenizer) {
        (Some(n), _) => Ok(n),
        (_, Some(t)) => crate::rows::tokenizer_rows(t),
        _ => Err(Error::arg("--vocab-rows", missing)),
    }
}

/// The first flag a DCP folder or a Megatron checkpoint cannot honour (`optimizer`: whether its
/// `--optimizer` value is one), refused with `message`.
/// Refuse the flags a layout's job does not take: `--optimizer` as `optimizer` says, and
/// `--fail-on-nonfinite` unless the job `scans` the tensors it reads for NaN and Inf.
fn refuse_flags(a: &Args, (optimizer, scans): (bool, bool), message: &str) -> Result<()> {
    let unsupported = [
        (optimizer, "--optimizer"),
        (a.segments != 1, "--segments"),
        (!a.tensors.is_empty(), "--tensor"),
        (!a.keep.is_empty(), "--keep"),
        (!a.optimizer_param.is_empty(), "--optimizer-param"),
        (a.fail_on_nonfinite && !scans, "--fail-on-nonfinite"),
    ];
    match unsupported.iter().find(|(set, _)| *set) {
        Some((_, flag)) => Err(Error::arg(flag, message)),
        None => Ok(()),
    }
}

/// A torch Distributed Checkpoint folder: `--vocab-rows N` or `--tokenizer TOK`, the optimizer
/// repaired, new weight rows by `--init` (mean, zeros, normal or hewitt).
fn dcp(a: &Args, d: &Dcp, out: &mut dyn Write) -> Result<u8> {
    let rows = rows_of(
        a,
        "a DCP folder is resized with --vocab-rows N or --tokenizer TOK",
    )?;
    refuse_flags(
        a,
        (!matches!(a.optimizer, Opt::Repair), false),
        "for a DCP folder only --optimizer repair, one segment and the detected vocabulary are supported (not --tensor, --keep, --optimizer-param, --fail-on-nonfinite)",
    )?;
    let how = row_init(a, "a DCP folder")?;
    let run = crate::jobs::sanitize_checkpoint::dcp::Run {
        dry_run: a.dry_run,
        overwrite: a.overwrite,
        allow_shrink: a.allow_shrink,
    };
    let r = crate::jobs::sanitize_checkpoint::dcp::run(d, &a.output, rows, &how, run)?;
    if a.dry_run && a.print.json {
        let plan = to_plan::dcp_plan(&r, &a.output);
        super::run::print(out, true, &plan, String::new);
        return Ok(0);
    }
    super::run::print(out, a.print.json, &r, || {
        crate::jobs::sanitize_checkpoint::dcp::render(&r)
    });
    Ok(0)
}

/// `--init` for the folder jobs (DCP, Megatron): mean, zeros, normal or hewitt, with
/// single-file sanitize's defaults (its extend_embeddings::Options).
fn row_init(a: &Args, what: &str) -> Result<crate::rows::init::Init> {
    use crate::rows::init::Init;
    let defaults = crate::jobs::extend_embeddings::Options::default();
    Ok(match a.init {
        Method::Mean => Init::Mean,
        Method::Zeros => Init::Zeros,
        Method::Normal => Init::Normal {
            std: defaults.std,
            seed: a.seed,
        },
        Method::Hewitt => Init::Hewitt {
            epsilon: defaults.epsilon,
            seed: a.seed,
        },
        _ => {
            return Err(Error::arg(
                "--init",
                format!("for {what} --init is mean, zeros, normal or hewitt"),
            ))
        }
    })
}

/// A Megatron-Core torch_dist checkpoint: `--vocab-rows N` (the true vocabulary) or
/// `--tokenizer TOK`; the padded size by the run's rule; the optimizer state resized with the
/// rows (`dp_reshardable` buckets, `fully_reshardable` states; other layouts refused), or left
/// out with `--optimizer drop`.
fn megatron(a: &Args, m: &crate::formats::megatron::Megatron, out: &mut dyn Write) -> Result<u8> {
    use crate::jobs::sanitize_checkpoint::megatron as job;
    let n = rows_of(
        a,
        "a Megatron checkpoint is resized with --vocab-rows N (the true vocabulary; the padded size follows the run's rule) or --tokenizer TOK",
    )?;
    refuse_flags(
        a,
        (matches!(a.optimizer, Opt::Keep), true),
        "for a Megatron checkpoint only --optimizer repair (dp_reshardable buckets re-laid, fully_reshardable states resized, other optimizer layouts refused) or drop, one segment and the detected vocabulary are supported (not --tensor, --keep, --optimizer-param)",
    )?;
    let how = row_init(a, "a Megatron checkpoint")?;
    let run = job::Run {
        dry_run: a.dry_run,
        overwrite: a.overwrite,
        allow_shrink: a.allow_shrink,
        drop_optimizer: matches!(a.optimizer, Opt::Drop),
        fail_on_nonfinite: a.fail_on_nonfinite,
    };
    let r = job::run(m, &a.output, n, &how, run, &globals(a)?)?;
    if a.dry_run && a.print.json && !r.failed {
        let plan = megatron_dist_plan(&r, m, (&a.input, &a.output), how.name());
        super::run::print(out, true, &plan, String::new);
        return Ok(0);
    }
    super::run::print(out, a.print.json, &r, || job::render(&r));
    Ok(u8::from(r.failed))
}

/// Megatron-LM's legacy per-rank save: as [`megatron`], the optimizer's moments and master
/// copies resized with the rows (or left out with `--optimizer drop`).
fn megatron_legacy(
    a: &Args,
    l: &crate::formats::megatron::legacy::Legacy,
    out: &mut dyn Write,
) -> Result<u8> {
    use crate::jobs::sanitize_checkpoint::megatron_legacy as job;
    let n = rows_of(
        a,
        "a Megatron checkpoint is resized with --vocab-rows N (the true vocabulary; the padded size follows the run's rule) or --tokenizer TOK",
    )?;
    refuse_flags(
        a,
        (matches!(a.optimizer, Opt::Keep), true),
        "for a Megatron legacy checkpoint only --optimizer repair (the moments and master copies resized) or drop, one segment and the detected vocabulary are supported (not --tensor, --keep, --optimizer-param)",
    )?;
    let how = row_init(a, "a Megatron checkpoint")?;
    let run = crate::jobs::sanitize_checkpoint::megatron::Run {
        dry_run: a.dry_run,
        overwrite: a.overwrite,
        allow_shrink: a.allow_shrink,
        drop_optimizer: matches!(a.optimizer, Opt::Drop),
        fail_on_nonfinite: a.fail_on_nonfinite,
    };
    let r = job::run(l, &a.output, n, &how, run, &globals(a)?)?;
    if a.dry_run && a.print.json && !r.failed {
        let plan = megatron_legacy_plan(&r, (&a.input, &a.output), how.name());
        super::run::print(out, true, &plan, String::new);
        return Ok(0);
    }
    super::run::print(out, a.print.json, &r, || job::render(&r));
    Ok(u8::from(r.failed))
}

/// sanitize-checkpoint on a DeepSpeed ZeRO save root or tag folder: `--vocab-rows N` (or a
/// tokenizer's size), new rows by `--init mean|zeros`.
fn sanitize_zero(
    a: &Args,
    z: &Zero,
    side: Option<&zero_trainer::Beside<'_>>,
    out: &mut dyn Write,
) -> Result<u8> {
    use crate::jobs::sanitize_checkpoint::zero;
    use crate::rows::init::Init;
    // (set, the flag, as the message names it)
    let unsupported = [
        (a.model.is_some(), "--model", "--model"),
        (
            !matches!(a.optimizer, Opt::Repair),
            "--optimizer",
            "--optimizer drop/keep",
        ),
        (
            matches!(a.scheduler, Sched::Drop),
            "--scheduler",
            "--scheduler drop",
        ),
        (a.segments != 1, "--segments", "--segments"),
        (!a.keep.is_empty(), "--keep", "--keep"),
        (
            !a.optimizer_param.is_empty(),
            "--optimizer-param",
            "--optimizer-param",
        ),
        (
            a.fail_on_nonfinite,
            "--fail-on-nonfinite",
            "--fail-on-nonfinite",
        ),
    ];
    if let Some((_, flag, shown)) = unsupported.iter().find(|(set, _, _)| *set) {
        return Err(Error::arg(
            flag,
            format!("{shown} is not supported for a DeepSpeed ZeRO checkpoint (it takes --vocab-rows or --tokenizer, --tensor, --init mean|zeros, --dry-run, --overwrite)"),
        ));
    }
    let rows = rows_of(
        a,
        "a ZeRO checkpoint needs --vocab-rows N or --tokenizer TOK",
    )?;
    let init = match a.init {
        Method::Mean => Init::Mean,
        Method::Zeros => Init::Zeros,
        _ => {
            return Err(Error::arg(
                "--init",
                "--init: a ZeRO checkpoint's new rows are 'mean' (default) or 'zeros'",
            ))
        }
    };
    let opts = zero::Options {
        vocab_rows: rows,
        tensors: a.tensors.clone(),
        init,
        overwrite: a.overwrite,
        dry_run: a.dry_run,
        allow_shrink: a.allow_shrink,
    };
    let r = zero::run(z, side, &a.output, &opts)?;
    if a.dry_run && a.print.json {
        let plan = to_plan::zero_plan(&r, &a.output);
        super::run::print(out, true, &plan, String::new);
        return Ok(0);
    }
    super::run::print(out, a.print.json, &r, || zero::render(&r));
    Ok(0)
}

/// A Megatron-Core torch_dist resize's plan (`r`: the dry run's report of `m`; `init`: the new
/// rows' init): `common.pt` rewritten beside the tensors.
pub(super) fn megatron_dist_plan(
    r: &crate::jobs::sanitize_checkpoint::megatron::Report,
    m: &crate::formats::megatron::Megatron,
    (input, output): (&Path, &Path),
    init: &str,
) -> crate::plan::Plan {
    let rel = m.dir.strip_prefix(&m.path).unwrap_or(Path::new(""));
    let side = vec![crate::plan::SideEdit {
        file: rel.join("common.pt"),
        what: crate::plan::SideWhat::Written {
            why: "the run's args with the new padded_vocab_size".into(),
        },
    }];
    to_plan::megatron_plan(
        r,
        (input, output),
        crate::formats::megatron::LAYOUT,
        (&r.entries, &r.bucket_edits),
        (r.padded_rows, init),
        side,
    )
}

/// A Megatron-LM legacy resize's plan (`r`: the dry run's report; `init`: the new rows' init):
/// the files it leaves out beside the tensors.
pub(super) fn megatron_legacy_plan(
    r: &crate::jobs::sanitize_checkpoint::megatron_legacy::Report,
    (input, output): (&Path, &Path),
    init: &str,
) -> crate::plan::Plan {
    to_plan::megatron_plan(
        r,
        (input, output),
        crate::formats::megatron::legacy::LAYOUT,
        (&r.entries, &r.dropped),
        (r.padded_rows, init),
        to_plan::left_out_files(&r.left_out),
    )
}
