//! subword-mean's lists: each new token's ids in the base tokenizer (its pieces).

use crate::error::{Error, Result};
use crate::tokenizer::form::Form;
use std::path::Path;

/// For subword-mean: for each new id, the base tokenizer's ids of its text (None: fall back).
pub(crate) fn subword_lists(
    merged: &Path,
    base: &Path,
    old_rows: u64,
    new_rows: u64,
    fallbacks: &mut Vec<String>,
) -> Result<Vec<Option<Vec<usize>>>> {
    let load = |p: &Path| {
        tokenizers::Tokenizer::from_file(p)
            .map_err(|e| Error::format(p, format!("subword-mean needs a tokenizer.json: {e}")))
    };
    let (m, b) = (load(merged)?, load(base)?);
    let unk: Option<u32> = ["[UNK]", "<unk>", "<|unk|>"]
        .iter()
        .find_map(|u| b.token_to_id(u));
    // A byte-level or ▁ token is written in the model's own symbols: BASE's model splits those
    // (its text, encoded again, would be the symbols' bytes). Plain tokens are text.
    let pipeline = serde_json::json!({
        "pre_tokenizer": serde_json::to_value(b.get_pre_tokenizer()).unwrap_or_default(),
        "normalizer": serde_json::to_value(b.get_normalizer()).unwrap_or_default(),
    });
    let symbols = Form::of_tokenizer_json(&pipeline) != Form::Plain;
    let mut out = Vec::new();
    for id in old_rows..new_rows {
        let text = u32::try_from(id).ok().and_then(|i| m.id_to_token(i));
        let added = text.as_ref().is_some_and(|t| {
            m.get_added_tokens_decoder()
                .get(&(id as u32))
                .is_some_and(|a| &a.content == t)
        });
        let ids = text.as_ref().and_then(|t| {
            if symbols && !added {
                use tokenizers::Model;
                b.get_model()
                    .tokenize(t)
                    .ok()
                    .map(|v| v.iter().map(|t| t.id).collect::<Vec<u32>>())
            } else {
                b.encode(t.as_str(), false)
                    .ok()
                    .map(|e| e.get_ids().to_vec())
            }
        });
        match ids {
            Some(v)
                if !v.is_empty()
                    && v.iter().all(|&i| Some(i) != unk && u64::from(i) < old_rows) =>
            {
                out.push(Some(v.into_iter().map(|i| i as usize).collect()))
            }
            _ => {
                fallbacks.push(text.unwrap_or_else(|| format!("<id {id}>")));
                out.push(None);
            }
        }
    }
    Ok(out)
}
