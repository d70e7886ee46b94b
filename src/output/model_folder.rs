//! Completing a model folder output (extend-embeddings and sanitize-checkpoint on folders):
//! config.json with the new vocabulary size, the merged tokenizer in place of the old one (with
//! tokenizer_config.json's added tokens kept consistent), every other file carried over. The
//! folder mechanics (temp folder, carrying, rename) are folder.rs's; jobs plan what goes in
//! (the weights, the config text, the merged tokenizer) and call [`finish`].

use crate::error::{Error, Result};
use crate::output::{
    self,
    folder::{AtomicFolder, Carried, Left},
};
use crate::tokenizer::merge::{load_tokenizer, Base};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What [`finish`] wrote besides the weights.
pub(crate) struct Finished {
    /// File names in the output folder.
    pub config: Option<String>,
    pub tokenizer: Option<String>,
    pub carried: Vec<Carried>,
    pub left_out: Vec<Left>,
}

fn write_json(folder: &AtomicFolder, name: &str, text: &str, protected: &[&Path]) -> Result<()> {
    output::write_bytes(&folder.join(name), protected, text.as_bytes(), |tmp| {
        let back = std::fs::read_to_string(tmp).map_err(|e| Error::io(tmp, "read back", e))?;
        serde_json::from_str::<Value>(&back)
            .map(|_| ())
            .map_err(|e| Error::format(tmp, e.to_string()))
    })
    .map(|_| ())
    .map_err(|e| folder.about(e))
}

/// Write `config_text` as config.json and `merged` as the folder's tokenizer, then carry every
/// other file of `input_dir`; `written` holds the names the job wrote already (the weights).
pub(crate) fn finish(
    folder: &AtomicFolder,
    input_dir: &Path,
    written: &mut Vec<String>,
    config_text: Option<&str>,
    merged: Option<&Path>,
    protected: &[&Path],
    link: bool,
) -> Result<Finished> {
    let mut done = Finished {
        config: None,
        tokenizer: None,
        carried: Vec::new(),
        left_out: Vec::new(),
    };
    if let Some(text) = config_text {
        write_json(folder, "config.json", text, protected)?;
        written.push("config.json".into());
        done.config = Some("config.json".into());
    }
    let mut stale = Vec::new();
    if let Some(merged) = merged {
        let (name, other) = match load_tokenizer(merged)? {
            Base::Hf(_) => ("tokenizer.json", "tokenizer.model"),
            _ => ("tokenizer.model", "tokenizer.json"),
        };
        let bytes = std::fs::read(merged).map_err(|e| Error::io(merged, "read", e))?;
        output::write_bytes(&folder.join(name), protected, &bytes, |tmp| {
            load_tokenizer(tmp).map(|_| ())
        })
        .map_err(|e| folder.about(e))?;
        written.push(name.into());
        done.tokenizer = Some(name.into());
        // transformers takes a tokenizer's added tokens from tokenizer_config.json's
        // added_tokens_decoder when it has one: the merged tokenizer's must be there too, or its
        // new added tokens are not matched whole (they would not encode to their ids).
        let tc = input_dir.join("tokenizer_config.json");
        if name == "tokenizer.json" && tc.is_file() {
            if let Some(text) = added_tokens_config(&tc, &bytes)? {
                write_json(folder, "tokenizer_config.json", &text, protected)?;
                written.push("tokenizer_config.json".into());
            }
        }
        let why = format!("the old tokenizer: {name} is the merged one and this one lacks its new tokens (transformers would load it instead of, or beside, {name})");
        for n in [other, "vocab.json", "merges.txt", "added_tokens.json"] {
            stale.push((n.to_string(), why.clone()));
        }
    }
    let (carried, left) = output::folder::carry_rest(folder, input_dir, written, &stale, link)
        .map_err(|e| folder.about(e))?;
    done.carried = carried;
    done.left_out = left;
    Ok(done)
}

/// The folder holding a checkpoint given as a folder or as a sharded index; None for a file.
pub(crate) fn input_folder(input: &Path, sharded: bool) -> Option<PathBuf> {
    if input.is_dir() {
        return Some(input.to_path_buf());
    }
    sharded.then(|| {
        input
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    })
}

/// tokenizer_config.json with `added_tokens_decoder` listing every added token of the merged
/// tokenizer.json (`merged`), when it has that key and lacks some; None when nothing changes.
fn added_tokens_config(tc: &Path, merged: &[u8]) -> Result<Option<String>> {
    let text = std::fs::read_to_string(tc).map_err(|e| Error::io(tc, "read", e))?;
    let mut cfg: Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(tc, format!("not valid JSON: {e}")))?;
    let Some(Value::Object(dec)) = cfg.get_mut("added_tokens_decoder") else {
        return Ok(None);
    };
    let m: Value = serde_json::from_slice(merged)
        .map_err(|e| Error::format(tc, format!("the merged tokenizer is not valid JSON: {e}")))?;
    let mut changed = false;
    for t in m["added_tokens"].as_array().map_or(&[][..], |v| v) {
        let Some(id) = t["id"].as_u64() else { continue };
        if dec.contains_key(&id.to_string()) {
            continue;
        }
        let mut entry = serde_json::Map::new();
        for k in [
            "content",
            "lstrip",
            "normalized",
            "rstrip",
            "single_word",
            "special",
        ] {
            if let Some(v) = t.get(k) {
                entry.insert(k.into(), v.clone());
            }
        }
        dec.insert(id.to_string(), Value::Object(entry));
        changed = true;
    }
    if !changed {
        return Ok(None);
    }
    let mut out =
        serde_json::to_string_pretty(&cfg).map_err(|e| Error::format(tc, e.to_string()))?;
    out.push('\n');
    Ok(Some(out))
}
