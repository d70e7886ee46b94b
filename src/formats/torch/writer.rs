//! Writing torch checkpoints that `torch.load(weights_only=True)` (and `mmap=True`) reads: a
//! protocol-2 pickle using BINUNICODE for every string, and a zip whose records are STORED and
//! 64-byte aligned, with the `version` and `byteorder` records torch expects. Each storage is
//! written once, however many views share it; untouched storages are copied from the input map.

use super::opcode::Op;
use super::value::{Call, Id, Node, Pickle, TensorNode};
use super::TorchFile;
use crate::error::{Error, Result};
use crate::formats::mapped::Mapped;
use crate::formats::TensorRef;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Where a storage's bytes come from.
pub enum StoragePayload<'a> {
    /// A byte range of an input file (copied without passing through user space where possible).
    Copy {
        map: &'a Mapped,
        start: u64,
        len: u64,
    },
    /// Computed by the job.
    Bytes(Vec<u8>),
    /// Ranges of input files and computed bytes, in order: a matrix whose old rows are copied
    /// from the input like an untouched storage and whose new rows are the only bytes held in
    /// memory (so writing a grown tensor never holds the whole tensor).
    Pieces(Vec<Piece<'a>>),
}

/// A piece of a [`StoragePayload::Pieces`].
pub enum Piece<'a> {
    File {
        map: &'a Mapped,
        start: u64,
        len: u64,
    },
    Bytes(Cow<'a, [u8]>),
}

impl<'a> Piece<'a> {
    /// `len` bytes of tensor `t` from byte `from` of its elements: a range of its file, copied
    /// as the output is written (a tensor stored with strides is gathered into memory). A range
    /// past the tensor's end is an error naming its file and name.
    pub fn try_of_tensor(t: &TensorRef<'a>, from: u64, len: u64) -> Result<Self> {
        if from.checked_add(len).is_none_or(|end| end > t.nbytes()) {
            return Err(outside(t, from, len, t.nbytes()));
        }
        match t.contiguous_range() {
            Some((start, _)) => Ok(Piece::File {
                map: t.map,
                start: start + from,
                len,
            }),
            None => Ok(Piece::Bytes(Cow::Owned(
                part_of(t, &t.try_bytes()?, from, len)?.to_vec(),
            ))),
        }
    }

    /// [`Piece::try_of_tensor`] for callers that have not moved to it yet: a range past the
    /// tensor's end gives an empty piece, which [`check_plan`] then refuses (the storage's size
    /// no longer matches its tensors), so nothing is written from it.
    pub fn of_tensor(t: &TensorRef<'a>, from: u64, len: u64) -> Self {
        Self::try_of_tensor(t, from, len).unwrap_or(Piece::Bytes(Cow::Borrowed(&[])))
    }

    pub fn len(&self) -> u64 {
        match self {
            Piece::File { len, .. } => *len,
            Piece::Bytes(b) => b.len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a> StoragePayload<'a> {
    pub fn len(&self) -> u64 {
        match self {
            StoragePayload::Copy { len, .. } => *len,
            StoragePayload::Bytes(b) => b.len() as u64,
            StoragePayload::Pieces(p) => p.iter().map(Piece::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload as pieces, in order.
    pub fn pieces(&self) -> Vec<Piece<'_>> {
        match self {
            StoragePayload::Copy { map, start, len } => vec![Piece::File {
                map,
                start: *start,
                len: *len,
            }],
            StoragePayload::Bytes(b) => vec![Piece::Bytes(Cow::Borrowed(b))],
            StoragePayload::Pieces(p) => p
                .iter()
                .map(|p| match p {
                    Piece::File { map, start, len } => Piece::File {
                        map,
                        start: *start,
                        len: *len,
                    },
                    Piece::Bytes(b) => Piece::Bytes(Cow::Borrowed(b)),
                })
                .collect(),
        }
    }

    /// A matrix stored contiguously in `t` (an input tensor), resized: its first `keep` bytes
    /// copied from the input, then `tail`. With `parts` = (segments, old bytes per segment, new
    /// bytes per segment), each of the matrix's equal segments is grown at its end and `tail`
    /// holds the segments' new bytes in order. A tensor stored with strides is gathered first.
    /// Bytes kept past the tensor's end, or a `tail` of another length than the segments need,
    /// are an error naming `t`'s file and name.
    pub fn try_resized(
        t: &TensorRef<'a>,
        keep: u64,
        parts: Option<(u64, u64, u64)>,
        tail: Cow<'a, [u8]>,
    ) -> Result<Self> {
        let layout = Resized::new(t, keep, parts, tail.len() as u64)?;
        if t.contiguous_range().is_none() {
            // Gathered once, not once per segment.
            return layout
                .gathered(t, &t.try_bytes()?, &tail)
                .map(StoragePayload::Bytes);
        }
        let part = |from: u64, len: u64| -> Result<Cow<'a, [u8]>> {
            Ok(match &tail {
                Cow::Borrowed(b) => Cow::Borrowed(part_of(t, b, from, len)?),
                Cow::Owned(v) => Cow::Owned(part_of(t, v, from, len)?.to_vec()),
            })
        };
        let mut pieces = Vec::new();
        match parts {
            Some((n, old, new)) => {
                for c in 0..n {
                    pieces.push(Piece::try_of_tensor(t, c * old, old)?);
                    pieces.push(Piece::Bytes(part(c * new, new)?));
                }
            }
            None => {
                pieces.push(Piece::try_of_tensor(t, 0, keep)?);
                pieces.push(Piece::Bytes(part(0, tail.len() as u64)?));
            }
        }
        Ok(StoragePayload::Pieces(
            pieces.into_iter().filter(|p| !p.is_empty()).collect(),
        ))
    }

    /// [`StoragePayload::try_resized`] for callers that have not moved to it yet: a layout that
    /// does not fit gives an empty payload, which [`check_plan`] then refuses (the storage's
    /// size no longer matches its tensors), so nothing is written from it.
    pub fn resized(
        t: &TensorRef<'a>,
        keep: u64,
        parts: Option<(u64, u64, u64)>,
        tail: Cow<'a, [u8]>,
    ) -> Self {
        Self::try_resized(t, keep, parts, tail).unwrap_or(StoragePayload::Bytes(Vec::new()))
    }
}

/// How a resized matrix is laid out, checked against the input tensor and the new bytes.
struct Resized {
    keep: u64,
    parts: Option<(u64, u64, u64)>,
}

impl Resized {
    fn new(
        t: &TensorRef<'_>,
        keep: u64,
        parts: Option<(u64, u64, u64)>,
        tail: u64,
    ) -> Result<Self> {
        let (kept, grown) = match parts {
            Some((n, old, new)) => (n.checked_mul(old), n.checked_mul(new)),
            None => (Some(keep), Some(tail)),
        };
        if kept.is_none_or(|k| k > t.nbytes()) {
            return Err(outside(t, 0, kept.unwrap_or(u64::MAX), t.nbytes()));
        }
        if grown != Some(tail) {
            return Err(Error::tensor(
                &t.map.path,
                t.name,
                format!("its resize lays out {parts:?} (segments, old bytes, new bytes) but the new rows hold {tail} bytes"),
            ));
        }
        Ok(Resized { keep, parts })
    }

    /// The resized matrix in memory, from the input tensor's gathered bytes `all`.
    fn gathered(&self, t: &TensorRef<'_>, all: &[u8], tail: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        match self.parts {
            Some((n, old, new)) => {
                for c in 0..n {
                    out.extend_from_slice(part_of(t, all, c * old, old)?);
                    out.extend_from_slice(part_of(t, tail, c * new, new)?);
                }
            }
            None => {
                out.extend_from_slice(part_of(t, all, 0, self.keep)?);
                out.extend_from_slice(tail);
            }
        }
        Ok(out)
    }
}

/// `len` bytes from `from` of `bytes` (input tensor `t`'s gathered bytes, or its new rows).
fn part_of<'b>(t: &TensorRef<'_>, bytes: &'b [u8], from: u64, len: u64) -> Result<&'b [u8]> {
    usize::try_from(from)
        .ok()
        .zip(usize::try_from(len).ok())
        .and_then(|(f, n)| bytes.get(f..f.checked_add(n)?))
        .ok_or_else(|| outside(t, from, len, bytes.len() as u64))
}

/// Bytes of input tensor `t` (or of its new rows) were laid out past their end.
fn outside(t: &TensorRef<'_>, from: u64, len: u64, holds: u64) -> Error {
    Error::tensor(
        &t.map.path,
        t.name,
        format!("bytes {from}..+{len} of it were laid out, but it holds {holds}"),
    )
}

/// A torch checkpoint to write: the tree, the bytes of each storage key, and the small records
/// (`version`, `.data/serialization_id`, …) to carry over.
pub struct TorchPlan<'a> {
    pub pickle: Pickle,
    pub storages: Vec<(String, StoragePayload<'a>)>,
    /// Records other than data.pkl and data/*, by name without the archive prefix.
    pub records: Vec<(String, Vec<u8>)>,
    /// Also hash the whole file (every tensor and record is always hashed), as
    /// the safetensors writer's `file_sha256` does: off by default.
    pub file_sha256: bool,
}

impl<'a> TorchPlan<'a> {
    /// Everything in `t` unchanged (a legacy file becomes a zip file). A record past the end of
    /// `t`'s file is an error naming the file and the record.
    pub fn try_identity(t: &'a TorchFile) -> Result<Self> {
        let records = match &t.container {
            super::Container::Zip(z) => z
                .records
                .iter()
                .filter(|r| r.name != "data.pkl" && !r.name.starts_with("data/"))
                .map(|r| {
                    let bytes = t.map.slice(r.start, r.len).ok_or_else(|| {
                        Error::format(
                            &t.map.path,
                            format!("record '{}': {}", r.name, t.map.past_end(r.start, r.len)),
                        )
                    })?;
                    Ok((r.name.clone(), bytes.to_vec()))
                })
                .collect::<Result<_>>()?,
            super::Container::Legacy => Vec::new(),
        };
        Ok(Self::copying(t, records))
    }

    /// [`TorchPlan::try_identity`] for callers that have not moved to it yet. Every record of
    /// an opened file was checked to lie inside it, so for those this is the same plan; a
    /// record that does not gives a plan without the file's small records.
    pub fn identity(t: &'a TorchFile) -> Self {
        Self::try_identity(t).unwrap_or_else(|_| Self::copying(t, Vec::new()))
    }

    /// `t`'s tree and every storage copied from its file, with `records` carried over.
    fn copying(t: &'a TorchFile, records: Vec<(String, Vec<u8>)>) -> Self {
        let storages = t
            .storages
            .values()
            .map(|s| {
                (
                    s.key.clone(),
                    StoragePayload::Copy {
                        map: &t.map,
                        start: s.start,
                        len: s.len,
                    },
                )
            })
            .collect();
        TorchPlan {
            pickle: t.pickle.clone(),
            storages,
            records,
            file_sha256: false,
        }
    }

    /// Give the tensor at `path` a new storage holding `payload`: `rows` rows, contiguous, same
    /// dtype and width. Every tensor that viewed the old storage the same way (a tied weight)
    /// follows it; their paths are returned. Calling it again for a tied path changes nothing.
    /// The plan must have been made from `source` (node ids are shared).
    pub fn replace_rows(
        &mut self,
        source: &TorchFile,
        path: &str,
        rows: u64,
        payload: StoragePayload<'a>,
    ) -> std::result::Result<Vec<String>, String> {
        let orig = source
            .tensors
            .iter()
            .find(|x| x.path == path)
            .and_then(|x| source.pickle.tensor_of(x.node))
            .ok_or_else(|| format!("no tensor '{path}'"))?
            .clone();
        let cols: u64 = orig.shape.iter().skip(1).product();
        let need = orig.storage.dtype.bytes_for(rows * cols);
        if need != Some(payload.len()) {
            return Err(format!(
                "'{path}': {rows} rows need {need:?} bytes, got {}",
                payload.len()
            ));
        }
        let ids: Vec<Id> = (0..source.pickle.nodes.len() as Id)
            .filter(|&i| matches!(source.pickle.node(i), Node::Tensor(n) if n.same_view(&orig)))
            .collect();
        let tied: Vec<String> = source
            .tensors
            .iter()
            .filter(|x| x.path != path)
            .filter(|x| {
                source
                    .pickle
                    .tensor_of(x.node)
                    .is_some_and(|n| n.same_view(&orig))
            })
            .map(|x| x.path.clone())
            .collect();
        let already = ids.iter().any(
            |&i| matches!(self.pickle.node(i), Node::Tensor(n) if n.storage.key != orig.storage.key),
        );
        if already {
            return Ok(tied);
        }
        let key = source
            .storages
            .keys()
            .chain(self.storages.iter().map(|(k, _)| k))
            .filter_map(|k| k.parse::<u64>().ok())
            .max()
            .map_or(0, |m| m + 1)
            .to_string();
        self.storages.push((key.clone(), payload));
        for i in ids {
            if let Node::Tensor(n) = self.pickle.node_mut(i) {
                n.view_new_storage(&key, rows);
            }
        }
        Ok(tied)
    }
}

// ---------------------------------------------------------------------------------------------
// Pickle emission

struct Emitter<'a> {
    p: &'a Pickle,
    out: Vec<u8>,
    shared: HashSet<Id>,
    memo: HashMap<Id, u32>,
    /// Storage key in the tree → key written (`0`, `1`, … in order of first appearance).
    keys: HashMap<String, String>,
    /// The tree's storage keys in the order they were first written.
    order: Vec<String>,
}

/// A value tree serialised as torch writes it.
pub struct Emitted {
    pub bytes: Vec<u8>,
    /// The tree's storage keys in the order they first appear in `bytes`; the one at index `i`
    /// is written as key `i` (record `data/i`), as `torch.save` numbers them.
    pub storage_order: Vec<String>,
}

/// Serialise a value tree as a protocol-2 pickle. Nodes reached more than once are written once
/// and fetched from the memo after, so sharing (tied weights) survives. Storage keys are
/// renumbered `0, 1, …` in order of first appearance, as `torch.save` numbers them: torch's
/// offset-calculating loader (`calculate_storage_offsets`, and every load onto the meta device)
/// expects key `0` first and each next record right after the previous one.
pub fn emit_pickle(p: &Pickle) -> std::result::Result<Emitted, String> {
    // Count references from reachable parents to find shared nodes.
    let mut refs: HashMap<Id, u32> = HashMap::new();
    let mut seen = HashSet::new();
    let mut stack = vec![p.root];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for c in node_children(p.node(id)) {
            *refs.entry(c).or_default() += 1;
            stack.push(c);
        }
    }
    let shared = refs
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(id, _)| id)
        .collect();
    let mut e = Emitter {
        p,
        out: vec![Op::Proto.byte(), 2],
        shared,
        memo: HashMap::new(),
        keys: HashMap::new(),
        order: Vec::new(),
    };
    e.emit(p.root, 0)?;
    e.op(Op::Stop);
    Ok(Emitted {
        bytes: e.out,
        storage_order: e.order,
    })
}

/// Every id a node refers to.
pub(crate) fn node_children(n: &Node) -> Vec<Id> {
    match n {
        Node::List(v) | Node::Tuple(v) | Node::Set(v) | Node::FrozenSet(v) => v.clone(),
        Node::Dict(e) => e.iter().flat_map(|&(k, v)| [k, v]).collect(),
        Node::PersistentId(i) => vec![*i],
        Node::Tensor(t) => t.rest.clone(),
        Node::Object {
            callable,
            args,
            kwargs,
            state,
            list_items,
            dict_items,
            ..
        } => {
            let mut v = vec![*callable, *args];
            v.extend(kwargs.iter());
            v.extend(list_items.iter());
            v.extend(dict_items.iter().flat_map(|&(k, v)| [k, v]));
            v.extend(state.iter());
            v
        }
        _ => Vec::new(),
    }
}

impl Emitter<'_> {
    fn op(&mut self, op: Op) {
        self.out.push(op.byte());
    }

    fn global(&mut self, module: &str, name: &str) {
        self.op(Op::Global);
        self.out.extend_from_slice(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
    }

    fn string(&mut self, s: &str) -> std::result::Result<(), String> {
        let n = u32::try_from(s.len()).map_err(|_| "a string longer than 4 GiB".to_string())?;
        self.op(Op::BinUnicode);
        self.out.extend_from_slice(&n.to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn int(&mut self, i: i64) {
        match i {
            0..=0xFF => {
                self.op(Op::BinInt1);
                self.out.push(i as u8);
            }
            0x100..=0xFFFF => {
                self.op(Op::BinInt2);
                self.out.extend_from_slice(&(i as u16).to_le_bytes());
            }
            _ if i32::try_from(i).is_ok() => {
                self.op(Op::BinInt);
                self.out.extend_from_slice(&(i as i32).to_le_bytes());
            }
            _ => {
                // LONG1 with the shortest two's complement that keeps the sign.
                let mut b = i.to_le_bytes().to_vec();
                while b.len() > 1 {
                    let last = b[b.len() - 1];
                    let prev_sign = b[b.len() - 2] & 0x80;
                    if (last == 0 && prev_sign == 0) || (last == 0xFF && prev_sign != 0) {
                        b.pop();
                    } else {
                        break;
                    }
                }
                self.long(&b);
            }
        }
    }

    fn long(&mut self, b: &[u8]) {
        if b.len() < 256 {
            self.op(Op::Long1);
            self.out.push(b.len() as u8);
        } else {
            self.op(Op::Long4);
            self.out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        }
        self.out.extend_from_slice(b);
    }

    fn latin1(b: &[u8]) -> String {
        b.iter().map(|&c| char::from(c)).collect()
    }

    fn uint_tuple(&mut self, v: &[u64]) -> std::result::Result<(), String> {
        self.op(Op::Mark);
        for &x in v {
            let x = i64::try_from(x).map_err(|_| "a size above i64".to_string())?;
            self.int(x);
        }
        self.op(Op::Tuple);
        Ok(())
    }

    fn tensor(&mut self, t: &TensorNode, depth: usize) -> std::result::Result<(), String> {
        self.global("torch._utils", t.rebuild.function());
        self.tensor_args(t, depth)?;
        self.op(Op::Reduce);
        Ok(())
    }

    /// The argument tuple of a tensor's rebuild call.
    fn tensor_args(&mut self, t: &TensorNode, depth: usize) -> std::result::Result<(), String> {
        self.op(Op::Mark);
        // The persistent id: ('storage', torch.XStorage, key, location, numel).
        self.op(Op::Mark);
        self.string("storage")?;
        self.global(&t.storage.class.0, &t.storage.class.1);
        let next = self.order.len().to_string();
        let key = match self.keys.get(&t.storage.key) {
            Some(k) => k.clone(),
            None => {
                self.order.push(t.storage.key.clone());
                self.keys.insert(t.storage.key.clone(), next.clone());
                next
            }
        };
        self.string(&key)?;
        self.string(&t.storage.location)?;
        let numel = t
            .storage
            .written_numel()
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| "storage too large".to_string())?;
        self.int(numel);
        self.op(Op::Tuple);
        self.op(Op::BinPersId);
        let offset = i64::try_from(t.offset).map_err(|_| "offset too large".to_string())?;
        self.int(offset);
        self.uint_tuple(&t.shape)?;
        self.uint_tuple(&t.stride)?;
        for &r in &t.rest {
            self.emit(r, depth + 1)?;
        }
        self.op(Op::Tuple);
        Ok(())
    }

    /// `_rebuild_from_type_v2(func, type, args, attributes)`: the tensor node written back as
    /// the argument tuple its rebuild function is called with.
    fn tensor_with_attributes(&mut self, id: Id, depth: usize) -> std::result::Result<(), String> {
        let p = self.p;
        let (Node::Object { callable, args, .. }, Some(tensor)) =
            (p.node(id), p.from_type_tensor(id))
        else {
            return Err("malformed _rebuild_from_type_v2".into());
        };
        let (Node::Tuple(a), Node::Tensor(t)) = (p.node(*args), p.node(tensor)) else {
            return Err("malformed _rebuild_from_type_v2".into());
        };
        self.emit(*callable, depth + 1)?;
        self.op(Op::Mark);
        self.emit(a[0], depth + 1)?;
        self.emit(a[1], depth + 1)?;
        self.tensor_args(t, depth + 1)?;
        self.emit(a[3], depth + 1)?;
        self.op(Op::Tuple);
        self.op(Op::Reduce);
        Ok(())
    }

    fn items(&mut self, items: &[Id], depth: usize) -> std::result::Result<(), String> {
        for &i in items {
            self.emit(i, depth + 1)?;
        }
        Ok(())
    }

    fn pairs(&mut self, pairs: &[(Id, Id)], depth: usize) -> std::result::Result<(), String> {
        for &(k, v) in pairs {
            self.emit(k, depth + 1)?;
            self.emit(v, depth + 1)?;
        }
        Ok(())
    }

    /// Write node `id`: fetched from the memo when it was written before, else written and, when
    /// reached more than once, put in the memo.
    fn emit(&mut self, id: Id, depth: usize) -> std::result::Result<(), String> {
        if depth > super::MAX_DEPTH {
            return Err(format!(
                "values nest deeper than {} levels",
                super::MAX_DEPTH
            ));
        }
        if let Some(&k) = self.memo.get(&id) {
            if k < 256 {
                self.op(Op::BinGet);
                self.out.push(k as u8);
            } else {
                self.op(Op::LongBinGet);
                self.out.extend_from_slice(&k.to_le_bytes());
            }
            return Ok(());
        }
        self.node(id, depth)?;
        if self.shared.contains(&id) {
            let k = self.memo.len() as u32;
            if k < 256 {
                self.op(Op::BinPut);
                self.out.push(k as u8);
            } else {
                self.op(Op::LongBinPut);
                self.out.extend_from_slice(&k.to_le_bytes());
            }
            self.memo.insert(id, k);
        }
        Ok(())
    }

    /// The opcodes that build node `id` (its children emitted as they come).
    fn node(&mut self, id: Id, depth: usize) -> std::result::Result<(), String> {
        let p = self.p;
        match p.node(id) {
            Node::None => self.op(Op::None),
            Node::Bool(b) => self.op(if *b { Op::NewTrue } else { Op::NewFalse }),
            Node::Int(i) => self.int(*i),
            Node::BigInt(b) => self.long(b),
            Node::Float(f) => {
                self.op(Op::BinFloat);
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Node::Str(s) => self.string(s)?,
            Node::Bytes(b) => self.bytes(b)?,
            Node::ByteArray(b) => {
                self.global("__builtin__", "bytearray");
                self.bytes_value(b)?;
                self.op(Op::Tuple1);
                self.op(Op::Reduce);
            }
            Node::List(v) => {
                self.op(Op::EmptyList);
                self.appends(v, depth)?;
            }
            Node::Tuple(v) => self.tuple(v, depth)?,
            Node::Dict(e) => {
                self.op(Op::EmptyDict);
                self.set_items(e, depth)?;
            }
            Node::Set(v) | Node::FrozenSet(v) => {
                let name = if matches!(p.node(id), Node::Set(_)) {
                    "set"
                } else {
                    "frozenset"
                };
                self.global("__builtin__", name);
                self.op(Op::EmptyList);
                self.appends(v, depth)?;
                self.op(Op::Tuple1);
                self.op(Op::Reduce);
            }
            Node::Global { module, name } => self.global(module, name),
            Node::PersistentId(i) => {
                self.emit(*i, depth + 1)?;
                self.op(Op::BinPersId);
            }
            Node::Tensor(t) => self.tensor(t, depth)?,
            Node::Object { .. } if p.is_from_type(id) => self.tensor_with_attributes(id, depth)?,
            Node::Object { .. } => self.object(id, depth)?,
        }
        Ok(())
    }

    /// `bytes`: `bytes()` when empty, else `_codecs.encode(latin1 text, 'latin1')`.
    fn bytes(&mut self, b: &[u8]) -> std::result::Result<(), String> {
        if b.is_empty() {
            self.global("__builtin__", "bytes");
            self.op(Op::EmptyTuple);
            self.op(Op::Reduce);
            return Ok(());
        }
        self.bytes_value(b)
    }

    /// `_codecs.encode(latin1 text, 'latin1')`, the bytes value protocol 2 writes.
    fn bytes_value(&mut self, b: &[u8]) -> std::result::Result<(), String> {
        self.global("_codecs", "encode");
        self.string(&Self::latin1(b))?;
        self.string("latin1")?;
        self.op(Op::Tuple2);
        self.op(Op::Reduce);
        Ok(())
    }

    fn tuple(&mut self, v: &[Id], depth: usize) -> std::result::Result<(), String> {
        match v.len() {
            0 => self.op(Op::EmptyTuple),
            n @ 1..=3 => {
                self.items(v, depth)?;
                self.op([Op::Tuple1, Op::Tuple2, Op::Tuple3][n - 1]);
            }
            _ => {
                self.op(Op::Mark);
                self.items(v, depth)?;
                self.op(Op::Tuple);
            }
        }
        Ok(())
    }

    /// `MARK items APPENDS` onto the list on the stack (nothing when there are none).
    fn appends(&mut self, v: &[Id], depth: usize) -> std::result::Result<(), String> {
        if !v.is_empty() {
            self.op(Op::Mark);
            self.items(v, depth)?;
            self.op(Op::Appends);
        }
        Ok(())
    }

    /// `MARK key value … SETITEMS` onto the dict on the stack (nothing when there are none).
    fn set_items(&mut self, e: &[(Id, Id)], depth: usize) -> std::result::Result<(), String> {
        if !e.is_empty() {
            self.op(Op::Mark);
            self.pairs(e, depth)?;
            self.op(Op::SetItems);
        }
        Ok(())
    }

    /// A called object: the call (REDUCE, NEWOBJ, or NEWOBJ_EX spelled through copyreg), then
    /// its list items, dict items and state.
    fn object(&mut self, id: Id, depth: usize) -> std::result::Result<(), String> {
        let Node::Object {
            callable,
            args,
            call,
            kwargs,
            state,
            list_items,
            dict_items,
        } = self.p.node(id)
        else {
            return Err("not an object".into());
        };
        match call {
            Call::Reduce | Call::NewObj => {
                self.emit(*callable, depth + 1)?;
                self.emit(*args, depth + 1)?;
                self.op(if *call == Call::Reduce {
                    Op::Reduce
                } else {
                    Op::NewObj
                });
            }
            Call::NewObjEx => {
                // Protocol 2 has no NEWOBJ_EX: copyreg.__newobj_ex__(cls, args, kwargs).
                self.global("copyreg", "__newobj_ex__");
                self.emit(*callable, depth + 1)?;
                self.emit(*args, depth + 1)?;
                match kwargs {
                    Some(k) => self.emit(*k, depth + 1)?,
                    None => self.op(Op::EmptyDict),
                }
                self.op(Op::Tuple3);
                self.op(Op::Reduce);
            }
        }
        self.appends(list_items, depth)?;
        self.set_items(dict_items, depth)?;
        if let Some(s) = state {
            self.emit(*s, depth + 1)?;
            self.op(Op::Build);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Zip layout

/// Records are aligned so each storage can be memory-mapped as its element type (torch uses 64).
pub const ALIGNMENT: u64 = 64;
const U32_MAX: u64 = 0xFFFF_FFFF;
/// General-purpose flags torch's zip writer (miniz, streaming) sets: sizes and CRC follow the
/// data in a descriptor (bit 3), names are UTF-8 (bit 11). An empty record has no descriptor.
const FLAGS_DESCRIPTOR: u16 = 0x0808;
const FLAGS_EMPTY: u16 = 0x0800;

/// The flags of a record of `len` bytes (the same in its local header and the directory).
fn flags(len: u64) -> u16 {
    if len == 0 {
        FLAGS_EMPTY
    } else {
        FLAGS_DESCRIPTOR
    }
}

/// The zip64 extra field of a record (the same in its local header and the directory): both
/// sizes when the record reaches 4 GiB, then its header's offset when that does; empty otherwise.
fn zip64_extra(len: u64, header_offset: u64) -> Vec<u8> {
    let mut fields = Vec::new();
    if len >= U32_MAX {
        fields.extend_from_slice(&len.to_le_bytes());
        fields.extend_from_slice(&len.to_le_bytes());
    }
    if header_offset >= U32_MAX {
        fields.extend_from_slice(&header_offset.to_le_bytes());
    }
    if fields.is_empty() {
        return fields;
    }
    let mut extra = Vec::with_capacity(4 + fields.len());
    extra.extend_from_slice(&1u16.to_le_bytes());
    extra.extend_from_slice(&(fields.len() as u16).to_le_bytes());
    extra.extend_from_slice(&fields);
    extra
}

/// One record as laid out in the output.
#[derive(Debug, Clone)]
pub struct Laid {
    pub name: String,
    pub header_offset: u64,
    pub local_header: Vec<u8>,
    pub data_start: u64,
    pub len: u64,
    pub crc32: u32,
    /// The data descriptor written after the data (empty for an empty record).
    pub descriptor: Vec<u8>,
}

impl Laid {
    /// Where the next record's local header starts.
    pub fn end(&self) -> u64 {
        self.data_start + self.len + self.descriptor.len() as u64
    }
}

/// Lay out records (name, length, CRC) exactly as torch's writer does, so that its loader can
/// compute every storage's offset from the one before (`get_record_offset_no_read`): local
/// header with zero CRC and sizes; a zip64 extra field when the size or the header's offset
/// reaches 4 GiB (sizes, then offset); an `FB` extra field of `Z` padding so the data starts on
/// [`ALIGNMENT`]; after the data a descriptor of 16 bytes, or 24 when zip64.
pub fn lay_out(prefix: &str, records: &[(String, u64, u32)]) -> Vec<Laid> {
    let mut at = 0u64;
    let mut out = Vec::with_capacity(records.len());
    for (name, len, crc) in records {
        let full = format!("{prefix}/{name}");
        let big_len = *len >= U32_MAX;
        let big_off = at >= U32_MAX;
        let mut extra = zip64_extra(*len, at);
        let base = at + 30 + full.len() as u64 + extra.len() as u64 + 4;
        let pad = (ALIGNMENT - base % ALIGNMENT) % ALIGNMENT;
        extra.extend_from_slice(b"FB");
        extra.extend_from_slice(&(pad as u16).to_le_bytes());
        extra.resize(extra.len() + pad as usize, b'Z');

        let mut h = Vec::with_capacity(30 + full.len() + extra.len());
        h.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes()); // version needed, as torch writes it
        h.extend_from_slice(&flags(*len).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes()); // STORED
        h.extend_from_slice(&0u16.to_le_bytes()); // time
        h.extend_from_slice(&0u16.to_le_bytes()); // date
        h.extend_from_slice(&0u32.to_le_bytes()); // CRC: in the descriptor
        let small = if big_len { U32_MAX as u32 } else { 0 };
        h.extend_from_slice(&small.to_le_bytes());
        h.extend_from_slice(&small.to_le_bytes());
        h.extend_from_slice(&(full.len() as u16).to_le_bytes());
        h.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        h.extend_from_slice(full.as_bytes());
        h.extend_from_slice(&extra);
        let data_start = at + h.len() as u64;
        let mut descriptor = Vec::new();
        if *len > 0 {
            descriptor.extend_from_slice(&0x0807_4b50u32.to_le_bytes());
            descriptor.extend_from_slice(&crc.to_le_bytes());
            if big_len || big_off {
                descriptor.extend_from_slice(&len.to_le_bytes());
                descriptor.extend_from_slice(&len.to_le_bytes());
            } else {
                descriptor.extend_from_slice(&(*len as u32).to_le_bytes());
                descriptor.extend_from_slice(&(*len as u32).to_le_bytes());
            }
        }
        let laid = Laid {
            name: full,
            header_offset: at,
            local_header: h,
            data_start,
            len: *len,
            crc32: *crc,
            descriptor,
        };
        at = laid.end();
        out.push(laid);
    }
    out
}

/// The central directory and end records for records laid out by [`lay_out`], which end at
/// `cd_start`. Like torch's writer: zip64 end records always, attributes and times zero.
pub fn central_directory(laid: &[Laid], cd_start: u64) -> Vec<u8> {
    let mut cd = Vec::new();
    for r in laid {
        let extra = zip64_extra(r.len, r.header_offset);
        let big_len = r.len >= U32_MAX;
        let big_off = r.header_offset >= U32_MAX;
        let version: u16 = if big_len || big_off { 45 } else { 0 };
        cd.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        cd.extend_from_slice(&version.to_le_bytes()); // made by
        cd.extend_from_slice(&version.to_le_bytes()); // needed
        cd.extend_from_slice(&flags(r.len).to_le_bytes());
        cd.extend_from_slice(&0u16.to_le_bytes()); // STORED
        cd.extend_from_slice(&0u16.to_le_bytes()); // time
        cd.extend_from_slice(&0u16.to_le_bytes()); // date
        cd.extend_from_slice(&r.crc32.to_le_bytes());
        let small = if big_len {
            U32_MAX as u32
        } else {
            r.len as u32
        };
        cd.extend_from_slice(&small.to_le_bytes());
        cd.extend_from_slice(&small.to_le_bytes());
        cd.extend_from_slice(&(r.name.len() as u16).to_le_bytes());
        cd.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        cd.extend_from_slice(&0u16.to_le_bytes()); // comment
        cd.extend_from_slice(&0u16.to_le_bytes()); // disk
        cd.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        cd.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        let off = if big_off {
            U32_MAX as u32
        } else {
            r.header_offset as u32
        };
        cd.extend_from_slice(&off.to_le_bytes());
        cd.extend_from_slice(r.name.as_bytes());
        cd.extend_from_slice(&extra);
    }
    let cd_len = cd.len() as u64;
    let n = laid.len() as u64;
    let eocd64_at = cd_start + cd_len;
    cd.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
    cd.extend_from_slice(&44u64.to_le_bytes());
    cd.extend_from_slice(&0x031eu16.to_le_bytes());
    cd.extend_from_slice(&45u16.to_le_bytes());
    cd.extend_from_slice(&0u32.to_le_bytes());
    cd.extend_from_slice(&0u32.to_le_bytes());
    cd.extend_from_slice(&n.to_le_bytes());
    cd.extend_from_slice(&n.to_le_bytes());
    cd.extend_from_slice(&cd_len.to_le_bytes());
    cd.extend_from_slice(&cd_start.to_le_bytes());
    cd.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
    cd.extend_from_slice(&0u32.to_le_bytes());
    cd.extend_from_slice(&eocd64_at.to_le_bytes());
    cd.extend_from_slice(&1u32.to_le_bytes());
    cd.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    cd.extend_from_slice(&0u16.to_le_bytes());
    cd.extend_from_slice(&0u16.to_le_bytes());
    let n16 = n.min(0xFFFF) as u16;
    cd.extend_from_slice(&n16.to_le_bytes());
    cd.extend_from_slice(&n16.to_le_bytes());
    cd.extend_from_slice(&(cd_len.min(U32_MAX) as u32).to_le_bytes());
    cd.extend_from_slice(&(cd_start.min(U32_MAX) as u32).to_le_bytes());
    cd.extend_from_slice(&0u16.to_le_bytes());
    cd
}

/// torch's `.data/serialization_id`: 40 decimal digits. Ours is derived from the records'
/// names and CRCs, so the same output gets the same id.
pub fn serialization_id(records: &[(String, u64, u32)]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, len, crc) in records {
        h.update(name.as_bytes());
        h.update(len.to_le_bytes());
        h.update(crc.to_le_bytes());
    }
    let d = h.finalize();
    let a = u64::from_le_bytes(d[..8].try_into().unwrap_or([0; 8]));
    let b = u64::from_le_bytes(d[8..16].try_into().unwrap_or([0; 8]));
    format!("{a:020}{b:020}")
}

/// The archive folder torch would use for `dest`: its file name without extension.
pub fn archive_prefix(dest: &Path) -> String {
    dest.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty() && !s.contains('/'))
        .unwrap_or("archive")
        .to_string()
}

/// Check the plan is writable: every tensor's storage is in the plan with the size it claims.
pub fn check_plan(dest: &Path, plan: &TorchPlan<'_>) -> Result<()> {
    let sizes: HashMap<&str, u64> = plan
        .storages
        .iter()
        .map(|(k, s)| (k.as_str(), s.len()))
        .collect();
    if sizes.len() != plan.storages.len() {
        return Err(Error::format(
            dest,
            "a storage key appears twice in the plan",
        ));
    }
    for n in &plan.pickle.nodes {
        if let Node::Tensor(t) = n {
            let need = t.storage.dtype.bytes_for(t.storage.numel);
            match sizes.get(t.storage.key.as_str()) {
                None => {
                    return Err(Error::format(
                        dest,
                        format!("storage '{}' is used but not planned", t.storage.key),
                    ))
                }
                Some(&have) if Some(have) != need => {
                    return Err(Error::format(
                        dest,
                        format!(
                        "storage '{}' is planned with {have} bytes but its tensors need {need:?}",
                        t.storage.key
                    ),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::torch::pickle::{unpickle, GlobalPolicy, Limits};

    fn round_trip(p: &Pickle) -> Pickle {
        let bytes = emit_pickle(p).unwrap().bytes;
        assert_eq!(&bytes[..2], b"\x80\x02", "protocol 2");
        let (back, end) = unpickle(&bytes, &GlobalPolicy::default(), Limits::default()).unwrap();
        assert_eq!(end, bytes.len());
        back
    }

    /// Resolve ids so two arenas can be compared by value.
    fn resolve(p: &Pickle, id: Id) -> String {
        let r = |i: &Id| resolve(p, *i);
        match p.node(id) {
            Node::List(v) => format!("[{}]", v.iter().map(r).collect::<Vec<_>>().join(",")),
            Node::Tuple(v) => format!("({})", v.iter().map(r).collect::<Vec<_>>().join(",")),
            Node::Set(v) => format!("set{{{}}}", v.iter().map(r).collect::<Vec<_>>().join(",")),
            Node::Dict(e) => format!(
                "{{{}}}",
                e.iter()
                    .map(|(k, v)| format!("{}:{}", r(k), r(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn every_node_kind_and_integer_boundary_survives_a_round_trip() {
        let mut p = Pickle {
            nodes: Vec::new(),
            root: 0,
        };
        let mut items = Vec::new();
        for i in [
            0i64,
            255,
            256,
            65535,
            65536,
            -1,
            -129,
            i32::MIN as i64,
            i32::MAX as i64 + 1,
            i64::MIN,
            i64::MAX,
        ] {
            items.push(p.push(Node::Int(i)));
        }
        items.push(p.push(Node::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 0x40])));
        items.push(p.push(Node::Float(-0.0)));
        items.push(p.push(Node::Float(f64::INFINITY)));
        items.push(p.push(Node::Str("ünïcode ✓".into())));
        items.push(p.push(Node::Bytes(vec![0, 0x7f, 0x80, 0xff])));
        items.push(p.push(Node::Bytes(Vec::new())));
        items.push(p.push(Node::None));
        items.push(p.push(Node::Bool(false)));
        let one = p.push(Node::Int(1));
        let t4 = p.push(Node::Tuple(vec![one, one, one, one]));
        items.push(t4);
        items.push(p.push(Node::Tuple(vec![])));
        items.push(p.push(Node::Set(vec![one])));
        let k = p.push(Node::Str("k".into()));
        let shared = p.push(Node::List(vec![one]));
        let d = p.push(Node::Dict(vec![(k, shared)]));
        items.push(d);
        items.push(shared);
        p.root = p.push(Node::List(items));
        let back = round_trip(&p);
        assert_eq!(resolve(&back, back.root), resolve(&p, p.root));
        // The list reached twice is written once and fetched from the memo: still one node.
        let Node::List(top) = back.node(back.root) else {
            panic!()
        };
        let Some(inner) = back.get(top[top.len() - 2], "k") else {
            panic!()
        };
        assert_eq!(inner, top[top.len() - 1]);
    }

    #[test]
    fn layout_aligns_every_record_to_64_bytes() {
        let laid = lay_out(
            "x",
            &[
                ("data.pkl".into(), 123, 1),
                ("data/0".into(), 7, 2),
                ("version".into(), 2, 3),
            ],
        );
        for l in &laid {
            assert_eq!(l.data_start % ALIGNMENT, 0, "{}", l.name);
            assert_eq!(l.data_start, l.header_offset + l.local_header.len() as u64);
        }
        // Each record is followed by its 16-byte data descriptor.
        assert_eq!(laid[1].header_offset, laid[0].data_start + 123 + 16);
        assert_eq!(laid[1].header_offset, laid[0].end());
    }
}
