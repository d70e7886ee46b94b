//! vocab-blocks' writing: one vocabulary matrix split into two blocks under two names, or two
//! blocks joined into one, in a safetensors or torch file, every other tensor copied ([`Op`],
//! [`write_blocks`]).

use crate::error::{Error, Result};
use crate::formats::safetensors::write::{
    write_safetensors, Payload, PlannedTensor, SafetensorsLayout,
};
use crate::formats::torch::value::{Id, Node, TensorNode};
use crate::formats::torch::write::write_torch;
use crate::formats::torch::writer::{Piece, StoragePayload, TorchLayout};
use crate::formats::torch::TorchFile;
use crate::formats::{Format, OpenOptions, TensorRef, Tensors};
use crate::output::manifest::FileManifest;
use std::path::Path;

/// What to do.
#[derive(Debug, Clone)]
pub enum Op {
    /// Split `tensor` at row `at` into `names.0` (rows `[0, at)`) and `names.1` (the rest).
    Split {
        tensor: String,
        at: u64,
        names: (String, String),
    },
    /// Join `names.0` and `names.1` (rows in that order) into `into`.
    Join {
        names: (String, String),
        into: String,
    },
}

/// The default block names of `tensor`: `…weight` → `…weight_frozen`, `…weight_unfrozen`.
pub fn default_names(tensor: &str) -> (String, String) {
    (format!("{tensor}_frozen"), format!("{tensor}_unfrozen"))
}

/// The tensor `name`, which `flag` chose (the one to change when the file lacks it).
pub(crate) fn tensor<'c>(
    ckpt: &'c Tensors,
    name: &str,
    flag: &'static str,
) -> Result<TensorRef<'c>> {
    ckpt.tensor(name).ok_or_else(|| {
        Error::arg(
            flag,
            format!("{}: no tensor named '{name}'", ckpt.path.display()),
        )
    })
}

/// Write `ckpt` with `op` done to `out` (checked by the caller), in its own format.
pub fn write_blocks(
    ckpt: &Tensors,
    out: &Path,
    op: &Op,
    inputs: &[&Path],
    open: &OpenOptions,
) -> Result<FileManifest> {
    match ckpt.format {
        Format::Safetensors => safetensors(ckpt, out, op, inputs),
        _ => torch(&ckpt.torch[0], out, op, inputs, open),
    }
}

/// The bytes of `t`, then of `u`.
fn concat(t: &TensorRef<'_>, u: &TensorRef<'_>) -> Result<Vec<u8>> {
    let mut v = t.try_bytes()?.into_owned();
    v.extend_from_slice(&u.try_bytes()?);
    Ok(v)
}

fn safetensors(ckpt: &Tensors, out: &Path, op: &Op, inputs: &[&Path]) -> Result<FileManifest> {
    let file = &ckpt.files[0];
    let mut plan = SafetensorsLayout::identity(file);
    // Shapes the split blocks' views point at (they live as long as the plan).
    let shapes: Vec<Vec<u64>> = match op {
        Op::Split { tensor: n, at, .. } => {
            let t = tensor(ckpt, n, "--split")?;
            vec![vec![*at, t.shape[1]], vec![t.shape[0] - at, t.shape[1]]]
        }
        Op::Join { .. } => Vec::new(),
    };
    match op {
        Op::Split {
            tensor: n,
            at,
            names,
        } => {
            let t = tensor(ckpt, n, "--split")?;
            let row = t.dtype.bytes_for(t.shape[1]).unwrap_or(0);
            let i = plan
                .tensors
                .iter()
                .position(|p| &p.name == n)
                .ok_or_else(|| Error::tensor(file.path(), n, "no tensor by that name"))?;
            let view = |name: &'static str, k: usize, start: u64| TensorRef {
                name,
                dtype: t.dtype,
                shape: &shapes[k],
                map: t.map,
                start,
                strides: None,
            };
            let blocks = [
                PlannedTensor {
                    name: names.0.clone(),
                    dtype: t.dtype,
                    shape: shapes[0].clone(),
                    payload: Payload::Copy(view("", 0, t.start)),
                },
                PlannedTensor {
                    name: names.1.clone(),
                    dtype: t.dtype,
                    shape: shapes[1].clone(),
                    payload: Payload::Copy(view("", 1, t.start + at * row)),
                },
            ];
            plan.tensors.splice(i..=i, blocks);
        }
        Op::Join { names, into } => {
            let (a, b) = (
                tensor(ckpt, &names.0, "--names")?,
                tensor(ckpt, &names.1, "--names")?,
            );
            let joined = PlannedTensor {
                name: into.clone(),
                dtype: a.dtype,
                shape: vec![a.shape[0] + b.shape[0], a.shape[1]],
                payload: Payload::Bytes(concat(&a, &b)?),
            };
            plan.tensors.retain(|p| p.name != names.1);
            if let Some(p) = plan.tensors.iter_mut().find(|p| p.name == names.0) {
                *p = joined;
            }
        }
    }
    // The order the reference writer gives a file built from scratch: a split of a file it
    // wrote, joined again, is that file byte for byte.
    plan.sort_like_reference();
    write_safetensors(&plan, out, inputs)
}

/// The dict-like node holding value `id`, and the index of that entry.
fn entry_of(t: &TorchFile, id: Id) -> Option<(Id, usize)> {
    let p = &t.pickle;
    (0..p.nodes.len() as Id).find_map(|d| {
        p.dict_entries(d)
            .and_then(|e| e.iter().position(|&(_, v)| v == id))
            .map(|i| (d, i))
    })
}

/// A tensor viewing a new contiguous storage `key` of `rows` rows, as `like` does.
fn block_node(like: &TensorNode, key: &str, rows: u64) -> TensorNode {
    let mut n = like.clone();
    n.view_new_storage(key, rows);
    n
}

/// The entry key of `name`, given the path of the tensor it sits beside (`path`) and that
/// tensor's key there (`key`): the same prefix, the new last part. `flag` chose `name`.
fn sibling_key(path: &str, key: &str, name: &str, flag: &'static str) -> Result<String> {
    let prefix = &path[..path.len() - key.len()];
    name.strip_prefix(prefix)
        .map(str::to_string)
        .ok_or_else(|| {
            Error::arg(
                flag,
                format!(
                    "'{name}' must sit beside '{path}' (same prefix '{prefix}') in a torch file"
                ),
            )
        })
}

/// A tensor entry of the pickle: its node, the tensor, the dict holding it, its index there and
/// its key.
type Entry = (Id, TensorNode, Id, usize, String);

/// The torch file a split or join edits, and lookups into it.
struct TorchBlocks<'t> {
    t: &'t TorchFile,
}

impl<'t> TorchBlocks<'t> {
    /// The plain tensor `name` as a dict entry (a Parameter or a tensor outside a dict refused).
    fn find(&self, name: &str) -> Result<Entry> {
        let (t, src) = (self.t, &self.t.pickle);
        let tt = t
            .tensors
            .iter()
            .find(|x| x.path == name)
            .ok_or_else(|| Error::tensor(&t.map.path, name, "no tensor by that name"))?;
        let node = match src.node(tt.node) {
            Node::Tensor(n) => (**n).clone(),
            _ => {
                return Err(Error::tensor(
                    &t.map.path,
                    name,
                    "is a Parameter, not a plain tensor: vocab-blocks works on state dicts",
                ))
            }
        };
        let (dict, i) = entry_of(t, tt.node)
            .ok_or_else(|| Error::tensor(&t.map.path, name, "is not an entry of a dict"))?;
        let key = src
            .dict_entries(dict)
            .and_then(|e| src.str(e[i].0))
            .ok_or_else(|| Error::tensor(&t.map.path, name, "its key is not a string"))?
            .to_string();
        Ok((tt.node, node, dict, i, key))
    }

    /// The bytes of `name`.
    fn tensor(&self, name: &str) -> Result<TensorRef<'t>> {
        self.t
            .tensor_refs()
            .find(|x| x.name == name)
            .ok_or_else(|| Error::tensor(&self.t.map.path, name, "no tensor by that name"))
    }

    /// A storage key no storage of the file or the plan has (`extra` more for a second one).
    fn next_key(&self, plan: &TorchLayout<'_>, extra: u64) -> String {
        self.t
            .storages
            .keys()
            .chain(plan.storages.iter().map(|(k, _)| k))
            .filter_map(|k| k.parse::<u64>().ok())
            .max()
            .map_or(extra, |m| m + 1 + extra)
            .to_string()
    }

    /// `n`'s entry replaced by two blocks on new storages: its rows `..at` and `at..`.
    fn split(
        &self,
        plan: &mut TorchLayout<'t>,
        n: &str,
        at: u64,
        names: &(String, String),
    ) -> Result<()> {
        let (_, node, dict, i, key) = self.find(n)?;
        let r = self.tensor(n)?;
        let row = r.dtype.bytes_for(node.shape[1]).unwrap_or(0);
        let split = (at * row).min(r.nbytes());
        let (ka, kb) = (self.next_key(plan, 0), self.next_key(plan, 1));
        let a = block_node(&node, &ka, at);
        let b = block_node(&node, &kb, node.shape[0] - at);
        let (pa, pb) = (
            Piece::try_of_tensor(&r, 0, split)?,
            Piece::try_of_tensor(&r, split, r.nbytes() - split)?,
        );
        plan.storages.push((ka, StoragePayload::Pieces(vec![pa])));
        plan.storages.push((kb, StoragePayload::Pieces(vec![pb])));
        let (key_a, key_b) = (
            sibling_key(n, &key, &names.0, "--names")?,
            sibling_key(n, &key, &names.1, "--names")?,
        );
        let p = &mut plan.pickle;
        let ids = [
            p.push(Node::Str(key_a)),
            p.push(Node::Tensor(Box::new(a))),
            p.push(Node::Str(key_b)),
            p.push(Node::Tensor(Box::new(b))),
        ];
        if let Node::Dict(e) | Node::Object { dict_items: e, .. } = p.node_mut(dict) {
            e.splice(i..=i, [(ids[0], ids[1]), (ids[2], ids[3])]);
        }
        Ok(())
    }

    /// The two blocks' entries replaced by one matrix `into` on a new storage, rows in order.
    fn join(&self, plan: &mut TorchLayout<'t>, names: &(String, String), into: &str) -> Result<()> {
        let (_, na, dict_a, ia, key_a) = self.find(&names.0)?;
        let (_, _, dict_b, ib, _) = self.find(&names.1)?;
        if dict_a != dict_b {
            return Err(Error::unsupported(
                &self.t.map.path,
                format!("'{}' and '{}' are not in one dict", names.0, names.1),
            ));
        }
        let (ra, rb) = (self.tensor(&names.0)?, self.tensor(&names.1)?);
        let len = ra.nbytes() + rb.nbytes();
        let row = ra.dtype.bytes_for(na.shape[1]).unwrap_or(1).max(1);
        let k = self.next_key(plan, 0);
        let c = block_node(&na, &k, len / row);
        let both = vec![
            Piece::try_of_tensor(&ra, 0, ra.nbytes())?,
            Piece::try_of_tensor(&rb, 0, rb.nbytes())?,
        ];
        plan.storages.push((k, StoragePayload::Pieces(both)));
        let key_c = sibling_key(&names.0, &key_a, into, "--join")?;
        let p = &mut plan.pickle;
        let ids = [p.push(Node::Str(key_c)), p.push(Node::Tensor(Box::new(c)))];
        if let Node::Dict(e) | Node::Object { dict_items: e, .. } = p.node_mut(dict_a) {
            e[ia] = (ids[0], ids[1]);
            e.remove(ib);
        }
        Ok(())
    }
}

fn torch(
    t: &TorchFile,
    out: &Path,
    op: &Op,
    inputs: &[&Path],
    open: &OpenOptions,
) -> Result<FileManifest> {
    let mut plan = TorchLayout::try_identity(t)?;
    let blocks = TorchBlocks { t };
    match op {
        Op::Split {
            tensor: n,
            at,
            names,
        } => blocks.split(&mut plan, n, *at, names)?,
        Op::Join { names, into } => blocks.join(&mut plan, names, into)?,
    }
    write_torch(&plan, out, inputs, &open.globals)
}
