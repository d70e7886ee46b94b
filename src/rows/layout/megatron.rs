//! A Megatron-Core `torch_dist` checkpoint at a new vocabulary size, planned and written for
//! sanitize-checkpoint: `n` true tokens give the padded table size by the run's own rule (a
//! multiple of `make_vocab_size_divisible_by` x TP, from `common.pt`'s args); the embedding and
//! output layer are grown (new rows by the init) or cut (`allow_shrink`) to it and re-cut into
//! the same number of tensor-parallel row chunks; `common.pt`'s `padded_vocab_size` (and
//! `vocab_size` where set) follow. The distributed optimizer's `dp_reshardable` buckets are
//! re-laid exactly (`formats::megatron::buckets` proves their layout, `relay` re-lays it;
//! docs/formats.md), its `fully_reshardable` per-parameter state (laid out as the weights)
//! resized by the same rows, or either left out (`drop_optimizer`); other optimizer layouts are
//! refused. The rule and row makers the legacy layout shares ([`super::megatron_legacy`]) are
//! here too.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::formats::dcp::write::ObjectEdit;
pub use crate::formats::dcp::write::Written;
use crate::formats::dcp::write::{ChunkOut, TensorEdit};
use crate::formats::megatron::buckets::{self, Bucket};
use crate::formats::megatron::common::{padded, VocabArgs};
use crate::formats::megatron::layout::{
    is_main_copy, vocab_states, VocabState, VocabTensor, FULLY_RESHARDABLE,
};
use crate::formats::megatron::relay::{self, NewVocab, Relaid};
use crate::formats::megatron::write::{self, Resize};
pub use crate::formats::megatron::Megatron;
use crate::formats::torch::pickle::GlobalPolicy;
use crate::output::folder::Carried;
use crate::plan::{Edit, Entry, Role, RowSource};
use crate::rows::init::{self, Init, Matrix};
use crate::rows::layout::dcp::Changed;
use crate::rows::layout::report::NonFinite;
use serde::Serialize;
use std::path::Path;

/// How a run goes: the rows cut only with `allow_shrink`; `drop_optimizer` leaves the optimizer
/// state out (resume with `--no-load-optim`); `out` the output and whether it may be replaced
/// (None: a dry run, nothing written).
#[derive(Debug, Clone, Copy, Default)]
pub struct How<'a> {
    pub allow_shrink: bool,
    pub drop_optimizer: bool,
    pub out: Option<(&'a Path, bool)>,
    /// `--fail-on-nonfinite`: a vocabulary matrix holding NaN or Inf stops the run before
    /// anything is written.
    pub fail_on_nonfinite: bool,
}

/// The `dp_reshardable` buckets re-laid: how many (one per TP rank of each pipeline stage that
/// holds a vocabulary matrix), states each, the first one's unpadded size before and after and
/// padded size after; with pipeline stages, each re-laid stage's (the other stages' buckets
/// are left as they are).
#[derive(Debug, Clone, Serialize)]
pub struct RelaidBuckets {
    pub groups: u64,
    pub states: u64,
    pub numel_unpadded: (u64, u64),
    pub numel: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageBuckets>,
}

/// A pipeline stage's re-laid bucket (`gbuf_idx_B`, B > 0 only for a later model chunk's or
/// dtype's buffer; `bucket_idx_N`, N > 0 only where `overlap_grad_reduce` split the stage's
/// parameters): its groups (`stage x TP + tp`), their unpadded size before and after and padded
/// size after.
#[derive(Debug, Clone, Serialize)]
pub struct StageBuckets {
    pub stage: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub buffer: u64,
    pub bucket: u64,
    pub groups: Vec<u64>,
    pub numel_unpadded: (u64, u64),
    pub numel: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RelaidBuckets {
    /// What the report says of `r`, the buckets of `all_groups` groups (TP `tp` x PP) re-laid:
    /// each stage's and bucket's sizes where there are several stages or buckets.
    fn of(r: &Relaid, all_groups: u64, tp: u64) -> RelaidBuckets {
        let first = r.sizes.first().copied().unwrap_or(relay::RelaidSize {
            group: 0,
            buffer: 0,
            index: 0,
            unpadded: (0, 0),
            padded: 0,
        });
        let mut stages: Vec<StageBuckets> = Vec::new();
        let listed = all_groups > tp || r.sizes.iter().any(|x| x.index > 0 || x.buffer > 0);
        for x in r.sizes.iter().filter(|_| listed) {
            let stage = x.group / tp.max(1);
            let same =
                |s: &&mut StageBuckets| (s.stage, s.buffer, s.bucket) == (stage, x.buffer, x.index);
            match stages.iter_mut().find(|s| same(s)) {
                Some(s) => s.groups.push(x.group),
                None => stages.push(StageBuckets {
                    stage,
                    buffer: x.buffer,
                    bucket: x.index,
                    groups: vec![x.group],
                    numel_unpadded: x.unpadded,
                    numel: x.padded,
                }),
            }
        }
        let mut groups: Vec<u64> = r.sizes.iter().map(|x| x.group).collect();
        groups.dedup();
        RelaidBuckets {
            groups: groups.len() as u64,
            states: buckets::STATES.len() as u64,
            numel_unpadded: first.unpadded,
            numel: first.padded,
            stages,
        }
    }
}

/// The proven buckets `bs` re-laid for the vocabulary's new bytes (`rows`: old and new padded
/// rows); nothing when there are none or the table keeps its size.
fn relay_buckets(
    m: &Megatron,
    bs: &[Bucket],
    new_bytes: &[Vec<u8>],
    (old, rows): (u64, u64),
    policy: &GlobalPolicy,
) -> Result<(Option<Relaid>, Vec<ObjectEdit>)> {
    if bs.is_empty() || rows == old {
        return Ok((None, Vec::new()));
    }
    let args = relay::run_args(m, policy)?;
    // The main params are fp32 whatever the weights' type: the new rows' go in as float32.
    let f32_bytes = m
        .vocab
        .iter()
        .zip(new_bytes)
        .map(|(v, b)| {
            let row = v.dtype.bytes_for(v.shape[1]).unwrap_or(0) as usize;
            let tail = b.get(old as usize * row..).unwrap_or(&[]);
            crate::dtype::recode(tail, v.dtype, DType::F32)
                .map_err(|e| Error::tensor(&m.dir, v.name, e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let vocab = new_vocab(m, (old, rows), f32_bytes.iter().map(Vec::as_slice));
    let r = relay::relay(m, bs, &vocab, args)?;
    let objects = r.objects.clone();
    Ok((Some(r), objects))
}

/// Each vocabulary matrix at `rows` rows (from `old`), with its new rows' main params from
/// `bytes`.
fn new_vocab<'a>(
    m: &'a Megatron,
    (old, rows): (u64, u64),
    bytes: impl Iterator<Item = &'a [u8]>,
) -> Vec<NewVocab<'a>> {
    m.vocab
        .iter()
        .zip(bytes)
        .map(|(v, b)| NewVocab {
            fqn: v.name,
            old_rows: old,
            rows,
            cols: v.shape[1],
            new_rows: b,
        })
        .collect()
}

/// The run's padding rule from `common.pt`: (make_vocab_size_divisible_by, TP, old true size).
fn rule(m: &Megatron) -> Result<(u64, Option<u64>)> {
    let args = m.args();
    let Some(a) = args else {
        return Err(Error::unsupported(
            &m.path,
            "common.pt holds no Megatron-LM args: the run's padding rule (make_vocab_size_divisible_by) is unknown, so the padded size cannot be recomputed",
        ));
    };
    let path = m.common.as_ref().map_or(m.path.as_path(), |c| &c.path);
    if let Some(tp) = a.tensor_model_parallel_size.filter(|&t| t != m.tp) {
        return Err(Error::unsupported(
            path,
            format!("its args say tensor_model_parallel_size {tp} but the vocabulary is split {} ways: another TP size than the one the save shows is not resized here (resharding is Megatron's own loader's job: resize at the saved TP size, then load at the new one)", m.tp),
        ));
    }
    let old = m.vocab.first().map_or(0, |v| v.shape[0]);
    if a.padded_vocab_size.is_some_and(|p| p != old) {
        return Err(Error::format(
            path,
            format!("its args say padded_vocab_size {} but the vocabulary matrices have {old} rows: the folder mixes two saves", crate::formats::megatron::legacy::shown(a.padded_vocab_size)),
        ));
    }
    let by = a
        .make_vocab_size_divisible_by
        .filter(|&d| d > 0)
        .ok_or_else(|| {
            Error::unsupported(
                path,
                "its args hold no make_vocab_size_divisible_by: the run's padding rule is unknown",
            )
        })?;
    Ok((by, a.vocab_size))
}

/// `v` with `rows` rows: its old rows below `rows` bit for bit, rows past its end made by `how`
/// from its first `base` rows (the true vocabulary where known), re-cut into `tp` equal row
/// chunks; all its new bytes; and the NaN and Inf its old rows hold.
fn resized(
    m: &Megatron,
    v: &VocabTensor,
    rows: u64,
    base: u64,
    how: &Init,
) -> Result<(TensorEdit, Vec<u8>, NonFinite)> {
    let (old, cols) = (v.shape[0], v.shape[1]);
    let row = v.dtype.bytes_for(cols).unwrap_or(0) as usize;
    let (all, mut bytes) = item_rows(m, v.name, row, old.min(rows))?;
    let bad = nonfinite(v, &all);
    if rows > old {
        let what = (v.name, v.dtype, v.shape[1]);
        bytes.extend(init_rows(
            &m.dir,
            what,
            &all,
            (base.min(old), rows - old),
            how,
        )?);
    }
    let edit = row_chunks(v.name, (rows, cols), row, &bytes, m.tp);
    Ok((edit, bytes, bad))
}

/// The NaN and Inf among a vocabulary matrix's bytes `all` (none for a type without them).
pub(crate) fn nonfinite(v: &VocabTensor, all: &[u8]) -> NonFinite {
    let (nan, inf) = crate::nonfinite::NonFinite::count(v.dtype, all);
    NonFinite {
        tensor: v.name.to_string(),
        nan,
        inf,
    }
}

/// Item `fqn`'s whole bytes (its chunks' CRCs checked) and a copy of its first `keep` rows of
/// `row` bytes each.
fn item_rows(m: &Megatron, fqn: &str, row: usize, keep: u64) -> Result<(Vec<u8>, Vec<u8>)> {
    let item = m
        .dcp
        .item(fqn)
        .ok_or_else(|| Error::format(&m.dir, format!("no tensor '{fqn}'")))?;
    m.dcp.verify_item_crcs(item)?;
    let all = m.dcp.tensor_bytes(item)?;
    let kept = all.get(..row * keep as usize).map(<[u8]>::to_vec);
    let kept =
        kept.ok_or_else(|| Error::format(&m.dir, format!("'{fqn}' holds fewer than {keep} rows")))?;
    Ok((all, kept))
}

/// `count` new rows of `v` made by `how` from its first `base` rows.
/// New rows are made of float rows only.
pub(crate) fn refuse_non_float(at: &Path, name: &str, dtype: DType) -> Result<()> {
    if dtype.is_convertible_float() {
        return Ok(());
    }
    Err(Error::tensor(
        at,
        name,
        format!("{dtype} is not a float type: cannot make new rows"),
    ))
}

pub(crate) fn init_rows(
    at: &Path,
    (name, dtype, cols): (&str, DType, u64),
    all: &[u8],
    (base, count): (u64, u64),
    how: &Init,
) -> Result<Vec<u8>> {
    refuse_non_float(at, name, dtype)?;
    let mx = Matrix {
        dtype,
        rows: base as usize,
        cols: cols as usize,
        bytes: &all[..dtype.bytes_for(base * cols).unwrap_or(0) as usize],
    };
    let stats = init::stats(&mx);
    let values = init::new_rows(&mx, &stats, how, count as usize);
    Ok(init::encode(dtype, &values))
}

/// What becomes of the optimizer state when it is kept.
enum Kept {
    /// None there, or `--optimizer drop`.
    Nothing,
    /// `dp_reshardable` buckets, their layout proven, to re-lay.
    Buckets(Vec<Bucket>),
    /// `fully_reshardable`: each vocabulary matrix's states, laid out as the matrix, to resize
    /// by its row map.
    ModelSpace(Vec<VocabState>),
}

/// The fix a refused optimizer layout names.
const DROP_FIX: &str = "give --optimizer drop to leave the optimizer state out and resume with Megatron-LM's --no-load-optim (a fresh optimizer from the resized weights)";

/// What becomes of the optimizer state: its items left out (`--optimizer drop`), its
/// `dp_reshardable` buckets re-laid, or its `fully_reshardable` states resized; any other
/// layout is refused.
fn optimizer_items(m: &Megatron, drop: bool, policy: &GlobalPolicy) -> Result<(Vec<String>, Kept)> {
    let items: Vec<String> = m
        .dcp
        .items
        .iter()
        .filter(|i| i.fqn.starts_with("optimizer."))
        .map(|i| i.fqn.clone())
        .collect();
    if (items.is_empty() && m.optimizer.form.is_none()) || drop {
        return Ok((items, Kept::Nothing));
    }
    let flat = m.optimizer.form.as_deref() == Some("dp_reshardable");
    if flat && m.args().and_then(|a| a.use_distributed_optimizer) == Some(false) {
        // Flat buckets are the distributed optimizer's; Megatron-LM loads by its args.
        return Err(Error::unsupported(m.dir.join("common.pt"), format!("its args say use_distributed_optimizer false but the save holds the distributed optimizer's flat buckets (dp_reshardable): Megatron-LM would not load them; {DROP_FIX}")));
    }
    match m.optimizer.form.as_deref() {
        Some("dp_reshardable") => {
            return Ok((
                Vec::new(),
                Kept::Buckets(buckets::buckets(
                    &m.dcp,
                    relay::rule(m, relay::run_args(m, policy)?),
                )?),
            ));
        }
        Some(FULLY_RESHARDABLE) => {
            let states = vocab_states(&m.dcp, &m.vocab, &m.optimizer, DROP_FIX)?;
            return Ok((Vec::new(), Kept::ModelSpace(states)));
        }
        _ => {}
    }
    Err(Error::unsupported(
        &m.path,
        format!("{}: holds distributed-optimizer state ({}, {} items): only the dp_reshardable flat buckets and the fully_reshardable per-parameter state are resized; {DROP_FIX}", m.found.what(), m.optimizer.form.as_deref().unwrap_or("unknown layout"), items.len()),
    ))
}

/// `s`, a state of the vocabulary matrix `v` laid out as `v`, at `rows` rows: its old rows below
/// `rows` bit for bit, new rows the new weights (`weight`: all of `v`'s new bytes) for a main
/// copy and zero for a moment, re-cut into the same tensor-parallel row chunks.
fn state_resized(
    m: &Megatron,
    v: &VocabTensor,
    s: &VocabState,
    rows: u64,
    weight: &[u8],
) -> Result<TensorEdit> {
    let (old, cols) = (v.shape[0], v.shape[1]);
    let row = s.dtype.bytes_for(cols).unwrap_or(0) as usize;
    let (_, mut bytes) = item_rows(m, &s.fqn, row, old.min(rows))?;
    if rows > old {
        if is_main_copy(&s.state) {
            let from = v.dtype.bytes_for(old * cols).unwrap_or(0) as usize;
            let new = weight.get(from..).unwrap_or(&[]);
            let recoded = crate::dtype::recode(new, v.dtype, s.dtype)
                .map_err(|e| Error::tensor(&m.dir, &s.fqn, e.to_string()))?;
            bytes.extend(recoded);
        } else {
            bytes.resize(row * rows as usize, 0);
        }
    }
    Ok(row_chunks(&s.fqn, (rows, cols), row, &bytes, m.tp))
}

/// A `rows` x `cols` tensor's edit: `bytes` cut into `tp` equal whole-width row chunks.
fn row_chunks(
    fqn: &str,
    (rows, cols): (u64, u64),
    row: usize,
    bytes: &[u8],
    tp: u64,
) -> TensorEdit {
    let per = rows / tp.max(1);
    let chunks = (0..tp)
        .map(|r| ChunkOut::New {
            offsets: vec![r * per, 0],
            sizes: vec![per, cols],
            bytes: bytes[(r * per) as usize * row..((r + 1) * per) as usize * row].to_vec(),
        })
        .collect();
    TensorEdit {
        fqn: fqn.to_string(),
        shape: vec![rows, cols],
        chunks,
    }
}

/// `--vocab-rows 0`: refused (a vocabulary needs a token).
pub(crate) fn refuse_no_tokens(n: u64) -> Result<()> {
    if n == 0 {
        return Err(Error::arg(
            "--vocab-rows",
            "0: a Megatron vocabulary needs at least one token",
        ));
    }
    Ok(())
}

/// The padded rows for `n` true tokens by the run's rule (`by` × `tp`), each vocabulary matrix
/// (`names`, in `dir`) refused a cut of its padded (`old`) or true (`old_true`) rows without
/// `allow_shrink`.
pub(crate) fn target_rows(
    dir: &Path,
    names: &[&str],
    (old, old_true): (u64, Option<u64>),
    (n, by, tp): (u64, u64, u64),
    allow_shrink: bool,
) -> Result<u64> {
    let rows = padded(n, by, tp.max(1)).ok_or_else(|| {
        Error::arg(
            "--vocab-rows",
            format!("--vocab-rows {n}: rounded up to a multiple of make_vocab_size_divisible_by x TP = {by} x {tp} it overflows 64 bits; give the true vocabulary size"),
        )
    })?;
    for name in names {
        crate::rows::refuse_weight_cut(dir, name, old, rows, allow_shrink)?;
        if let Some(t) = old_true {
            crate::rows::refuse_weight_cut(dir, name, t, n, allow_shrink)?;
        }
    }
    Ok(rows)
}

/// What [`resize`] did: the padded rows before and after, the tensors changed (their input
/// shapes), the optimizer items left out, the buckets re-laid, and what was written.
pub struct Resized {
    pub old_rows: u64,
    pub rows: u64,
    pub changed: Vec<Changed>,
    pub dropped: Vec<String>,
    pub buckets: Option<RelaidBuckets>,
    /// The `fully_reshardable` state items resized with their vocabulary matrix.
    pub optimizer_states: Vec<String>,
    /// The vocabulary matrices as entries (`Megatron::entries`), and the optimizer's items as the
    /// plan's edits: each re-laid bucket item (holding many parameters' rows), each resized
    /// `fully_reshardable` state, or with `--optimizer drop` each tensor item left out.
    pub entries: Vec<Entry>,
    pub bucket_edits: Vec<Edit>,
    pub written: Option<Written>,
    pub carried: Vec<Carried>,
    /// The vocabulary matrices holding NaN or Inf (the tensors the run reads whole).
    pub nonfinite: Vec<NonFinite>,
    /// `fail_on_nonfinite` and some: nothing was written.
    pub failed: bool,
}

/// A re-laid bucket item as a plan edit: its flat shape before and after, a moment's or the
/// main params' (`…param`, the fp32 master copy) state, its elements moved to the parameters'
/// new offsets (new rows' moments 0, their main params the new weights).
fn bucket_edit(m: &Megatron, e: &TensorEdit) -> Edit {
    let from = m
        .dcp
        .item(&e.fqn)
        .and_then(|i| crate::formats::dcp::keys::shape(i))
        .map(<[u64]>::to_vec)
        .unwrap_or_default();
    let role = if e.fqn.ends_with(".param") {
        Role::MasterCopy
    } else {
        Role::Moment
    };
    Edit {
        tensor: e.fqn.clone(),
        role,
        from,
        to: e.shape.clone(),
        rows: RowSource::Mapped {
            from: serde_json::json!({"relaid": "dp_reshardable bucket: each parameter's elements at its new offset, the new rows' moments 0 and main params the new weights"}),
        },
    }
}

/// An optimizer item `--optimizer drop` leaves out, as a `removed` edit when it is a tensor (the
/// flat buckets' main params and moments; the optimizer's pickled objects are no tensors).
fn left_out_item(m: &Megatron, fqn: &str) -> Option<Edit> {
    let shape = m.dcp.item(fqn).and_then(crate::formats::dcp::keys::shape)?;
    // A bucket's state is its last name part; a fully_reshardable state's its third.
    let model_space = fqn.strip_prefix("optimizer.state.");
    let state = model_space.and_then(|r| r.split('.').next());
    let role = if fqn.ends_with(".param") || state.is_some_and(is_main_copy) {
        Role::MasterCopy
    } else if fqn.contains(".exp_avg") {
        Role::Moment
    } else {
        Role::Other
    };
    Some(Edit::removed(fqn, role, shape))
}

/// The table's padded rows before and after a resize to `n` true tokens, and the run's old
/// true size where its args say.
struct Target {
    old: u64,
    old_true: Option<u64>,
    rows: u64,
}

fn target(m: &Megatron, n: u64, allow_shrink: bool) -> Result<Target> {
    refuse_no_tokens(n)?;
    let (by, old_true) = rule(m)?;
    let old = m.vocab.first().map_or(0, |v| v.shape[0]);
    let names: Vec<&str> = m.vocab.iter().map(|v| v.name).collect();
    let shape = (n, by, m.tp);
    let rows = target_rows(&m.dir, &names, (old, old_true), shape, allow_shrink)?;
    Ok(Target {
        old,
        old_true,
        rows,
    })
}

/// Whether [`resize`] to `n` true tokens (no cut) would go through, decided from the metadata
/// without reading a tensor: the padding rule, float matrices to grow, the optimizer layout
/// and, for `dp_reshardable` buckets, the re-lay's sizes. Only the main params' bit proof and
/// the chunks' CRCs are left to the run. For check-vocab's fix: a dry run of [`resize`] would
/// read every bucket of the optimizer state.
pub fn resizable(m: &Megatron, n: u64, drop_optimizer: bool, policy: &GlobalPolicy) -> Result<()> {
    let Target { old, rows, .. } = target(m, n, false)?;
    if rows > old {
        for v in &m.vocab {
            refuse_non_float(&m.dir, v.name, v.dtype)?;
        }
    }
    let (_, kept) = optimizer_items(m, drop_optimizer, policy)?;
    let Kept::Buckets(bs) = kept else {
        return Ok(());
    };
    if rows == old {
        return Ok(());
    }
    let args = relay::run_args(m, policy)?;
    let vocab = new_vocab(m, (old, rows), std::iter::repeat(&[][..]));
    relay::check(m, &bs, &vocab, args)
}

/// Resize `m`'s vocabulary for a true vocabulary of `n` tokens, written as `how` says.
pub fn resize(
    m: &Megatron,
    n: u64,
    init: &Init,
    how: How<'_>,
    policy: &GlobalPolicy,
) -> Result<Resized> {
    let Target {
        old,
        old_true,
        rows,
    } = target(m, n, how.allow_shrink)?;
    let (dropped, kept) = optimizer_items(m, how.drop_optimizer, policy)?;
    let mut edits = Vec::new();
    let mut changed = Vec::new();
    let mut new_bytes = Vec::new();
    let mut bad = Vec::new();
    for v in m.vocab.iter().filter(|_| rows == old) {
        let item = m.dcp.item(v.name);
        let item = item.ok_or_else(|| Error::format(&m.dir, format!("no tensor '{}'", v.name)))?;
        bad.push(nonfinite(v, &m.dcp.tensor_bytes(item)?));
    }
    for v in m.vocab.iter().filter(|_| rows != old) {
        let (edit, bytes, b) = resized(m, v, rows, old_true.unwrap_or(old), init)?;
        bad.push(b);
        edits.push(edit);
        new_bytes.push(bytes);
        changed.push(Changed {
            name: v.name.to_string(),
            role: if v.role == "head" {
                Role::Head
            } else {
                Role::Embedding
            },
            shape: v.shape.clone(),
        });
    }
    let args = VocabArgs {
        padded_vocab_size: rows,
        vocab_size: old_true.map(|_| n),
        drop_optimizer: how.drop_optimizer,
    };
    let opt = optimizer_edits(m, &kept, &new_bytes, (old, rows), policy)?;
    edits.extend(opt.edits);
    let mut plan_edits = opt.plan;
    if how.drop_optimizer {
        plan_edits = dropped.iter().filter_map(|n| left_out_item(m, n)).collect();
    }
    let r = Resize {
        edits,
        dropped,
        objects: opt.objects,
        args,
    };
    bad.retain(|b| b.nan + b.inf > 0);
    let failed = how.fail_on_nonfinite && !bad.is_empty();
    let (written, carried) = match how.out.filter(|_| !failed) {
        None => (None, Vec::new()),
        Some((output, overwrite)) => {
            let (w, c) = write::write(m, &r, output, overwrite, policy)?;
            (Some(w), c)
        }
    };
    Ok(Resized {
        old_rows: old,
        rows,
        changed,
        dropped: r.dropped,
        // Left out, the optimizer's states are `removed` edits, not entries to resize.
        entries: m
            .entries()
            .into_iter()
            .filter(|e| e.of.is_none() || !how.drop_optimizer)
            .collect(),
        bucket_edits: plan_edits,
        buckets: opt.buckets,
        optimizer_states: opt.states,
        written,
        carried,
        nonfinite: bad,
        failed,
    })
}

/// The kept optimizer state's share of a resize: its new tensors, their plan edits, the
/// buckets' size objects, and what the report says.
struct OptimizerEdits {
    edits: Vec<TensorEdit>,
    plan: Vec<Edit>,
    objects: Vec<ObjectEdit>,
    buckets: Option<RelaidBuckets>,
    states: Vec<String>,
}

/// `kept` resized with the vocabulary (`new_bytes`: each matrix's new bytes; `old` and new
/// padded `rows`): buckets re-laid, or each vocabulary matrix's model-space states resized.
fn optimizer_edits(
    m: &Megatron,
    kept: &Kept,
    new_bytes: &[Vec<u8>],
    (old, rows): (u64, u64),
    policy: &GlobalPolicy,
) -> Result<OptimizerEdits> {
    let mut out = OptimizerEdits {
        edits: Vec::new(),
        plan: Vec::new(),
        objects: Vec::new(),
        buckets: None,
        states: Vec::new(),
    };
    match kept {
        Kept::Nothing => {}
        Kept::Buckets(bs) => {
            let (relaid, objects) = relay_buckets(m, bs, new_bytes, (old, rows), policy)?;
            if let Some(b) = relaid {
                out.plan = b.edits.iter().map(|e| bucket_edit(m, e)).collect();
                let all_groups = bs.iter().map(|b| b.group + 1).max().unwrap_or(0);
                out.buckets = Some(RelaidBuckets::of(&b, all_groups, m.tp));
                out.edits = b.edits;
            }
            out.objects = objects;
        }
        Kept::ModelSpace(states) if rows != old => {
            for s in states {
                let Some(i) = m.vocab.iter().position(|v| v.name == s.weight) else {
                    continue;
                };
                let (v, weight) = (&m.vocab[i], new_bytes.get(i).map_or(&[][..], |b| b));
                // The plan's edits are these states' entries' (`Megatron::entries`).
                out.edits.push(state_resized(m, v, s, rows, weight)?);
                out.states.push(s.fqn.clone());
            }
        }
        Kept::ModelSpace(_) => {}
    }
    Ok(out)
}
