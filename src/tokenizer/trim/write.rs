//! The pruned tokenizer.json: the base document with model.vocab, merges and unk_id, the
//! added tokens' ids, the post-processor's ids and padding's pad_id renumbered by the map;
//! everything else as it was.

use crate::tokenizer::fxhash::FxHashSet;
use crate::tokenizer::hf::HfTokenizer;
use serde_json::{Map, Value};

/// The pruned document as JSON text (pretty, a final newline, as Hugging Face saves it).
pub(super) fn json(t: &HfTokenizer, map: &[Option<u32>]) -> Result<String, String> {
    let mut doc = t.json.clone();
    let new = |v: &Value| -> Result<Value, String> {
        v.as_u64()
            .and_then(|i| map.get(usize::try_from(i).ok()?).copied().flatten())
            .map(Value::from)
            .ok_or_else(|| format!("id {v} is dropped but the tokenizer names it"))
    };
    let model = doc
        .get_mut("model")
        .and_then(Value::as_object_mut)
        .ok_or("no \"model\" object")?;
    prune_vocab(model, map)?;
    if let Some(u) = model.get_mut("unk_id").filter(|u| !u.is_null()) {
        *u = new(u)?;
    }
    if let Some(left) = kept_merges(model) {
        model.insert("merges".into(), Value::Array(left));
    }
    if let Some(Value::Array(added)) = doc.get_mut("added_tokens") {
        for a in added {
            if let Some(id) = a.get_mut("id") {
                *id = new(id)?;
            }
        }
    }
    if let Some(p) = doc.get_mut("post_processor") {
        renumber_processor(p, &new)?;
    }
    if let Some(id) = doc.pointer_mut("/padding/pad_id") {
        *id = new(id)?;
    }
    let mut text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}

/// The merges whose parts and result are all in the (pruned) vocab, in their order.
fn kept_merges(model: &Map<String, Value>) -> Option<Vec<Value>> {
    let merges = model.get("merges")?.as_array()?;
    let prefix = model
        .get("continuing_subword_prefix")
        .and_then(Value::as_str)
        .unwrap_or("");
    let vocab: FxHashSet<&str> = match model.get("vocab") {
        Some(Value::Object(v)) => v.keys().map(String::as_str).collect(),
        _ => FxHashSet::default(),
    };
    let kept = |m: &&Value| merge_kept(m, &vocab, prefix);
    Some(merges.iter().filter(kept).cloned().collect())
}

/// model.vocab with the kept tokens only, at their new ids (a Unigram's list: the kept pieces).
fn prune_vocab(model: &mut Map<String, Value>, map: &[Option<u32>]) -> Result<(), String> {
    let new = |i: u64| map.get(usize::try_from(i).ok()?).copied().flatten();
    match model.get_mut("vocab") {
        Some(Value::Object(v)) => {
            let old = std::mem::take(v);
            for (tok, id) in old {
                let id = id
                    .as_u64()
                    .ok_or_else(|| format!("model.vocab['{tok}'] is not an id"))?;
                if let Some(n) = new(id) {
                    v.insert(tok, n.into());
                }
            }
        }
        Some(Value::Array(pieces)) => {
            let old = std::mem::take(pieces);
            pieces.extend(
                old.into_iter()
                    .enumerate()
                    .filter(|(i, _)| new(*i as u64).is_some())
                    .map(|(_, p)| p),
            );
        }
        _ => return Err("model.vocab is neither a map nor a list".into()),
    }
    Ok(())
}

/// Is a merge (`"a b"` or `["a", "b"]`) still usable: both parts and what they make are kept
/// (`tokenizers` refuses a merge whose part or result is not in the vocab)?
fn merge_kept(m: &Value, vocab: &FxHashSet<&str>, prefix: &str) -> bool {
    let (a, b) = match m {
        Value::String(s) => match s.split_once(' ') {
            Some(p) => p,
            None => return false,
        },
        Value::Array(p) => match (
            p.first().and_then(Value::as_str),
            p.get(1).and_then(Value::as_str),
        ) {
            (Some(a), Some(b)) => (a, b),
            _ => return false,
        },
        _ => return false,
    };
    let joined = format!(
        "{a}{}",
        b.strip_prefix(prefix)
            .filter(|_| !prefix.is_empty())
            .unwrap_or(b)
    );
    vocab.contains(a) && vocab.contains(b) && vocab.contains(joined.as_str())
}

/// Renumber the ids a post-processor names (those the rules keep as specials): TemplateProcessing's
/// special tokens, BERT/RoBERTa's sep and cls, through Sequence.
fn renumber_processor(
    p: &mut Value,
    new: &impl Fn(&Value) -> Result<Value, String>,
) -> Result<(), String> {
    match p.get("type").and_then(Value::as_str) {
        Some("TemplateProcessing") => {
            if let Some(Value::Object(m)) = p.get_mut("special_tokens") {
                for s in m.values_mut() {
                    if let Some(Value::Array(ids)) = s.get_mut("ids") {
                        for id in ids {
                            *id = new(id)?;
                        }
                    }
                }
            }
        }
        Some("BertProcessing" | "RobertaProcessing") => {
            for k in ["sep", "cls"] {
                if let Some(id) = p.get_mut(k).and_then(|s| s.get_mut(1)) {
                    *id = new(id)?;
                }
            }
        }
        Some("Sequence") => {
            if let Some(Value::Array(ps)) = p.get_mut("processors") {
                for q in ps {
                    renumber_processor(q, new)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}
