//! Which optimizer parameter index holds which model tensor's state. torch's optimizer state
//! dict numbers parameters, it does not name them (unless built from `named_parameters()`), and
//! Trainer numbers them group by group (weight decay first), not in the weights file's order.
//!
//! The answer, in the order tried: the names torch stored (`param_names`); the position, when the
//! optimizer holds the model's tensors in order; the shape. Several vocabulary parameters of one
//! shape (an untied embedding and head) get the same edit, so which index is which does not
//! change the output: they are matched in order and the report says so. Only when parameters of
//! one shape need different edits (a vocabulary matrix and a position table) is a mapping
//! needed that the checkpoint does not hold: then refuse, naming the candidates.

use super::state::{moment_shape, FoundOpt, Mapping, DROP_REMEDY};
use crate::error::{Error, Result};
use crate::formats::torch::value::Pickle;
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

/// One answer per optimizer (its vocabulary parameters) and how it was found.
pub(crate) struct Matched {
    pub mappings: Vec<Mapping>,
    pub how: String,
    /// Every index → name, per optimizer, when the checkpoint says it (names or position);
    /// empty otherwise.
    pub all: Vec<Mapping>,
}

/// Match optimizer parameter indices to the model's vocabulary parameters. `by_position` allows
/// the positional rule (a training file whose model is saved in module order; not a Trainer
/// folder, whose safetensors sorts the names). `pinned`: indices the user named
/// (`--optimizer-param NAME=INDEX`), taken as given after a shape check.
pub(crate) fn match_params(
    path: &Path,
    p: &Pickle,
    opts: &[FoundOpt],
    model: &ModelParams<'_>,
    by_position: bool,
    pinned: &[(String, u64)],
) -> Result<Matched> {
    if !pinned.is_empty() {
        let pins = pins(path, p, opts, model, pinned)?;
        return by_shape(path, p, opts, model, pins);
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
            mappings: m,
            how: "param_names (stored by torch)".into(),
            all,
        });
    }
    if by_position {
        if let Some((m, all)) = by_position_rule(p, opts, model) {
            return Ok(Matched {
                mappings: m,
                how: "position".into(),
                all,
            });
        }
    }
    by_shape(path, p, opts, model, Vec::new())
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
/// class with exactly as many candidates as members is matched in order (its members get the
/// same edit). Anything else is refused, naming the candidates.
fn by_shape(
    path: &Path,
    p: &Pickle,
    opts: &[FoundOpt],
    model: &ModelParams<'_>,
    pins: Vec<((usize, u64), &String)>,
) -> Result<Matched> {
    let mut out = vec![Vec::new(); opts.len()];
    let mut taken: Vec<(usize, u64)> = pins.iter().map(|(c, _)| *c).collect();
    let mut done: Vec<&String> = pins.iter().map(|(_, n)| *n).collect();
    for ((k, i), n) in &pins {
        out[*k].push((*i, (*n).clone()));
    }
    let mut interchangeable: Vec<String> = Vec::new();
    for name in model.vocab {
        if done.contains(&name) {
            continue;
        }
        let Some(shape) = model.shape(name) else {
            continue;
        };
        let cands = candidates(p, opts, shape, model);
        let cands: Vec<(usize, u64)> = cands.into_iter().filter(|c| !taken.contains(c)).collect();
        let class: Vec<&String> = model
            .vocab
            .iter()
            .filter(|o| !done.contains(o) && model.shape(o) == Some(shape))
            .collect();
        if cands.len() != class.len() {
            return Err(refusal(path, p, opts, model, &class, shape, &cands));
        }
        for (&(k, i), n) in cands.iter().zip(&class) {
            out[k].push((i, (*n).clone()));
        }
        if class.len() > 1 {
            let names: Vec<&str> = class.iter().map(|s| s.as_str()).collect();
            interchangeable.push(names.join(" and "));
        }
        taken.extend(&cands);
        done.extend(class);
    }
    let all = leftovers(p, opts, model, &taken);
    let how = if !pins.is_empty() {
        "--optimizer-param, then shape".to_string()
    } else if interchangeable.is_empty() {
        "shape".to_string()
    } else {
        format!(
            "shape; {} share one shape and get the same edit, so which index holds which does not change the output",
            interchangeable.join("; ")
        )
    };
    Ok(Matched {
        mappings: out,
        how,
        all,
    })
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
    p: &Pickle,
    opts: &[FoundOpt],
    model: &'m ModelParams<'_>,
    pinned: &[(String, u64)],
) -> Result<Vec<((usize, u64), &'m String)>> {
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
        out.push(((k, *i), vname));
    }
    Ok(out)
}
