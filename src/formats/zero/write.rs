//! Writing a DeepSpeed ZeRO checkpoint with some parameters resized (same world size): the flat
//! fp32 partitions of every rank are laid out again for the new shapes with DeepSpeed's alignment
//! padding, the rank files' bookkeeping (group paddings, slice mappings, `param_shapes`) follows,
//! and the whole save root (or tag folder) is written as one atomic folder, re-read with the
//! strict reader and compared with what was planned before it is renamed into place.

use crate::dtype::{self, DType};
use crate::error::{Error, Result};
use crate::formats::torch::value::{Id, Node, Pickle};
use crate::formats::torch::write::write_torch;
use crate::formats::torch::writer::{StoragePayload, TorchLayout};
use crate::formats::torch::TorchFile;
use crate::formats::zero::{
    self, layout_stage12, layout_stage3, stage12_partition, stage3_partition, Param, Piece, Zero,
};
use crate::output::folder::AtomicFolder;
use crate::rowmap::{RowMap, Run};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One parameter's new values (f32 little-endian for master weights and moments).
#[derive(Debug, Clone)]
pub struct Resize {
    pub name: String,
    pub shape: Vec<u64>,
    /// The module's tensor (its own dtype), for stages 1/2.
    pub module: Option<Vec<u8>>,
    pub master: Vec<u8>,
    /// (key, values) per optimizer moment.
    pub moments: Vec<(String, Vec<u8>)>,
}

impl Resize {
    /// The new values of parameter `p` at `new_shape`, laid out as a ZeRO checkpoint needs them:
    /// the module's tensor (stages 1/2, its own dtype), the fp32 master copy and each moment,
    /// old rows kept bit for bit. The new model rows come from `new_rows(dtype, old rows, the
    /// model's old bytes, the dtype to encode them in, how many)`; the master copy's new rows are
    /// exactly those (decoded to f32) and the moments' are zero. The model's rows are the
    /// module's tensor where the module holds it, else the master weights (stage 3 keeps no whole
    /// module: its new rows are encoded once in the dtype the model trains in, so model and master
    /// agree). A module already at `new_shape` (the model resized, its optimizer saved as it was)
    /// is the model.
    pub fn of(
        z: &Zero,
        p: &Param,
        new_shape: &[u64],
        new_rows: impl Fn(DType, u64, &[u8], DType, usize) -> Result<Vec<u8>>,
    ) -> Result<Resize> {
        let (old, rows) = (p.shape[0], new_shape[0]);
        let cols: u64 = p.shape.iter().skip(1).product();
        let grow = rows.saturating_sub(old) as usize;
        let master = z.master(p)?;
        let module = z.module_tensor(&p.name);
        let resized_model = module
            .as_ref()
            .is_some_and(|t| t.shape != p.shape.as_slice() && t.shape == new_shape);
        let (model_dtype, model_bytes) = match &module {
            Some(t) if t.shape == p.shape.as_slice() || resized_model => {
                (t.dtype, t.try_bytes()?.into_owned())
            }
            Some(t) => {
                return Err(Error::tensor(
                    &z.model[0].map.path,
                    &format!("module.{}", p.name),
                    format!(
                        "is {:?}; param_shapes says {:?} and --vocab-rows asks for {:?}: give the module's rows",
                        t.shape, p.shape, new_shape
                    ),
                ))
            }
            None => (DType::F32, master.clone()),
        };
        let esize = (model_dtype.bits() / 8) as usize;
        let lp = if module.is_none() {
            z.model_dtype()
        } else {
            model_dtype
        };
        let tail_model = if resized_model {
            let from = (old * cols) as usize * esize;
            model_bytes.get(from..).unwrap_or_default().to_vec()
        } else {
            new_rows(model_dtype, old, &model_bytes, lp, grow)?
        };
        let mut decoded = vec![0f64; grow * cols as usize];
        dtype::decode_row_f64(lp, &tail_model, &mut decoded)
            .map_err(|e| Error::format(&z.dir, format!("{e:?}")))?;
        let mut tail_master = vec![0u8; decoded.len() * 4];
        dtype::encode_row_f64(DType::F32, &decoded, &mut tail_master)
            .map_err(|e| Error::format(&z.dir, format!("{e:?}")))?;
        let moments = z
            .moment_keys()
            .into_iter()
            .map(|k| {
                let b = z.moment(p, k)?;
                let zeros = vec![0u8; grow * cols as usize * 4];
                Ok((k.to_string(), resized(&b, 4, cols, old, rows, &zeros)))
            })
            .collect::<Result<_>>()?;
        Ok(Resize {
            name: p.name.clone(),
            shape: new_shape.to_vec(),
            module: match (&module, resized_model) {
                (Some(_), true) => Some(model_bytes),
                (Some(_), false) => {
                    Some(resized(&model_bytes, esize, cols, old, rows, &tail_model))
                }
                (None, _) => None,
            },
            master: resized(&master, 4, cols, old, rows, &tail_master),
            moments,
        })
    }
}

impl Resize {
    /// Parameter `p` gathered by a row map (a vocabulary trimmed or transplanted): the module's
    /// tensor is `module` (its new bytes, in `dtype`: kept rows gathered, made rows the job's),
    /// the fp32 master copy's kept rows follow their ids and its made rows are the module's made
    /// rows decoded to f32 (model and master agree), every moment's kept rows follow their ids
    /// and its made rows are zero; dropped ids' rows go.
    pub fn gathered(
        z: &Zero,
        p: &Param,
        map: &RowMap,
        (module, dtype): (Vec<u8>, DType),
    ) -> Result<Resize> {
        let bad = |e: String| Error::tensor(&z.dir, &p.name, e);
        if p.shape.first() != Some(&map.old_rows()) {
            return Err(bad(format!(
                "has shape {:?} but the row map is for {} old rows",
                p.shape,
                map.old_rows()
            )));
        }
        let cols = p.shape.iter().skip(1).product::<u64>() as usize;
        let esize = (dtype.bits() / 8) as usize;
        let made = made_rows(map, &module, cols * esize).map_err(bad)?;
        let made_master =
            dtype::recode(&made, dtype, DType::F32).map_err(|e| bad(format!("{e:?}")))?;
        let row = cols * 4;
        let master = map.gather(&z.master(p)?, row, &made_master).map_err(bad)?;
        let moments = z
            .moment_keys()
            .into_iter()
            .map(|k| {
                Ok((
                    k.to_string(),
                    map.gather_zeros(&z.moment(p, k)?, row).map_err(bad)?,
                ))
            })
            .collect::<Result<_>>()?;
        let mut shape = p.shape.clone();
        shape[0] = map.new_rows();
        Ok(Resize {
            name: p.name.clone(),
            shape,
            module: Some(module),
            master,
            moments,
        })
    }
}

impl Resize {
    /// [`Resize::gathered`] for a Hugging Face Trainer run with DeepSpeed, whose consolidated
    /// weights saved beside `global_step*/` the job planned on: the module's tensor (stages 1/2;
    /// stage 3: the master copy in the dtype the model trains in) gathered by `map` from its own
    /// bytes, its made rows the weights' made rows (`weights`: the new tensor, in its dtype)
    /// encoded in the module's dtype; master copy and moments then as [`Resize::gathered`].
    pub fn gathered_beside(
        z: &Zero,
        p: &Param,
        map: &RowMap,
        (weights, wdtype): (&[u8], DType),
    ) -> Result<Resize> {
        let bad = |e: String| Error::tensor(&z.dir, &p.name, e);
        let cols = p.shape.iter().skip(1).product::<u64>() as usize;
        let recode =
            |b: &[u8], from, to| dtype::recode(b, from, to).map_err(|e| bad(format!("{e:?}")));
        let module = z.module_tensor(&p.name);
        let (base, dtype): (std::borrow::Cow<[u8]>, DType) = match &module {
            Some(t) => (t.try_bytes()?, t.dtype),
            None => {
                let lp = z.model_dtype();
                (recode(&z.master(p)?, DType::F32, lp)?.into(), lp)
            }
        };
        let wrow = cols * (wdtype.bits() / 8) as usize;
        let made = made_rows(map, weights, wrow).map_err(bad)?;
        let made = recode(&made, wdtype, dtype)?;
        let row = cols * (dtype.bits() / 8) as usize;
        let module = map.gather(&base, row, &made).map_err(bad)?;
        Resize::gathered(z, p, map, (module, dtype))
    }
}

/// The rows of `bytes` (a new tensor, rows of `row` bytes) that `map` makes, in order.
fn made_rows(map: &RowMap, bytes: &[u8], row: usize) -> std::result::Result<Vec<u8>, String> {
    let mut made = Vec::new();
    for r in map.runs() {
        if let Run::Init { to, len } = *r {
            let (a, b) = (to as usize * row, (to + len) as usize * row);
            let rows = bytes.get(a..b).ok_or_else(|| {
                format!(
                    "its new tensor holds {} bytes, too few for the row map",
                    bytes.len()
                )
            })?;
            made.extend_from_slice(rows);
        }
    }
    Ok(made)
}

/// `rows` rows of `bytes` (`old` rows of `cols` elements of `esize` bytes), new rows `tail`.
fn resized(bytes: &[u8], esize: usize, cols: u64, old: u64, rows: u64, tail: &[u8]) -> Vec<u8> {
    let keep = (old.min(rows) * cols) as usize * esize;
    let mut v = bytes[..keep].to_vec();
    if rows > old {
        v.extend_from_slice(tail);
    }
    v
}

/// The new layout: per group the (name, shape) list, each rank's flat lengths (master weights and
/// moments), and the parameters' pieces.
pub struct NewLayout {
    pub shapes: Vec<Vec<(String, Vec<u64>)>>,
    pub master_lens: Vec<Vec<u64>>,
    pub moment_lens: Vec<Vec<u64>>,
    pub params: Vec<Param>,
}

/// Lay out `z`'s parameters with the shapes of `resizes`.
pub fn new_layout(z: &Zero, resizes: &[Resize]) -> Result<NewLayout> {
    let shape_of = |n: &String| -> Result<(String, Vec<u64>)> {
        let shape = resizes
            .iter()
            .find(|r| &r.name == n)
            .map(|r| r.shape.clone())
            .or_else(|| z.param(n).map(|p| p.shape.clone()))
            .ok_or_else(|| {
                Error::format(
                    &z.dir,
                    format!("parameter '{n}' of an optimizer group has no shape in the checkpoint"),
                )
            })?;
        Ok((n.clone(), shape))
    };
    let shapes: Vec<Vec<(String, Vec<u64>)>> = z
        .groups
        .iter()
        .map(|g| g.iter().map(shape_of).collect::<Result<_>>())
        .collect::<Result<_>>()?;
    let w = z.world as u64;
    let mut master_lens = vec![Vec::new(); z.world];
    let mut moment_lens = vec![Vec::new(); z.world];
    if z.stage <= 2 {
        for g in &shapes {
            let numel: u64 = g.iter().map(|(_, s)| s.iter().product::<u64>()).sum();
            let (_, part) = stage12_partition(numel, w);
            for r in 0..z.world {
                master_lens[r].push(numel.saturating_sub(r as u64 * part).min(part));
                moment_lens[r].push(part);
            }
        }
    } else {
        if z.flat_lens[0].len() != shapes.len() {
            return Err(Error::format(
                &z.dir,
                format!(
                    "{} fp32 flat groups for {} parameter groups (stage-3 sub-groups): resizing is supported with one sub-group per group (sub_group_size larger than each group)",
                    z.flat_lens[0].len(),
                    shapes.len()
                ),
            ));
        }
        for g in &shapes {
            let n: u64 = g
                .iter()
                .map(|(_, s)| stage3_partition(s.iter().product(), w))
                .sum();
            for r in 0..z.world {
                master_lens[r].push(n);
                moment_lens[r].push(n);
            }
        }
    }
    let params = if z.stage <= 2 {
        layout_stage12(&shapes, z.world, &master_lens)
    } else {
        layout_stage3(&shapes, z.world, &master_lens)
    }
    .map_err(|p| Error::format(&z.dir, p))?;
    Ok(NewLayout {
        shapes,
        master_lens,
        moment_lens,
        params,
    })
}

/// The element ranges of a parameter held by its pieces: (first element, piece).
fn spans(p: &Param) -> Vec<(u64, Piece)> {
    let mut at = 0;
    p.pieces
        .iter()
        .map(|&x| {
            let s = (at, x);
            at += x.len;
            s
        })
        .collect()
}

/// Rank `rank`'s new flat `k` of lengths `len`: every parameter's elements at its new pieces,
/// from `resized` (new full values) or copied from the old flats at `old_path(k)`.
fn build_flat<'a>(
    z: &Zero,
    new: &NewLayout,
    rank: usize,
    k: usize,
    len: u64,
    old_path: &dyn Fn(usize) -> String,
    resized: &dyn Fn(&str) -> Option<&'a [u8]>,
) -> Result<Vec<u8>> {
    let mut out = vec![0u8; len as usize * 4];
    for p in &new.params {
        for (e0, piece) in spans(p) {
            if piece.rank != rank || piece.flat != k {
                continue;
            }
            let dst = (piece.start * 4) as usize;
            if let Some(full) = resized(&p.name) {
                let (from, n) = ((e0 * 4) as usize, (piece.len * 4) as usize);
                let (Some(src), Some(to)) = (
                    full.get(from..from + n),
                    out.get_mut(dst..dst.saturating_add(n)),
                ) else {
                    return Err(Error::tensor(
                        &z.dir,
                        &p.name,
                        format!(
                            "its new values hold {} bytes and rank {rank}'s flat {k} {} bytes, but bytes {from}..+{n} of them were laid out at {dst}",
                            full.len(),
                            out.len()
                        ),
                    ));
                };
                to.copy_from_slice(src);
                continue;
            }
            let old = z.param(&p.name).ok_or_else(|| {
                Error::format(
                    &z.dir,
                    format!("parameter '{}' is not in the input", p.name),
                )
            })?;
            // The old pieces that overlap [e0, e0 + len) of the parameter.
            for (o0, op) in spans(old) {
                let lo = e0.max(o0);
                let hi = (e0 + piece.len).min(o0 + op.len);
                if lo >= hi {
                    continue;
                }
                let t = z.flat(op.rank, &old_path(op.flat))?;
                let bytes = t.try_bytes()?;
                let from = ((op.start + lo - o0) * 4) as usize;
                let to = dst + ((lo - e0) * 4) as usize;
                let n = ((hi - lo) * 4) as usize;
                let src = bytes.get(from..from + n).ok_or_else(|| {
                    Error::tensor(&z.optim[op.rank].map.path, &old_path(op.flat), "too short")
                })?;
                out[to..to + n].copy_from_slice(src);
            }
        }
    }
    Ok(out)
}

/// A new Int node.
fn int(p: &mut Pickle, v: u64) -> Id {
    p.push(Node::Int(v as i64))
}

/// Set entry `i` of the list at `list` to a new int.
fn set_list_int(p: &mut Pickle, list: Id, i: usize, v: u64) {
    let id = int(p, v);
    if let Node::List(items) = p.node_mut(list) {
        if let Some(slot) = items.get_mut(i) {
            *slot = id;
        }
    }
}

/// Replace the `torch.Size` (or tuple) at `size` by `shape`, with new nodes (shared nodes stay).
fn set_size(p: &mut Pickle, size: Id, shape: &[u64]) {
    let dims: Vec<Id> = shape.iter().map(|&d| int(p, d)).collect();
    let inner = p.push(Node::Tuple(dims));
    let is_object = matches!(p.node(size), Node::Object { .. });
    if is_object {
        let args = p.push(Node::Tuple(vec![inner]));
        if let Node::Object { args: a, .. } = p.node_mut(size) {
            *a = args;
        }
    } else if let Node::Tuple(items) = p.node(inner).clone() {
        *p.node_mut(size) = Node::Tuple(items);
    }
}

/// Update `param_shapes` of a model-states tree for the new shapes.
fn set_param_shapes(p: &mut Pickle, path: &Path, resizes: &[Resize]) -> Result<()> {
    let t = zero::Tree { p, path };
    let groups = t.items(t.key(p.root, "param_shapes")?, "param_shapes")?;
    let mut edits = Vec::new();
    for g in groups {
        for r in resizes {
            if let Some(id) = p.get(g, &r.name) {
                edits.push((id, r.shape.clone()));
            }
        }
    }
    for (id, shape) in edits {
        set_size(p, id, &shape);
    }
    Ok(())
}

/// Stage 1/2 bookkeeping of rank `rank`: `group_paddings` and `param_slice_mappings`.
fn set_stage12_meta(p: &mut Pickle, path: &Path, new: &NewLayout, rank: usize) -> Result<()> {
    let t = zero::Tree { p, path };
    let osd = t.key(p.root, "optimizer_state_dict")?;
    let pads = t.key(osd, "group_paddings")?;
    let maps = p.get(osd, "param_slice_mappings");
    for (g, &lean) in new.master_lens[rank].iter().enumerate() {
        set_list_int(p, pads, g, new.moment_lens[rank][g] - lean);
    }
    let Some(maps) = maps else { return Ok(()) };
    let t = zero::Tree { p, path };
    let groups = t.items(maps, "param_slice_mappings")?;
    // A fragment_address of the input as the template of new ones.
    let template = groups
        .iter()
        .filter_map(|&g| p.dict_entries(g).and_then(|e| e.first().map(|&(_, v)| v)))
        .next();
    let Some(template) = template else {
        return Ok(());
    };
    let tnode = p.node(template).clone();
    for (g, &od) in groups.iter().enumerate() {
        let mut items = Vec::new();
        for param in new.params.iter().filter(|x| x.group == g) {
            for piece in param.pieces.iter().filter(|x| x.rank == rank) {
                let key = p.push(Node::Str(param.name.clone()));
                let value = fragment(p, &tnode, piece.len, piece.start).ok_or_else(|| {
                    Error::format(path, "param_slice_mappings entry is not a fragment_address")
                })?;
                items.push((key, value));
            }
        }
        match p.node_mut(od) {
            Node::Object { dict_items, .. } => *dict_items = items,
            Node::Dict(e) => *e = items,
            _ => {
                return Err(Error::format(
                    path,
                    "param_slice_mappings group is not a dict",
                ))
            }
        }
    }
    Ok(())
}

/// A new `fragment_address(numel, start)` shaped like `template` (its state dict, or its args).
fn fragment(p: &mut Pickle, template: &Node, numel: u64, start: u64) -> Option<Id> {
    let Node::Object {
        callable,
        args,
        call,
        kwargs,
        state,
        ..
    } = template.clone()
    else {
        return None;
    };
    let (n, s) = (int(p, numel), int(p, start));
    let (args, state) = match state {
        Some(_) => {
            let (kn, ks) = (
                p.push(Node::Str("numel".into())),
                p.push(Node::Str("start".into())),
            );
            (args, Some(p.push(Node::Dict(vec![(kn, n), (ks, s)]))))
        }
        None => (p.push(Node::Tuple(vec![n, s])), None),
    };
    Some(p.push(Node::object(callable, args, call, kwargs, state)))
}

fn file_name(f: &TorchFile) -> String {
    f.map
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Which of the save root's own files (beside the tag folder) the ZeRO writer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootFiles {
    /// Every file: the output is the save root alone.
    All,
    /// DeepSpeed's own only (`latest`, its `zero_to_*.py` scripts): the weights, config and tokenizer a
    /// Hugging Face Trainer run saved beside `global_step*/` are the caller's to write.
    DeepSpeed,
}

/// Write `z` with `resizes` applied to `dest` (a new save root, or tag folder when `z` was
/// opened from one). Returns the destination and the subfolders left out (other tags).
pub fn write(
    z: &Zero,
    resizes: &[Resize],
    dest: &Path,
    overwrite: bool,
) -> Result<(PathBuf, Vec<String>)> {
    let inputs = z.input_paths();
    let folder = AtomicFolder::create(dest, &inputs, overwrite)?;
    let (left, _) = write_into(z, resizes, &folder, RootFiles::All)?;
    Ok((folder.commit()?, left))
}

/// Write `z` with `resizes` applied into `folder` (not committed): the tag folder's rank files
/// and other files, the save root's `root` files, re-read with the strict reader and compared
/// with the plan. Returns the subfolders left out (other tags) and the names written at the
/// folder's top (the tag folder, the root files carried).
pub fn write_into(
    z: &Zero,
    resizes: &[Resize],
    folder: &AtomicFolder,
    root: RootFiles,
) -> Result<(Vec<String>, Vec<String>)> {
    let new = new_layout(z, resizes)?;
    let tag_dir = match &z.root {
        Some(_) => {
            let d = folder.join(&z.tag);
            std::fs::create_dir(&d).map_err(|e| Error::io(&d, "create", e))?;
            d
        }
        None => folder.path().to_path_buf(),
    };
    let by_name: BTreeMap<&str, &Resize> = resizes.iter().map(|r| (r.name.as_str(), r)).collect();
    for rank in 0..z.world {
        write_optim(
            z,
            &new,
            &by_name,
            rank,
            &tag_dir.join(file_name(&z.optim[rank])),
        )
        .map_err(|e| folder.about(e))?;
    }
    for (i, m) in z.model.iter().enumerate() {
        write_model(z, m, i, &new, &by_name, &tag_dir.join(file_name(m)))
            .map_err(|e| folder.about(e))?;
    }
    let (left, top) = carry_other(z, folder, &tag_dir, root)?;
    verify(z, resizes, folder.path(), &new).map_err(|e| folder.about(e))?;
    Ok((left, top))
}

fn write_optim(
    z: &Zero,
    new: &NewLayout,
    by_name: &BTreeMap<&str, &Resize>,
    rank: usize,
    dest: &Path,
) -> Result<()> {
    let f = &z.optim[rank];
    let mut plan = TorchLayout::try_identity(f)?;
    for (k, &len) in new.master_lens[rank].iter().enumerate() {
        let master = build_flat(z, new, rank, k, len, &|k| z.master_path(k), &|n| {
            by_name.get(n).map(|r| r.master.as_slice())
        })?;
        plan.replace_rows(f, &z.master_path(k), len, StoragePayload::Bytes(master))
            .map_err(|p| Error::format(dest, p))?;
        for key in z.moment_keys() {
            let mlen = new.moment_lens[rank][k];
            let bytes = build_flat(z, new, rank, k, mlen, &|k| z.moment_path(k, key), &|n| {
                by_name.get(n).and_then(|r| {
                    r.moments
                        .iter()
                        .find(|(m, _)| m == key)
                        .map(|(_, b)| b.as_slice())
                })
            })?;
            plan.replace_rows(
                f,
                &z.moment_path(k, key),
                mlen,
                StoragePayload::Bytes(bytes),
            )
            .map_err(|p| Error::format(dest, p))?;
        }
    }
    if z.stage <= 2 {
        set_stage12_meta(&mut plan.pickle, &f.map.path, new, rank)?;
    }
    write_torch(&plan, dest, &z.input_paths(), &z.policy)?;
    Ok(())
}

fn write_model(
    z: &Zero,
    m: &TorchFile,
    _index: usize,
    _new: &NewLayout,
    by_name: &BTreeMap<&str, &Resize>,
    dest: &Path,
) -> Result<()> {
    let mut plan = TorchLayout::try_identity(m)?;
    let resizes: Vec<Resize> = by_name.values().map(|r| (*r).clone()).collect();
    set_param_shapes(&mut plan.pickle, &m.map.path, &resizes)?;
    if z.stage <= 2 {
        for r in &resizes {
            let Some(bytes) = &r.module else { continue };
            plan.replace_rows(
                m,
                &format!("module.{}", r.name),
                r.shape[0],
                StoragePayload::Bytes(bytes.clone()),
            )
            .map_err(|p| Error::format(dest, p))?;
        }
    }
    write_torch(&plan, dest, &z.input_paths(), &z.policy)?;
    Ok(())
}

/// Carry the save root's other files (`latest`, DeepSpeed's zero_to_fp32.py, …, with their
/// permissions; with [`RootFiles::DeepSpeed`] those two only) and the tag folder's files that
/// are not rank files. Subfolders (other tags) are left out: their names are returned for the
/// report, with the names carried or written at the folder's top.
fn carry_other(
    z: &Zero,
    folder: &AtomicFolder,
    tag_dir: &Path,
    root_files: RootFiles,
) -> Result<(Vec<String>, Vec<String>)> {
    let written: Vec<String> = z.model.iter().chain(&z.optim).map(file_name).collect();
    let mut left = Vec::new();
    let mut top = Vec::new();
    let mut copy_dir = |src: &Path, to: &Path, skip: &dyn Fn(&str) -> bool| -> Result<()> {
        let rd = std::fs::read_dir(src).map_err(|e| Error::io(src, "list", e))?;
        for e in rd {
            let e = e.map_err(|e| Error::io(src, "list", e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if skip(&name) {
                continue;
            }
            let path = e.path();
            let rel = to
                .strip_prefix(folder.path())
                .unwrap_or(Path::new(""))
                .join(&name);
            if to == folder.path() {
                top.push(name.clone());
            }
            if !path.is_file() {
                left.push(rel.to_string_lossy().into_owned());
                continue;
            }
            folder.carry(&path, &rel.to_string_lossy(), false)?;
            let perms = std::fs::metadata(&path)
                .map_err(|e| Error::io(&path, "stat", e))?
                .permissions();
            let dest = folder.join(&rel.to_string_lossy());
            std::fs::set_permissions(&dest, perms).map_err(|e| Error::io(&dest, "chmod", e))?;
        }
        Ok(())
    };
    copy_dir(&z.dir, tag_dir, &|n| written.iter().any(|w| w == n))?;
    if let Some(root) = &z.root {
        let deepspeed = crate::output::folder::deepspeed_root_file;
        copy_dir(root, folder.path(), &|n| {
            n == z.tag || (root_files == RootFiles::DeepSpeed && !deepspeed(n))
        })?;
        top.push(z.tag.clone());
    } else {
        top.extend(written);
    }
    left.sort();
    Ok((left, top))
}

/// Re-open the written folder and compare every parameter with the plan: resized ones equal
/// their new values, every other one's master weights and moments equal the input's, bit for bit.
fn verify(z: &Zero, resizes: &[Resize], out: &Path, new: &NewLayout) -> Result<()> {
    // The written folder has the input's layout: a save root with the same tag, or a tag folder.
    let at = zero::Located {
        root: z.root.as_ref().map(|_| out.to_path_buf()),
        tag: z.tag.clone(),
        dir: match &z.root {
            Some(_) => out.join(&z.tag),
            None => out.to_path_buf(),
        },
    };
    let w = zero::open(&at, &z.policy)?;
    let fail = |what: String| Error::Verify {
        path: out.to_path_buf(),
        problem: what,
    };
    if w.params.len() != new.params.len() {
        return Err(fail("parameter count differs".into()));
    }
    let keys = z.moment_keys();
    for p in &w.params {
        let r = resizes.iter().find(|r| r.name == p.name);
        let master = w.master(p)?;
        let want = match r {
            Some(r) => r.master.clone(),
            None => z.master(z.param(&p.name).ok_or_else(|| fail(p.name.clone()))?)?,
        };
        if master != want {
            return Err(fail(format!("master weights of '{}' differ", p.name)));
        }
        for key in &keys {
            let got = w.moment(p, key)?;
            let want = match r {
                Some(r) => r
                    .moments
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default(),
                None => z.moment(z.param(&p.name).ok_or_else(|| fail(p.name.clone()))?, key)?,
            };
            if got != want {
                return Err(fail(format!("{key} of '{}' differs", p.name)));
            }
        }
    }
    Ok(())
}
