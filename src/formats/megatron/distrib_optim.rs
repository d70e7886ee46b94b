//! Megatron-LM's legacy distributed-optimizer state, `mp_rank_*/distrib_optim.pt` (what
//! megatron-core's `DistributedOptimizer.save_parameter_state` writes: the
//! `get_parameter_state_dp_zero` dict): `buckets_coalesced: True` and, per buffer `gbuf_idx`, one
//! `(param dtype, grad dtype)` entry holding `param` (the fp32 main copies), `exp_avg`,
//! `exp_avg_sq` (1-D float32) and `numel_unpadded`: the buffer's buckets gathered from every
//! data-parallel replica and concatenated without their end padding. Nothing in it names a
//! parameter: the layout follows from the model's parameters (the rank file's state dict, in
//! `named_parameters()` order), grouped into buffers by dtype, and megatron-core 0.16.1's
//! `_ParamAndGradBuffer` rule ([`buckets`]); [`DistribOptim::prove`] checks it against the
//! saved size and every parameter's main copy against its weight.

use super::buckets::{self, NewVocab, Param, Segment, STATES};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::value::{Id, Node, Pickle};
use crate::formats::torch::writer::{Piece, StoragePayload, TorchLayout};
use crate::formats::torch::TorchFile;
use crate::formats::TensorRef;
use std::path::{Path, PathBuf};

/// One buffer: its index, the parameters' dtype, its saved size, each state's tensor path in
/// the file (`STATES` order) and the `numel_unpadded` node.
#[derive(Debug, Clone)]
pub struct Buffer {
    pub index: u64,
    pub dtype: DType,
    pub numel: u64,
    pub paths: [String; 3],
    pub numel_node: Id,
}

/// An open `distrib_optim.pt`.
#[derive(Debug)]
pub struct DistribOptim {
    pub path: PathBuf,
    pub file: TorchFile,
    pub buffers: Vec<Buffer>,
}

/// One buffer's layout: its members' flat segments (the buckets' unpadded parts concatenated,
/// bucket 0 first) and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flat {
    pub segments: Vec<Segment>,
    pub numel: u64,
}

impl DistribOptim {
    /// Read `path` (the globals the user allowed, `policy`, and torch's dtypes).
    pub fn open(path: &Path, policy: &GlobalPolicy) -> Result<DistribOptim> {
        let file = TorchFile::open(path, policy).map_err(with_drop_hint)?;
        let buffers = read_buffers(path, &file)?;
        Ok(DistribOptim {
            path: path.to_path_buf(),
            file,
            buffers,
        })
    }

    /// State `s` of buffer `b` (a 1-D float32 tensor of `b.numel` elements).
    pub fn state(&self, b: &Buffer, s: usize) -> Result<TensorRef<'_>> {
        let path = &b.paths[s];
        self.file
            .tensor_refs()
            .find(|t| t.name == path)
            .ok_or_else(|| Error::format(&self.path, format!("no tensor '{path}'")))
    }
}

/// A reader's error on this file, with the way out (`--optimizer drop`) added to its message.
fn with_drop_hint(e: Error) -> Error {
    const HINT: &str = "; it is the distributed optimizer's state: give --optimizer drop to leave it out and resume with Megatron-LM's --no-load-optim";
    match e {
        Error::Format { path, problem } => Error::Format {
            path,
            problem: problem + HINT,
        },
        Error::Unsupported { path, problem } => Error::Unsupported {
            path,
            problem: problem + HINT,
        },
        Error::Tensor {
            path,
            tensor,
            problem,
        } => Error::Tensor {
            path,
            tensor,
            problem: problem + HINT,
        },
        other => other,
    }
}

fn bad(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::unsupported(path, format!("{what}: not the distributed optimizer's state as megatron-core's save_parameter_state writes it (buckets_coalesced); give --optimizer drop to leave it out and resume with Megatron-LM's --no-load-optim"))
}

/// The buffers of the root dict, in index order.
fn read_buffers(path: &Path, f: &TorchFile) -> Result<Vec<Buffer>> {
    let p = &f.pickle;
    let entries = p
        .dict_entries(p.root)
        .ok_or_else(|| bad(path, "not a dict"))?;
    let mut coalesced = false;
    let mut out = Vec::new();
    for (k, v) in entries {
        match p.node(*k) {
            Node::Str(s) if s == "buckets_coalesced" => {
                coalesced = matches!(p.node(*v), Node::Bool(true));
            }
            Node::Int(i) if *i >= 0 && *i as usize == out.len() => {
                out.push(buffer(path, f, *i as u64, *v)?);
            }
            Node::Int(i) => return Err(bad(path, format!("an entry keyed {i} where buffer {} comes next (buffers are keyed 0, 1, … in order)", out.len()))),
            Node::Str(s) => return Err(bad(path, format!("an entry keyed '{s}'"))),
            _ => return Err(bad(path, "an entry keyed neither by a buffer number nor 'buckets_coalesced'")),
        }
    }
    if !coalesced {
        return Err(bad(
            path,
            "no 'buckets_coalesced: True' (the format before February 2024, one entry per bucket)",
        ));
    }
    if out.is_empty() {
        return Err(bad(path, "no buffer"));
    }
    Ok(out)
}

/// Buffer `index` (`id`: its dict, one `(param dtype, grad dtype)` entry).
fn buffer(path: &Path, f: &TorchFile, index: u64, id: Id) -> Result<Buffer> {
    let p = &f.pickle;
    let what = |w: &str| bad(path, format!("buffer {index}: {w}"));
    let [(key, states)] = p.dict_entries(id).unwrap_or_default()[..] else {
        return Err(what("not one (param dtype, grad dtype) entry"));
    };
    let dtype = match p.node(key) {
        Node::Tuple(t) if t.len() == 2 => torch_dtype(p, t[0]),
        _ => None,
    }
    .ok_or_else(|| what("its key is not a (torch dtype, torch dtype) pair"))?;
    let mut numel = None;
    let mut paths: [Option<String>; 3] = Default::default();
    for &(k, v) in p.dict_entries(states).unwrap_or_default() {
        let name = p.str(k).unwrap_or("");
        if name == "numel_unpadded" {
            numel = super::common::uint(p, v).map(|n| (n, v));
            continue;
        }
        let s = STATES.iter().position(|s| *s == name).ok_or_else(|| {
            what(&format!(
                "an entry '{name}' (Adam's param, exp_avg, exp_avg_sq and numel_unpadded are read)"
            ))
        })?;
        paths[s] = Some(
            f.tensor_at(v)
                .map(|t| t.path.clone())
                .ok_or_else(|| what(&format!("'{name}' is not a tensor")))?,
        );
    }
    let (numel, numel_node) = numel.ok_or_else(|| what("no numel_unpadded"))?;
    let paths = paths.map(Option::unwrap_or_default);
    if paths.iter().any(String::is_empty) {
        return Err(what("not every one of param, exp_avg, exp_avg_sq"));
    }
    for path_s in &paths {
        let t = f
            .tensor_refs()
            .find(|t| t.name == path_s)
            .ok_or_else(|| what(&format!("'{path_s}' is not readable")))?;
        if t.dtype != DType::F32 || t.shape != [numel] {
            return Err(what(&format!(
                "'{path_s}' is {} {:?}, not {} [{numel}] (numel_unpadded)",
                t.dtype,
                t.shape,
                DType::F32
            )));
        }
    }
    Ok(Buffer {
        index,
        dtype,
        numel,
        paths,
        numel_node,
    })
}

/// A `torch.<dtype>` global's type.
fn torch_dtype(p: &Pickle, id: Id) -> Option<DType> {
    match p.node(id) {
        Node::Global { module, name } if module == "torch" => crate::dtype::ALL
            .into_iter()
            .find(|d| d.torch_name() == name),
        _ => None,
    }
}

/// A buffer's layout of its `members` of `params` (the rank's model parameters, module order,
/// each with its dtype; the buffer's: one model chunk's parameters of its dtype), split into
/// buckets at `size` (None: one), each laid out.
pub fn flat(params: &[(Param, DType)], members: &[usize], size: Option<u64>) -> Flat {
    let only: Vec<Param> = params.iter().map(|(p, _)| p.clone()).collect();
    let mut segments = Vec::new();
    let mut at = 0;
    for (_, segs, unpadded) in buckets::group_layout(&only, members, size) {
        segments.extend(segs.into_iter().map(|s| Segment {
            start: s.start + at,
            ..s
        }));
        at += unpadded;
    }
    Flat {
        segments,
        numel: at,
    }
}

/// Elements compared at a time by [`DistribOptim::prove`] (memory: one such run of each side).
const RUN: u64 = 1 << 20;

impl DistribOptim {
    /// Prove buffer `b`'s layout `f` of `params` (each with its weight's tensor in the rank
    /// file): its length is the saved `numel_unpadded`, and every parameter's main copy (the
    /// `param` state at its segment) rounded to its weight's dtype is its weight, bit for bit
    /// (Megatron copies the main params into the weights after each step). The whole `param`
    /// state is read once, a run at a time.
    pub fn prove(
        &self,
        b: &Buffer,
        f: &Flat,
        params: &[(Param, DType)],
        weights: &[TensorRef<'_>],
    ) -> Result<()> {
        if f.numel != b.numel {
            return Err(bad(&self.path, format!("buffer {}: its numel_unpadded is {}, but the model's {} parameters laid out by megatron-core's bucket rule take {}", b.index, b.numel, b.dtype, f.numel)));
        }
        let main = self.state(b, 0)?;
        let main_bytes = main.try_bytes()?;
        for s in &f.segments {
            let Some(j) = s.param else { continue };
            let (p, w) = (&params[j].0, &weights[j]);
            let wb = w.try_bytes()?;
            let es = w.dtype.bits() / 8;
            let mut at = 0;
            while at < s.len {
                let n = RUN.min(s.len - at);
                let m = main_bytes
                    .get(((s.start + at) * 4) as usize..((s.start + at + n) * 4) as usize);
                let wt = wb.get((at * es) as usize..((at + n) * es) as usize);
                let same = m
                    .zip(wt)
                    .is_some_and(|(m, wt)| buckets::rounds_to(m, wt, w.dtype));
                if !same {
                    return Err(bad(&self.path, format!("buffer {}: the main params at {}..{} are not '{}' ({}, rounded to it) near element {at}: the layout megatron-core's rule gives is not this file's", b.index, s.start, s.start + s.len, p.fqn, w.dtype)));
                }
                main.map.release(main.start + (s.start + at) * 4, n * 4);
                w.map.release(w.start + at * es, n * es);
                at += n;
            }
        }
        Ok(())
    }
}

/// One buffer of one rank re-laid: its index in the file's buffers, its new size, and each
/// state's bytes in order (`STATES`): pieces of the old file and new bytes.
pub struct NewBuffer<'a> {
    pub buffer: usize,
    pub numel: u64,
    pub states: Vec<Vec<Piece<'a>>>,
}

/// Buffer `bi` of every TP rank of one stage (`stage`, rank order) re-laid from `old` to `new`
/// (`params`: the old parameters, module order): each parameter's state from its old place,
/// each resized vocabulary matrix's rows for that TP rank gathered from the rank that held them
/// (new rows: the new weights as main params, moments zero), each gap zero (as
/// `get_parameter_state_dp_zero` leaves it). Per rank.
pub fn relay<'a>(
    stage: &'a [DistribOptim],
    bi: usize,
    (old, new): (&Flat, &Flat),
    params: &[(Param, DType)],
    grown: &[NewVocab<'_>],
) -> Result<Vec<NewBuffer<'a>>> {
    let tp = stage.len() as u64;
    // Each state's old tensor on every rank of the stage (a rank's rows may come from any).
    let olds_of: Vec<Vec<TensorRef<'a>>> = (0..STATES.len())
        .map(|s| stage.iter().map(|d| d.state(&d.buffers[bi], s)).collect())
        .collect::<Result<_>>()?;
    let mut out = Vec::new();
    for rank in 0..tp {
        let mut states = Vec::new();
        for (s, olds) in olds_of.iter().enumerate() {
            let mut pieces = Vec::new();
            for seg in &new.segments {
                let Some(j) = seg.param else {
                    pieces.push(Piece::Bytes(vec![0u8; seg.len as usize * 4].into()));
                    continue;
                };
                let from = old
                    .segments
                    .iter()
                    .find(|o| o.param == Some(j))
                    .ok_or_else(|| {
                        bad(
                            &stage[0].path,
                            format!("'{}' is in no old bucket", params[j].0.fqn),
                        )
                    })?;
                match grown.iter().find(|g| g.fqn == params[j].0.fqn) {
                    None => pieces.push(piece(&olds[rank as usize], from.start, seg.len)?),
                    Some(g) => pieces.extend(vocab_pieces(olds, from.start, g, rank, s)?),
                }
            }
            states.push(pieces);
        }
        out.push(NewBuffer {
            buffer: bi,
            numel: new.numel,
            states,
        });
    }
    Ok(out)
}

/// Elements `start..start + len` of a float32 state, as a piece of its file.
fn piece<'a>(t: &TensorRef<'a>, start: u64, len: u64) -> Result<Piece<'a>> {
    Piece::try_of_tensor(t, start * 4, len * 4)
}

/// TP rank `rank`'s rows of vocabulary matrix `g` in state `s`: each run of old rows from the
/// rank that held them (`olds`, its segment at `at`), new rows the new weights (`param`) or zero.
fn vocab_pieces<'a>(
    olds: &[TensorRef<'a>],
    at: u64,
    g: &NewVocab<'_>,
    rank: u64,
    s: usize,
) -> Result<Vec<Piece<'a>>> {
    let tp = olds.len() as u64;
    let (per_new, per_old) = (g.rows / tp, g.old_rows / tp);
    let (lo, hi) = (rank * per_new, (rank + 1) * per_new);
    let mut out = Vec::new();
    for (h, t) in olds.iter().enumerate() {
        let (a, b) = (
            (h as u64 * per_old).max(lo),
            ((h as u64 + 1) * per_old).min(hi),
        );
        if a < b {
            out.push(piece(
                t,
                at + (a - h as u64 * per_old) * g.cols,
                (b - a) * g.cols,
            )?);
        }
    }
    let first_new = g.old_rows.max(lo);
    if first_new < hi {
        let row = g.cols as usize * 4;
        let (a, b) = (
            (first_new - g.old_rows) as usize * row,
            (hi - g.old_rows) as usize * row,
        );
        out.push(if s == 0 {
            Piece::Bytes(g.new_rows.get(a..b).unwrap_or(&[]).to_vec().into())
        } else {
            Piece::Bytes(vec![0u8; b - a].into())
        });
    }
    Ok(out)
}

impl DistribOptim {
    /// This file with `news` (its re-laid buffers) written to `dest`, verified by the torch
    /// writer's read-back; `policy`: the globals it was read with.
    pub fn write(
        &self,
        news: Vec<NewBuffer<'_>>,
        dest: &Path,
        policy: &GlobalPolicy,
    ) -> Result<()> {
        let mut plan = TorchLayout::try_identity(&self.file)?;
        for nb in news {
            let b = &self.buffers[nb.buffer];
            for (s, pieces) in nb.states.into_iter().enumerate() {
                plan.replace_rows(
                    &self.file,
                    &b.paths[s],
                    nb.numel,
                    StoragePayload::Pieces(pieces),
                )
                .map_err(|e| Error::tensor(&self.path, &b.paths[s], e))?;
            }
            let n =
                i64::try_from(nb.numel).map_err(|_| Error::format(&self.path, "size past i64"))?;
            *plan.pickle.node_mut(b.numel_node) = Node::Int(n);
        }
        crate::formats::torch::write::write_torch(&plan, dest, &[self.path.as_path()], policy)?;
        Ok(())
    }
}
