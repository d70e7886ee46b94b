//! Torch checkpoints (`torch.save`): the zip and legacy containers, a non-executing pickle reader
//! producing a lossless value tree, and a writer whose output `torch.load(weights_only=True)` reads.

pub mod container;
mod globals;
pub mod opcode;
pub mod optimizer;
pub mod pickle;
pub mod value;
pub mod write;
pub mod writer;
mod zip_check;
mod zip_pass;

use super::tensor::TensorRef;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mapped::Mapped;
use container::{Record, Zip};
use pickle::{GlobalPolicy, Limits, Origin};
use std::collections::BTreeMap;
use std::path::Path;
use value::{Id, Node, Pickle, TensorNode};

/// Which container the file used.
#[derive(Debug, Clone)]
pub enum Container {
    Zip(Zip),
    Legacy,
}

/// One storage: a run of `numel` elements of `dtype` in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storage {
    pub key: String,
    pub dtype: DType,
    pub numel: u64,
    /// Absolute offset and length in the file.
    pub start: u64,
    pub len: u64,
    /// The zip record, whose CRC covers these bytes (None for legacy files).
    pub record: Option<Record>,
}

/// A tensor of the tree, by dotted path (`model.text_emb.weight`, `optimizer.state.3.exp_avg`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchTensor {
    pub path: String,
    pub node: Id,
}

/// An open torch checkpoint.
#[derive(Debug)]
pub struct TorchFile {
    pub map: Mapped,
    pub container: Container,
    pub pickle: Pickle,
    /// Where the main pickle's bytes are in the file.
    pub pickle_start: u64,
    pub pickle_len: u64,
    pub storages: BTreeMap<String, Storage>,
    pub tensors: Vec<TorchTensor>,
}

/// How many nodes a walk of the tree may visit: a memo bomb shares few nodes many times, and
/// walking it would take exponential time.
pub const MAX_WALK: usize = 4 << 20;
/// How deeply values may nest.
pub const MAX_DEPTH: usize = 512;

/// The two ways torch.save stores a checkpoint, told apart by the first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// A zip archive: torch.save since torch 1.6.
    Zip,
    /// A bare pickle stream: torch.save before 1.6 (or `_use_new_zipfile_serialization=False`).
    Legacy,
}

impl Saved {
    /// Which container `head` (a file's first bytes) starts, if either.
    pub fn of(head: &[u8]) -> Option<Saved> {
        if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(Saved::Zip)
        } else if head.len() >= 2 && head[0] == 0x80 && (2..=5).contains(&head[1]) {
            Some(Saved::Legacy)
        } else {
            None
        }
    }
}

impl TorchFile {
    /// The tensor at node `id` of the pickle (the tensor node or the rebuild call around it),
    /// with its path.
    pub fn tensor_at(&self, id: Id) -> Option<&TorchTensor> {
        self.tensors
            .iter()
            .find(|t| t.node == id || self.pickle.tensor_id(t.node) == Some(id))
    }

    /// Open a zip or legacy torch checkpoint. Reads the container directory and the pickle only.
    pub fn open(path: &Path, policy: &GlobalPolicy) -> Result<Self> {
        let map = Mapped::open(path)?;
        let bytes = map.bytes();
        let (container, pickle, pickle_start, pickle_len, storages, tensors) =
            match Saved::of(bytes) {
                Some(Saved::Zip) => open_zip(path, bytes, policy)?,
                Some(Saved::Legacy) => open_legacy(path, bytes, policy)?,
                None => return Err(Error::format(path, "not a torch checkpoint")),
            };
        let file = TorchFile {
            map,
            container,
            pickle,
            pickle_start,
            pickle_len,
            storages,
            tensors,
        };
        file.check_tensors()?;
        Ok(file)
    }

    /// Every tensor's storage exists, agrees on dtype, and holds the whole view.
    fn check_tensors(&self) -> Result<()> {
        for t in &self.tensors {
            let Some(node) = self.pickle.tensor_of(t.node) else {
                continue;
            };
            let terr = |p: String| Error::tensor(&self.map.path, &t.path, p);
            let Some(s) = self.storages.get(&node.storage.key) else {
                return Err(terr(format!(
                    "refers to storage '{}', which the file does not have",
                    node.storage.key
                )));
            };
            if s.dtype != node.storage.dtype {
                return Err(terr(format!(
                    "storage '{}' is {} here but {} elsewhere",
                    s.key, node.storage.dtype, s.dtype
                )));
            }
            if node.shape.contains(&0) {
                continue;
            }
            let last = node
                .shape
                .iter()
                .zip(&node.stride)
                .try_fold(node.offset, |acc, (&n, &st)| {
                    (n - 1).checked_mul(st).and_then(|x| acc.checked_add(x))
                });
            match last {
                Some(l) if l < s.numel => {}
                _ => {
                    return Err(terr(format!(
                        "view (offset {}, shape {:?}, stride {:?}) reaches past the end of storage '{}' ({} elements): the file is corrupt",
                        node.offset, node.shape, node.stride, s.key, s.numel
                    )))
                }
            }
        }
        Ok(())
    }

    /// The tensors as views into the map.
    pub fn tensor_refs(&self) -> impl Iterator<Item = TensorRef<'_>> {
        self.tensors.iter().filter_map(move |t| {
            let node = self.pickle.tensor_of(t.node)?;
            let s = self.storages.get(&node.storage.key)?;
            let esize = node.storage.dtype.bits() / 8;
            Some(TensorRef {
                name: &t.path,
                dtype: node.storage.dtype,
                shape: &node.shape,
                map: &self.map,
                start: s.start + node.offset * esize,
                strides: Some(&node.stride),
            })
        })
    }

    /// Check the CRC-32 of every storage record (reads all tensor data; zip files only).
    pub fn verify_crcs(&self) -> Result<()> {
        use rayon::prelude::*;
        self.storages
            .par_iter()
            .try_for_each(|(_, s)| match &s.record {
                Some(r) => {
                    // Streamed: a chunk of the file resident at a time.
                    let mut crc = crc32fast::Hasher::new();
                    self.map.stream(s.start, s.len, |c| crc.update(c))?;
                    container::check_crc_value(&self.map.path, r, crc.finalize())
                }
                None => Ok(()),
            })
    }

    /// The tensor node at a dotted path.
    pub fn tensor_node(&self, path: &str) -> Option<&TensorNode> {
        let t = self.tensors.iter().find(|t| t.path == path)?;
        self.pickle.tensor_of(t.node)
    }
}

pub(crate) type Opened = (
    Container,
    Pickle,
    u64,
    u64,
    BTreeMap<String, Storage>,
    Vec<TorchTensor>,
);

/// The storage-coverage invariant, checked on every torch file read: every storage the file
/// holds is used by a tensor reached from the root of the tree. A storage nobody reaches means
/// the pickle holds something this reader did not understand (tensors hidden in a construct it
/// skipped); reading on would return a smaller checkpoint, so the file is refused. The message
/// tells a storage some tensor of the pickle uses (reached by no name: a dict key)
/// from one no tensor uses at all (a record torch.load skips too).
fn check_coverage<'a>(
    path: &Path,
    p: &Pickle,
    stored: impl Iterator<Item = &'a str>,
    used: &BTreeMap<String, value::StorageRef>,
) -> Result<()> {
    let unused: Vec<&str> = stored.filter(|k| !used.contains_key(*k)).collect();
    if unused.is_empty() {
        return Ok(());
    }
    let built: std::collections::BTreeSet<&str> = p
        .nodes
        .iter()
        .filter_map(|n| match n {
            Node::Tensor(t) => Some(t.storage.key.as_str()),
            _ => None,
        })
        .collect();
    let (unnamed, orphan): (Vec<&str>, Vec<&str>) = unused.iter().partition(|k| built.contains(*k));
    let why = if orphan.is_empty() {
        "are held by tensors the value tree reaches by no name (a tensor used as a dict key, or inside a construct this reader does not read)"
    } else if unnamed.is_empty() {
        "are used by no tensor in the pickle (records torch.load skips too, so the file is not one torch.save wrote)"
    } else {
        "are used by no tensor reached by a name (some by no tensor at all)"
    };
    let shown: Vec<String> = unused.iter().take(8).map(|k| format!("'{k}'")).collect();
    Err(Error::format(
        path,
        format!(
            "{} stored storage(s) ({}{}) {why}: reading on would drop data; refusing (please report the file's origin)",
            unused.len(),
            shown.join(", "),
            if unused.len() > shown.len() { ", …" } else { "" }
        ),
    ))
}

/// Read a zip container held in `bytes` (a whole file, or one item of a DCP `.distcp` file);
/// offsets in the result are relative to `bytes`.
pub(crate) fn open_zip(path: &Path, bytes: &[u8], policy: &GlobalPolicy) -> Result<Opened> {
    let zip = container::parse_zip(path, bytes)?;
    let pk = zip
        .record("data.pkl")
        .ok_or_else(|| Error::format(path, "no data.pkl record"))?
        .clone();
    let data = record_bytes(path, bytes, &pk)?;
    container::check_crc(path, &pk, data)?;
    let at = Origin {
        path,
        record: "data.pkl",
    };
    let (pickle, end) = pickle::unpickle(data, at, policy, Limits::default())?;
    if end as u64 != pk.len {
        return Err(Error::format(
            path,
            format!(
                "{} bytes after the end of the pickle in data.pkl",
                pk.len - end as u64
            ),
        ));
    }
    pid_arity(path, &pickle, 5, "a zip")?;
    let tensors = tensor_paths(&pickle).map_err(|p| Error::format(path, p))?;
    let refs = storage_refs(&pickle, &tensors);
    check_coverage(
        path,
        &pickle,
        zip.records
            .iter()
            .filter_map(|r| r.name.strip_prefix("data/")),
        &refs,
    )?;
    let mut storages = BTreeMap::new();
    for (key, s) in refs {
        let Some(r) = zip.record(&format!("data/{key}")) else {
            return Err(Error::format(
                path,
                format!("storage '{key}' is used by a tensor but record 'data/{key}' is missing"),
            ));
        };
        let need = s.dtype.bytes_for(s.numel);
        if need != Some(r.len) {
            return Err(Error::format(
                path,
                format!(
                    "storage '{key}': {} elements of {} need {} bytes but record 'data/{key}' has {}",
                    s.numel,
                    s.dtype,
                    need.map_or("too many".into(), |n| n.to_string()),
                    r.len
                ),
            ));
        }
        storages.insert(
            key.clone(),
            Storage {
                key,
                dtype: s.dtype,
                numel: s.numel,
                start: r.start,
                len: r.len,
                record: Some(r.clone()),
            },
        );
    }
    Ok((
        Container::Zip(zip),
        pickle,
        pk.start,
        pk.len,
        storages,
        tensors,
    ))
}

/// A record's bytes in `bytes`: a range past the end is an error naming the record (the
/// container check validated every record, so this is a second guard, never an empty slice).
fn record_bytes<'b>(path: &Path, bytes: &'b [u8], r: &Record) -> Result<&'b [u8]> {
    usize::try_from(r.start)
        .ok()
        .zip(usize::try_from(r.len).ok())
        .and_then(|(start, len)| bytes.get(start..start.checked_add(len)?))
        .ok_or_else(|| {
            Error::format(
                path,
                format!(
                    "record '{}' ({} bytes at {}) lies past the end of the file ({} bytes)",
                    r.name,
                    r.len,
                    r.start,
                    bytes.len()
                ),
            )
        })
}

/// The storages the tree's tensors use, by key (the first reference decides dtype and size;
/// tensors that disagree are caught by `check_tensors`). Only tensors reached from the root count.
fn storage_refs(p: &Pickle, tensors: &[TorchTensor]) -> BTreeMap<String, value::StorageRef> {
    let mut out = BTreeMap::new();
    for t in tensors {
        if let Some(n) = p.tensor_of(t.node) {
            out.entry(n.storage.key.clone())
                .or_insert_with(|| n.storage.clone());
        }
    }
    out
}

/// Every persistent id of `p` has `n` items, as torch's loader for `what` file unpacks them:
/// ('storage', type, key, location, numel) in a zip, the same and view metadata in a legacy file.
fn pid_arity(path: &Path, p: &Pickle, n: usize, what: &str) -> Result<()> {
    for node in &p.nodes {
        let Node::PersistentId(pid) = node else {
            continue;
        };
        if let Node::Tuple(items) = p.node(*pid) {
            if items.len() != n {
                return Err(Error::format(
                    path,
                    format!("a storage's persistent id has {} items; torch's loader for {what} file unpacks {n}: the file is not one torch wrote", items.len()),
                ));
            }
        }
    }
    Ok(())
}

/// A legacy (torch < 1.6) file: five pickles one after the other (magic number, protocol,
/// sys_info, the main value tree, the storage keys), then each storage as a count and its bytes.
fn open_legacy(path: &Path, bytes: &[u8], policy: &GlobalPolicy) -> Result<Opened> {
    let mut r = LegacyReader {
        path,
        bytes,
        pos: 0,
    };
    r.preamble()?;
    let (main, main_start) = r.next("main", policy)?;
    pid_arity(path, &main, 6, "a legacy")?;
    let main_len = (r.pos - main_start) as u64;
    let (keys, _) = r.next("storage-keys", &GlobalPolicy::default())?;
    let Node::List(key_ids) = keys.node(keys.root) else {
        return Err(Error::format(path, "legacy storage-key list is not a list"));
    };
    let tensors = tensor_paths(&main).map_err(|p| Error::format(path, p))?;
    let refs = storage_refs(&main, &tensors);
    let listed: Vec<&str> = key_ids.iter().filter_map(|&k| keys.str(k)).collect();
    if listed.len() != key_ids.len() {
        return Err(Error::format(path, "legacy storage key is not a string"));
    }
    check_coverage(path, &main, listed.iter().copied(), &refs)?;
    let storages = r.storages(&listed, &refs)?;
    Ok((
        Container::Legacy,
        main,
        main_start as u64,
        main_len,
        storages,
        tensors,
    ))
}

/// Reads a legacy file front to back.
struct LegacyReader<'b> {
    path: &'b Path,
    bytes: &'b [u8],
    pos: usize,
}

impl LegacyReader<'_> {
    /// Run the next pickle; returns it with the offset it started at.
    fn next(&mut self, what: &str, policy: &GlobalPolicy) -> Result<(Pickle, usize)> {
        let start = self.pos;
        let at = Origin {
            path: self.path,
            record: &format!("the legacy {what} pickle (at byte {start})"),
        };
        let (p, n) = pickle::unpickle(&self.bytes[start..], at, policy, Limits::default())?;
        self.pos += n;
        Ok((p, start))
    }

    /// The magic number, protocol and sys_info pickles: torch's, and little-endian.
    fn preamble(&mut self) -> Result<()> {
        let (path, plain) = (self.path, GlobalPolicy::default());
        let (magic, _) = self.next("magic-number", &plain)?;
        if magic.node(magic.root) != &Node::BigInt(container::LEGACY_MAGIC.to_vec()) {
            return Err(Error::format(
                path,
                "starts with a pickle but not torch's legacy magic number: not a torch checkpoint",
            ));
        }
        let (proto, _) = self.next("protocol", &plain)?;
        if proto.node(proto.root) != &Node::Int(container::LEGACY_PROTOCOL) {
            return Err(Error::format(
                path,
                "unsupported legacy torch protocol version",
            ));
        }
        let (sys, _) = self.next("sys_info", &plain)?;
        if sys
            .get(sys.root, "little_endian")
            .is_some_and(|id| sys.node(id) == &Node::Bool(false))
        {
            return Err(Error::format(
                path,
                "storages are stored big-endian: only little-endian checkpoints are supported",
            ));
        }
        Ok(())
    }

    /// The storages after the pickles, in the listed order, each a count that must match what
    /// the tensors say and then its bytes; they must end exactly at the end of the file.
    fn storages(
        &self,
        listed: &[&str],
        refs: &BTreeMap<String, value::StorageRef>,
    ) -> Result<BTreeMap<String, Storage>> {
        let (path, bytes) = (self.path, self.bytes);
        let mut storages = BTreeMap::new();
        let mut at = self.pos as u64;
        for &key in listed {
            let Some(s) = refs.get(key) else {
                return Err(Error::format(
                    path,
                    format!("legacy storage '{key}' is listed but no tensor uses it"),
                ));
            };
            let storage = self.storage(key, s, at)?;
            at = storage.start + storage.len;
            storages.insert(key.to_string(), storage);
        }
        if let Some(missing) = refs.keys().find(|k| !storages.contains_key(*k)) {
            return Err(Error::format(
                path,
                format!("storage '{missing}' is used by a tensor but not stored in the file"),
            ));
        }
        if at != bytes.len() as u64 {
            return Err(Error::format(
                path,
                format!(
                    "{} trailing bytes after the last legacy storage",
                    bytes.len() as u64 - at
                ),
            ));
        }
        Ok(storages)
    }

    /// Storage `key` at byte `at`: its count, checked against what its tensors say, then its
    /// bytes, checked to lie inside the file.
    fn storage(&self, key: &str, s: &value::StorageRef, at: u64) -> Result<Storage> {
        let (path, bytes) = (self.path, self.bytes);
        let count = bytes
            .get(at as usize..at as usize + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| {
                Error::format(
                    path,
                    format!("legacy storage '{key}' is cut off: the file is truncated"),
                )
            })?;
        // Typed storages count elements, untyped ones (v3 dtypes) bytes.
        if Some(count) != s.written_numel() {
            return Err(Error::format(
                path,
                format!(
                    "legacy storage '{key}' holds {count} elements but the tensors say {}",
                    s.written_numel().unwrap_or(u64::MAX)
                ),
            ));
        }
        let len = s
            .dtype
            .bytes_for(s.numel)
            .ok_or_else(|| Error::format(path, format!("legacy storage '{key}' size overflows")))?;
        let start = at + 8;
        if start
            .checked_add(len)
            .is_none_or(|e| e > bytes.len() as u64)
        {
            return Err(Error::format(
                path,
                format!("legacy storage '{key}' ({len} bytes at {start}) runs past the end of the file: truncated"),
            ));
        }
        Ok(Storage {
            key: key.to_string(),
            dtype: s.dtype,
            numel: s.numel,
            start,
            len,
            record: None,
        })
    }
}

/// A short rendering of a dict key for dotted paths.
pub fn key_text(p: &Pickle, id: Id) -> String {
    match p.node(id) {
        Node::Str(s) => s.clone(),
        Node::Int(i) => i.to_string(),
        Node::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        Node::None => "None".to_string(),
        Node::Float(f) => f.to_string(),
        Node::Tuple(items) => {
            let parts: Vec<String> = items.iter().map(|&i| key_text(p, i)).collect();
            format!("({})", parts.join(","))
        }
        _ => "?".to_string(),
    }
}

/// The children of a node, each with its path component.
pub fn children(p: &Pickle, id: Id) -> Vec<(String, Id)> {
    match p.node(id) {
        Node::Dict(entries) => entries.iter().map(|&(k, v)| (key_text(p, k), v)).collect(),
        Node::List(v) | Node::Tuple(v) | Node::Set(v) | Node::FrozenSet(v) => v
            .iter()
            .enumerate()
            .map(|(i, &c)| (i.to_string(), c))
            .collect(),
        Node::Object { .. } if p.tensor_of(id).is_some() => Vec::new(),
        Node::Object {
            args,
            state,
            list_items,
            dict_items,
            ..
        } => {
            let mut out: Vec<(String, Id)> = Vec::new();
            if !p.is_ordered_dict(id) {
                if let Node::Tuple(a) = p.node(*args) {
                    out.extend(a.iter().enumerate().map(|(i, &c)| (format!("args.{i}"), c)));
                }
            }
            if let Some(s) = state {
                match p.node(*s) {
                    Node::Dict(e) => out.extend(e.iter().map(|&(k, v)| (key_text(p, k), v))),
                    _ if p.is_ordered_dict(id) => {}
                    _ => out.push(("state".to_string(), *s)),
                }
            }
            out.extend(
                list_items
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| (i.to_string(), c)),
            );
            out.extend(dict_items.iter().map(|&(k, v)| (key_text(p, k), v)));
            out
        }
        _ => Vec::new(),
    }
}

/// Visit every node under the root, depth first, with its dotted path. `visit` returns whether to
/// descend. Refuses cycles, nesting deeper than [`MAX_DEPTH`], and more than `limit` visits.
pub fn walk(
    p: &Pickle,
    limit: usize,
    visit: &mut dyn FnMut(&str, Id) -> bool,
) -> std::result::Result<(), String> {
    let mut w = Walker {
        p,
        on_path: vec![false; p.nodes.len()],
        visits: 0,
        limit,
        path: String::new(),
    };
    w.go(p.root, 0, visit)
}

struct Walker<'a> {
    p: &'a Pickle,
    on_path: Vec<bool>,
    visits: usize,
    limit: usize,
    path: String,
}

impl Walker<'_> {
    fn go(
        &mut self,
        id: Id,
        depth: usize,
        visit: &mut dyn FnMut(&str, Id) -> bool,
    ) -> std::result::Result<(), String> {
        self.visits += 1;
        if self.visits > self.limit {
            return Err(format!(
                "the value tree expands to more than {} values when walked: refusing (an expansion bomb?)",
                self.limit
            ));
        }
        if depth > MAX_DEPTH {
            return Err(format!(
                "values nest deeper than {MAX_DEPTH} levels: refusing"
            ));
        }
        if self.on_path[id as usize] {
            return Err(format!(
                "the value at '{}' contains itself: refusing a cyclic structure",
                self.path
            ));
        }
        if !visit(&self.path, id) {
            return Ok(());
        }
        self.on_path[id as usize] = true;
        for (part, child) in children(self.p, id) {
            let len = self.path.len();
            if !self.path.is_empty() {
                self.path.push('.');
            }
            self.path.push_str(&part);
            self.go(child, depth + 1, visit)?;
            self.path.truncate(len);
        }
        self.on_path[id as usize] = false;
        Ok(())
    }
}

/// Every tensor (or Parameter) in the tree with its dotted path. Two tensors whose paths read the
/// same (a key holding a dot beside a nested dict, `{'lm_head.weight': A, 'lm_head': {'weight':
/// B}}`, or `'1'` beside `1`) are refused: a name would stand for either.
pub fn tensor_paths(p: &Pickle) -> std::result::Result<Vec<TorchTensor>, String> {
    let mut out = Vec::new();
    walk(p, MAX_WALK, &mut |path, id| {
        if p.tensor_of(id).is_some() {
            out.push(TorchTensor {
                path: path.to_string(),
                node: id,
            });
            false
        } else {
            true
        }
    })?;
    let mut seen = std::collections::HashSet::with_capacity(out.len());
    if let Some(t) = out.iter().find(|t| !seen.insert(t.path.as_str())) {
        return Err(format!(
            "two tensors are both named '{}' (a key with a dot beside a nested dict, or a string key beside a number): which one a name means is ambiguous; rename one key and save again",
            t.path
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `_rebuild_tensor_v2` of storage '0' (a LongStorage of 2), as pickle opcodes to embed.
    const TENSOR: &[u8] = b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nLongStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR";

    #[test]
    fn two_tensors_whose_dotted_paths_read_the_same_are_refused() {
        // {'a.b': T, 'a': {'b': T}}, then {'a.b': T, 'a': {'c': T}}: torch has two tensors either way.
        let t = TENSOR;
        let file = |inner: &[u8]| {
            let mut b = b"\x80\x02}(X\x03\x00\x00\x00a.b".to_vec();
            b.extend_from_slice(t);
            b.extend_from_slice(b"X\x01\x00\x00\x00a}X\x01\x00\x00\x00");
            b.extend_from_slice(inner);
            b.extend_from_slice(t);
            b.extend_from_slice(b"su.");
            b
        };
        let paths = |bytes: &[u8]| {
            let at = pickle::Origin {
                path: Path::new("x.pt"),
                record: "data.pkl",
            };
            let (p, _) =
                pickle::unpickle(bytes, at, &Default::default(), Default::default()).unwrap();
            tensor_paths(&p).map(|v| v.into_iter().map(|t| t.path).collect::<Vec<_>>())
        };
        let e = paths(&file(b"b")).unwrap_err();
        assert!(e.contains("both named 'a.b'"), "{e}");
        assert_eq!(paths(&file(b"c")).unwrap(), ["a.b", "a.c"]);
    }

    #[test]
    fn a_storage_only_a_dict_key_tensor_uses_is_told_from_one_no_tensor_uses() {
        // {T: 1} (torch.save of a dict keyed by a tensor): the tensor has no name here.
        let t = TENSOR;
        let bytes = [&b"\x80\x02}"[..], t, b"K\x01s."].concat();
        let at = pickle::Origin {
            path: Path::new("x.pt"),
            record: "data.pkl",
        };
        let (p, _) = pickle::unpickle(&bytes, at, &Default::default(), Default::default()).unwrap();
        let refs = storage_refs(&p, &tensor_paths(&p).unwrap());
        let line = |stored: &[&str]| {
            let e = check_coverage(Path::new("x.pt"), &p, stored.iter().copied(), &refs);
            e.unwrap_err().line()
        };
        assert!(line(&["0"]).contains("('0') are held by tensors the value tree reaches by no name (a tensor used as a dict key"));
        assert!(line(&["7"]).contains("('7') are used by no tensor in the pickle"));
        assert!(line(&["0", "7"]).contains("some by no tensor at all"));
    }

    #[test]
    fn a_record_past_the_end_of_the_bytes_is_an_error_naming_it() {
        let bytes = [1u8, 2, 3, 4];
        let record = |start, len| Record {
            name: "data.pkl".into(),
            start,
            len,
            crc32: 0,
        };
        let path = Path::new("x.pt");
        assert_eq!(
            record_bytes(path, &bytes, &record(1, 3)).unwrap(),
            &[2, 3, 4]
        );
        for (start, len) in [(1, 4), (5, 0), (u64::MAX, 2)] {
            let e = record_bytes(path, &bytes, &record(start, len)).unwrap_err();
            assert!(
                e.to_string().contains("record 'data.pkl'") && e.to_string().starts_with("x.pt: "),
                "{e}"
            );
        }
    }
}
