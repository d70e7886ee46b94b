//! The `inspect-checkpoint` job: what is in a checkpoint, as a report (human table or JSON).

mod gguf;
mod megatron;
pub mod megatron_legacy;
mod render;
mod report;
mod text;
mod zero;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, ItemKind};
use crate::formats::torch::value::{Node, Pickle};
use crate::formats::torch::{self as torchfmt, TorchFile};
use crate::formats::{self, Checkpoint, Format, TensorRef, Tensors};
use crate::output::manifest;
use crate::output::progress::Progress;
use crate::ties::{self, How, Tie};
use crate::vocab;
use rayon::prelude::*;
use regex::Regex;
pub use render::render;
pub use report::*;
use std::path::Path;
pub use text::human_bytes;
use text::shape_str;

/// Build the report for an open checkpoint (a ZeRO checkpoint has its own: [`zero()`]).
pub fn report(ckpt: &Checkpoint, opts: &Options) -> Result<Report> {
    match ckpt {
        Checkpoint::Dcp(d) => dcp_report(d, opts),
        Checkpoint::Gguf(g) => Err(Error::unsupported(
            g.path(),
            "a GGUF file has a report of its own (inspect_checkpoint::gguf)",
        )),
        _ => tensors_report(
            ckpt.tensors_for("inspect-checkpoint", "inspect-checkpoint's ZeRO report")?,
            opts,
        ),
    }
}

/// The report of a tensor store.
fn tensors_report(ckpt: &Tensors, opts: &Options) -> Result<Report> {
    let listed: Vec<_> = ckpt
        .tensors()
        .filter(|t| opts.filter.as_ref().is_none_or(|re| re.is_match(t.name())))
        .collect();
    let hashes = if opts.hash {
        hash_listed(ckpt, &listed)?
    } else {
        vec![None; listed.len()]
    };
    let mut vocabulary = vocab::detect(ckpt.tensors().map(|t| (t.name, t.shape)));
    let config = formats::config_beside(&ckpt.path)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str(&t).ok());
    let ties = ties::find(ckpt, vocabulary.vocabulary.as_ref(), config.as_ref());
    // A logits bias [1, V] changes with the rows too (the jobs select it): listed with them.
    if let Some(v) = vocabulary.vocabulary.as_mut() {
        let all = ckpt.tensors().map(|t| (t.name, t.shape));
        if let Some((name, shape)) = vocab::per_token_elsewhere(all, v.rows) {
            v.tensors.push(vocab::VocabTensor {
                name: name.to_string(),
                role: vocab::Role::HeadBias,
                shape: shape.to_vec(),
            });
        }
    }
    let (tensors, totals) = tensor_entries(ckpt, &listed, hashes, &ties);
    Ok(Report {
        hash: opts.hash.then(manifest::algorithm),
        path: ckpt.path.clone(),
        format: ckpt.format,
        files: ckpt
            .files
            .iter()
            .map(|f| &f.map)
            .chain(ckpt.torch.iter().map(|t| &t.map))
            .map(|m| FileEntry {
                path: m.path.clone(),
                bytes: m.len,
            })
            .collect(),
        file_bytes: ckpt.file_bytes(),
        metadata: metadata(ckpt),
        filter: opts.filter.as_ref().map(|r| r.as_str().to_string()),
        tensors,
        totals,
        vocabulary,
        ties,
        // One torch file: its tree. Shards of a state dict have no tree worth summarising.
        tree: match &ckpt.torch[..] {
            [one] if ckpt.index.is_none() => Some(tree_summary(one)),
            _ => None,
        },
        bytes_items: None,
    })
}

/// `--hash`: every listed tensor's digest, in parallel (and the zip CRCs of torch storages,
/// since every byte is read anyway).
fn hash_listed(ckpt: &Tensors, listed: &[TensorRef<'_>]) -> Result<Vec<Option<String>>> {
    for t in &ckpt.torch {
        t.verify_crcs()?;
    }
    let total = listed.iter().map(|t| t.nbytes()).sum();
    let progress = Progress::bytes(total, "hashing");
    let shared = progress.shared();
    let v = listed
        .par_iter()
        .map(|t| t.digest_with(|n| shared.inc(n)).map(Some))
        .collect::<Result<Vec<_>>>()?;
    progress.finish();
    Ok(v)
}

/// The listed tensors' rows and their totals (a tied name's storage counted once, under the
/// first name of its tie).
fn tensor_entries(
    ckpt: &Tensors,
    listed: &[TensorRef<'_>],
    hashes: Vec<Option<String>>,
    ties: &[Tie],
) -> (Vec<TensorEntry>, Totals) {
    let sharded = ckpt.index.is_some();
    let shared: Vec<&str> = ties
        .iter()
        .filter(|t| t.how == How::SameStorage)
        .flat_map(|t| t.names[1..].iter().map(String::as_str))
        .collect();
    let mut totals = Totals::default();
    let mut tensors = Vec::with_capacity(listed.len());
    let torch_names = !ckpt.torch.is_empty();
    let dtype_name = |d: DType| {
        if torch_names {
            d.torch_name()
        } else {
            d.name()
        }
    };
    for (t, digest) in listed.iter().zip(hashes) {
        let once = !shared.contains(&t.name);
        let (params, bytes) = if once {
            (t.elements(), t.nbytes())
        } else {
            (0, 0)
        };
        totals.count(dtype_name(t.dtype), params, bytes);
        tensors.push(TensorEntry {
            name: t.name.to_string(),
            dtype: t.dtype,
            torch_dtype: torch_names.then(|| t.dtype.torch_name()),
            shape: t.shape.to_vec(),
            bytes: t.nbytes(),
            shard: sharded.then(|| file_name(&t.map.path)),
            digest,
            chunks: None,
        });
    }
    (tensors, totals)
}

/// The metadata: a sharded set's index metadata, or a safetensors header's `__metadata__`.
fn metadata(ckpt: &Tensors) -> serde_json::Value {
    match (&ckpt.index, ckpt.files.first()) {
        (Some(index), _) => index
            .metadata
            .clone()
            .map(serde_json::Value::Object)
            .unwrap_or(serde_json::Value::Null),
        (None, Some(f)) => match &f.header.metadata {
            Some(m) => serde_json::Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            ),
            None => serde_json::Value::Null,
        },
        (None, None) => serde_json::Value::Null,
    }
}

/// The report of a DCP folder: every tensor key with its global shape and chunks, the
/// vocabulary among the model's keys, and the names of the pickled values.
fn dcp_report(d: &Dcp, opts: &Options) -> Result<Report> {
    if opts.hash {
        // Hashing reads every byte anyway: check the chunks' zip CRCs too.
        d.verify_crcs()?;
    }
    let mut tensors = Vec::new();
    let mut totals = Totals::default();
    let mut bytes_items = Vec::new();
    for it in &d.items {
        if opts.filter.as_ref().is_some_and(|re| !re.is_match(&it.fqn)) {
            continue;
        }
        let ItemKind::Tensor {
            dtype,
            shape,
            chunks,
        } = &it.kind
        else {
            bytes_items.push(it.fqn.clone());
            continue;
        };
        let elements: u64 = shape.iter().product();
        let bytes = dtype.bytes_for(elements).unwrap_or(0);
        let digest = if opts.hash {
            Some(manifest::digest(&d.tensor_bytes(it)?))
        } else {
            None
        };
        totals.count(dtype.torch_name(), elements, bytes);
        tensors.push(TensorEntry {
            name: it.fqn.clone(),
            dtype: *dtype,
            torch_dtype: Some(dtype.torch_name()),
            shape: shape.clone(),
            bytes,
            shard: None,
            digest,
            chunks: Some(
                chunks
                    .iter()
                    .map(|c| ChunkEntry {
                        offsets: c.offsets.clone(),
                        sizes: c.sizes.clone(),
                        file: c.stored.file.clone(),
                        offset: c.stored.offset,
                        length: c.stored.length,
                    })
                    .collect(),
            ),
        });
    }
    Ok(Report {
        hash: opts.hash.then(manifest::algorithm),
        path: d.dir.clone(),
        format: Format::TorchDcp,
        files: d
            .files
            .values()
            .map(|m| FileEntry {
                path: m.path.clone(),
                bytes: m.len,
            })
            .collect(),
        file_bytes: d.files.values().map(|m| m.len).sum(),
        metadata: serde_json::json!({ "version": d.version }),
        filter: opts.filter.as_ref().map(|r| r.as_str().to_string()),
        tensors,
        totals,
        vocabulary: crate::formats::dcp::keys::vocabulary(d),
        ties: Vec::new(),
        tree: None,
        bytes_items: Some(bytes_items),
    })
}

/// A one-line description of a node.
pub fn describe(p: &Pickle, id: u32) -> String {
    if let Some(t) = p.tensor_of(id) {
        let kind = if matches!(p.node(id), Node::Tensor(_)) {
            "tensor"
        } else {
            "parameter"
        };
        return format!(
            "{kind} {} {}",
            t.storage.dtype.torch_name(),
            shape_str(&t.shape)
        );
    }
    match p.node(id) {
        Node::None => "None".into(),
        Node::Bool(_) => "bool".into(),
        Node::Int(_) | Node::BigInt(_) => "int".into(),
        Node::Float(_) => "float".into(),
        Node::Str(_) => "str".into(),
        Node::Bytes(b) | Node::ByteArray(b) => format!("bytes ({})", b.len()),
        Node::List(v) => format!("list ({})", v.len()),
        Node::Tuple(v) => format!("tuple ({})", v.len()),
        Node::Set(v) | Node::FrozenSet(v) => format!("set ({})", v.len()),
        Node::Dict(e) => format!("dict ({} entries)", e.len()),
        Node::Object { dict_items, .. } if p.is_ordered_dict(id) => {
            format!("OrderedDict ({} entries)", dict_items.len())
        }
        Node::Object { callable, .. } => {
            format!("object {}", p.global_name(*callable).unwrap_or_default())
        }
        Node::Global { .. } => format!("global {}", p.global_name(id).unwrap_or_default()),
        Node::PersistentId(_) => "persistent id".into(),
        Node::Tensor(_) => "tensor".into(),
    }
}

/// The value of a scalar node, shortened.
fn scalar(p: &Pickle, id: u32) -> Option<String> {
    let s = match p.node(id) {
        Node::None => "None".to_string(),
        Node::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        Node::Int(i) => i.to_string(),
        Node::BigInt(b) => format!("<{}-byte int>", b.len()),
        Node::Float(f) => f.to_string(),
        Node::Str(s) if s.chars().count() > 60 => {
            format!("{:?}…", s.chars().take(60).collect::<String>())
        }
        Node::Str(s) => format!("{s:?}"),
        _ => return None,
    };
    Some(s)
}

/// Summarise a torch file's tree: top-level keys, optimizers and schedulers anywhere in it.
pub fn tree_summary(t: &TorchFile) -> TreeSummary {
    let p = &t.pickle;
    let entries = torchfmt::children(p, p.root)
        .into_iter()
        .map(|(key, id)| {
            let prefix = format!("{key}.");
            TreeEntry {
                tensors: t
                    .tensors
                    .iter()
                    .filter(|x| x.path == key || x.path.starts_with(&prefix))
                    .count(),
                kind: describe(p, id),
                value: scalar(p, id),
                key,
            }
        })
        .collect();
    let mut optimizers = Vec::new();
    let mut schedulers = Vec::new();
    // The tree was walked when the file was opened, so this walk is within bounds.
    let _ = torchfmt::walk(p, torchfmt::MAX_WALK, &mut |path, id| {
        if p.tensor_of(id).is_some() {
            return false;
        }
        let Some(entries) = p.dict_entries(id) else {
            return true;
        };
        let keys: Vec<String> = entries
            .iter()
            .map(|&(k, _)| torchfmt::key_text(p, k))
            .collect();
        if let (Some(state), Some(groups)) = (p.get(id, "state"), p.get(id, "param_groups")) {
            let groups: Vec<u32> = match p.node(groups) {
                Node::List(v) => v.clone(),
                _ => Vec::new(),
            };
            let params = groups
                .iter()
                .filter_map(|&g| p.get(g, "params"))
                .map(|l| match p.node(l) {
                    Node::List(v) => v.len(),
                    _ => 0,
                })
                .sum();
            let per_param = p.dict_entries(state).unwrap_or(&[]);
            let mut moments: Vec<String> = Vec::new();
            for &(_, s) in per_param {
                for &(k, _) in p.dict_entries(s).unwrap_or(&[]) {
                    let name = torchfmt::key_text(p, k);
                    if !moments.contains(&name) {
                        moments.push(name);
                    }
                }
            }
            optimizers.push(OptimizerSummary {
                path: path.to_string(),
                param_groups: groups.len(),
                params,
                state_entries: per_param.len(),
                moments,
            });
            return false;
        }
        if keys.iter().any(|k| k == "last_epoch" || k == "base_lrs") {
            schedulers.push(SchedulerSummary {
                path: path.to_string(),
                last_epoch: p.get(id, "last_epoch").and_then(|v| scalar(p, v)),
                keys,
            });
            return false;
        }
        true
    });
    TreeSummary {
        root: describe(p, p.root),
        entries,
        optimizers,
        schedulers,
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Parse a `--filter` pattern.
pub fn parse_filter(pattern: &str) -> Result<Regex> {
    Regex::new(pattern).map_err(|e| Error::arg("--filter", format!("--filter '{pattern}': {e}")))
}

/// inspect-checkpoint on a ZeRO folder: the JSON value and the text. `--filter` selects
/// parameters; `--hash` is refused (the parameters are spread over the ranks' flat tensors).
pub fn zero(z: &crate::formats::zero::Zero, opts: &Options) -> Result<(serde_json::Value, String)> {
    let path = z.path();
    if opts.hash {
        return Err(Error::arg(
            "--hash",
            format!(
                "{}: --hash is not supported for a DeepSpeed ZeRO checkpoint (hash its files instead)",
                path.display()
            ),
        ));
    }
    let mut r = zero::report(z, path);
    if let Some(f) = &opts.filter {
        r.params.retain(|p| f.is_match(&p.name));
    }
    Ok((
        serde_json::to_value(&r).unwrap_or_default(),
        zero::render(&r),
    ))
}

/// inspect-checkpoint on a GGUF file: the JSON value and the text. `--filter` selects tensors;
/// `--hash` digests each tensor's data bytes.
pub fn gguf(g: &crate::formats::gguf::Gguf, opts: &Options) -> Result<(serde_json::Value, String)> {
    let r = gguf::report(g, opts.filter.as_ref(), opts.hash)?;
    Ok((
        serde_json::to_value(&r).unwrap_or_default(),
        gguf::render(&r),
    ))
}

/// A Megatron-Core `torch_dist` checkpoint's report: its iteration, parallel layout, vocabulary
/// and optimizer layout, then the DCP folder's tensors. JSON and the human text.
pub fn megatron(
    m: &crate::formats::megatron::Megatron,
    opts: &Options,
) -> Result<(serde_json::Value, String)> {
    let dcp = dcp_report(&m.dcp, opts)?;
    let tensors = (serde_json::to_value(&dcp).unwrap_or_default(), render(&dcp));
    let r = megatron::report(m, tensors);
    Ok((
        serde_json::to_value(&r).unwrap_or_default(),
        megatron::render(&r),
    ))
}
