//! Optimizer state as torch stores it, read the same way by every job that asks "which state
//! belongs to which parameter" (sanitize-checkpoint, its Trainer-folder form, check-vocab):
//! where optimizers are, which parameter index is which model tensor, how each state tensor
//! follows its parameter's rows, and the bytes of a state tensor at new rows.

use crate::dtype;
use crate::error::{Error, Result};
use crate::formats::torch::value::{Id, Node, Pickle};
use crate::formats::torch::writer::StoragePayload;
use crate::formats::TensorRef;
use crate::plan::{Entry, Role};
use std::borrow::Cow;

/// The per-parameter state of optimizer index `idx`.
pub(crate) fn state_of(p: &Pickle, opt: Id, idx: u64) -> Option<Id> {
    let state = p.get(opt, "state")?;
    p.dict_entries(state)?
        .iter()
        .find(|(k, _)| p.node(*k) == &Node::Int(idx as i64))
        .map(|(_, v)| *v)
}

/// The tensors of a parameter's state, by name.
pub(crate) fn state_tensors(p: &Pickle, opt: Id, idx: u64) -> Vec<(String, Vec<u64>)> {
    let Some(s) = state_of(p, opt, idx) else {
        return Vec::new();
    };
    p.dict_entries(s)
        .unwrap_or(&[])
        .iter()
        .filter_map(|(k, v)| {
            let t = p.tensor_of(*v)?;
            Some((p.str(*k)?.to_string(), t.shape.clone()))
        })
        .collect()
}

/// The parameter shape a state implies: a full-shaped moment (any name: exp_avg, exp_inf,
/// square_avg, sum, …), or Adafactor's factored row × column (`[r]` or `[r, 1]` with `[c]` or `[1, c]`),
/// or a 1-D moment of a bias. Scalars (step, mu_product) say nothing.
pub(crate) fn moment_shape(p: &Pickle, opt: Id, idx: u64) -> Option<Vec<u64>> {
    let ts = state_tensors(p, opt, idx);
    let full = ts
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.len() >= 2 && s.iter().skip(1).any(|&d| d != 1) && s[0] != 1)
        .max_by_key(|s| s.iter().product::<u64>());
    if let Some(s) = full {
        return Some(s.clone());
    }
    let squeeze = |s: &[u64]| -> Vec<u64> { s.iter().copied().filter(|&d| d != 1).collect() };
    let row = ts
        .iter()
        .find(|(n, _)| n.contains("row"))
        .map(|(_, s)| squeeze(s));
    let col = ts
        .iter()
        .find(|(n, _)| n.contains("col"))
        .map(|(_, s)| squeeze(s));
    if let (Some(r), Some(c)) = (row, col) {
        if r.len() == 1 && c.len() == 1 {
            return Some(vec![r[0], c[0]]);
        }
    }
    ts.iter()
        .map(|(_, s)| s)
        .find(|s| s.len() == 1 && s[0] > 1)
        .cloned()
}

/// How a state tensor of a parameter of shape `param` follows the parameter's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follows {
    /// Shaped like the parameter: grow its rows.
    Rows,
    /// Factored along the rows (`[V]` or `[V, 1]`, Adafactor's row statistics): grow its rows.
    FactoredRows,
    /// Independent of the vocabulary (scalars, column factors): keep.
    No,
    /// Holds the vocabulary size along some axis in a way this tool does not know: refuse.
    Unknown,
}

/// `rows`: the row counts the vocabulary has had (the parameter's, the old and the target). A
/// state shaped like its parameter but for the rows is that parameter's, left at another size
/// (seed 001: weights of 24000 rows, moments of 24001): it follows the rows, whatever they are.
pub(crate) fn follows(shape: &[u64], param: &[u64], rows: &[u64]) -> Follows {
    let lead = shape.first().copied().unwrap_or(0);
    // A leading 1 is a factor's broadcast axis ([1, C]), unless the vocabulary has one row.
    let rowlike = lead > 1 || rows.contains(&lead);
    if !shape.is_empty() && shape.len() == param.len() && shape[1..] == param[1..] && rowlike {
        return Follows::Rows;
    }
    if shape == param {
        return Follows::Rows;
    }
    if lead > 1 && rows.contains(&lead) && shape.iter().skip(1).all(|&d| d == 1) {
        return Follows::FactoredRows;
    }
    if shape.iter().product::<u64>() <= 1 || !shape.iter().any(|d| rows.contains(d)) {
        return Follows::No;
    }
    Follows::Unknown
}

/// A state tensor that holds the vocabulary size in a way this tool does not know: its path and
/// shape.
pub(crate) type Unknown = (String, Vec<u64>);

/// One vocabulary parameter's optimizer state as entries of the row-surgery interface: each
/// state tensor of optimizer `o`'s index `idx` (the parameter `of`, shaped `param`) that follows
/// the parameter's rows (`rows`: the row counts the vocabulary has had), with how it follows —
/// role Moment, new rows at the optimizer's initial value (Adagrad's `sum` at its group's
/// `initial_accumulator_value`, every other moment at 0). States independent of the vocabulary
/// are left out; one that holds the vocabulary size in a way this tool does not know is the
/// error: its path and shape, for the caller's refusal.
pub(crate) fn state_entries(
    p: &Pickle,
    o: &FoundOpt,
    (idx, of): (u64, &str),
    param: &[u64],
    rows: &[u64],
) -> std::result::Result<Vec<(Entry, Follows)>, Unknown> {
    let fill_sum = initial_accumulator(p, o.id, idx);
    let mut out = Vec::new();
    for (name, shape) in state_tensors(p, o.id, idx) {
        let path = state_path(&o.key, idx, &name);
        let how = follows(&shape, param, rows);
        match how {
            Follows::No => continue,
            Follows::Unknown => return Err((path, shape)),
            Follows::Rows | Follows::FactoredRows => {}
        }
        let fill = if name == "sum" { fill_sum } else { 0.0 };
        let e = Entry::state(&path, Role::Moment, &shape, of).with_fill(fill);
        out.push((e, how));
    }
    Ok(out)
}

/// The dotted path of a state tensor: `optimizer.state.0.exp_avg`, or `state.0.exp_avg` in a
/// file that is the optimizer (a Trainer checkpoint's optimizer.pt).
pub(crate) fn state_path(key: &str, idx: u64, name: &str) -> String {
    if key.is_empty() {
        format!("state.{idx}.{name}")
    } else {
        format!("{key}.state.{idx}.{name}")
    }
}

/// Optimizer parameter index → model tensor, for one optimizer's vocabulary parameters.
pub(crate) type Mapping = Vec<(u64, String)>;

/// An optimizer state dict found in the file.
pub(crate) struct FoundOpt {
    /// Its dotted path (`optimizer`, `optimizer_states.1`): the prefix of its tensors' names.
    pub key: String,
    pub id: Id,
    /// What `--optimizer drop` removes: a key of a dict (the optimizer's own, or that of the
    /// list holding it, as Lightning's `optimizer_states`).
    pub drop: (Id, String),
    pub groups: Vec<Id>,
    /// Parameter indices, group by group.
    pub params: Vec<u64>,
    /// The parameters' names, aligned with `params`, when every group stores `param_names`
    /// (torch optimizers built from `named_parameters()`).
    pub names: Option<Vec<String>>,
}

/// Where a training checkpoint keeps the model's weights, in the order looked for.
pub(crate) const MODEL_KEYS: [&str; 4] = ["model", "state_dict", "module", "model_state_dict"];

/// How every refusal that only a fresh optimizer gets past ends (check-vocab offers
/// `--optimizer drop` for these, and for nothing else).
pub const DROP_REMEDY: &str = "use --optimizer drop (a fresh optimizer)";

/// Does the tree hold optimizer state anywhere outside the model (the places sanitize looks)?
pub fn has_optimizer(p: &Pickle) -> bool {
    let model = MODEL_KEYS.iter().find_map(|k| p.get(p.root, k));
    !find_optimizers(p, model).is_empty()
}

impl FoundOpt {
    /// The optimizer state dict `id`, known as `key`, removed by removing `drop`.
    pub(crate) fn new(p: &Pickle, id: Id, key: String, drop: (Id, String)) -> FoundOpt {
        let groups: Vec<Id> = match p.get(id, "param_groups").map(|g| p.node(g)) {
            Some(Node::List(v)) => v.clone(),
            _ => Vec::new(),
        };
        let params: Vec<u64> = groups
            .iter()
            .filter_map(|&g| p.get(g, "params"))
            .flat_map(|l| match p.node(l) {
                Node::List(v) => v.clone(),
                _ => Vec::new(),
            })
            .filter_map(|i| match p.node(i) {
                Node::Int(i) if *i >= 0 => Some(*i as u64),
                _ => None,
            })
            .collect();
        let names: Vec<String> = groups
            .iter()
            .filter_map(|&g| p.get(g, "param_names"))
            .flat_map(|l| match p.node(l) {
                Node::List(v) => v
                    .iter()
                    .filter_map(|&n| p.str(n).map(str::to_string))
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        let names = (!params.is_empty() && names.len() == params.len()).then_some(names);
        FoundOpt {
            key,
            id,
            drop,
            groups,
            params,
            names,
        }
    }
}

pub(crate) fn is_optimizer(p: &Pickle, id: Id) -> bool {
    p.get(id, "state")
        .is_some_and(|s| p.dict_entries(s).is_some())
        && matches!(
            p.get(id, "param_groups").map(|g| p.node(g)),
            Some(Node::List(_))
        )
}

/// Every optimizer state dict (`{"state": {…}, "param_groups": […]}`) outside the model: under
/// any key (`optimizer`, `optim`, `optimizer_g`), in lists (Lightning's `optimizer_states`), in
/// nested dicts (`{"training": {"optimizer": …}}`).
pub(crate) fn find_optimizers(p: &Pickle, model: Option<Id>) -> Vec<FoundOpt> {
    fn go(
        p: &Pickle,
        id: Id,
        path: &str,
        list_drop: Option<&(Id, String)>,
        depth: usize,
        model: Option<Id>,
        out: &mut Vec<FoundOpt>,
    ) {
        if depth > 6 {
            return;
        }
        let is_list = matches!(p.node(id), Node::List(_) | Node::Tuple(_));
        for (part, child) in crate::formats::torch::children(p, id) {
            if Some(child) == model || p.tensor_of(child).is_some() {
                continue;
            }
            let cp = if path.is_empty() {
                part.clone()
            } else {
                format!("{path}.{part}")
            };
            let drop = match (is_list, list_drop) {
                (true, Some(d)) => d.clone(),
                _ => (id, part.clone()),
            };
            if is_optimizer(p, child) {
                out.push(FoundOpt::new(p, child, cp, drop));
            } else {
                go(p, child, &cp, Some(&drop), depth + 1, model, out);
            }
        }
    }
    let mut out = Vec::new();
    go(p, p.root, "", None, 0, model, &mut out);
    out
}

/// A moment at `rows` rows: old rows kept (copied from the input when the file is written), new
/// rows `fill` (0 for every moment but Adagrad's `sum`, which starts at
/// `initial_accumulator_value`). With `n` > 1 the tensor is `n` equal segments (a multi-codebook
/// table), each grown at its end, its old rows first (only growth: every old row is kept). Only
/// the new rows are held in memory.
pub(crate) fn resize_filled_segments<'a>(
    t: &TensorRef<'a>,
    rows: u64,
    fill: f64,
    n: u64,
) -> Result<StoragePayload<'a>> {
    let old_rows = t.shape.first().copied().unwrap_or(0);
    let n = n.max(1);
    if n > 1 && (old_rows % n != 0 || !rows.is_multiple_of(n) || rows < old_rows) {
        return Err(Error::tensor(
            &t.map.path,
            t.name,
            format!("{old_rows} → {rows} rows are not {n} equal segments each grown at its end"),
        ));
    }
    let cols: u64 = t.shape.iter().skip(1).product();
    let esize = t.dtype.bits() / 8;
    let (old_seg, new_seg) = (
        old_rows.min(rows) / n * cols * esize,
        rows.saturating_sub(old_rows) / n * cols * esize,
    );
    let mut tail = vec![0u8; new_seg as usize];
    if fill != 0.0 && new_seg > 0 {
        dtype::encode_row_f64(t.dtype, &vec![fill; (new_seg / esize) as usize], &mut tail)
            .map_err(|e| {
                Error::tensor(
                    &t.map.path,
                    t.name,
                    format!("cannot fill its new rows: {e}"),
                )
            })?;
    }
    if n == 1 {
        return StoragePayload::try_resized(t, old_seg, None, Cow::Owned(tail));
    }
    let tail = tail.repeat(n as usize);
    StoragePayload::try_resized(
        t,
        old_seg * n,
        Some((n, old_seg, new_seg)),
        Cow::Owned(tail),
    )
}

/// A moment gathered by a row map (a vocabulary transplanted or trimmed): each new id's row is
/// the old row the map names, bit for bit (a kept token's moments follow it to its new id), rows
/// the init makes are `fill` (0 for every moment but Adagrad's `sum`), dropped rows go. The
/// whole tensor is in memory (bounded by the tensors changed).
pub(crate) fn gathered_moment<'a>(
    t: &TensorRef<'a>,
    map: &crate::rowmap::RowMap,
    fill: f64,
) -> Result<StoragePayload<'a>> {
    let bad = |e: String| Error::tensor(&t.map.path, t.name, e);
    let cols: u64 = t.shape.iter().skip(1).product();
    let esize = t.dtype.bits() / 8;
    let row = usize::try_from(cols * esize).map_err(|e| bad(e.to_string()))?;
    let init_len = usize::try_from(map.init_rows() * cols).map_err(|e| bad(e.to_string()))?;
    let mut init = vec![0u8; init_len * esize as usize];
    if fill != 0.0 && init_len > 0 {
        dtype::encode_row_f64(t.dtype, &vec![fill; init_len], &mut init)
            .map_err(|e| bad(format!("cannot fill its new rows: {e}")))?;
    }
    let old = t.try_bytes()?;
    let bytes = map.gather(&old, row, &init).map_err(bad)?;
    StoragePayload::try_resized(t, 0, None, Cow::Owned(bytes))
}

/// The `initial_accumulator_value` of the param group holding `idx` (Adagrad), if any.
pub(crate) fn initial_accumulator(p: &Pickle, opt: Id, idx: u64) -> f64 {
    let Some(Node::List(groups)) = p.get(opt, "param_groups").map(|g| p.node(g)) else {
        return 0.0;
    };
    for &g in groups {
        let holds = match p.get(g, "params").map(|l| p.node(l)) {
            Some(Node::List(v)) => v.iter().any(|&i| p.node(i) == &Node::Int(idx as i64)),
            _ => false,
        };
        if holds {
            return match p.get(g, "initial_accumulator_value").map(|v| p.node(v)) {
                Some(Node::Float(f)) => *f,
                Some(Node::Int(i)) => *i as f64,
                _ => 0.0,
            };
        }
    }
    0.0
}
