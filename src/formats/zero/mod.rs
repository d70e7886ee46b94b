//! DeepSpeed ZeRO checkpoints (stages 1, 2 and 3): a save root holding `latest` and a tag folder
//! (`global_stepN/`) with the model states and one optimizer-state file per data-parallel rank.
//! The fp32 master weights and Adam moments are flat partitions per parameter group split across
//! ranks with DeepSpeed's alignment padding; this module maps every parameter to the pieces of
//! those partitions that hold it, so its full values can be read (and, in `zero::write`, laid out
//! again for new shapes).
//!
//! Layouts (DeepSpeed's `stage_1_and_2.py`, `stage3.py`, `zero_to_fp32.py`):
//! - stages 1/2: per group, the parameters are concatenated in `param_shapes` order, the total is
//!   padded to a multiple of 2 × world size, and rank R holds the R-th equal part. Its
//!   `single_partition_of_fp32_groups[g]` is that part without its padding; the moments in
//!   `base_optimizer_state.state[g]` keep the padding.
//! - stage 3: every parameter is split on its own into world-size parts of ceil(numel / world)
//!   (the last padded); rank R's `fp32_flat_groups` are R's parts of every parameter, in order,
//!   and `optimizer_state_dict.state[k]` the moments of flat group k.

pub mod keys;

/// The layout's name in reports and plans (`Checkpoint::layout`).
pub const LAYOUT: &str = "DeepSpeed ZeRO checkpoint";
pub mod layout;
pub mod weights;
pub mod write;

pub use layout::{
    layout_stage12, layout_stage3, stage12_partition, stage3_partition, Param, Piece, STAGE12_ALIGN,
};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::tensor::TensorRef;
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Id, Node, Pickle};
use crate::formats::torch::TorchFile;
use std::path::{Path, PathBuf};

/// The DeepSpeed classes its checkpoints pickle, read as plain data (their arguments and state are
/// values; nothing is called): the ZeRO stage enum, the loss scalers, and the fragment addresses
/// of `param_slice_mappings`. Allowed for ZeRO files only, without `--allow-global`.
pub const DEEPSPEED_GLOBALS: [&str; 4] = [
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.utils.tensor_fragment.fragment_address",
];

/// An open ZeRO checkpoint.
#[derive(Debug)]
pub struct Zero {
    /// The save root holding `latest`, when that was given.
    pub root: Option<PathBuf>,
    pub tag: String,
    /// The tag folder.
    pub dir: PathBuf,
    pub stage: u8,
    pub world: usize,
    /// Stages 1/2: the one `mp_rank_00_model_states.pt`; stage 3: one per rank.
    pub model: Vec<TorchFile>,
    /// One per rank, in rank order.
    pub optim: Vec<TorchFile>,
    /// In `param_shapes` order.
    pub params: Vec<Param>,
    /// Per group: its parameter names (`param_shapes`).
    pub groups: Vec<Vec<String>>,
    /// Each rank's flat lengths (elements), per flat tensor.
    pub flat_lens: Vec<Vec<u64>>,
    /// The optimizer's per-element state keys (see [`Zero::moment_keys`]).
    pub state_keys: Vec<String>,
    /// Frozen parameters (`frozen_param_shapes`): no optimizer state; not resized.
    pub frozen: Vec<(String, Vec<u64>)>,
    pub policy: GlobalPolicy,
}

/// Where a ZeRO checkpoint is: the save root (if given) and the tag folder.
#[derive(Debug, Clone)]
pub struct Located {
    pub root: Option<PathBuf>,
    pub tag: String,
    pub dir: PathBuf,
}

/// A ZeRO checkpoint as `formats::open` found it: where it is, and its rank files opened (read
/// and validated) the first time a tool asks ([`ZeroAt::get`]), so the weight tools that read only
/// the model a DeepSpeed run saved beside it neither pay for nor fail on them.
#[derive(Debug)]
pub struct ZeroAt {
    pub located: Located,
    globals: GlobalPolicy,
    opened: std::sync::OnceLock<Zero>,
}

impl ZeroAt {
    /// `located`, to be opened with the user's trusted `globals`.
    pub(super) fn new(located: Located, globals: GlobalPolicy) -> ZeroAt {
        ZeroAt {
            located,
            globals,
            opened: std::sync::OnceLock::new(),
        }
    }

    /// The save root given (holding `latest`), else the tag folder.
    pub fn path(&self) -> &Path {
        self.located.root.as_deref().unwrap_or(&self.located.dir)
    }

    /// The checkpoint's folders (the save root and the tag folder): every rank file is in them.
    pub fn input_paths(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = self.located.root.iter().map(PathBuf::as_path).collect();
        v.push(&self.located.dir);
        v
    }

    /// The checkpoint, its rank files opened on first use.
    pub fn get(&self) -> Result<&Zero> {
        if let Some(z) = self.opened.get() {
            return Ok(z);
        }
        let z = open(&self.located, &self.globals)?;
        Ok(self.opened.get_or_init(|| z))
    }

    /// The checkpoint, opened, owned.
    pub fn into_zero(self) -> Result<Zero> {
        match self.opened.into_inner() {
            Some(z) => Ok(z),
            None => open(&self.located, &self.globals),
        }
    }
}

fn is_rank_file(name: &str) -> bool {
    name.ends_with("_optim_states.pt") || name.ends_with("_model_states.pt")
}

fn has_rank_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.filter_map(|e| e.ok())
            .any(|e| e.file_name().to_str().is_some_and(is_rank_file))
    })
}

/// Is `path` a ZeRO save root (a `latest` file naming a tag folder of rank files) or a tag
/// folder itself? Detected by content, never by name; None for anything else.
pub(super) fn locate(path: &Path) -> Option<Located> {
    if !path.is_dir() {
        return None;
    }
    let latest = path.join("latest");
    if latest.is_file() {
        let tag = std::fs::read_to_string(&latest).ok()?.trim().to_string();
        let dir = path.join(&tag);
        if !tag.is_empty() && !tag.contains('/') && has_rank_files(&dir) {
            return Some(Located {
                root: Some(path.to_path_buf()),
                tag,
                dir,
            });
        }
        return None;
    }
    if path.join("mp_rank_00_model_states.pt").is_file()
        || path
            .join("zero_pp_rank_0_mp_rank_00_model_states.pt")
            .is_file()
    {
        let tag = path.file_name()?.to_string_lossy().into_owned();
        return Some(Located {
            root: None,
            tag,
            dir: path.to_path_buf(),
        });
    }
    None
}

/// The policy ZeRO files are read with: the user's, plus [`DEEPSPEED_GLOBALS`].
pub fn policy(user: &GlobalPolicy) -> GlobalPolicy {
    let mut p = user.clone();
    p.extra
        .extend(DEEPSPEED_GLOBALS.iter().map(|s| s.to_string()));
    p
}

/// Per group, each parameter's name and shape (`param_shapes`).
pub type GroupShapes = Vec<Vec<(String, Vec<u64>)>>;

/// Small readers of the value tree.
pub(crate) struct Tree<'a> {
    pub p: &'a Pickle,
    pub path: &'a Path,
}

impl<'a> Tree<'a> {
    fn bad(&self, what: String) -> Error {
        Error::format(self.path, what)
    }

    pub fn key(&self, dict: Id, key: &str) -> Result<Id> {
        self.p
            .get(dict, key)
            .ok_or_else(|| self.bad(format!("no '{key}' entry: not a DeepSpeed ZeRO file")))
    }

    pub fn items(&self, id: Id, what: &str) -> Result<Vec<Id>> {
        match self.p.node(id) {
            Node::List(v) | Node::Tuple(v) => Ok(v.clone()),
            _ => Err(self.bad(format!("'{what}' is not a list"))),
        }
    }

    /// An int, an int-valued enum (`ZeroStageEnum.gradients`), or a list of ints (max).
    pub fn int(&self, id: Id, what: &str) -> Result<i64> {
        match self.p.node(id) {
            Node::Int(i) => Ok(*i),
            Node::Bool(b) => Ok(*b as i64),
            Node::Object { args, .. } => match self.p.node(*args) {
                Node::Tuple(a) if a.len() == 1 => self.int(a[0], what),
                _ => Err(self.bad(format!("'{what}' is not an integer"))),
            },
            Node::List(v) if !v.is_empty() => {
                let all: Result<Vec<i64>> = v.iter().map(|&i| self.int(i, what)).collect();
                Ok(all?.into_iter().max().unwrap_or(0))
            }
            _ => Err(self.bad(format!("'{what}' is not an integer"))),
        }
    }

    /// A `torch.Size((…))` or a tuple/list of ints.
    pub fn shape(&self, id: Id, what: &str) -> Result<Vec<u64>> {
        let inner = match self.p.node(id) {
            Node::Object { callable, args, .. }
                if self.p.global_name(*callable).as_deref() == Some("torch.Size") =>
            {
                match self.p.node(*args) {
                    Node::Tuple(a) if a.len() == 1 => a[0],
                    _ => return Err(self.bad(format!("'{what}': torch.Size without a tuple"))),
                }
            }
            _ => id,
        };
        self.items(inner, what)?
            .into_iter()
            .map(|i| match self.p.node(i) {
                Node::Int(n) if *n >= 0 => Ok(*n as u64),
                _ => Err(self.bad(format!("'{what}' is not a shape"))),
            })
            .collect()
    }

    /// `param_shapes`: per group, name → shape.
    pub fn param_shapes(&self, root: Id) -> Result<GroupShapes> {
        let groups = self.items(self.key(root, "param_shapes")?, "param_shapes")?;
        let mut out = Vec::new();
        for g in groups {
            let entries = self
                .p
                .dict_entries(g)
                .ok_or_else(|| self.bad("'param_shapes' entry is not a dict".into()))?;
            let mut v = Vec::new();
            for &(k, s) in entries {
                let name = self
                    .p
                    .str(k)
                    .ok_or_else(|| self.bad("'param_shapes' key is not a string".into()))?;
                v.push((name.to_string(), self.shape(s, name)?));
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// Rank `rank`'s file of `kind` (optim, model): `zero_pp_rank_R_mp_rank_00_KIND_states.pt`,
/// with the `bf16_` prefix DeepSpeed gives optimizer files of bf16 runs.
fn rank_file(dir: &Path, rank: usize, kind: &str) -> PathBuf {
    let plain = format!("zero_pp_rank_{rank}_mp_rank_00_{kind}_states.pt");
    let bf16 = dir.join(format!("bf16_{plain}"));
    if bf16.is_file() {
        bf16
    } else {
        dir.join(plain)
    }
}

/// Refuse tensor-parallel checkpoints (files of model-parallel ranks other than 00).
fn check_single_mp(dir: &Path) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if is_rank_file(&name) && !name.contains("mp_rank_00_") {
            return Err(Error::format(
                e.path(),
                "a tensor-parallel (model-parallel rank other than 00) ZeRO checkpoint: not supported",
            ));
        }
    }
    Ok(())
}

fn open_rank(path: &Path, rank: usize, policy: &GlobalPolicy) -> Result<TorchFile> {
    if !path.is_file() {
        return Err(Error::format(
            path,
            format!("rank {rank}'s file is missing: the checkpoint is incomplete (every data-parallel rank writes one)"),
        ));
    }
    TorchFile::open(path, policy)
}

/// Open the ZeRO checkpoint `locate` found (a save root with `latest`, or a tag folder).
pub fn open(loc: &Located, user: &GlobalPolicy) -> Result<Zero> {
    let policy = policy(user);
    check_single_mp(&loc.dir)?;
    let optim0 = open_rank(&rank_file(&loc.dir, 0, "optim"), 0, &policy)?;
    let t = Tree {
        p: &optim0.pickle,
        path: &optim0.map.path,
    };
    let osd = t.key(t.p.root, "optimizer_state_dict")?;
    if t.p.get(osd, "zero_stage").is_none()
        && t.p.get(osd, "single_partition_of_fp32_groups").is_some()
    {
        return Err(t.bad("written by DeepSpeed's BF16_Optimizer (ZeRO-1 with bf16 and fp32 gradient accumulation), whose layout is not ZeRO's: not supported (DeepSpeed's zero_to_fp32 does not read it either)".into()));
    }
    let stage = t.int(t.key(osd, "zero_stage")?, "zero_stage")?;
    let world = t.int(t.key(osd, "partition_count")?, "partition_count")?;
    if !(1..=3).contains(&stage) || world < 1 {
        return Err(t.bad(format!(
            "zero_stage {stage} with partition_count {world}: not a ZeRO-1/2/3 checkpoint"
        )));
    }
    let (stage, world) = (stage as u8, world as usize);
    let mut optim = vec![optim0];
    for r in 1..world {
        optim.push(open_rank(&rank_file(&loc.dir, r, "optim"), r, &policy)?);
    }
    let extra = rank_file(&loc.dir, world, "optim");
    if extra.is_file() {
        return Err(Error::format(
            &extra,
            format!("rank {world}'s file is here but partition_count says the world size is {world}: files of two runs are mixed"),
        ));
    }
    let model = if stage <= 2 {
        let p = loc.dir.join("mp_rank_00_model_states.pt");
        if !p.is_file() {
            return Err(Error::format(&p, "the model states file is missing"));
        }
        vec![TorchFile::open(&p, &policy)?]
    } else {
        (0..world)
            .map(|r| open_rank(&rank_file(&loc.dir, r, "model"), r, &policy))
            .collect::<Result<_>>()?
    };
    let mut z = Zero {
        root: loc.root.clone(),
        tag: loc.tag.clone(),
        dir: loc.dir.clone(),
        stage,
        world,
        model,
        optim,
        params: Vec::new(),
        groups: Vec::new(),
        flat_lens: Vec::new(),
        state_keys: Vec::new(),
        frozen: Vec::new(),
        policy,
    };
    z.lay_out()?;
    Ok(z)
}

impl Zero {
    /// The flat tensor path (master weights) of flat `k` in an optimizer file.
    pub fn master_path(&self, k: usize) -> String {
        if self.stage <= 2 {
            format!("optimizer_state_dict.single_partition_of_fp32_groups.{k}")
        } else {
            format!("optimizer_state_dict.fp32_flat_groups.{k}")
        }
    }

    /// Where flat `k`'s optimizer state is in an optimizer file.
    pub fn state_prefix(&self, k: usize) -> String {
        if self.stage <= 2 {
            format!("optimizer_state_dict.base_optimizer_state.state.{k}")
        } else {
            format!("optimizer_state_dict.optimizer_state_dict.state.{k}")
        }
    }

    /// The moment `key` (exp_avg, exp_avg_sq) of flat `k` in an optimizer file.
    pub fn moment_path(&self, k: usize, key: &str) -> String {
        format!("{}.{key}", self.state_prefix(k))
    }

    /// The f32 1-d tensor at `path` of rank `rank`'s optimizer file.
    pub fn flat(&self, rank: usize, path: &str) -> Result<TensorRef<'_>> {
        let f = &self.optim[rank];
        let t = f
            .tensor_refs()
            .find(|t| t.name == path)
            .ok_or_else(|| Error::format(&f.map.path, format!("rank {rank} has no '{path}'")))?;
        if t.dtype != DType::F32 || t.shape.len() != 1 {
            return Err(Error::tensor(
                &f.map.path,
                path,
                format!(
                    "is {} {:?}; DeepSpeed's flat partitions are 1-d float32",
                    t.dtype, t.shape
                ),
            ));
        }
        Ok(t)
    }

    /// Map every parameter to its pieces, checking every rank's flat lengths against the layout.
    fn lay_out(&mut self) -> Result<()> {
        let m = &self.model[0];
        let t = Tree {
            p: &m.pickle,
            path: &m.map.path,
        };
        let shapes = t.param_shapes(t.p.root)?;
        // None (ZeRO-1 writes it so) or a dict of name → shape; anything else is refused
        // rather than read as "no frozen parameters".
        let frozen = t.p.get(t.p.root, "frozen_param_shapes");
        if let Some(f) = frozen.filter(|&f| t.p.node(f) != &Node::None) {
            let entries =
                t.p.dict_entries(f)
                    .ok_or_else(|| t.bad("'frozen_param_shapes' is not a dict".to_string()))?;
            for &(k, v) in entries {
                let name = t
                    .p
                    .str(k)
                    .ok_or_else(|| {
                        t.bad("'frozen_param_shapes' has a key that is not a string".to_string())
                    })?
                    .to_string();
                let shape = t.shape(v, &name)?;
                self.frozen.push((name, shape));
            }
        }
        self.groups = shapes
            .iter()
            .map(|g| g.iter().map(|(n, _)| n.clone()).collect())
            .collect();
        if self.stage <= 2 {
            self.check_no_param_alignment()?;
            self.check_not_elastic()?;
        }
        let nflat = self.flat_count()?;
        let mut lens = Vec::new();
        for r in 0..self.world {
            let mut v = Vec::new();
            for k in 0..nflat {
                v.push(self.flat(r, &self.master_path(k))?.shape[0]);
            }
            lens.push(v);
        }
        self.flat_lens = lens;
        self.params = if self.stage <= 2 {
            layout_stage12(&shapes, self.world, &self.flat_lens)
                .map_err(|p| Error::format(&self.dir, p))?
        } else {
            layout_stage3(&shapes, self.world, &self.flat_lens)
                .map_err(|p| Error::format(&self.dir, p))?
        };
        self.state_keys = self.find_state_keys()?;
        self.check_moments()
    }

    /// `zero_optimization.parameter_alignment` pads each parameter inside the flat groups
    /// (`param_alignment_paddings`): that layout is refused, not misread.
    fn check_no_param_alignment(&self) -> Result<()> {
        for f in &self.optim {
            let t = Tree {
                p: &f.pickle,
                path: &f.map.path,
            };
            let osd = t.key(t.p.root, "optimizer_state_dict")?;
            let Some(pads) = t.p.get(osd, "param_alignment_paddings") else {
                continue;
            };
            for g in t.items(pads, "param_alignment_paddings")? {
                for x in t.items(g, "param_alignment_paddings")? {
                    if t.int(x, "param_alignment_paddings")? != 0 {
                        return Err(t.bad("parameters are padded inside the flat groups (zero_optimization.parameter_alignment): this layout is not supported".into()));
                    }
                }
            }
        }
        Ok(())
    }

    fn flat_count(&self) -> Result<usize> {
        let f = &self.optim[0];
        let t = Tree {
            p: &f.pickle,
            path: &f.map.path,
        };
        let osd = t.key(t.p.root, "optimizer_state_dict")?;
        let key = if self.stage <= 2 {
            "single_partition_of_fp32_groups"
        } else {
            "fp32_flat_groups"
        };
        Ok(t.items(t.key(osd, key)?, key)?.len())
    }

    /// Every moment tensor has the length DeepSpeed gives it: a stage-1/2 rank's whole part
    /// (padding included), a stage-3 rank's flat group.
    fn check_moments(&self) -> Result<()> {
        for r in 0..self.world {
            for (k, &len) in self.flat_lens[r].iter().enumerate() {
                let want = if self.stage <= 2 {
                    let numel: u64 = self
                        .params
                        .iter()
                        .filter(|p| p.group == k)
                        .map(Param::numel)
                        .sum();
                    stage12_partition(numel, self.world as u64).1
                } else {
                    len
                };
                for key in &self.state_keys {
                    let path = self.moment_path(k, key);
                    let t = self.flat(r, &path)?;
                    if t.shape[0] != want {
                        return Err(Error::tensor(
                            &self.optim[r].map.path,
                            &path,
                            format!(
                                "holds {} elements; rank {r}'s part of group {k} is {want}: the optimizer state does not match the layout",
                                t.shape[0]
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The optimizer's per-element state keys (Adam: exp_avg, exp_avg_sq).
    pub fn moment_keys(&self) -> Vec<&str> {
        self.state_keys.iter().map(String::as_str).collect()
    }

    /// The optimizer's per-element state keys (Adam: exp_avg, exp_avg_sq; SGD: momentum_buffer):
    /// the 1-d f32 tensors of each flat group's state, the same in every rank and group. 0-d
    /// entries (`step`) are kept as they are; any other tensor there is refused, never skipped.
    fn find_state_keys(&self) -> Result<Vec<String>> {
        let mut first: Option<Vec<String>> = None;
        for (r, f) in self.optim.iter().enumerate() {
            for k in 0..self.flat_lens[r].len() {
                let prefix = format!("{}.", self.state_prefix(k));
                let mut keys = Vec::new();
                for t in f.tensor_refs().filter(|t| t.name.starts_with(&prefix)) {
                    let key = &t.name[prefix.len()..];
                    if key.contains('.') || t.shape.is_empty() {
                        continue;
                    }
                    if t.dtype != DType::F32 || t.shape.len() != 1 {
                        return Err(Error::tensor(
                            &f.map.path,
                            t.name,
                            format!("optimizer state is {} {:?}; per-element state of a flat group is 1-d float32", t.dtype, t.shape),
                        ));
                    }
                    keys.push(key.to_string());
                }
                keys.sort();
                match &first {
                    None => first = Some(keys),
                    Some(want) if *want != keys => {
                        return Err(Error::format(
                            &f.map.path,
                            format!("rank {r}'s optimizer state of group {k} has keys {keys:?} where rank 0's group 0 has {want:?}"),
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(first.unwrap_or_default())
    }

    /// Stage-1/2 elastic checkpoints keep the moments as a list of lean per-group states: refused.
    fn check_not_elastic(&self) -> Result<()> {
        let f = &self.optim[0];
        let t = Tree {
            p: &f.pickle,
            path: &f.map.path,
        };
        let osd = t.key(t.p.root, "optimizer_state_dict")?;
        if let Some(b) = t.p.get(osd, "base_optimizer_state") {
            if matches!(t.p.node(b), Node::List(_)) {
                return Err(t.bad("an elastic checkpoint (zero_optimization.elastic_checkpoint: the moments stored per group without padding): not supported".into()));
            }
        }
        Ok(())
    }

    /// The dtype the model trains in, from the saved `ds_config` (`bf16`/`fp16` `enabled`).
    pub fn model_dtype(&self) -> DType {
        let p = &self.model[0].pickle;
        let enabled = |key: &str| {
            p.get(p.root, "ds_config")
                .and_then(|c| p.get(c, key))
                .and_then(|b| p.get(b, "enabled"))
                .is_some_and(|e| matches!(p.node(e), Node::Bool(true)))
        };
        if enabled("bf16") {
            DType::BF16
        } else if enabled("fp16") {
            DType::F16
        } else {
            DType::F32
        }
    }

    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// A parameter's full values from the flat tensors at `path_of(k)` (f32 bytes, row-major).
    pub fn gather(&self, p: &Param, path_of: &dyn Fn(usize) -> String) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(p.numel() as usize * 4);
        for piece in &p.pieces {
            let t = self.flat(piece.rank, &path_of(piece.flat))?;
            let bytes = t.try_bytes()?;
            let r = (piece.start * 4) as usize..((piece.start + piece.len) * 4) as usize;
            let b = bytes.get(r).ok_or_else(|| {
                Error::tensor(
                    &self.optim[piece.rank].map.path,
                    &path_of(piece.flat),
                    format!("too short for parameter '{}'", p.name),
                )
            })?;
            out.extend_from_slice(b);
        }
        Ok(out)
    }

    /// The fp32 master weights of a parameter (f32 little-endian bytes).
    pub fn master(&self, p: &Param) -> Result<Vec<u8>> {
        self.gather(p, &|k| self.master_path(k))
    }

    /// A moment (`exp_avg`, `exp_avg_sq`) of a parameter.
    pub fn moment(&self, p: &Param, key: &str) -> Result<Vec<u8>> {
        self.gather(p, &|k| self.moment_path(k, key))
    }

    /// The module's own tensor for a parameter (full for stages 1/2; None for stage 3, whose
    /// module files hold partitioned placeholders).
    pub fn module_tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        if self.stage > 2 {
            return None;
        }
        let path = format!("module.{name}");
        self.model[0].tensor_refs().find(|t| t.name == path)
    }

    /// The path it was opened from: the save root, else the tag folder.
    pub fn path(&self) -> &Path {
        self.root.as_deref().unwrap_or(&self.dir)
    }

    /// Every input file.
    pub fn input_paths(&self) -> Vec<&Path> {
        self.model
            .iter()
            .chain(&self.optim)
            .map(|f| f.map.path.as_path())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes(groups: &[&[u64]]) -> GroupShapes {
        groups
            .iter()
            .enumerate()
            .map(|(g, ns)| {
                ns.iter()
                    .enumerate()
                    .map(|(i, &n)| (format!("g{g}.p{i}"), vec![n]))
                    .collect()
            })
            .collect()
    }

    /// Every element of every parameter lies in exactly one piece, inside its rank's flat.
    fn covers_once(params: &[Param], lens: &[Vec<u64>]) {
        let mut used: Vec<Vec<Vec<bool>>> = lens
            .iter()
            .map(|l| l.iter().map(|&n| vec![false; n as usize]).collect())
            .collect();
        for p in params {
            assert_eq!(p.pieces.iter().map(|x| x.len).sum::<u64>(), p.numel());
            for x in &p.pieces {
                for e in x.start..x.start + x.len {
                    let slot = &mut used[x.rank][x.flat][e as usize];
                    assert!(
                        !*slot,
                        "{} overlaps at rank {} flat {}",
                        p.name, x.rank, x.flat
                    );
                    *slot = true;
                }
            }
        }
    }

    #[test]
    fn stage12_layout_pads_each_group_to_twice_the_world_size() {
        for world in 1..=5usize {
            let s = shapes(&[&[997, 9, 3], &[1], &[6]]);
            let lens: Vec<Vec<u64>> = (0..world)
                .map(|r| {
                    s.iter()
                        .map(|g| {
                            let n: u64 = g.iter().map(|(_, s)| s[0]).sum();
                            let (total, part) = stage12_partition(n, world as u64);
                            assert_eq!(total % (2 * world as u64), 0);
                            assert!(total - n < 2 * world as u64);
                            n.saturating_sub(r as u64 * part).min(part)
                        })
                        .collect()
                })
                .collect();
            let params = layout_stage12(&s, world, &lens).unwrap();
            covers_once(&params, &lens);
            // Lean partitions hold exactly the parameters: nothing left unfilled.
            let held: u64 = lens.iter().flatten().sum();
            assert_eq!(held, 997 + 9 + 3 + 1 + 6);
            // A length off by one is refused, naming the rank.
            let mut bad = lens.clone();
            bad[world - 1][0] += 1;
            let e = layout_stage12(&s, world, &bad).unwrap_err();
            assert!(e.contains(&format!("rank {}", world - 1)), "{e}");
        }
    }

    #[test]
    fn stage3_layout_splits_each_parameter_on_its_own() {
        for world in 1..=5usize {
            let s = shapes(&[&[997, 9, 3], &[1]]);
            let w = world as u64;
            let lens: Vec<Vec<u64>> = (0..world)
                .map(|_| {
                    s.iter()
                        .map(|g| g.iter().map(|(_, s)| stage3_partition(s[0], w)).sum())
                        .collect()
                })
                .collect();
            let params = layout_stage3(&s, world, &lens).unwrap();
            covers_once(&params, &lens);
            for p in &params {
                let part = stage3_partition(p.numel(), w);
                // Rank r's part starts at r * part of the parameter; only the last is short.
                for (i, x) in p.pieces.iter().enumerate() {
                    assert_eq!(x.rank, i);
                    if i + 1 < p.pieces.len() {
                        assert_eq!(x.len, part);
                    }
                }
            }
            let mut bad = lens.clone();
            bad[0][1] += 1;
            assert!(layout_stage3(&s, world, &bad).is_err());
        }
    }
}
