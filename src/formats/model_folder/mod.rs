//! Completing a model folder output (extend-embeddings and sanitize-checkpoint on folders):
//! config.json with the new vocabulary size, the merged tokenizer in place of the old one (with
//! tokenizer_config.json's added tokens kept consistent), every other file carried over. The
//! folder mechanics (temp folder, carrying, rename) are folder.rs's; jobs plan what goes in
//! (the weights, the config edit, the merged tokenizer) and call `finish`. JSON files are
//! edited in place ([`json_text`]): what an edit does not change keeps its bytes.

use crate::error::{Error, Result};
use crate::output::folder::NewFile;
use crate::output::{
    self,
    folder::{AtomicFolder, Carried, Left},
    json_text::{self, EditedFile, JsonEdit},
};
use serde_json::Value;
use std::path::Path;

/// The merged tokenizer a folder output takes (the job decides, from the file's content): its
/// file, the name it goes under, the name of the other kind (left out: the folder keeps one
/// tokenizer), and the strict reader that must read the written copy back.
pub(crate) struct TokenizerFile<'a> {
    pub path: &'a Path,
    pub name: &'static str,
    pub other: &'static str,
    pub check: fn(&Path) -> Result<()>,
}

/// What [`finish`] wrote besides the weights.
pub(crate) struct Finished {
    /// File names in the output folder.
    pub config: Option<String>,
    pub tokenizer: Option<String>,
    pub carried: Vec<Carried>,
    pub left_out: Vec<Left>,
    /// The JSON files edited (config.json, tokenizer_config.json, special_tokens_map.json) by
    /// their paths in the output, and what changed in each.
    pub edited: Vec<EditedFile>,
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

/// Write `config`'s text as config.json and `merged` as the folder's tokenizer, then carry every
/// other file of `input_dir`; `written` holds the names the job wrote already (the weights).
pub(crate) fn finish(
    folder: &AtomicFolder,
    input_dir: &Path,
    written: &mut Vec<String>,
    config: Option<&JsonEdit>,
    merged: Option<&TokenizerFile<'_>>,
    protected: &[&Path],
    link: bool,
) -> Result<Finished> {
    let mut done = Finished {
        config: None,
        tokenizer: None,
        carried: Vec::new(),
        left_out: Vec::new(),
        edited: Vec::new(),
    };
    if let Some(edit) = config {
        write_json(folder, "config.json", &edit.text, protected)?;
        written.push("config.json".into());
        done.config = Some("config.json".into());
        edited(folder, "config.json", edit, &mut done.edited);
    }
    let mut stale = Vec::new();
    if let Some(tf) = merged {
        let (name, other, merged) = (tf.name, tf.other, tf.path);
        let bytes = std::fs::read(merged).map_err(|e| Error::io(merged, "read", e))?;
        output::write_bytes(&folder.join(name), protected, &bytes, |tmp| (tf.check)(tmp))
            .map_err(|e| folder.about(e))?;
        written.push(name.into());
        done.tokenizer = Some(name.into());
        // transformers takes a tokenizer's added tokens from tokenizer_config.json's
        // added_tokens_decoder when it has one: the merged tokenizer's must be there too, or its
        // new added tokens are not matched whole (they would not encode to their ids).
        // Its new special tokens are listed where transformers looks for them (the extra/
        // additional special tokens of tokenizer_config.json and special_tokens_map.json), so
        // they are special there too (skipped by decode(skip_special_tokens=True)).
        if name == "tokenizer.json" {
            for file in ["tokenizer_config.json", "special_tokens_map.json"] {
                let path = input_dir.join(file);
                if path.is_file() {
                    if let Some(edit) = added_tokens_config(&path, &bytes)? {
                        write_json(folder, file, &edit.text, protected)?;
                        written.push(file.into());
                        edited(folder, file, &edit, &mut done.edited);
                    }
                }
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

/// Complete a folder output from decided files: `json` edits of the input's JSON files (each
/// written whole and read back as JSON), `copied` files from elsewhere (read back by `check`),
/// `stale` input files left out with why; every other file of `input_dir` carried. `written`
/// holds the names the job wrote already (the weights).
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_with(
    folder: &AtomicFolder,
    input_dir: &Path,
    written: &mut Vec<String>,
    json: &[(String, JsonEdit)],
    copied: &[(String, NewFile)],
    check: fn(&Path) -> Result<()>,
    stale: &[(String, String)],
    protected: &[&Path],
    link: bool,
) -> Result<Finished> {
    let mut done = Finished {
        config: None,
        tokenizer: None,
        carried: Vec::new(),
        left_out: Vec::new(),
        edited: Vec::new(),
    };
    for (name, edit) in json {
        write_json(folder, name, &edit.text, protected)?;
        written.push(name.clone());
        edited(folder, name, edit, &mut done.edited);
    }
    for (name, from) in copied {
        let bytes = match from {
            NewFile::Path(p) => std::fs::read(p).map_err(|e| Error::io(p, "read", e))?,
            NewFile::Bytes(b) => b.clone(),
        };
        let is_json = name.ends_with(".json");
        output::write_bytes(&folder.join(name), protected, &bytes, |tmp| {
            if is_json && name != "tokenizer.json" {
                let back =
                    std::fs::read_to_string(tmp).map_err(|e| Error::io(tmp, "read back", e))?;
                return serde_json::from_str::<Value>(&back)
                    .map(|_| ())
                    .map_err(|e| Error::format(tmp, e.to_string()));
            }
            if name == "tokenizer.json" || name.ends_with(".model") {
                return check(tmp);
            }
            Ok(())
        })
        .map_err(|e| folder.about(e))?;
        written.push(name.clone());
    }
    let (carried, left) = output::folder::carry_rest(folder, input_dir, written, stale, link)
        .map_err(|e| folder.about(e))?;
    done.carried = carried;
    done.left_out = left;
    Ok(done)
}

/// A file of the output folder edited, by its path in the output, and its changes.
fn edited(folder: &AtomicFolder, name: &str, edit: &JsonEdit, all: &mut Vec<EditedFile>) {
    if !edit.changes.is_empty() {
        all.push(EditedFile {
            file: folder.dest().join(name),
            changes: edit.changes.clone(),
        });
    }
}

/// tokenizer_config.json (or special_tokens_map.json) with `added_tokens_decoder` listing every
/// added token of the merged tokenizer.json (`merged`), when it has that key and lacks some, and
/// its special tokens that the file names nowhere appended to `extra_special_tokens` (or
/// `additional_special_tokens`, the older name, where the file uses it); None when nothing changes.
fn added_tokens_config(tc: &Path, merged: &[u8]) -> Result<Option<JsonEdit>> {
    let text = std::fs::read_to_string(tc).map_err(|e| Error::io(tc, "read", e))?;
    let mut cfg: Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(tc, format!("not valid JSON: {e}")))?;
    let m: Value = serde_json::from_slice(merged)
        .map_err(|e| Error::format(tc, format!("the merged tokenizer is not valid JSON: {e}")))?;
    let added = m["added_tokens"].as_array().map_or(&[][..], |v| v);
    let mut changed = list_specials(&mut cfg, added);
    let Some(Value::Object(dec)) = cfg.get_mut("added_tokens_decoder") else {
        return json_if_changed(tc, &text, &cfg, changed);
    };
    for t in added {
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
    json_if_changed(tc, &text, &cfg, changed)
}

/// `text` (the file `tc`) edited to `cfg`, every value left alone kept as written.
fn json_if_changed(tc: &Path, text: &str, cfg: &Value, changed: bool) -> Result<Option<JsonEdit>> {
    if !changed {
        return Ok(None);
    }
    json_text::rewrite(text, cfg)
        .map(Some)
        .map_err(|e| Error::format(tc, e))
}

/// Append the special added tokens `cfg` names nowhere (no role such as `eos_token`, not in its
/// list) to its list of extra special tokens; whether it changed.
fn list_specials(cfg: &mut Value, added: &[Value]) -> bool {
    let Some(obj) = cfg.as_object_mut() else {
        return false;
    };
    let named: std::collections::HashSet<String> = obj
        .iter()
        .filter(|(k, _)| k.ends_with("_token") || k.ends_with("special_tokens"))
        .flat_map(|(_, v)| match v {
            Value::Array(a) => a.to_vec(),
            v => vec![v.clone()],
        })
        .filter_map(|v| match v {
            Value::String(s) => Some(s),
            v => v.get("content").and_then(Value::as_str).map(String::from),
        })
        .collect();
    let new: Vec<Value> = added
        .iter()
        .filter(|t| t["special"] == Value::Bool(true))
        .filter_map(|t| t["content"].as_str())
        .filter(|c| !named.contains(*c))
        .map(|c| Value::String(c.to_string()))
        .collect();
    if new.is_empty() {
        return false;
    }
    let key = if obj.contains_key("additional_special_tokens") {
        "additional_special_tokens"
    } else {
        "extra_special_tokens"
    };
    match obj.get_mut(key) {
        Some(Value::Array(list)) => list.extend(new),
        Some(_) => return false, // a named map (v5's dict form): left as the user wrote it
        None => {
            obj.insert(key.into(), Value::Array(new));
        }
    }
    true
}
