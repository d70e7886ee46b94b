//! inspect-checkpoint on a DeepSpeed ZeRO save root: the tag, stage, world size, files and each
//! parameter's shape as the rank files record it.

use crate::formats::zero::Zero;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The inspect report of a ZeRO checkpoint.
#[derive(Debug, Serialize)]
pub struct Report {
    pub path: PathBuf,
    pub format: &'static str,
    pub tag: String,
    pub stage: u8,
    pub world_size: usize,
    pub files: Vec<PathBuf>,
    pub params: Vec<ParamReport>,
}

#[derive(Debug, Serialize)]
pub struct ParamReport {
    pub name: String,
    pub shape: Vec<u64>,
    pub group: usize,
    /// The module's dtype (stages 1/2), e.g. bf16 with fp32 master weights.
    pub module_dtype: Option<String>,
    pub master: &'static str,
    /// Optimizer state per parameter, each with the parameter's full shape.
    pub state: Vec<String>,
    /// (rank, elements) held by each rank.
    pub ranks: Vec<(usize, u64)>,
    /// Frozen (no optimizer state, not partitioned by the optimizer).
    pub frozen: bool,
}

/// Describe an open ZeRO checkpoint.
pub fn report(z: &Zero, path: &Path) -> Report {
    let keys = z.moment_keys();
    let params = z
        .params
        .iter()
        .map(|p| ParamReport {
            name: p.name.clone(),
            shape: p.shape.clone(),
            group: p.group,
            module_dtype: z.module_tensor(&p.name).map(|t| t.dtype.to_string()),
            master: "f32",
            state: keys.iter().map(|k| k.to_string()).collect(),
            ranks: p.pieces.iter().map(|x| (x.rank, x.len)).collect(),
            frozen: false,
        })
        .chain(z.frozen.iter().map(|(name, shape)| ParamReport {
            name: name.clone(),
            shape: shape.clone(),
            group: 0,
            module_dtype: z.module_tensor(name).map(|t| t.dtype.to_string()),
            master: "none",
            state: Vec::new(),
            ranks: Vec::new(),
            frozen: true,
        }))
        .collect();
    Report {
        path: path.to_path_buf(),
        format: "deepspeed-zero",
        tag: z.tag.clone(),
        stage: z.stage,
        world_size: z.world,
        files: z.input_paths().into_iter().map(Path::to_path_buf).collect(),
        params,
    }
}

/// The human rendering of [`Report`].
pub fn render(r: &Report) -> String {
    let mut s = format!(
        "{}: DeepSpeed ZeRO-{} checkpoint, tag {}, {} ranks, {} files\n",
        r.path.display(),
        r.stage,
        r.tag,
        r.world_size,
        r.files.len()
    );
    for p in &r.params {
        let ranks: Vec<String> = p
            .ranks
            .iter()
            .map(|(r, n)| format!("rank {r}: {n}"))
            .collect();
        if p.frozen {
            s.push_str(&format!("  {:<32} {:?} frozen\n", p.name, p.shape));
            continue;
        }
        s.push_str(&format!(
            "  {:<32} {:?} group {} module {} master f32, state {} ({})\n",
            p.name,
            p.shape,
            p.group,
            p.module_dtype.as_deref().unwrap_or("partitioned"),
            if p.state.is_empty() {
                "none".to_string()
            } else {
                p.state.join(", ")
            },
            ranks.join(", ")
        ));
    }
    s
}
