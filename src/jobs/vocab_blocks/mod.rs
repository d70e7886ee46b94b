//! The `vocab-blocks` job: split one vocabulary matrix into a frozen block `[0, N)` and a
//! trainable block `[N, V)` under two names (Higgs-audio style `weight_frozen` /
//! `weight_unfrozen`, joined by `torch.cat` in `forward`), and join two such blocks back into
//! one matrix to serve. Every other tensor is untouched; safetensors and torch files; a split
//! followed by a join gives back the file it started from, byte for byte (and the reverse). The
//! writing in each format is `rows::layout::blocks`'.

use crate::error::{Error, Result};
use crate::formats::{self, Format, OpenOptions, TensorRef, Tensors};
use crate::output::manifest::FileManifest;
pub use crate::rows::layout::blocks::{default_names, Op};
use crate::rows::layout::blocks::{tensor, write_blocks};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Options {
    pub op: Op,
    pub overwrite: bool,
    pub dry_run: bool,
    pub open: OpenOptions,
}

#[derive(Debug, Clone, Serialize)]
pub struct Block {
    pub name: String,
    pub shape: Vec<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub input: PathBuf,
    pub format: Format,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    /// `split` or `join`.
    pub op: &'static str,
    pub from: Vec<Block>,
    pub to: Vec<Block>,
    pub untouched_tensors: usize,
    pub dry_run: bool,
    pub manifest: Vec<FileManifest>,
}

fn shape_of(t: &TensorRef<'_>) -> Vec<u64> {
    t.shape.to_vec()
}

/// New names, chosen by `flag`, must not be taken.
fn refuse_same(ckpt: &Tensors, names: &[&str], flag: &'static str) -> Result<()> {
    for n in names {
        if ckpt.tensor(n).is_some() {
            return Err(Error::arg(
                flag,
                format!(
                    "{}: a tensor named '{n}' exists already; choose other names",
                    ckpt.path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The blocks a split makes of `n`: rows `..at` and `at..`.
fn split_blocks(
    ckpt: &Tensors,
    n: &str,
    at: u64,
    names: &(String, String),
) -> Result<(Vec<Block>, Vec<Block>)> {
    let t = tensor(ckpt, n, "--split")?;
    refuse_same(ckpt, &[&names.0, &names.1], "--names")?;
    let rows = t.shape.first().copied().unwrap_or(0);
    if t.shape.len() != 2 || at == 0 || at >= rows {
        return Err(Error::tensor(
            &ckpt.path,
            n,
            format!(
                "shape {:?}: --at {at} must split its rows into two non-empty blocks (0 < N < {rows})",
                t.shape
            ),
        ));
    }
    let d = t.shape[1];
    let from = vec![Block {
        name: n.to_string(),
        shape: shape_of(&t),
    }];
    let to = vec![
        Block {
            name: names.0.clone(),
            shape: vec![at, d],
        },
        Block {
            name: names.1.clone(),
            shape: vec![rows - at, d],
        },
    ];
    Ok((from, to))
}

/// The matrix a join makes of two blocks of one width and dtype.
fn join_blocks(
    ckpt: &Tensors,
    names: &(String, String),
    into: &str,
) -> Result<(Vec<Block>, Vec<Block>)> {
    let (a, b) = (
        tensor(ckpt, &names.0, "--names")?,
        tensor(ckpt, &names.1, "--names")?,
    );
    refuse_same(ckpt, &[into], "--join")?;
    if a.shape.len() != 2 || a.shape[1..] != b.shape[1..] || a.dtype != b.dtype {
        return Err(Error::tensor(
            &ckpt.path,
            &names.1,
            format!(
                "{} {} {:?} and {} {} {:?} are not blocks of one matrix (same dtype and width, 2-D)",
                names.0, a.dtype, a.shape, names.1, b.dtype, b.shape
            ),
        ));
    }
    let from = vec![
        Block {
            name: names.0.clone(),
            shape: shape_of(&a),
        },
        Block {
            name: names.1.clone(),
            shape: shape_of(&b),
        },
    ];
    let to = vec![Block {
        name: into.to_string(),
        shape: vec![a.shape[0] + b.shape[0], a.shape[1]],
    }];
    Ok((from, to))
}

/// Decide the split or join: the report is the plan (`from` blocks replaced by `to` blocks,
/// every other tensor copied). Reads only.
pub fn plan(ckpt: &Tensors, opts: &Options) -> Result<Report> {
    if !matches!(
        ckpt.format,
        Format::Safetensors | Format::TorchZip | Format::TorchLegacy
    ) {
        return Err(Error::unsupported(
            &ckpt.path,
            format!(
                "vocab-blocks reads one safetensors or torch file, not {}",
                ckpt.format.name()
            ),
        ));
    }
    if ckpt.has_optimizer() {
        return Err(Error::unsupported(
            &ckpt.path,
            "holds optimizer state, indexed by the parameters this would split or join: resuming a run across a split or join is not supported; drop it first (sanitize-checkpoint --optimizer drop), or take the model's weights alone",
        ));
    }
    let (from, to) = match &opts.op {
        Op::Split { tensor, at, names } => split_blocks(ckpt, tensor, *at, names)?,
        Op::Join { names, into } => join_blocks(ckpt, names, into)?,
    };
    Ok(Report {
        input: ckpt.path.clone(),
        format: ckpt.format,
        output: None,
        op: match opts.op {
            Op::Split { .. } => "split",
            Op::Join { .. } => "join",
        },
        untouched_tensors: ckpt.tensors().count() - from.len(),
        from,
        to,
        dry_run: opts.dry_run,
        manifest: Vec::new(),
    })
}

/// The split or join as a [`crate::plan::Plan`]: the tensors it removes, and each new block
/// with the rows it takes (`[start, end)` of which old tensor).
pub fn to_plan(r: &Report, output: &Path) -> crate::plan::Plan {
    use crate::plan::{Edit, Plan, Role, RowSource};
    let mut plan = Plan::new("vocab-blocks", &r.input, output, r.format.name(), r);
    // The old tensors' rows in order, handed out to the new blocks in order.
    let (mut old_i, mut old_at) = (0usize, 0u64);
    for b in &r.to {
        let rows = b.shape.first().copied().unwrap_or(0);
        let mut sources = Vec::new();
        let mut need = rows;
        while need > 0 && old_i < r.from.len() {
            let old = &r.from[old_i];
            let left = old.shape.first().copied().unwrap_or(0) - old_at;
            let take = left.min(need);
            sources.push(serde_json::json!({"tensor": old.name, "rows": [old_at, old_at + take]}));
            (need, old_at) = (need - take, old_at + take);
            if take == left {
                (old_i, old_at) = (old_i + 1, 0);
            }
        }
        plan.edits.push(Edit {
            tensor: b.name.clone(),
            role: Role::of_weight(&b.name),
            from: Vec::new(),
            to: b.shape.clone(),
            rows: RowSource::Mapped {
                from: serde_json::Value::Array(sources),
            },
        });
    }
    for b in &r.from {
        plan.edits.push(Edit {
            tensor: b.name.clone(),
            role: Role::of_weight(&b.name),
            from: b.shape.clone(),
            to: Vec::new(),
            rows: RowSource::Removed,
        });
    }
    plan
}

/// Write the planned file (nothing for `--dry-run`).
pub fn execute(ckpt: &Tensors, mut report: Report, out: &Path, opts: &Options) -> Result<Report> {
    if opts.dry_run {
        return Ok(report);
    }
    let inputs = ckpt.input_paths();
    let ext: &[&str] = match ckpt.format {
        Format::Safetensors => &["safetensors"],
        _ => &["pt", "pth", "bin", "ckpt"],
    };
    crate::output::folder::file_destination(out, &inputs, ckpt.format.name(), ext, opts.overwrite)?;
    let m = write_blocks(ckpt, out, &opts.op, &inputs, &opts.open)?;
    report.manifest = vec![m];
    report.output = Some(out.to_path_buf());
    Ok(report)
}

/// Split or join `input` into `out`: [`plan`], then [`execute`].
pub fn run(input: &Path, out: &Path, opts: &Options) -> Result<Report> {
    crate::output::atomic::refuse_overlap(out, &[input])?;
    let opened = formats::open(input, &opts.open)?;
    if let formats::Checkpoint::Megatron(_) = &opened {
        return Err(opened.refusal("vocab-blocks", ""));
    }
    let Some(ckpt) = opened.tensors() else {
        return Err(Error::unsupported(
            opened.path(),
            format!(
                "vocab-blocks reads one safetensors or torch file, not {}",
                opened.layout()
            ),
        ));
    };
    let report = plan(ckpt, opts)?;
    execute(ckpt, report, out, opts)
}
