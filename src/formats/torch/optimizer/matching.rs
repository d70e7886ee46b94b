//! Which optimizer parameter index holds which model tensor's state. torch's optimizer state
//! dict numbers parameters, it does not name them (unless built from `named_parameters()`), and
//! Trainer numbers them group by group (weight decay first, each in module order), not in the
//! weights file's order (model.safetensors sorts the names).
//!
//! The answer, in the order tried: the names torch stored (`param_names`); the position, when the
//! optimizer holds the model's tensors in order; the shape, and for an embedding and a head of one
//! shape what their moments say ([`super::evidence`]: rows never seen as input stay exactly zero
//! in an embedding's moments, never in a head's). A mapping nothing establishes is never reported:
//! vocabulary parameters of one shape that nothing tells apart get the same edit, so they are
//! matched in order for the edit and reported as a set ([`SameShape`]). Only when parameters of
//! one shape need different edits (a vocabulary matrix and a position table) is a mapping needed
//! that the checkpoint does not hold: then refuse, naming the candidates. An index the user names
//! (`--optimizer-param`) that the moments contradict is refused too.

use super::evidence;
use super::state::{moment_shape, FoundOpt, Mapping, DROP_REMEDY};
use crate::error::{Error, Result};
use crate::formats::torch::value::Pickle;
use crate::formats::torch::TorchFile;
use crate::vocab::{self, Role};
use serde::Serialize;
use std::path::Path;

/// The model as the optimizer sees it.
pub(crate) struct ModelParams<'a> {
    /// (name, shape) of each parameter, in the weights' order (a tie once).
    pub list: &'a [(String, Vec<u64>)],
    /// The vocabulary parameters, each once.
    pub vocab: &'a [String],
    /// What the model's names carry before the names the optimizer knows (`model.` in a
    /// training file holding the model under `model`; empty for a Trainer folder).
    pub prefix: &'a str,
}

impl ModelParams<'_> {
    fn shape(&self, name: &str) -> Option<&[u64]> {
        self.list
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.as_slice())
    }
}

/// Vocabulary parameters of one shape whose indices nothing in the checkpoint tells apart: they
/// get the same edit (same rows, new moment rows at the same value), so they are matched in order
/// for it, but which index holds which is not known and never reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SameShape {
    /// The optimizer's indices holding them, in some order.
    pub params: Vec<u64>,
    /// The parameters, in some order.
    pub names: Vec<String>,
    pub shape: Vec<u64>,
    /// Why the checkpoint does not tell them apart.
    pub why: String,
}

impl SameShape {
    /// How a state of one of them is named: "a or b".
    pub fn owner<'a>(same: &'a [SameShape], idx: u64, name: &'a str) -> std::borrow::Cow<'a, str> {
        match same.iter().find(|s| s.params.contains(&idx)) {
            Some(s) => s.names.join(" or ").into(),
            None => name.into(),
        }
    }

    /// "params 0 and 8 hold a and b, in an order nothing shows": a true sentence, no mapping.
    pub fn describe(&self) -> String {
        let params: Vec<String> = self.params.iter().map(u64::to_string).collect();
        format!(
            "{} {} hold {}, in an order nothing in the checkpoint shows",
            if params.len() == 1 { "param" } else { "params" },
            and_list(params),
            and_list(self.names.clone())
        )
    }
}

/// One answer per optimizer (its vocabulary parameters) and how it was found.
pub(crate) struct Matched {
    /// Index → name for the edit (a [`SameShape`] set's members among them in some order).
    pub mappings: Vec<Mapping>,
    /// Per optimizer: the sets whose order is not known (reported as sets, never as mappings).
    pub same_shape: Vec<Vec<SameShape>>,
    pub how: String,
    /// Every index → name, per optimizer, when the checkpoint says it (names or position);
    /// empty otherwise.
    pub all: Vec<Mapping>,
}

/// Match optimizer parameter indices to the model's vocabulary parameters. `by_position` allows
/// the positional rule (a training file whose model is saved in module order; not a Trainer
/// folder, whose safetensors sorts the names). `pinned`: indices the user named
/// (`--optimizer-param NAME=INDEX`), taken as given after a shape check, unless the moments
/// show the index is the other matrix's (then refused).
pub(crate) fn match_params(
    path: &Path,
    t: &TorchFile,
    opts: &[FoundOpt],
    model: &ModelParams<'_>,
    by_position: bool,
    pinned: &[(String, u64)],
) -> Result<Matched> {
    let p = &t.pickle;
    if !pinned.is_empty() {
        let pins = pins(path, t, opts, model, pinned)?;
        return by_shape(path, t, opts, model, pins);
    }
    if let Some(m) = by_names(p, opts, model) {
        let all = opts
            .iter()
            .map(|o| {
                let names = o.names.iter().flatten();
                let full = |n: &String| {
                    let prefixed = format!("{}{n}", model.prefix);
                    if model.shape(&prefixed).is_some() {
                        prefixed
                    } else {
                        n.clone()
                    }
                };
                o.params.iter().copied().zip(names.map(full)).collect()
            })
            .collect();
        return Ok(Matched {
            same_shape: vec![Vec::new(); m.len()],
            mappings: m,
            how: "param_names (stored by torch)".into(),
            all,
        });
    }
    if by_position {
        if let Some((m, all)) = by_position_rule(p, opts, model) {
            return Ok(Matched {
                same_shape: vec![Vec::new(); m.len()],
                mappings: m,
                how: "position".into(),
                all,
            });
        }
    }
    by_shape(path, t, opts, model, Vec::new())
}

/// Does a parameter's known moment shape `ms` belong to a parameter of shape `shape`: the same
/// shape, or (a moment left at another vocabulary size, seed 001) the same but for the rows,
/// when no parameter of the model has the moment's shape.
fn candidate(ms: &[u64], shape: &[u64], model: &ModelParams<'_>) -> bool {
    ms == shape
        || (!ms.is_empty()
            && ms.len() == shape.len()
            && ms[1..] == shape[1..]
            && !model.list.iter().any(|(_, s)| s == ms))
}

/// Every (optimizer, index) whose known moments could be `shape`'s.
fn candidates(
    p: &Pickle,
    opts: &[FoundOpt],
    shape: &[u64],
    model: &ModelParams<'_>,
) -> Vec<(usize, u64)> {
    opts.iter()
        .enumerate()
        .flat_map(|(k, o)| {
            o.params
                .iter()
                .copied()
                .filter(move |&i| {
                    moment_shape(p, o.id, i).is_some_and(|ms| candidate(&ms, shape, model))
                })
                .map(move |i| (k, i))
        })
        .collect()
}

/// By the names torch stored: every vocabulary parameter found among them, its moments (when
/// any) shaped like it.
fn by_names(p: &Pickle, opts: &[FoundOpt], model: &ModelParams<'_>) -> Option<Vec<Mapping>> {
    let mut out = vec![Vec::new(); opts.len()];
    for name in model.vocab {
        let rel = name.strip_prefix(model.prefix).unwrap_or(name);
        let shape = model.shape(name)?;
        let (k, i) = opts.iter().enumerate().find_map(|(k, o)| {
            let names = o.names.as_ref()?;
            let j = names.iter().position(|n| n == rel || n == name)?;
            Some((k, o.params[j]))
        })?;
        if moment_shape(p, opts[k].id, i).is_some_and(|ms| !candidate(&ms, shape, model)) {
            return None;
        }
        out[k].push((i, name.clone()));
    }
    Some(out)
}

/// By position: the optimizers' parameters, in order, are the model's tensors, and every known
/// moment shape fits its tensor (a vocabulary tensor's rows may differ).
fn by_position_rule(
    p: &Pickle,
    opts: &[FoundOpt],
    model: &ModelParams<'_>,
) -> Option<(Vec<Mapping>, Vec<Mapping>)> {
    let flat: Vec<(usize, u64)> = opts
        .iter()
        .enumerate()
        .flat_map(|(k, o)| o.params.iter().map(move |&i| (k, i)))
        .collect();
    let fits = |ms: &[u64], (name, shape): &(String, Vec<u64>)| {
        ms.len() == shape.len()
            && ms[1..] == shape[1..]
            && (ms[0] == shape[0] || model.vocab.contains(name))
    };
    let lined_up = flat.len() == model.list.len()
        && flat
            .iter()
            .zip(model.list)
            .all(|(&(k, i), m)| moment_shape(p, opts[k].id, i).is_none_or(|ms| fits(&ms, m)));
    if !lined_up {
        return None;
    }
    let mut out = vec![Vec::new(); opts.len()];
    let mut all = vec![Vec::new(); opts.len()];
    for (&(k, i), (n, _)) in flat.iter().zip(model.list) {
        if model.vocab.contains(n) {
            out[k].push((i, n.clone()));
        }
        all[k].push((i, n.clone()));
    }
    Some((out, all))
}

/// How a candidate is named in messages.
fn show(p: &Pickle, opts: &[FoundOpt], (k, i): (usize, u64)) -> String {
    let at = if opts.len() > 1 {
        format!("{} ", opts[k].key)
    } else {
        String::new()
    };
    format!(
        "{at}param {i} {:?}",
        moment_shape(p, opts[k].id, i).unwrap_or_default()
    )
}

/// By shape: the vocabulary parameters of one shape with the same candidates form a class; a
/// class with exactly as many candidates as members is matched: an embedding and a head by what
/// their moments say, anything else in order for the edit (its members get the same one) and
/// reported as a [`SameShape`] set. Anything else is refused, naming the candidates.
fn by_shape(
    path: &Path,
    t: &TorchFile,
    opts: &[FoundOpt],
    model: &ModelParams<'_>,
    pins: Vec<((usize, u64), &String)>,
) -> Result<Matched> {
    let p = &t.pickle;
    let mut out = vec![Vec::new(); opts.len()];
    let mut same_shape = vec![Vec::new(); opts.len()];
    let mut taken: Vec<(usize, u64)> = pins.iter().map(|(c, _)| *c).collect();
    let mut done: Vec<&String> = pins.iter().map(|(_, n)| *n).collect();
    for ((k, i), n) in &pins {
        out[*k].push((*i, (*n).clone()));
    }
    let mut notes: Vec<String> = Vec::new();
    for name in model.vocab {
        if done.contains(&name) {
            continue;
        }
        let Some(shape) = model.shape(name) else {
            continue;
        };
        let cands = candidates(p, opts, shape, model);
        let cands: Vec<(usize, u64)> = cands.into_iter().filter(|c| !taken.contains(c)).collect();
        let mut class: Vec<&String> = model
            .vocab
            .iter()
            .filter(|o| !done.contains(o) && model.shape(o) == Some(shape))
            .collect();
        if cands.len() != class.len() {
            return Err(refusal(path, p, opts, model, &class, shape, &cands));
        }
        if class.len() > 1 {
            match order_class(t, opts, &class, &cands, shape) {
                Ok((ordered, why)) => {
                    class = ordered;
                    notes.push(format!("the moments: {why}"));
                }
                Err(set) => {
                    notes.push(set_note(opts, &set, &cands));
                    for (k, o) in same_shape.iter_mut().enumerate() {
                        let params: Vec<u64> =
                            cands.iter().filter(|c| c.0 == k).map(|c| c.1).collect();
                        if !params.is_empty() {
                            o.push(SameShape {
                                params,
                                ..set.clone()
                            });
                        }
                    }
                }
            }
        }
        for (&(k, i), n) in cands.iter().zip(&class) {
            out[k].push((i, (*n).clone()));
        }
        taken.extend(&cands);
        done.extend(class);
    }
    let all = leftovers(p, opts, model, &taken);
    let mut how = if pins.is_empty() {
        "shape".to_string()
    } else {
        "--optimizer-param, then shape".to_string()
    };
    for n in notes {
        how.push_str("; ");
        how.push_str(&n);
    }
    Ok(Matched {
        mappings: out,
        same_shape,
        how,
        all,
    })
}

/// How an index is named in what the moments say: `param 8` (`optimizer_g param 8` among
/// several optimizers).
fn index_name(opts: &[FoundOpt], (k, i): (usize, u64)) -> String {
    match opts.get(k) {
        Some(o) if opts.len() > 1 => format!("{} param {i}", o.key),
        _ => format!("param {i}"),
    }
}

/// A class of several vocabulary parameters of one shape against as many candidates: an
/// embedding and a head ordered like the candidates by what their moments say, with the evidence
/// in words; otherwise the set nothing orders (its `params` filled in by the caller).
fn order_class<'n>(
    t: &TorchFile,
    opts: &[FoundOpt],
    class: &[&'n String],
    cands: &[(usize, u64)],
    shape: &[u64],
) -> std::result::Result<(Vec<&'n String>, String), SameShape> {
    let set = |why: String| SameShape {
        params: Vec::new(),
        names: class.iter().map(|n| n.to_string()).collect(),
        shape: shape.to_vec(),
        why,
    };
    let (&[a, b], &[ca, cb]) = (class, cands) else {
        return Err(set("nothing in the checkpoint tells them apart".into()));
    };
    let Some((emb, head)) = embedding_and_head(a, b) else {
        return Err(set("nothing in the checkpoint tells them apart".into()));
    };
    let show = |c: (usize, u64)| index_name(opts, c);
    match evidence::embedding_of(t, opts, [ca, cb], shape, &show) {
        Ok(v) if v.embedding == 0 => Ok((vec![emb, head], v.why)),
        Ok(v) => Ok((vec![head, emb], v.why)),
        Err(why) => Err(set(format!(
            "their moments do not tell the embedding from the head ({why})"
        ))),
    }
}

/// Two names as (embedding, head), when one names an embedding and the other a head.
fn embedding_and_head<'n>(a: &'n String, b: &'n String) -> Option<(&'n String, &'n String)> {
    match (vocab::role_by_name(a), vocab::role_by_name(b)) {
        (Some(Role::Embedding), Some(Role::Head)) => Some((a, b)),
        (Some(Role::Head), Some(Role::Embedding)) => Some((b, a)),
        _ => None,
    }
}

/// The report's words for a set nothing orders: a true sentence, no mapping.
fn set_note(opts: &[FoundOpt], set: &SameShape, cands: &[(usize, u64)]) -> String {
    let idx = if opts.len() > 1 {
        and_list(cands.iter().map(|&c| index_name(opts, c)).collect())
    } else {
        let n: Vec<String> = cands.iter().map(|c| c.1.to_string()).collect();
        format!("params {}", and_list(n))
    };
    format!(
        "{idx}: {} have the same shape {:?} and {}; by shape alone either order gives the same edit",
        and_list(set.names.clone()),
        set.shape,
        set.why
    )
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(mut items: Vec<String>) -> String {
    match items.pop() {
        Some(last) if !items.is_empty() => format!("{} and {last}", items.join(", ")),
        Some(last) => last,
        None => String::new(),
    }
}

/// After the vocabulary is matched: the candidates left over for a vocabulary shape, when the
/// model's other parameters of that shape are one table, or all positional tables (for what is
/// kept on purpose, which of them is which does not matter).
fn leftovers(
    p: &Pickle,
    opts: &[FoundOpt],
    model: &ModelParams<'_>,
    taken: &[(usize, u64)],
) -> Vec<Mapping> {
    let mut all = vec![Vec::new(); opts.len()];
    let mut shapes: Vec<&[u64]> = Vec::new();
    for name in model.vocab {
        match model.shape(name) {
            Some(s) if !shapes.contains(&s) => shapes.push(s),
            _ => {}
        }
    }
    for shape in shapes {
        let others: Vec<&String> = model
            .list
            .iter()
            .filter(|(n, s)| s.as_slice() == shape && !model.vocab.contains(n))
            .map(|(n, _)| n)
            .collect();
        let left: Vec<(usize, u64)> = candidates(p, opts, shape, model)
            .into_iter()
            .filter(|c| !taken.contains(c))
            .collect();
        let alike = others.len() == 1 || others.iter().all(|n| crate::vocab::is_positional(n));
        if alike && left.len() == others.len() {
            for ((k, i), n) in left.into_iter().zip(others) {
                all[k].push((i, n.clone()));
            }
        }
    }
    all
}

/// The refusal when the checkpoint does not say which index is which.
fn refusal(
    path: &Path,
    p: &Pickle,
    opts: &[FoundOpt],
    model: &ModelParams<'_>,
    class: &[&String],
    shape: &[u64],
    cands: &[(usize, u64)],
) -> Error {
    let list: Vec<String> = cands.iter().map(|&c| show(p, opts, c)).collect();
    let names: Vec<&str> = class.iter().map(|s| s.as_str()).collect();
    let others: Vec<&str> = model
        .list
        .iter()
        .filter(|(n, s)| s.as_slice() == shape && !model.vocab.contains(n))
        .map(|(n, _)| n.as_str())
        .collect();
    let why = if cands.is_empty() {
        "no optimizer parameter has state of that shape".to_string()
    } else if others.is_empty() {
        format!(
            "{} candidates for {} parameter(s)",
            cands.len(),
            class.len()
        )
    } else {
        format!(
            "{} of the same shape is not a vocabulary matrix and keeps its rows, so the edits differ, and the optimizer stores no param_names to tell them apart",
            others.join(", ")
        )
    };
    let total: usize = opts.iter().map(|o| o.params.len()).sum();
    Error::format(
        path,
        format!(
            "cannot tell which optimizer parameter holds the moments of {} {shape:?} ({} with {total} parameters, the model {} tensors; candidates: {}; {why}): refusing to guess; name it with --optimizer-param {}=INDEX, or {DROP_REMEDY}",
            names.join(" / "),
            if opts.len() == 1 { "the optimizer".to_string() } else { format!("{} optimizers", opts.len()) },
            model.list.len(),
            if list.is_empty() { "none".into() } else { list.join(", ") },
            names.first().copied().unwrap_or("NAME"),
        ),
    )
}

/// The indices the user named, each checked: a parameter index of exactly one optimizer, its
/// moments (if any) shaped like the named vocabulary parameter.
fn pins<'m>(
    path: &Path,
    t: &TorchFile,
    opts: &[FoundOpt],
    model: &'m ModelParams<'_>,
    pinned: &[(String, u64)],
) -> Result<Vec<((usize, u64), &'m String)>> {
    let p = &t.pickle;
    let mut out = Vec::new();
    for (name, i) in pinned {
        let Some(vname) = model
            .vocab
            .iter()
            .find(|v| *v == name || v.strip_prefix(model.prefix) == Some(name.as_str()))
        else {
            return Err(Error::arg(
                "--optimizer-param",
                format!(
                    "--optimizer-param {name}={i}: {name} is not a vocabulary parameter of the model (they are: {})",
                    model.vocab.join(", ")
                ),
            ));
        };
        let holders: Vec<usize> = (0..opts.len())
            .filter(|&k| opts[k].params.contains(i))
            .collect();
        let [k] = holders[..] else {
            return Err(Error::arg(
                "--optimizer-param",
                format!(
                    "--optimizer-param {name}={i}: {} optimizers hold a parameter {i}",
                    holders.len()
                ),
            ));
        };
        let shape = model.shape(vname).unwrap_or_default();
        if moment_shape(p, opts[k].id, *i).is_some_and(|ms| !candidate(&ms, shape, model)) {
            return Err(Error::format(
                path,
                format!(
                    "--optimizer-param {name}={i}: the state of param {i} is {:?} but {name} is {shape:?}",
                    moment_shape(p, opts[k].id, *i).unwrap_or_default()
                ),
            ));
        }
        if let Some(why) = contradicted(t, opts, model, vname, (k, *i)) {
            return Err(Error::arg(
                "--optimizer-param",
                format!("--optimizer-param {name}={i}: the moments say otherwise: {why}"),
            ));
        }
        out.push(((k, *i), vname));
    }
    Ok(out)
}

/// When `name` is one of an embedding and a head of one shape (the model's only parameters of
/// that shape, two candidates) and their moments say which index is the embedding's: why
/// `pinned` is not `name`'s, if it is not.
fn contradicted(
    t: &TorchFile,
    opts: &[FoundOpt],
    model: &ModelParams<'_>,
    name: &str,
    pinned: (usize, u64),
) -> Option<String> {
    let shape = model.shape(name)?;
    let alike: Vec<&String> = model
        .list
        .iter()
        .filter(|(_, s)| s == shape)
        .map(|(n, _)| n)
        .collect();
    let [a, b] = alike[..] else {
        return None;
    };
    let (emb, head) = embedding_and_head(a, b)?;
    let cands = candidates(&t.pickle, opts, shape, model);
    let (&[c0, c1], true) = (&cands[..], cands.contains(&pinned)) else {
        return None;
    };
    let show = |c: (usize, u64)| index_name(opts, c);
    let v = evidence::embedding_of(t, opts, [c0, c1], shape, &show).ok()?;
    let (e, h) = if v.embedding == 0 { (c0, c1) } else { (c1, c0) };
    let wanted = if name == emb { e } else { h };
    (wanted != pinned).then(|| {
        format!(
            "{}, so {emb} is {} and {head} {}; leave the flag out (the moments say it) or name {}",
            v.why,
            show(e),
            show(h),
            show(wanted)
        )
    })
}
