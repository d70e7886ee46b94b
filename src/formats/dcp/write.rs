//! Writing an edited torch Distributed Checkpoint folder: unchanged data files carried over
//! byte for byte, new chunks (`torch.save` archives) in one new data file, a new `.metadata`
//! pickle; built in a temp folder, re-read with the strict reader, verified, renamed into place.

pub use super::edit::{gather, ChunkOut, ObjectEdit, Span, TensorEdit};
use crate::error::{Error, Result};
use crate::formats::dcp::{Dcp, Item, ItemKind, METADATA};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Call, Id, Node, Pickle};
use crate::formats::torch::writer::{central_directory, emit_pickle, lay_out, serialization_id};
use crate::output::folder::{AtomicFolder, Carried};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// What was written.
#[derive(Debug, Clone, Serialize)]
pub struct Written {
    pub carried: Vec<Carried>,
    /// The new data file holding the new chunks (None when no chunk is new).
    pub new_file: Option<String>,
    pub new_chunks: usize,
}

/// A data file name torch's writer would not have used in this folder (`__0_N.distcp`).
fn new_file_name(d: &Dcp) -> String {
    (1..)
        .map(|n| format!("__0_{n}.distcp"))
        .find(|n| !d.files.contains_key(n) && !d.dir.join(n).exists())
        .unwrap_or_default()
}

/// Write `d` with `edits` applied to `dest`.
pub fn write_dcp(d: &Dcp, edits: &[TensorEdit], dest: &Path, overwrite: bool) -> Result<Written> {
    let inputs: Vec<&Path> = std::iter::once(d.dir.as_path()).collect();
    let folder = AtomicFolder::create(dest, &inputs, overwrite)?;
    let written = write_dcp_in(
        d,
        &Out {
            edits,
            dropped: &[],
            objects: &[],
            policy: None,
        },
        &folder,
        "",
    )?;
    folder.commit()?;
    Ok(written)
}

/// What a DCP folder is written with: tensors edited, items left out (by fqn).
#[derive(Debug, Clone, Copy)]
pub struct Out<'e> {
    pub edits: &'e [TensorEdit],
    /// Items the output leaves out of `.metadata` (their bytes stay in the data files carried
    /// over, unreferenced; a data file nothing refers to any more is not carried).
    pub dropped: &'e [String],
    /// Pickled object items written anew (in the new data file).
    pub objects: &'e [ObjectEdit],
    /// The globals `.metadata` is read back with (None: torch's own).
    pub policy: Option<&'e GlobalPolicy>,
}

/// Write `d` as `out` says into `folder`'s subfolder `sub` (`""` or `"name/"`, created by the
/// caller), re-read and verified there; the caller commits the folder.
pub fn write_dcp_in(d: &Dcp, out: &Out<'_>, folder: &AtomicFolder, sub: &str) -> Result<Written> {
    let (edits, dropped) = (out.edits, out.dropped);
    let file = new_file_name(d);
    let mut data = NewFile::new(folder.join(&format!("{sub}{file}")));
    let mut placed: Vec<Vec<Option<(u64, u64)>>> = Vec::new();
    for e in edits {
        let item = d
            .item(&e.fqn)
            .ok_or_else(|| Error::format(&d.dir, format!("no tensor '{}'", e.fqn)))?;
        let mut at = Vec::new();
        for c in &e.chunks {
            let archive = match c {
                ChunkOut::Keep(_) | ChunkOut::Moved { .. } => None,
                ChunkOut::New { sizes, bytes, .. } => Some(chunk_archive(d, item, sizes, bytes)?),
                ChunkOut::Gathered { sizes, from, .. } => {
                    let bytes = gather(d, from, element_bytes(item))?;
                    Some(chunk_archive(d, item, sizes, &bytes)?)
                }
            };
            at.push(match archive {
                Some(a) => Some(data.put(&a).map_err(|e| folder.about(e))?),
                None => None,
            });
        }
        placed.push(at);
    }
    let mut objects_at = Vec::new();
    for o in out.objects {
        objects_at.push(data.put(&o.bytes).map_err(|e| folder.about(e))?);
    }
    let new_chunks = data.records;
    data.finish().map_err(|e| folder.about(e))?;
    let mut carried = Vec::new();
    let used = referenced_files(d, edits, dropped);
    for (name, map) in d.files.iter().filter(|(n, _)| used.contains(n.as_str())) {
        carried.push(
            folder
                .carry(&map.path, &format!("{sub}{name}"), false)
                .map_err(|e| folder.about(e))?,
        );
    }
    let md = edited_metadata(d, out, &placed, &objects_at, &file)?;
    write_file(&folder.join(&format!("{sub}{METADATA}")), &md).map_err(|e| folder.about(e))?;
    verify(d, out, &folder.join(sub)).map_err(|e| folder.about(e))?;
    Ok(Written {
        carried,
        new_file: (new_chunks > 0).then_some(file),
        new_chunks,
    })
}

/// The new data file, written record by record as the chunks are made (created with the first
/// one: no file when nothing is new), fsynced when finished.
struct NewFile {
    path: std::path::PathBuf,
    file: Option<std::io::BufWriter<std::fs::File>>,
    len: u64,
    records: usize,
}

impl NewFile {
    fn new(path: std::path::PathBuf) -> NewFile {
        NewFile {
            path,
            file: None,
            len: 0,
            records: 0,
        }
    }

    /// Append one record: where it starts and its length.
    fn put(&mut self, bytes: &[u8]) -> Result<(u64, u64)> {
        let f = match &mut self.file {
            Some(f) => f,
            None => {
                let f = std::fs::File::create(&self.path)
                    .map_err(|e| Error::io(&self.path, "create", e))?;
                self.file
                    .insert(std::io::BufWriter::with_capacity(1 << 20, f))
            }
        };
        f.write_all(bytes)
            .map_err(|e| Error::io(&self.path, "write", e))?;
        let at = (self.len, bytes.len() as u64);
        self.len += at.1;
        self.records += 1;
        Ok(at)
    }

    fn finish(self) -> Result<()> {
        let Some(f) = self.file else {
            return Ok(());
        };
        f.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(&self.path, "write", e))
    }
}

/// Bytes per element of a tensor item (0 for an object).
fn element_bytes(item: &Item) -> u64 {
    match &item.kind {
        ItemKind::Tensor { dtype, .. } => dtype.bits() / 8,
        ItemKind::Bytes { .. } => 0,
    }
}

/// The data files the output still refers to (a file whose every chunk was replaced is left
/// out).
fn referenced_files<'a>(
    d: &'a Dcp,
    edits: &[TensorEdit],
    dropped: &[String],
) -> std::collections::BTreeSet<&'a str> {
    let mut used = std::collections::BTreeSet::new();
    for it in d.items.iter().filter(|i| !dropped.contains(&i.fqn)) {
        match (&it.kind, edits.iter().find(|e| e.fqn == it.fqn)) {
            (ItemKind::Bytes { stored }, _) => {
                used.insert(stored.file.as_str());
            }
            (ItemKind::Tensor { chunks, .. }, None) => {
                used.extend(chunks.iter().map(|c| c.stored.file.as_str()));
            }
            (ItemKind::Tensor { chunks, .. }, Some(e)) => {
                for c in &e.chunks {
                    if let ChunkOut::Keep(i) = c {
                        used.extend(chunks.get(*i).map(|c| c.stored.file.as_str()));
                    }
                }
            }
        }
    }
    // A moved chunk's record stays in its input file, whichever item it came from.
    for e in edits {
        for c in &e.chunks {
            if let ChunkOut::Moved { from, .. } = c {
                if let Some((name, _)) = d.files.get_key_value(&from.stored.file) {
                    used.insert(name.as_str());
                }
            }
        }
    }
    used
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(|e| Error::io(path, "create", e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| Error::io(path, "write", e))
}

/// A `torch.save` archive of one contiguous tensor of `sizes`, made from the pickle of one of
/// the item's input chunks (same dtype and rebuild call; new shape and storage).
fn chunk_archive(d: &Dcp, item: &Item, sizes: &[u64], bytes: &[u8]) -> Result<Vec<u8>> {
    let ItemKind::Tensor { chunks, .. } = &item.kind else {
        return Err(Error::format(
            &d.dir,
            format!("'{}' is not a tensor", item.fqn),
        ));
    };
    let first = chunks
        .first()
        .ok_or_else(|| Error::format(&d.dir, format!("'{}' has no chunk", item.fqn)))?;
    let raw = d.item_bytes(&item.fqn, &first.stored)?;
    let policy = Default::default();
    let (_, mut p, _, _, _, tensors) =
        crate::formats::torch::open_zip(&d.map(&first.stored)?.path, raw, &policy)?;
    let id = tensors
        .first()
        .and_then(|t| p.tensor_id(t.node))
        .ok_or_else(|| Error::format(&d.dir, format!("'{}': chunk holds no tensor", item.fqn)))?;
    if let Node::Tensor(t) = p.node_mut(id) {
        t.shape = sizes.to_vec();
        t.view_new_storage("0", sizes.first().copied().unwrap_or(1));
        if sizes.is_empty() {
            t.shape.clear();
            t.stride.clear();
            t.storage.numel = 1;
        }
    }
    let pkl = emit_pickle(&p).map_err(|e| Error::format(&d.dir, e))?.bytes;
    Ok(archive(&pkl, Some(bytes)))
}

/// A `torch.save` archive of a pickle holding no tensor (a sharded object's value).
pub fn object_archive(p: &Pickle) -> std::result::Result<Vec<u8>, String> {
    Ok(archive(&emit_pickle(p)?.bytes, None))
}

/// `torch.save`'s records around `pkl` and the one storage `data/0` when given.
fn archive(pkl: &[u8], data: Option<&[u8]>) -> Vec<u8> {
    let mut records: Vec<(&str, &[u8])> = vec![
        ("data.pkl", pkl),
        (".format_version", b"1"),
        (".storage_alignment", b"64"),
        ("byteorder", b"little"),
    ];
    if let Some(bytes) = data {
        records.push(("data/0", bytes));
    }
    records.push(("version", b"3\n"));
    let mut lens: Vec<(String, u64, u32)> = records
        .iter()
        .map(|(n, b)| (n.to_string(), b.len() as u64, crc32fast::hash(b)))
        .collect();
    let id = serialization_id(&lens).into_bytes();
    lens.push((
        ".data/serialization_id".into(),
        id.len() as u64,
        crc32fast::hash(&id),
    ));
    let laid = lay_out("archive", &lens);
    let mut out = Vec::new();
    for (l, b) in laid
        .iter()
        .zip(records.iter().map(|r| r.1).chain([&id[..]]))
    {
        out.extend_from_slice(&l.local_header);
        out.extend_from_slice(b);
        out.extend_from_slice(&l.descriptor);
    }
    let cd_start = out.len() as u64;
    out.extend_from_slice(&central_directory(&laid, cd_start));
    out
}

/// The callable and args of an object node (to make another of its class).
fn class_of(p: &Pickle, id: Id) -> Option<(Id, Id)> {
    match p.node(id) {
        Node::Object { callable, args, .. } => Some((*callable, *args)),
        _ => None,
    }
}

/// A new `cls()` + BUILD(state dict) object, as the metadata's dataclasses are written.
fn new_object(p: &mut Pickle, (callable, args): (Id, Id), fields: Vec<(&str, Id)>) -> Id {
    let entries = fields
        .into_iter()
        .map(|(k, v)| (p.push(Node::Str(k.to_string())), v))
        .collect();
    let state = p.push(Node::Dict(entries));
    p.push(Node::object(
        callable,
        args,
        Call::NewObj,
        None,
        Some(state),
    ))
}

/// A `torch.Size(dims)` node made with the given `torch.Size` global.
fn size_node(p: &mut Pickle, size_global: Id, dims: &[u64]) -> Id {
    let ints = dims.iter().map(|&d| p.push(Node::Int(d as i64))).collect();
    let inner = p.push(Node::Tuple(ints));
    let args = p.push(Node::Tuple(vec![inner]));
    p.push(Node::object(size_global, args, Call::Reduce, None, None))
}

/// The id of the value stored under `key` in a dict node, and the dict's index of it.
fn dict_slot(p: &Pickle, dict: Id, key: &str) -> Option<usize> {
    match p.node(dict) {
        Node::Dict(e) => e.iter().position(|(k, _)| p.str(*k) == Some(key)),
        _ => None,
    }
}

fn set_field(p: &mut Pickle, dict: Id, key: &str, value: Id) -> Option<()> {
    let i = dict_slot(p, dict, key)?;
    match p.node_mut(dict) {
        Node::Dict(e) => e[i].1 = value,
        _ => return None,
    }
    Some(())
}

fn state_of(p: &Pickle, id: Id) -> Option<Id> {
    match p.node(id) {
        Node::Object { state, .. } => *state,
        _ => None,
    }
}

/// `.metadata` with each edited tensor's size, chunk list and storage entries replaced.
fn edited_metadata(
    d: &Dcp,
    out: &Out<'_>,
    placed: &[Vec<Option<(u64, u64)>>],
    objects_at: &[(u64, u64)],
    file: &str,
) -> Result<Vec<u8>> {
    let bad = |what: &str| Error::format(d.dir.join(METADATA), format!("cannot edit: {what}"));
    let mut p = d.pickle.clone();
    let root = state_of(&p, p.root).ok_or_else(|| bad("root"))?;
    let sd = p
        .get(root, "storage_data")
        .ok_or_else(|| bad("storage_data"))?;
    let Node::Dict(entries) = p.node(sd).clone() else {
        return Err(bad("storage_data"));
    };
    let (key_class, info_class) = entries
        .first()
        .and_then(|&(k, v)| Some((class_of(&p, k)?, class_of(&p, v)?)))
        .ok_or_else(|| bad("storage_data is empty"))?;
    let mut keep = entries;
    if !out.dropped.is_empty() {
        drop_items(d, &mut p, root, &mut keep, out.dropped).ok_or_else(|| bad("dropped items"))?;
    }
    for (e, at) in out.edits.iter().zip(placed) {
        let item = d.item(&e.fqn).ok_or_else(|| bad(&e.fqn))?;
        let ItemKind::Tensor { chunks, .. } = &item.kind else {
            return Err(bad(&e.fqn));
        };
        let st = state_of(&p, item.node).ok_or_else(|| bad(&e.fqn))?;
        let old_size = p.get(st, "size").ok_or_else(|| bad(&e.fqn))?;
        let (size_global, _) = class_of(&p, old_size).ok_or_else(|| bad(&e.fqn))?;
        let chunk_class = chunks
            .first()
            .and_then(|c| class_of(&p, c.node))
            .ok_or_else(|| bad(&e.fqn))?;
        let new_size = size_node(&mut p, size_global, &e.shape);
        set_field(&mut p, st, "size", new_size).ok_or_else(|| bad(&e.fqn))?;
        // Every input chunk not kept leaves storage_data; each new or moved one enters it.
        let kept: Vec<usize> = e
            .chunks
            .iter()
            .filter_map(|c| match c {
                ChunkOut::Keep(i) => Some(*i),
                _ => None,
            })
            .collect();
        let gone: Vec<Id> = (0..chunks.len())
            .filter(|i| !kept.contains(i))
            .map(|i| chunks[i].stored.node)
            .collect();
        keep.retain(|(_, v)| !gone.contains(v));
        let mut list = Vec::with_capacity(e.chunks.len());
        for (index, (c, pos)) in e.chunks.iter().zip(at).enumerate() {
            let (offsets, sizes, (path, start, len)) = match (c, pos) {
                (ChunkOut::Keep(i), _) => {
                    list.push(chunks[*i].node);
                    continue;
                }
                (ChunkOut::Moved { offsets, from }, _) => {
                    let s = &from.stored;
                    (offsets, &from.sizes, (s.file.as_str(), s.offset, s.length))
                }
                (
                    ChunkOut::New { offsets, sizes, .. }
                    | ChunkOut::Gathered { offsets, sizes, .. },
                    Some((start, len)),
                ) => (offsets, sizes, (file, *start, *len)),
                _ => return Err(bad("a new chunk was not placed")),
            };
            let classes = Classes {
                size_global,
                chunk: chunk_class,
                key: key_class,
                info: info_class,
            };
            let (chunk, entry) = new_chunk(
                &mut p,
                classes,
                (&e.fqn, index),
                (offsets, sizes),
                (path, start, len),
            );
            list.push(chunk);
            keep.push(entry);
        }
        let lid = p.get(st, "chunks").ok_or_else(|| bad(&e.fqn))?;
        *p.node_mut(lid) = Node::List(list);
    }
    for (o, &(start, len)) in out.objects.iter().zip(objects_at) {
        place_object(d, &mut p, o, file, start, len).ok_or_else(|| bad(&o.fqn))?;
    }
    *p.node_mut(sd) = Node::Dict(keep);
    emit_pickle(&p).map(|e| e.bytes).map_err(|e| {
        Error::format(
            d.dir.join(METADATA),
            format!("cannot write the metadata: {e}"),
        )
    })
}

/// The metadata classes a new chunk is made of (those of the input's nodes).
#[derive(Clone, Copy)]
struct Classes {
    size_global: Id,
    chunk: (Id, Id),
    key: (Id, Id),
    info: (Id, Id),
}

/// A new `ChunkStorageMetadata` node for chunk `index` of tensor `fqn` at `offsets` of
/// `sizes`, and its `storage_data` entry (`MetadataIndex` -> `_StorageInfo` of `path`,
/// `start`, `len`).
fn new_chunk(
    p: &mut Pickle,
    c: Classes,
    (fqn, index): (&str, usize),
    (offsets, sizes): (&[u64], &[u64]),
    (path, start, len): (&str, u64, u64),
) -> (Id, (Id, Id)) {
    let o = size_node(p, c.size_global, offsets);
    let s = size_node(p, c.size_global, sizes);
    let chunk = new_object(p, c.chunk, vec![("offsets", o), ("sizes", s)]);
    let fqn = p.push(Node::Str(fqn.to_string()));
    let o2 = size_node(p, c.size_global, offsets);
    let idx = p.push(Node::Int(index as i64));
    let key = new_object(p, c.key, vec![("fqn", fqn), ("offset", o2), ("index", idx)]);
    let path = p.push(Node::Str(path.to_string()));
    let off = p.push(Node::Int(start as i64));
    let l = p.push(Node::Int(len as i64));
    let none = p.push(Node::None);
    let info = new_object(
        p,
        c.info,
        vec![
            ("relative_path", path),
            ("offset", off),
            ("length", l),
            ("transform_descriptors", none),
        ],
    );
    (chunk, (key, info))
}

/// Object item `o`'s `_StorageInfo` pointed at its new bytes (`file`, `start`, `len`).
fn place_object(
    d: &Dcp,
    p: &mut Pickle,
    o: &ObjectEdit,
    file: &str,
    start: u64,
    len: u64,
) -> Option<()> {
    let ItemKind::Bytes { stored } = &d.item(&o.fqn)?.kind else {
        return None;
    };
    let st = state_of(p, stored.node)?;
    let path = p.push(Node::Str(file.to_string()));
    let off = p.push(Node::Int(i64::try_from(start).ok()?));
    let l = p.push(Node::Int(i64::try_from(len).ok()?));
    set_field(p, st, "relative_path", path)?;
    set_field(p, st, "offset", off)?;
    set_field(p, st, "length", l)
}

/// `dropped` items out of `state_dict_metadata`, and their storage entries out of `keep`.
fn drop_items(
    d: &Dcp,
    p: &mut Pickle,
    root: Id,
    keep: &mut Vec<(Id, Id)>,
    dropped: &[String],
) -> Option<()> {
    let mut gone: Vec<Id> = Vec::new();
    for it in d.items.iter().filter(|i| dropped.contains(&i.fqn)) {
        match &it.kind {
            ItemKind::Bytes { stored } => gone.push(stored.node),
            ItemKind::Tensor { chunks, .. } => gone.extend(chunks.iter().map(|c| c.stored.node)),
        }
    }
    keep.retain(|(_, v)| !gone.contains(v));
    let sdm = p.get(root, "state_dict_metadata")?;
    let Node::Dict(mut entries) = p.node(sdm).clone() else {
        return None;
    };
    entries.retain(|(k, _)| p.str(*k).is_none_or(|k| !dropped.iter().any(|x| x == k)));
    *p.node_mut(sdm) = Node::Dict(entries);
    Some(())
}

/// The temp folder re-read with the same reader: every item is there; edited tensors have
/// their planned shape and bytes; every other item is where it was, in a data file carried over
/// byte for byte (compared when carried), so its bytes are the input's without reading them.
fn verify(d: &Dcp, o: &Out<'_>, tmp: &Path) -> Result<()> {
    let out = match o.policy {
        Some(policy) => Dcp::open_with(tmp, policy)?,
        None => Dcp::open(tmp)?,
    };
    let edits = o.edits;
    let kept: Vec<&Item> = d
        .items
        .iter()
        .filter(|i| !o.dropped.contains(&i.fqn))
        .collect();
    let verr = |p: String| Error::Verify {
        path: tmp.to_path_buf(),
        problem: p,
    };
    if out.items.len() != kept.len() {
        return Err(verr(format!(
            "{} items written, {} read",
            kept.len(),
            out.items.len()
        )));
    }
    let place = |s: &crate::formats::dcp::Stored| (s.file.clone(), s.offset, s.length);
    for (a, b) in kept.into_iter().zip(&out.items) {
        if a.fqn != b.fqn {
            return Err(verr(format!("'{}' read back as '{}'", a.fqn, b.fqn)));
        }
        if let Some(o) = o.objects.iter().find(|x| x.fqn == a.fqn) {
            let ItemKind::Bytes { stored } = &b.kind else {
                return Err(verr(format!("'{}' is not an object", a.fqn)));
            };
            if out.item_bytes(&b.fqn, stored)? != o.bytes.as_slice() {
                return Err(verr(format!("'{}' read back differs from the plan", a.fqn)));
            }
            continue;
        }
        match (edits.iter().find(|e| e.fqn == a.fqn), &a.kind, &b.kind) {
            (Some(e), _, ItemKind::Tensor { shape, .. }) => {
                if *shape != e.shape {
                    return Err(verr(format!(
                        "'{}' is {shape:?}, planned {:?}",
                        a.fqn, e.shape
                    )));
                }
                if !edited_as_planned((d, a), (&out, b), e)? {
                    return Err(verr(format!("'{}' read back differs from the plan", a.fqn)));
                }
            }
            (None, ItemKind::Bytes { stored: x }, ItemKind::Bytes { stored: y })
                if place(x) == place(y) => {}
            (
                None,
                ItemKind::Tensor {
                    dtype: t1,
                    shape: s1,
                    chunks: c1,
                },
                ItemKind::Tensor {
                    dtype: t2,
                    shape: s2,
                    chunks: c2,
                },
            ) if t1 == t2
                && s1 == s2
                && c1.len() == c2.len()
                && c1.iter().zip(c2).all(|(x, y)| {
                    x.offsets == y.offsets
                        && x.sizes == y.sizes
                        && place(&x.stored) == place(&y.stored)
                }) => {}
            _ => {
                return Err(verr(format!(
                    "'{}' read back differs from the input",
                    a.fqn
                )))
            }
        }
    }
    Ok(())
}

/// An edited tensor read back, chunk by chunk: each kept chunk at its input place, each new
/// chunk's box and bytes as planned (compared in the map, one chunk at a time).
fn edited_as_planned(
    (d, a): (&Dcp, &Item),
    (out, b): (&Dcp, &Item),
    e: &TensorEdit,
) -> Result<bool> {
    let (ItemKind::Tensor { chunks: old, .. }, ItemKind::Tensor { chunks: new, .. }) =
        (&a.kind, &b.kind)
    else {
        return Ok(false);
    };
    if new.len() != e.chunks.len() {
        return Ok(false);
    }
    let es = element_bytes(a);
    for (planned, got) in e.chunks.iter().zip(new) {
        let at = |s: &crate::formats::dcp::Stored| (s.file.clone(), s.offset, s.length);
        let same = match planned {
            ChunkOut::Keep(i) => old.get(*i).is_some_and(|c| {
                c.offsets == got.offsets && c.sizes == got.sizes && at(&c.stored) == at(&got.stored)
            }),
            ChunkOut::Moved { offsets, from } => {
                *offsets == got.offsets
                    && from.sizes == got.sizes
                    && at(&from.stored) == at(&got.stored)
            }
            ChunkOut::New {
                offsets,
                sizes,
                bytes,
            } => {
                let map = out.map(&got.stored)?;
                *offsets == got.offsets
                    && *sizes == got.sizes
                    && map.slice(got.data_start, bytes.len() as u64) == Some(&bytes[..])
            }
            ChunkOut::Gathered {
                offsets,
                sizes,
                from,
            } => {
                let bytes = gather(d, from, es)?;
                let map = out.map(&got.stored)?;
                let same = *offsets == got.offsets
                    && *sizes == got.sizes
                    && map.slice(got.data_start, bytes.len() as u64) == Some(&bytes[..]);
                map.release(got.data_start, bytes.len() as u64);
                same
            }
        };
        if !same {
            return Ok(false);
        }
    }
    Ok(true)
}
