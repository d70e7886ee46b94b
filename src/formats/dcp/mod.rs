//! torch Distributed Checkpoint folders (`torch.distributed.checkpoint.save`, FSDP2, torchtitan):
//! the `.metadata` pickle read as data through the non-executing VM, and each `__R_S.distcp`
//! item (a `torch.save` archive per tensor chunk, raw bytes otherwise) found by offset in a map.

pub mod edit;
pub mod keys;
pub mod weights;
pub mod write;

use super::torch::pickle::{self, GlobalPolicy, Limits};
use super::torch::value::{Id, Node, Pickle};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mapped::Mapped;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The globals torch writes into `.metadata`, allowed for that pickle only (as data: the VM
/// records calls, it never makes them).
pub const METADATA_GLOBALS: [&str; 14] = [
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata.StorageMeta",
    "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.filesystem._StorageInfo",
    "torch.serialization._get_layout",
    "torch.strided",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
    "pathlib.PurePosixPath",
];

const MD: &str = "torch.distributed.checkpoint.metadata.";

/// The name of the metadata file in a DCP folder.
pub const METADATA: &str = ".metadata";

/// Is `dir` a DCP folder (it holds `.metadata`)?
pub(super) fn is_dcp(dir: &Path) -> bool {
    dir.is_dir() && dir.join(METADATA).is_file()
}

/// Where one written item is: `relative_path`, `offset`, `length` of its `_StorageInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub file: String,
    pub offset: u64,
    pub length: u64,
    /// The `_StorageInfo` object node in the metadata tree.
    pub node: Id,
}

/// The CRC-32 a chunk's archive states for its storage record, and where the record is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordCrc {
    pub crc32: u32,
    /// Absolute offset in the data file.
    pub start: u64,
    pub len: u64,
}

/// One chunk of a tensor: its box in the global tensor and where its elements are.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub offsets: Vec<u64>,
    pub sizes: Vec<u64>,
    pub stored: Stored,
    /// Absolute offset of element 0 (row-major, contiguous) in `stored.file`.
    pub data_start: u64,
    /// The CRC-32 the chunk's archive states for its storage record (checked by
    /// [`Dcp::verify_crcs`]), with the record's absolute start and length.
    pub crc32: Option<RecordCrc>,
    /// The `ChunkStorageMetadata` object node.
    pub node: Id,
}

impl Chunk {
    pub fn elements(&self) -> u64 {
        self.sizes.iter().product()
    }
}

/// What the metadata says one key is.
#[derive(Debug, Clone)]
pub enum ItemKind {
    Tensor {
        dtype: DType,
        shape: Vec<u64>,
        chunks: Vec<Chunk>,
    },
    /// A pickled Python value (`lr`, `betas`, …), kept as bytes.
    Bytes { stored: Stored },
}

/// One key of `state_dict_metadata` (a flattened name: `model.…`, `optim.state.….exp_avg`).
#[derive(Debug, Clone)]
pub struct Item {
    pub fqn: String,
    pub kind: ItemKind,
    /// The `TensorStorageMetadata` / `BytesStorageMetadata` object node.
    pub node: Id,
}

/// An open DCP folder.
#[derive(Debug)]
pub struct Dcp {
    pub dir: PathBuf,
    /// The `.metadata` value tree (written back, edited, by sanitize).
    pub pickle: Pickle,
    /// In the metadata's order.
    pub items: Vec<Item>,
    /// Each item's place in `items`, by name (a save's metadata names thousands).
    index: HashMap<String, usize>,
    /// The data files, by relative path.
    pub files: BTreeMap<String, Mapped>,
    pub version: Option<String>,
}

/// The policy `.metadata` is read with.
pub fn metadata_policy() -> GlobalPolicy {
    GlobalPolicy {
        context: &METADATA_GLOBALS,
        ..GlobalPolicy::default()
    }
}

/// Small readers of the metadata tree; None where the shape is not what torch writes.
struct Tree<'a>(&'a Pickle);

impl<'a> Tree<'a> {
    /// The BUILD state of an object made from `class` (a `metadata.` class unless dotted).
    fn state(&self, id: Id, class: &str) -> Option<Id> {
        match self.0.node(id) {
            Node::Object {
                callable, state, ..
            } => {
                let name = self.0.global_name(*callable)?;
                let want = if class.contains('.') {
                    class.to_string()
                } else {
                    format!("{MD}{class}")
                };
                (name == want).then_some(())?;
                *state
            }
            _ => None,
        }
    }

    fn class(&self, id: Id) -> Option<String> {
        match self.0.node(id) {
            Node::Object { callable, .. } => self.0.global_name(*callable),
            _ => None,
        }
    }

    fn field(&self, state: Id, key: &str) -> Option<Id> {
        match self.0.node(state) {
            Node::Dict(_) => self.0.get(state, key),
            _ => None,
        }
    }

    fn int(&self, id: Id) -> Option<u64> {
        match self.0.node(id) {
            Node::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    fn is_none(&self, id: Id) -> bool {
        matches!(self.0.node(id), Node::None)
    }

    /// `torch.Size((a, b, …))`.
    fn size(&self, id: Id) -> Option<Vec<u64>> {
        match self.0.node(id) {
            Node::Object { callable, args, .. }
                if self.0.global_name(*callable).as_deref() == Some("torch.Size") =>
            {
                let Node::Tuple(a) = self.0.node(*args) else {
                    return None;
                };
                let Node::Tuple(dims) = self.0.node(*a.first()?) else {
                    return None;
                };
                dims.iter().map(|&d| self.int(d)).collect()
            }
            _ => None,
        }
    }

    fn list(&self, id: Id) -> Option<&'a [Id]> {
        match self.0.node(id) {
            Node::List(v) => Some(v),
            _ => None,
        }
    }
}

fn bad(dir: &Path, what: impl std::fmt::Display) -> Error {
    Error::format(
        dir.join(METADATA),
        format!("{what}: not a DCP metadata file this reader understands (please report the torch version that wrote it)"),
    )
}

impl Dcp {
    /// Open a DCP folder: parse `.metadata`, map every data file it names, and find every
    /// chunk's elements (reads the small zip directory and pickle of each chunk only).
    pub fn open(dir: &Path) -> Result<Dcp> {
        Dcp::open_with(dir, &metadata_policy())
    }

    /// [`Dcp::open`] with the globals `.metadata` may hold given by the caller: a format built on
    /// DCP that pickles more into it (Megatron-Core's save plans).
    pub fn open_with(dir: &Path, policy: &GlobalPolicy) -> Result<Dcp> {
        let md_path = dir.join(METADATA);
        let data = std::fs::read(&md_path).map_err(|e| Error::io(&md_path, "read", e))?;
        let at = pickle::Origin {
            path: &md_path,
            record: "",
        };
        let (p, end) = pickle::unpickle(&data, at, policy, Limits::default())?;
        if end != data.len() {
            return Err(bad(
                dir,
                format!("{} bytes after the pickle", data.len() - end),
            ));
        }
        let t = Tree(&p);
        let root = t
            .state(p.root, "Metadata")
            .ok_or_else(|| bad(dir, "the root is not a Metadata object"))?;
        let version = t
            .field(root, "version")
            .and_then(|v| p.str(v).map(str::to_string));
        let stored = storage_data(dir, &t, root)?;
        let sdm = t
            .field(root, "state_dict_metadata")
            .and_then(|d| p.dict_entries(d))
            .ok_or_else(|| bad(dir, "no state_dict_metadata dict"))?;
        let mut items = Vec::with_capacity(sdm.len());
        for &(k, v) in sdm {
            let fqn = p
                .str(k)
                .ok_or_else(|| bad(dir, "a state_dict_metadata key is not a string"))?
                .to_string();
            items.push(item(dir, &t, &stored, fqn, v)?);
        }
        let mut files = BTreeMap::new();
        for s in stored.values() {
            if !files.contains_key(&s.file) {
                let path = safe_join(dir, &s.file)?;
                if !path.exists() {
                    return Err(Error::format(
                        &path,
                        "missing: .metadata stores items in this file (a rank's file not copied?); copy the whole checkpoint folder",
                    ));
                }
                files.insert(s.file.clone(), Mapped::open(&path)?);
            }
        }
        let index = items
            .iter()
            .enumerate()
            .map(|(i, it)| (it.fqn.clone(), i))
            .collect();
        let mut dcp = Dcp {
            dir: dir.to_path_buf(),
            pickle: p,
            items,
            index,
            files,
            version,
        };
        dcp.locate_chunks()?;
        Ok(dcp)
    }

    /// The file an item is stored in, mapped (opened with the folder).
    pub fn map(&self, s: &Stored) -> Result<&Mapped> {
        self.files
            .get(&s.file)
            .ok_or_else(|| Error::format(self.dir.join(&s.file), "not opened"))
    }

    /// The bytes of item `fqn`, bounds-checked against its file.
    pub fn item_bytes(&self, fqn: &str, s: &Stored) -> Result<&[u8]> {
        let map = self.map(s)?;
        map.slice(s.offset, s.length).ok_or_else(|| {
            Error::format(
                &map.path,
                format!(
                    "'{fqn}' is stored at bytes {}..+{} but the file ends at {} bytes: the file is truncated",
                    s.offset, s.length, map.len
                ),
            )
        })
    }

    /// Each chunk's `torch.save` archive: one contiguous tensor whose shape is the chunk's.
    fn locate_chunks(&mut self) -> Result<()> {
        let mut starts = Vec::new();
        for it in &self.items {
            if let ItemKind::Tensor { dtype, chunks, .. } = &it.kind {
                for c in chunks {
                    starts.push(self.chunk_start(&it.fqn, *dtype, c)?);
                    // Its header pages (and the neighbours the kernel maps with them) leave
                    // the resident set: opening a big folder does not hold its data mapped.
                    self.map(&c.stored)?
                        .release(c.stored.offset, c.stored.length);
                }
            }
        }
        // The same chunks in the same order as the loop above: one start each.
        let chunks = self.items.iter_mut().flat_map(|it| match &mut it.kind {
            ItemKind::Tensor { chunks, .. } => chunks.as_mut_slice(),
            _ => &mut [],
        });
        for (c, start) in chunks.zip(starts) {
            (c.data_start, c.crc32) = start;
        }
        Ok(())
    }

    fn chunk_start(&self, fqn: &str, dtype: DType, c: &Chunk) -> Result<(u64, Option<RecordCrc>)> {
        let map = self.map(&c.stored)?;
        let bytes = self.item_bytes(fqn, &c.stored)?;
        let terr = |p: String| Error::tensor(&map.path, fqn, p);
        let opened =
            super::torch::open_zip(&map.path, bytes, &GlobalPolicy::default()).map_err(|e| {
                // The archive's error names the file this one names already.
                let e = e.to_string();
                let head = format!("{}: ", map.path.display());
                terr(format!(
                    "chunk at {:?} (bytes {}..+{}): {}",
                    c.offsets,
                    c.stored.offset,
                    c.stored.length,
                    e.strip_prefix(&head).unwrap_or(&e)
                ))
            })?;
        let (_, p, _, _, storages, tensors) = opened;
        let [one] = &tensors[..] else {
            return Err(terr(format!(
                "chunk at {:?} holds {} tensors, expected one",
                c.offsets,
                tensors.len()
            )));
        };
        let node = p
            .tensor_of(one.node)
            .ok_or_else(|| terr("chunk is not a tensor".into()))?;
        let s = storages
            .get(&node.storage.key)
            .ok_or_else(|| terr("chunk's storage is missing".into()))?;
        let contiguous = node
            .stride
            .iter()
            .rev()
            .zip(node.shape.iter().rev())
            .try_fold(1u64, |expect, (&st, &n)| {
                (n == 1 || st == expect).then(|| expect * n)
            });
        if node.storage.dtype != dtype || node.shape != c.sizes || contiguous.is_none() {
            return Err(terr(format!(
                "chunk at {:?} is {} {:?} in the file but {} {:?} in the metadata",
                c.offsets, node.storage.dtype, node.shape, dtype, c.sizes
            )));
        }
        let crc = s.record.as_ref().map(|r| RecordCrc {
            crc32: r.crc32,
            start: c.stored.offset + r.start,
            len: r.len,
        });
        Ok((
            c.stored.offset + s.start + node.offset * (dtype.bits() / 8),
            crc,
        ))
    }

    /// The whole tensor in row-major order, assembled from its chunks (for tests and checks of
    /// small tensors; writers stream chunks instead).
    pub fn tensor_bytes(&self, item: &Item) -> Result<Vec<u8>> {
        let ItemKind::Tensor {
            dtype,
            shape,
            chunks,
        } = &item.kind
        else {
            return Err(Error::format(
                &self.dir,
                format!("'{}' is not a tensor", item.fqn),
            ));
        };
        let es = (dtype.bits() / 8) as usize;
        let total: u64 = shape.iter().product();
        let mut out = vec![0u8; total as usize * es];
        for c in chunks {
            let map = self.map(&c.stored)?;
            let len = c.elements() * es as u64;
            let src = map.slice(c.data_start, len).ok_or_else(|| {
                Error::tensor(
                    &map.path,
                    &item.fqn,
                    "chunk lies past the end of the file: truncated",
                )
            })?;
            place(&mut out, shape, c, src, es);
        }
        Ok(out)
    }

    /// Check the CRC-32 of every chunk's storage record (reads all tensor data).
    pub fn verify_crcs(&self) -> Result<()> {
        self.items
            .iter()
            .try_for_each(|it| self.verify_item_crcs(it))
    }

    /// Check the CRC-32 of each chunk of one tensor (nothing for a bytes item).
    pub fn verify_item_crcs(&self, it: &Item) -> Result<()> {
        let ItemKind::Tensor { chunks, .. } = &it.kind else {
            return Ok(());
        };
        chunks
            .iter()
            .try_for_each(|c| self.verify_chunk_crc(&it.fqn, c))
    }

    /// Check the CRC-32 of one chunk of tensor `fqn` (reads its record; nothing when its
    /// archive states none).
    pub fn verify_chunk_crc(&self, fqn: &str, c: &Chunk) -> Result<()> {
        let Some(RecordCrc {
            crc32: want,
            start,
            len,
        }) = c.crc32
        else {
            return Ok(());
        };
        let map = self.map(&c.stored)?;
        let mut crc = crc32fast::Hasher::new();
        map.stream(start, len, |b| crc.update(b))?;
        let got = crc.finalize();
        if got != want {
            return Err(Error::tensor(
                &map.path,
                fqn,
                format!(
                    "chunk at {:?}: CRC-32 {got:08x} but its archive says {want:08x}: the data is corrupt",
                    c.offsets
                ),
            ));
        }
        Ok(())
    }

    /// An item by name.
    pub fn item(&self, fqn: &str) -> Option<&Item> {
        self.index.get(fqn).map(|&i| &self.items[i])
    }

    /// Every data file's path.
    pub fn paths(&self) -> Vec<&Path> {
        self.files.values().map(|m| m.path.as_path()).collect()
    }
}

/// Copy a chunk's row-major elements into the global tensor at its offsets.
fn place(out: &mut [u8], shape: &[u64], c: &Chunk, src: &[u8], es: usize) {
    let nd = shape.len();
    if nd == 0 {
        out[..es].copy_from_slice(&src[..es]);
        return;
    }
    let last = c.sizes[nd - 1] as usize * es;
    let mut idx = vec![0u64; nd - 1];
    let rows: u64 = c.sizes[..nd - 1].iter().product();
    for r in 0..rows as usize {
        let mut at = 0u64;
        for d in 0..nd {
            let i = if d < nd - 1 { idx[d] } else { 0 } + c.offsets[d];
            at = at * shape[d] + i;
        }
        let at = at as usize * es;
        out[at..at + last].copy_from_slice(&src[r * last..(r + 1) * last]);
        for d in (0..nd - 1).rev() {
            idx[d] += 1;
            if idx[d] < c.sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// A relative path from the metadata, kept inside the folder.
fn safe_join(dir: &Path, rel: &str) -> Result<PathBuf> {
    let p = Path::new(rel);
    if p.components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(bad(dir, format!("data file '{rel}' is outside the folder")));
    }
    Ok(dir.join(p))
}

type StoredMap = HashMap<(String, Option<Vec<u64>>), Stored>;

/// `storage_data`: `{MetadataIndex(fqn, offset, index): _StorageInfo(path, offset, length)}`.
fn storage_data(dir: &Path, t: &Tree<'_>, root: Id) -> Result<StoredMap> {
    let p = t.0;
    let entries = t
        .field(root, "storage_data")
        .and_then(|d| p.dict_entries(d))
        .ok_or_else(|| bad(dir, "no storage_data dict"))?;
    let mut out = HashMap::with_capacity(entries.len());
    for &(k, v) in entries {
        let ks = t
            .state(k, "MetadataIndex")
            .ok_or_else(|| bad(dir, "a storage_data key is not a MetadataIndex"))?;
        let fqn = t
            .field(ks, "fqn")
            .and_then(|f| p.str(f))
            .ok_or_else(|| bad(dir, "a MetadataIndex without fqn"))?;
        let offset = match t.field(ks, "offset") {
            Some(o) if !t.is_none(o) => Some(
                t.size(o)
                    .ok_or_else(|| bad(dir, format!("'{fqn}': offset is not a torch.Size")))?,
            ),
            _ => None,
        };
        let vs = t
            .state(v, "torch.distributed.checkpoint.filesystem._StorageInfo")
            .ok_or_else(|| bad(dir, format!("'{fqn}': storage is not a _StorageInfo")))?;
        if let Some(td) = t.field(vs, "transform_descriptors") {
            if !t.is_none(td) {
                return Err(Error::format(
                    dir.join(METADATA),
                    format!("'{fqn}' is stored through transforms (compression or encryption extensions): not supported; save without storage extensions"),
                ));
            }
        }
        let file = t.field(vs, "relative_path").and_then(|f| p.str(f));
        let at = t.field(vs, "offset").and_then(|f| t.int(f));
        let len = t.field(vs, "length").and_then(|f| t.int(f));
        let (Some(file), Some(at), Some(length)) = (file, at, len) else {
            return Err(bad(
                dir,
                format!("'{fqn}': _StorageInfo without path/offset/length"),
            ));
        };
        let key = (fqn.to_string(), offset);
        let s = Stored {
            file: file.to_string(),
            offset: at,
            length,
            node: v,
        };
        if out.insert(key, s).is_some() {
            return Err(bad(dir, format!("'{fqn}' is stored twice at one offset")));
        }
    }
    Ok(out)
}

/// One `state_dict_metadata` entry, with its chunks matched to where they are stored.
fn item(dir: &Path, t: &Tree<'_>, stored: &StoredMap, fqn: String, v: Id) -> Result<Item> {
    let missing = |what: &str| {
        Error::format(
            dir.join(METADATA),
            format!("'{fqn}': {what} has no entry in storage_data: the metadata is incomplete"),
        )
    };
    match t.class(v).as_deref().and_then(|c| c.strip_prefix(MD)) {
        Some("BytesStorageMetadata") => {
            let s = stored
                .get(&(fqn.clone(), None))
                .ok_or_else(|| missing("the value"))?;
            return Ok(Item {
                kind: ItemKind::Bytes { stored: s.clone() },
                fqn,
                node: v,
            });
        }
        Some("TensorStorageMetadata") => {}
        _ => {
            return Err(bad(
                dir,
                format!("'{fqn}' is neither tensor nor bytes metadata"),
            ))
        }
    }
    let st = t
        .state(v, "TensorStorageMetadata")
        .ok_or_else(|| bad(dir, format!("'{fqn}': tensor metadata without state")))?;
    let dtype = t
        .field(st, "properties")
        .and_then(|pr| t.state(pr, "TensorProperties"))
        .and_then(|s| properties_dtype(t, s))
        .ok_or_else(|| {
            bad(
                dir,
                format!("'{fqn}': unreadable or non-strided tensor properties"),
            )
        })?;
    let shape = t
        .field(st, "size")
        .and_then(|s| t.size(s))
        .ok_or_else(|| bad(dir, format!("'{fqn}': no size")))?;
    let list = t
        .field(st, "chunks")
        .and_then(|c| t.list(c))
        .ok_or_else(|| bad(dir, format!("'{fqn}': no chunk list")))?;
    let mut chunks = Vec::with_capacity(list.len());
    for &c in list {
        let cs = t.state(c, "ChunkStorageMetadata");
        let offsets = cs
            .and_then(|s| t.field(s, "offsets"))
            .and_then(|o| t.size(o));
        let sizes = cs.and_then(|s| t.field(s, "sizes")).and_then(|o| t.size(o));
        let (Some(offsets), Some(sizes)) = (offsets, sizes) else {
            return Err(bad(dir, format!("'{fqn}': unreadable chunk")));
        };
        let fits = offsets.len() == shape.len()
            && sizes.len() == shape.len()
            && (0..shape.len()).all(|d| {
                offsets[d]
                    .checked_add(sizes[d])
                    .is_some_and(|e| e <= shape[d])
            });
        if !fits {
            return Err(Error::format(
                dir.join(METADATA),
                format!("'{fqn}': chunk at {offsets:?} of size {sizes:?} lies outside the tensor's shape {shape:?}"),
            ));
        }
        let s = stored
            .get(&(fqn.clone(), Some(offsets.clone())))
            .ok_or_else(|| missing(&format!("the chunk at {offsets:?}")))?;
        chunks.push(Chunk {
            offsets,
            sizes,
            stored: s.clone(),
            data_start: 0,
            crc32: None,
            node: c,
        });
    }
    check_tiles(dir, &fqn, &shape, &chunks)?;
    Ok(Item {
        fqn,
        kind: ItemKind::Tensor {
            dtype,
            shape,
            chunks,
        },
        node: v,
    })
}

/// The chunks tile the tensor: as many elements as it has and no two boxes sharing one (each
/// lies inside: checked as it was read). Otherwise part of the tensor would read as zeros.
fn check_tiles(dir: &Path, fqn: &str, shape: &[u64], chunks: &[Chunk]) -> Result<()> {
    let covered: u64 = chunks.iter().map(Chunk::elements).sum();
    if covered != shape.iter().product::<u64>() {
        return Err(Error::format(
            dir.join(METADATA),
            format!("'{fqn}': chunks hold {covered} elements but the tensor {shape:?} has {}: refusing a partial tensor", shape.iter().product::<u64>()),
        ));
    }
    if let Some((a, b)) = first_overlap(chunks) {
        return Err(Error::format(
            dir.join(METADATA),
            format!(
                "'{fqn}': chunks at {:?} and {:?} overlap, so the chunks do not tile the tensor {shape:?} (part of it would read as zeros): the metadata is corrupt (a rank's plan from another save?)",
                chunks[a].offsets, chunks[b].offsets
            ),
        ));
    }
    Ok(())
}

/// Two chunks whose boxes share an element, if any. With the element count checked, no overlap
/// means the chunks tile the tensor. A sweep along the dimension the chunks split most, so
/// row- or column-sharded tensors cost one sort, not every pair.
fn first_overlap(chunks: &[Chunk]) -> Option<(usize, usize)> {
    let dims = chunks.first()?.offsets.len();
    let split = (0..dims).max_by_key(|&d| {
        let mut starts: Vec<u64> = chunks.iter().map(|c| c.offsets[d]).collect();
        starts.sort_unstable();
        starts.dedup();
        starts.len()
    })?;
    let mut order: Vec<usize> = (0..chunks.len())
        .filter(|&i| chunks[i].elements() > 0)
        .collect();
    order.sort_by_key(|&i| chunks[i].offsets[split]);
    let mut active: Vec<usize> = Vec::new();
    for i in order {
        let start = chunks[i].offsets[split];
        active.retain(|&a| chunks[a].offsets[split] + chunks[a].sizes[split] > start);
        if let Some(&a) = active.iter().find(|&&a| boxes_meet(&chunks[a], &chunks[i])) {
            return Some((a, i));
        }
        active.push(i);
    }
    None
}

fn boxes_meet(a: &Chunk, b: &Chunk) -> bool {
    (0..a.offsets.len()).all(|d| {
        a.offsets[d] < b.offsets[d] + b.sizes[d] && b.offsets[d] < a.offsets[d] + a.sizes[d]
    })
}

/// `TensorProperties.__getstate__`: (dtype, layout, requires_grad, memory format, pin_memory[,
/// strides]); only strided layouts are read.
fn properties_dtype(t: &Tree<'_>, state: Id) -> Option<DType> {
    let Node::Tuple(s) = t.0.node(state) else {
        return None;
    };
    let dtype = t.0.global_name(*s.first()?)?;
    let layout = *s.get(1)?;
    let strided = match t.0.node(layout) {
        Node::Object { callable, args, .. }
            if t.0.global_name(*callable).as_deref() == Some("torch.serialization._get_layout") =>
        {
            matches!(t.0.node(*args), Node::Tuple(a) if a.len() == 1 && t.0.str(a[0]) == Some("torch.strided"))
        }
        Node::Global { .. } => t.0.global_name(layout).as_deref() == Some("torch.strided"),
        _ => false,
    };
    strided.then_some(())?;
    pickle::torch_dtype(dtype.strip_prefix("torch.")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(offsets: Vec<u64>, sizes: Vec<u64>) -> Chunk {
        Chunk {
            offsets,
            sizes,
            stored: Stored {
                file: String::new(),
                offset: 0,
                length: 0,
                node: 0,
            },
            data_start: 0,
            crc32: None,
            node: 0,
        }
    }

    #[test]
    fn chunks_split_by_rows_and_columns_assemble_row_major() {
        // A 3 x 4 tensor of u8 0..12 in three chunks: rows 0-1 cols 0-1, rows 0-1 cols 2-3, row 2.
        let shape = [3u64, 4];
        let mut out = vec![0u8; 12];
        place(
            &mut out,
            &shape,
            &chunk(vec![0, 0], vec![2, 2]),
            &[0, 1, 4, 5],
            1,
        );
        place(
            &mut out,
            &shape,
            &chunk(vec![0, 2], vec![2, 2]),
            &[2, 3, 6, 7],
            1,
        );
        place(
            &mut out,
            &shape,
            &chunk(vec![2, 0], vec![1, 4]),
            &[8, 9, 10, 11],
            1,
        );
        assert_eq!(out, (0..12).collect::<Vec<u8>>());
    }

    #[test]
    fn metadata_paths_outside_the_folder_are_refused() {
        let dir = Path::new("ckpt");
        assert!(safe_join(dir, "__0_0.distcp").is_ok());
        assert!(safe_join(dir, "../secret").is_err());
        assert!(safe_join(dir, "/etc/passwd").is_err());
    }
}
