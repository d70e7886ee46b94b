//! `common.pt`: what a Megatron save keeps outside the sharded tensors — the iteration, the
//! optimizer's sharding type and (Megatron-LM) the run's `args`, an `argparse.Namespace`. Read
//! as data through the non-executing pickle VM with the globals Megatron puts there allowed by
//! name; any other global is refused by name (`--allow-global` when it is plain data).

use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Id, Node, Pickle};
use crate::formats::torch::TorchFile;
use std::path::{Path, PathBuf};

/// The name of the file in an iteration folder.
pub const COMMON: &str = "common.pt";

/// The globals Megatron-LM's `common.pt` carries as plain data: the args object and the enums
/// its values use (recorded, never called).
pub(super) const COMMON_GLOBALS: [&str; 10] = [
    "argparse.Namespace",
    "megatron.core.transformer.enums.AttnBackend",
    "megatron.core.transformer.enums.AttnMaskType",
    "megatron.core.transformer.enums.AttnType",
    "megatron.core.transformer.enums.LayerType",
    "megatron.core.transformer.enums.ModelType",
    "megatron.core.transformer.enums.CudaGraphScope",
    "megatron.core.enums.ModelType",
    "megatron.core.enums.Fp8Recipe",
    "megatron.core.enums.Fp4Recipe",
];

/// Megatron-LM's `_vocab_size_with_padding`: `vocab` rounded up to a multiple of
/// `divisible_by` x `tp`; None when that is 0 or overflows.
pub fn padded(vocab: u64, divisible_by: u64, tp: u64) -> Option<u64> {
    let multiple = divisible_by.checked_mul(tp).filter(|&m| m > 0)?;
    vocab.div_ceil(multiple).checked_mul(multiple)
}

/// The args this reader uses (None: not in the file, or not an int / bool / string there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    pub padded_vocab_size: Option<u64>,
    /// Set by Megatron-LM for tokenizers sized on the command line (`--vocab-size`).
    pub vocab_size: Option<u64>,
    pub make_vocab_size_divisible_by: Option<u64>,
    pub tensor_model_parallel_size: Option<u64>,
    pub pipeline_model_parallel_size: Option<u64>,
    /// Model chunks per pipeline rank (interleaved schedule); None without.
    pub virtual_pipeline_model_parallel_size: Option<u64>,
    pub data_parallel_size: Option<u64>,
    pub context_parallel_size: Option<u64>,
    /// Distributed optimizer instances (the partial distributed optimizer): each shards the
    /// buckets over DP x CP / N replicas; None: one.
    pub num_distributed_optimizer_instances: Option<u64>,
    pub untie_embeddings_and_output_weights: Option<bool>,
    /// Megatron-LM's `--use-distributed-optimizer`: the optimizer state is sharded
    /// (`distrib_optim.pt` in a legacy save, `optimizer.distributed.*` items in torch_dist).
    pub use_distributed_optimizer: Option<bool>,
    pub tokenizer_type: Option<String>,
    pub tokenizer_model: Option<String>,
}

impl Args {
    /// Whether they tie the output layer to the embedding (`untie_embeddings_and_output_weights`
    /// false, Megatron-LM's default; None, not said, is not taken for tied).
    pub fn tied(&self) -> bool {
        self.untie_embeddings_and_output_weights == Some(false)
    }
}

/// `common.pt`, read.
#[derive(Debug, Clone)]
pub struct Common {
    pub path: PathBuf,
    pub iteration: Option<u64>,
    /// `optimizer.param_state_sharding_type` (the distributed optimizer's layout).
    pub sharding_type: Option<String>,
    /// Megatron-LM's args; None when the file has none (Megatron-Core used on its own, NeMo).
    pub args: Option<Args>,
}

/// The globals Megatron's files are read with: the user's, and Megatron's args, enums and
/// torch's dtypes (`common.pt`, the legacy rank files, `distrib_optim.pt`).
pub fn globals(user: &GlobalPolicy) -> GlobalPolicy {
    GlobalPolicy {
        extra: user.extra.clone(),
        context: &COMMON_GLOBALS,
    }
}

/// Read `dir/common.pt`, when there.
pub fn read(dir: &Path, policy: &GlobalPolicy) -> Result<Option<Common>> {
    let path = dir.join(COMMON);
    if !path.is_file() {
        return Ok(None);
    }
    let policy = globals(policy);
    let file = TorchFile::open(&path, &policy)?;
    let p = &file.pickle;
    if p.dict_entries(p.root).is_none() {
        return Err(Error::format(
            &path,
            "not a dict: not the common state of a Megatron save",
        ));
    }
    let iteration = p.get(p.root, "iteration").and_then(|v| uint(p, v));
    let sharding_type = p
        .get(p.root, "optimizer")
        .and_then(|o| p.get(o, "param_state_sharding_type"))
        .and_then(|v| p.str(v))
        .map(str::to_string);
    let args = match p.get(p.root, "args") {
        Some(a) if !matches!(p.node(a), Node::None) => Some(args(p, a).ok_or_else(|| {
            Error::format(
                &path,
                "'args' is not an argparse.Namespace of plain values: not Megatron-LM's args",
            )
        })?),
        _ => None,
    };
    Ok(Some(Common {
        path,
        iteration,
        sharding_type,
        args,
    }))
}

/// The fields of an `argparse.Namespace` object (its BUILD state, a dict).
pub(super) fn args(p: &Pickle, ns: Id) -> Option<Args> {
    let Node::Object {
        callable, state, ..
    } = p.node(ns)
    else {
        return None;
    };
    if p.global_name(*callable).as_deref() != Some("argparse.Namespace") {
        return None;
    }
    let d = (*state)?;
    p.dict_entries(d)?;
    let int = |k: &str| p.get(d, k).and_then(|v| uint(p, v));
    let text = |k: &str| p.get(d, k).and_then(|v| p.str(v)).map(str::to_string);
    let flag = |k: &str| {
        p.get(d, k).and_then(|v| match p.node(v) {
            Node::Bool(b) => Some(*b),
            _ => None,
        })
    };
    Some(Args {
        padded_vocab_size: int("padded_vocab_size"),
        vocab_size: int("vocab_size"),
        make_vocab_size_divisible_by: int("make_vocab_size_divisible_by"),
        tensor_model_parallel_size: int("tensor_model_parallel_size"),
        pipeline_model_parallel_size: int("pipeline_model_parallel_size"),
        virtual_pipeline_model_parallel_size: int("virtual_pipeline_model_parallel_size"),
        data_parallel_size: int("data_parallel_size"),
        context_parallel_size: int("context_parallel_size"),
        num_distributed_optimizer_instances: int("num_distributed_optimizer_instances"),
        untie_embeddings_and_output_weights: flag("untie_embeddings_and_output_weights"),
        use_distributed_optimizer: flag("use_distributed_optimizer"),
        tokenizer_type: text("tokenizer_type"),
        tokenizer_model: text("tokenizer_model"),
    })
}

/// A non-negative int node.
pub(super) fn uint(p: &Pickle, id: Id) -> Option<u64> {
    match p.node(id) {
        Node::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}

/// The args a resize writes into `common.pt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VocabArgs {
    pub padded_vocab_size: u64,
    /// Written only where the args hold an int there (Megatron-LM sets it for `--vocab-size`).
    pub vocab_size: Option<u64>,
    /// Leave out the `optimizer` entry (its sharding type), with the optimizer's items.
    pub drop_optimizer: bool,
}

/// `c`'s file with `args.padded_vocab_size` (and `args.vocab_size` where it is an int) set as
/// `new` says and, with `new.drop_optimizer`, no `optimizer` entry: the pickle edited, every
/// other record carried over, written to `dest` (atomically, re-read and compared).
pub fn write_edited(c: &Common, new: &VocabArgs, user: &GlobalPolicy, dest: &Path) -> Result<()> {
    let policy = globals(user);
    let file = TorchFile::open(&c.path, &policy)?;
    let mut plan = crate::formats::torch::writer::TorchLayout::try_identity(&file)?;
    let p = &mut plan.pickle;
    let bad = |what: &str| Error::format(&c.path, format!("cannot edit {what}"));
    let ns = p.get(p.root, "args").ok_or_else(|| bad("'args'"))?;
    let d = match p.node(ns) {
        Node::Object { state: Some(d), .. } => *d,
        _ => return Err(bad("'args': not an argparse.Namespace")),
    };
    let set = |p: &mut Pickle, key: &str, v: u64| -> Result<()> {
        let id = p.get(d, key).ok_or_else(|| bad(key))?;
        *p.node_mut(id) = Node::Int(i64::try_from(v).map_err(|_| bad(key))?);
        Ok(())
    };
    set(p, "padded_vocab_size", new.padded_vocab_size)?;
    if let Some(v) = new.vocab_size {
        if p.get(d, "vocab_size")
            .is_some_and(|id| uint(p, id).is_some())
        {
            set(p, "vocab_size", v)?;
        }
    }
    if new.drop_optimizer {
        let root = p.root;
        if let Node::Dict(entries) = p.node(root).clone() {
            let kept = entries
                .into_iter()
                .filter(|(k, _)| p.str(*k) != Some("optimizer"))
                .collect();
            *p.node_mut(root) = Node::Dict(kept);
        }
    }
    crate::formats::torch::write::write_torch(&plan, dest, &[c.path.as_path()], &policy)?;
    Ok(())
}

/// The args that set the distributed optimizer's buckets (Megatron-LM's names); None where
/// `common.pt` does not hold them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketArgs {
    pub overlap_grad_reduce: Option<bool>,
    pub ddp_bucket_size: Option<u64>,
    pub data_parallel_size: Option<u64>,
    /// Megatron-LM's `get_model` then builds every model chunk's `DistributedDataParallel` with
    /// `disable_bucketing`: one bucket per buffer.
    pub overlap_param_gather_with_optimizer_step: Option<bool>,
}

impl BucketArgs {
    /// `ddp_bucket_size`, or Megatron's default max(4e7, 1e6 x DP) where the args do not say.
    pub fn size(&self) -> u64 {
        let dp = self.data_parallel_size.unwrap_or(1);
        self.ddp_bucket_size
            .unwrap_or(40_000_000.max(1_000_000 * dp))
    }

    /// The first pipeline stage's bucket size: [`BucketArgs::size`] with `overlap_grad_reduce`,
    /// None (one bucket) without, or with `overlap_param_gather_with_optimizer_step`.
    pub fn overlap_size(&self) -> Option<u64> {
        let bucketed = self.overlap_grad_reduce == Some(true)
            && self.overlap_param_gather_with_optimizer_step != Some(true);
        bucketed.then(|| self.size())
    }
}

/// [`BucketArgs`] from `c`'s `args` (`user`: the globals the user allowed).
pub fn bucket_args(c: &Common, user: &GlobalPolicy) -> Result<BucketArgs> {
    let policy = globals(user);
    let file = TorchFile::open(&c.path, &policy)?;
    Ok(bucket_args_in(&file.pickle))
}

/// [`BucketArgs`] from the `args` of the dict `p` holds (a `common.pt`, a legacy rank file).
pub fn bucket_args_in(p: &Pickle) -> BucketArgs {
    let d = p.get(p.root, "args").and_then(|ns| match p.node(ns) {
        Node::Object { state, .. } => *state,
        _ => None,
    });
    let Some(d) = d else {
        return BucketArgs::default();
    };
    let int = |k: &str| p.get(d, k).and_then(|v| uint(p, v));
    let bool = |k: &str| {
        p.get(d, k).and_then(|v| match p.node(v) {
            Node::Bool(b) => Some(*b),
            _ => None,
        })
    };
    BucketArgs {
        overlap_grad_reduce: bool("overlap_grad_reduce"),
        ddp_bucket_size: int("ddp_bucket_size"),
        data_parallel_size: int("data_parallel_size"),
        overlap_param_gather_with_optimizer_step: bool("overlap_param_gather_with_optimizer_step"),
    }
}
