//! Ties: several names that are one parameter (GPT-2, Gemma, Llama-3.2, Qwen, BERT: the output
//! head is the token embedding). Every job asks this module, so they agree on what is tied:
//! inspect counts a tied storage once and names the pair, extend computes the new rows once,
//! sanitize matches the pair to one optimizer parameter, and the doctor reads the same answer.
//!
//! What counts as a tie:
//! - **same storage** (torch files): the names view one storage with the same offset, shape and
//!   stride, which is how `torch.save` writes a tied model. This is the only kind an optimizer
//!   sees as one parameter inside a torch file.
//! - **same bytes** (safetensors, which cannot share storage): an embedding and a head of one
//!   shape and dtype whose bytes are equal, unless `config.json` says `tie_word_embeddings: false`.
//! - **config**: the head is not stored at all and `config.json` says `tie_word_embeddings` (or
//!   leaves it out: transformers' default is tied); `from_pretrained` makes the head the
//!   embedding, so it grows with it.

use crate::formats::{TensorRef, Tensors};
use crate::vocab::{Role, Vocabulary};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum How {
    SameStorage,
    SameBytes,
    Config,
}

/// One tie.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tie {
    /// The names that are one parameter, in file order; the first is the one a job computes
    /// (the others follow it). A `config` tie names only the stored embedding.
    pub names: Vec<String>,
    pub how: How,
    /// Why, in words (`config.json tie_word_embeddings: true; the head is not stored`).
    pub detail: String,
}

impl Tie {
    /// The name the others follow.
    pub fn first(&self) -> &str {
        &self.names[0]
    }
}

/// `tie_word_embeddings` as `from_pretrained` reads it: the top level, or `text_config` for
/// multimodal configs (Gemma 3); None when the config does not say.
pub fn config_tie(config: &Value) -> Option<bool> {
    let key = "tie_word_embeddings";
    config
        .get(key)
        .and_then(Value::as_bool)
        .or_else(|| config.get("text_config")?.get(key)?.as_bool())
}

/// Names viewing one torch storage the same way, grouped, for every torch file (shards apart).
pub fn same_storage(ckpt: &Tensors) -> Vec<Tie> {
    let mut out = Vec::new();
    for t in &ckpt.torch {
        let mut groups: Vec<Vec<String>> = Vec::new();
        // (storage key, offset, shape, stride) → group.
        type View<'a> = (&'a str, u64, &'a [u64], &'a [u64]);
        let mut at: HashMap<View, usize> = HashMap::new();
        for x in &t.tensors {
            let Some(n) = t.pickle.tensor_of(x.node) else {
                continue;
            };
            let key = (
                n.storage.key.as_str(),
                n.offset,
                n.shape.as_slice(),
                n.stride.as_slice(),
            );
            match at.get(&key) {
                Some(&g) => groups[g].push(x.path.clone()),
                None => {
                    at.insert(key, groups.len());
                    groups.push(vec![x.path.clone()]);
                }
            }
        }
        out.extend(groups.into_iter().filter(|g| g.len() > 1).map(|names| Tie {
            names,
            how: How::SameStorage,
            detail: "one storage under both names (torch.save of a tied model)".into(),
        }));
    }
    out
}

/// Are two tensors' elements byte for byte equal? The first row is compared first, so untied
/// matrices are told apart without reading them whole.
fn equal_bytes(a: &TensorRef<'_>, b: &TensorRef<'_>) -> bool {
    if a.dtype != b.dtype || a.shape != b.shape {
        return false;
    }
    // Ranges were validated when the file was opened; one that still cannot be read is not
    // called a tie, and the job that reads the tensor refuses it with its name.
    let (Ok(x), Ok(y)) = (a.try_bytes(), b.try_bytes()) else {
        return false;
    };
    let row = (a.nbytes() / a.shape.first().copied().unwrap_or(1).max(1)) as usize;
    x.len() == y.len() && x[..row.min(x.len())] == y[..row.min(y.len())] && x == y
}

/// Every tie of the checkpoint: same storage anywhere, then, for the vocabulary, same bytes or a
/// head left to the config. `config`: the model's `config.json`, when there is one.
pub fn find(ckpt: &Tensors, vocabulary: Option<&Vocabulary>, config: Option<&Value>) -> Vec<Tie> {
    let mut ties = same_storage(ckpt);
    let Some(v) = vocabulary else {
        return ties;
    };
    let said = config.and_then(config_tie);
    let in_tie = |ties: &[Tie], n: &str| ties.iter().any(|t| t.names.iter().any(|m| m == n));
    let embeddings: Vec<&str> = v
        .tensors
        .iter()
        .filter(|t| t.role == Role::Embedding)
        .map(|t| t.name.as_str())
        .collect();
    let heads: Vec<&str> = v
        .tensors
        .iter()
        .filter(|t| t.role == Role::Head)
        .map(|t| t.name.as_str())
        .collect();
    if said != Some(false) {
        for e in &embeddings {
            for h in &heads {
                if in_tie(&ties, e) || in_tie(&ties, h) {
                    continue;
                }
                let (Some(a), Some(b)) = (ckpt.tensor(e), ckpt.tensor(h)) else {
                    continue;
                };
                if equal_bytes(&a, &b) {
                    ties.push(Tie {
                        names: vec![e.to_string(), h.to_string()],
                        how: How::SameBytes,
                        detail: "stored apart with identical bytes (a tied model saved without shared storage)".into(),
                    });
                }
            }
        }
    }
    if heads.is_empty() {
        // An embedding already tied to a stored name (BERT's decoder.weight in a torch file)
        // has its head stored.
        let free: Vec<&str> = embeddings
            .iter()
            .copied()
            .filter(|e| !in_tie(&ties, e))
            .collect();
        if let [e] = free[..] {
            let detail = match (config, said) {
                (_, Some(true)) => "the head is not stored; config.json tie_word_embeddings: true",
                (Some(_), None) => "the head is not stored; config.json leaves tie_word_embeddings to transformers' default (tied)",
                (None, _) => "the head is not stored and there is no config.json: tied, as transformers saves tied models, or the model has no head",
                (_, Some(false)) => "",
            };
            if !detail.is_empty() {
                ties.push(Tie {
                    names: vec![e.to_string()],
                    how: How::Config,
                    detail: detail.into(),
                });
            }
        }
    }
    ties
}

/// For each name in a tie but not first, the name it follows.
pub fn followers(ties: &[Tie]) -> HashMap<String, String> {
    ties.iter()
        .flat_map(|t| t.names[1..].iter().map(|n| (n.clone(), t.names[0].clone())))
        .collect()
}

/// The human line for one tie.
pub fn render(t: &Tie) -> String {
    match t.how {
        How::Config => format!(
            "{}: the output head is tied to it ({})",
            t.names[0], t.detail
        ),
        _ => format!("{} ({})", t.names.join(" = "), t.detail),
    }
}
