//! config.json's vocabulary size: the keys that hold it (top level and under `text_config`) and
//! setting them to a new row count. Every job that changes the row count sets them here.

use crate::error::{Error, Result};
use crate::output::json_text::{self, JsonEdit};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// A config.json key changed.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigChange {
    pub key: String,
    pub old: Value,
    pub new: u64,
}

/// Config keys that hold the vocabulary size, top level and under `text_config`.
/// The special-token roles a config names by id as `<role>_token_id`.
pub const TOKEN_ID_ROLES: [&str; 8] = [
    "bos",
    "eos",
    "pad",
    "unk",
    "mask",
    "sep",
    "cls",
    "decoder_start",
];

/// Every `<role>_token_id` key of a config-like object (config.json, its text_config,
/// generation_config.json): (role, key, ids, written as a list), keys with no id left out.
pub fn token_ids(obj: &Value) -> Vec<(&'static str, String, Vec<u64>, bool)> {
    let mut out = Vec::new();
    for r in TOKEN_ID_ROLES {
        let key = format!("{r}_token_id");
        let (ids, list): (Vec<u64>, bool) = match obj.get(&key) {
            Some(Value::Array(a)) => (a.iter().filter_map(Value::as_u64).collect(), true),
            Some(v) => (v.as_u64().into_iter().collect(), false),
            None => continue,
        };
        if !ids.is_empty() {
            out.push((r, key, ids, list));
        }
    }
    out
}

/// The other keys of a config-like object that name token ids: any `<name>_token_id` or
/// `<name>_token_index` outside [`TOKEN_ID_ROLES`] (BART's `forced_eos_token_id`, a vision
/// model's `image_token_id`, Gemma 3's `boi_token_index`, Whisper's `no_timestamps_token_id`)
/// holding an id or a list of ids: (name, key, ids, written as a list).
pub fn other_token_ids(obj: &Value) -> Vec<(String, String, Vec<u64>, bool)> {
    let Some(map) = obj.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, v) in map {
        let Some(name) = key
            .strip_suffix("_token_id")
            .or_else(|| key.strip_suffix("_token_index"))
        else {
            continue;
        };
        if TOKEN_ID_ROLES.contains(&name) && key.ends_with("_token_id") {
            continue;
        }
        let (ids, list): (Option<Vec<u64>>, bool) = match v {
            Value::Array(a) => (a.iter().map(Value::as_u64).collect(), true),
            v => (v.as_u64().map(|i| vec![i]), false),
        };
        if let Some(ids) = ids.filter(|i| !i.is_empty()) {
            out.push((name.to_string(), key.clone(), ids, list));
        }
    }
    out
}

/// Every key of a config-like object naming token ids: the `<role>_token_id` ones
/// ([`token_ids`]), then the others ([`other_token_ids`]): (name, key, ids, written as a list).
pub fn all_token_ids(obj: &Value) -> Vec<(String, String, Vec<u64>, bool)> {
    let roles = token_ids(obj)
        .into_iter()
        .map(|(r, key, ids, list)| (r.to_string(), key, ids, list));
    roles.chain(other_token_ids(obj)).collect()
}

/// Move every key of `obj` naming token ids ([`all_token_ids`]), a list item by item, to
/// `new(name, key, old)` (the name is the key's before `_token_id` / `_token_index`); the first
/// error stops.
pub fn remap_token_ids(
    obj: &mut Value,
    new: &mut dyn FnMut(&str, &str, u64) -> Result<u64>,
) -> Result<()> {
    for (role, key, ids, list) in all_token_ids(obj) {
        let moved: Vec<u64> = ids
            .iter()
            .map(|&o| new(&role, &key, o))
            .collect::<Result<_>>()?;
        obj[&key] = match (list, moved.first()) {
            (false, Some(&one)) => Value::from(one),
            _ => Value::from(moved),
        };
    }
    Ok(())
}

pub const CONFIG_KEYS: [&str; 4] = [
    "vocab_size",
    "n_vocab",
    "text_tokens_dict_size",
    "padded_vocab_size",
];

/// Set every vocabulary-size key to `new_rows`; the keys changed, with their old values.
pub fn update_config(cfg: &mut Value, new_rows: u64) -> Vec<ConfigChange> {
    let mut changes = Vec::new();
    let mut set = |obj: &mut serde_json::Map<String, Value>, prefix: &str| {
        for k in CONFIG_KEYS {
            if let Some(v) = obj.get_mut(k).filter(|v| v.is_u64()) {
                changes.push(ConfigChange {
                    key: format!("{prefix}{k}"),
                    old: v.clone(),
                    new: new_rows,
                });
                *v = Value::from(new_rows);
            }
        }
    };
    if let Some(obj) = cfg.as_object_mut() {
        set(obj, "");
        if let Some(Value::Object(tc)) = obj.get_mut("text_config") {
            set(tc, "text_config.");
        }
    }
    changes
}

/// config.json's `text` (read from `path`) with every vocabulary-size key set to `new_rows`:
/// its new text, every other byte as it was (see [`json_text`]), and the keys changed.
pub fn resize_config(
    path: &Path,
    text: &str,
    new_rows: u64,
) -> Result<(JsonEdit, Vec<ConfigChange>)> {
    let mut cfg: Value = serde_json::from_str(text)
        .map_err(|e| Error::format(path, format!("not valid JSON: {e}")))?;
    let changes = update_config(&mut cfg, new_rows);
    let edit = json_text::rewrite(text, &cfg).map_err(|e| Error::format(path, e))?;
    Ok((edit, changes))
}

/// `dir`'s config.json with every vocabulary-size key set to `new_rows` ([`resize_config`]);
/// None when the folder has no config.json.
pub fn resize_config_in(dir: &Path, new_rows: u64) -> Result<Option<JsonEdit>> {
    let c = dir.join("config.json");
    if !c.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&c).map_err(|e| Error::io(&c, "read", e))?;
    Ok(Some(resize_config(&c, &text, new_rows)?.0))
}
