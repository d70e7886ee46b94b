//! The files beside the weights a trim changes: config.json and generation_config.json (size,
//! special ids moved by the map), the tokenizer (the pruned file under the base's own name), its
//! tokenizer_config.json / special_tokens_map.json (`added_tokens_decoder` re-keyed by the map),
//! and the map itself (`token_map.json`: old id → new id, to convert logits or datasets back).

use crate::error::{Error, Result};
use crate::model::config::{all_token_ids, remap_token_ids, update_config};
use crate::output::folder::NewFile;
use crate::output::json_text::{self, JsonEdit};
use crate::tokenizer::base::Base;
use crate::tokenizer::trim::PrunedFile;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The config files of a model folder whose sizes and ids follow the vocabulary.
pub(super) const CONFIG_FILES: [&str; 2] = ["config.json", "generation_config.json"];

/// The map file's name in the output folder.
pub(super) const MAP_FILE: &str = "token_map.json";

fn read_json(p: &Path) -> Result<(String, Value)> {
    let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, "read", e))?;
    let v = serde_json::from_str(&text)
        .map_err(|e| Error::format(p, format!("not valid JSON: {e}")))?;
    Ok((text, v))
}

/// Every id the config files at `paths` name (every `*_token_id` / `*_token_index` key, top
/// level and `text_config`).
pub(super) fn named_ids(paths: &[&Path]) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for p in paths {
        let (_, v) = read_json(p)?;
        for obj in [Some(&v), v.get("text_config")].into_iter().flatten() {
            out.extend(
                all_token_ids(obj)
                    .into_iter()
                    .flat_map(|(_, _, ids, _)| ids),
            );
        }
    }
    Ok(out)
}

/// `path` (config.json or generation_config.json) with its sizes at `new_rows` (config.json)
/// and its ids moved by `map`.
pub(super) fn config_edit(
    path: &Path,
    name: &str,
    new_rows: u64,
    map: &[Option<u32>],
) -> Result<JsonEdit> {
    let (text, mut v) = read_json(path)?;
    if name == "config.json" {
        update_config(&mut v, new_rows);
    }
    refuse_unmoved_ids(path, &v)?;
    let mut moved = |_: &str, key: &str, old: u64| -> Result<u64> {
        usize::try_from(old)
            .ok()
            .and_then(|i| map.get(i).copied().flatten())
            .map(u64::from)
            .ok_or_else(|| Error::format(path, format!("{key} = {old}: that token is not kept")))
    };
    remap_token_ids(&mut v, &mut moved)?;
    if let Some(tc) = v.get_mut("text_config").filter(|t| t.is_object()) {
        remap_token_ids(tc, &mut moved)?;
    }
    json_text::rewrite(&text, &v).map_err(|e| Error::format(path, e))
}

/// Keys generation_config.json may hold that name token ids in shapes this trim does not move
/// (Whisper's and others' suppression lists, forced decoder ids, banned sequences, language and
/// task tables): refused when set, rather than left naming other tokens.
const UNMOVED_ID_KEYS: [&str; 7] = [
    "suppress_tokens",
    "begin_suppress_tokens",
    "forced_decoder_ids",
    "bad_words_ids",
    "sequence_bias",
    "lang_to_id",
    "task_to_id",
];

fn refuse_unmoved_ids(path: &Path, v: &Value) -> Result<()> {
    let set = |x: &Value| {
        !(x.is_null()
            || x.as_array().is_some_and(Vec::is_empty)
            || x.as_object().is_some_and(serde_json::Map::is_empty))
    };
    match UNMOVED_ID_KEYS.iter().find(|k| v.get(**k).is_some_and(set)) {
        Some(k) => Err(Error::unsupported(
            path,
            format!("'{k}' names token ids, which this trim does not move: remove it from the file (and set it again for the new ids, token_map.json gives them) to trim"),
        )),
        None => Ok(()),
    }
}

/// tokenizer_config.json (or special_tokens_map.json) with `added_tokens_decoder` re-keyed by
/// `map` (entries of dropped ids removed); None when it has none. Each entry is keyed by its
/// content's id in the tokenizer (`tok`), which is what transformers trusts when the two disagree;
/// an entry whose content the tokenizer lacks is refused (transformers would add it as a new
/// token, past the trimmed rows).
pub(super) fn rekeyed(path: &Path, map: &[Option<u32>], tok: &Base) -> Result<Option<JsonEdit>> {
    let (text, mut v) = read_json(path)?;
    let Some(Value::Object(dec)) = v.get("added_tokens_decoder") else {
        return Ok(None);
    };
    let ids = tok.ids();
    let mut moved: Vec<(u32, Value)> = Vec::with_capacity(dec.len());
    for (key, e) in dec {
        let content = e.get("content").and_then(Value::as_str);
        let Some(&old) = content.and_then(|c| ids.get(c)) else {
            return Err(Error::format(
                path,
                format!("added_tokens_decoder entry {key} names {}, which the tokenizer does not have: remove the entry or add the token to the tokenizer first", content.map_or("no content".into(), |c| format!("'{c}'"))),
            ));
        };
        if let Some(new) = map.get(old as usize).copied().flatten() {
            moved.push((new, e.clone()));
        }
    }
    moved.sort_by_key(|(k, _)| *k);
    v["added_tokens_decoder"] =
        Value::Object(moved.into_iter().map(|(k, e)| (k.to_string(), e)).collect());
    json_text::rewrite(&text, &v)
        .map(Some)
        .map_err(|e| Error::format(path, e))
}

/// A model folder's chat templates, where transformers reads them: tokenizer_config.json's
/// `chat_template` (one, or a list of `{name, template}`), chat_template.json's, chat_template.jinja
/// and additional_chat_templates/*.jinja.
pub(super) fn chat_templates(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for name in ["tokenizer_config.json", "chat_template.json"] {
        let p = dir.join(name);
        if !p.is_file() {
            continue;
        }
        match read_json(&p)?.1.get("chat_template") {
            Some(Value::String(t)) => out.push(t.clone()),
            Some(Value::Array(list)) => out.extend(
                list.iter()
                    .filter_map(|e| e.get("template")?.as_str().map(str::to_string)),
            ),
            _ => {}
        }
    }
    let mut jinja = vec![dir.join("chat_template.jinja")];
    if let Ok(more) = std::fs::read_dir(dir.join("additional_chat_templates")) {
        let mut more: Vec<PathBuf> = more
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
            .collect();
        more.sort();
        jinja.extend(more);
    }
    for p in jinja.into_iter().filter(|p| p.is_file()) {
        out.push(std::fs::read_to_string(&p).map_err(|e| Error::io(&p, "read", e))?);
    }
    Ok(out)
}

/// The pruned tokenizer's file name and bytes: a .model keeps `own` (its name in the input
/// folder) where given.
pub(super) fn tokenizer_file(p: &PrunedFile, own: Option<String>) -> (String, NewFile) {
    match p {
        PrunedFile::Json(t) => (
            "tokenizer.json".into(),
            NewFile::Bytes(t.clone().into_bytes()),
        ),
        PrunedFile::Sp(b) => (
            own.filter(|n| n.ends_with(".model"))
                .unwrap_or_else(|| "tokenizer.model".into()),
            NewFile::Bytes(b.clone()),
        ),
    }
}

/// `token_map.json`: the sizes and, per old id, its new id (null: dropped).
pub(super) fn map_file(map: &[Option<u32>], new_rows: u64) -> Vec<u8> {
    let doc = serde_json::json!({
        "old_vocab_size": map.len(),
        "new_vocab_size": new_rows,
        "old_to_new": map,
    });
    let mut s = doc.to_string();
    s.push('\n');
    s.into_bytes()
}
