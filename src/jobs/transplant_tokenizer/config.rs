//! config.json and generation_config.json for the new vocabulary: the vocabulary-size keys set to
//! the new rows, and every `<role>_token_id` found again in NEW: by the token's text, else by
//! the role NEW's tokenizer files give. An id neither finds is refused (nothing written).

use super::matching::Roles;
use crate::error::{Error, Result};
use crate::model::config::{remap_token_ids, update_config};
use crate::output::json_text::{self, JsonEdit};
use crate::tokenizer::base::Base;
use crate::tokenizer::surface::{by_id, by_surface, form, surface, Form};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The config files a model folder holds whose ids and sizes follow the vocabulary.
pub(super) const CONFIG_FILES: [&str; 2] = ["config.json", "generation_config.json"];

/// A config file read: where from, its text, its value.
pub(super) struct ConfigFile {
    pub name: &'static str,
    pub path: PathBuf,
    pub text: String,
    pub value: Value,
}

impl ConfigFile {
    pub fn read(name: &'static str, path: &Path) -> Result<ConfigFile> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, "read", e))?;
        let value = serde_json::from_str(&text)
            .map_err(|e| Error::format(path, format!("not valid JSON: {e}")))?;
        Ok(ConfigFile {
            name,
            path: path.to_path_buf(),
            text,
            value,
        })
    }
}

/// Old token id → new token id, by text, else by role.
pub(super) struct Remap<'a> {
    base_names: HashMap<u32, String>,
    base_form: Form,
    new_ids: HashMap<Vec<u8>, u32>,
    new_roles: &'a Roles,
    /// NEW's file, for messages.
    new_path: &'a Path,
}

impl<'a> Remap<'a> {
    pub fn new(base: &Base, new: &Base, new_roles: &'a Roles, new_path: &'a Path) -> Remap<'a> {
        Remap {
            base_names: by_id(base),
            base_form: form(base),
            new_ids: by_surface(new),
            new_roles,
            new_path,
        }
    }

    /// The new id of the token `old` was, for `key` (whose role is `role`) of `file`.
    fn id(&self, old: u64, role: &str, key: &str, file: &Path) -> Result<u64> {
        let text = u32::try_from(old)
            .ok()
            .and_then(|i| self.base_names.get(&i));
        let by_text = text.and_then(|t| self.new_ids.get(&surface(self.base_form, t)));
        if let Some(&id) = by_text {
            return Ok(u64::from(id));
        }
        if let Some(&id) = self.new_roles.get(role) {
            return Ok(id);
        }
        let what = text.map_or_else(
            || "no token in the base tokenizer".into(),
            |t| format!("'{t}'"),
        );
        Err(Error::format(
            file,
            format!(
                "{key} = {old} ({what}): the new tokenizer {} has no such token and names no {role}_token; add the token to it, or give --tokenizer as a folder whose tokenizer_config.json names its {role}_token",
                self.new_path.display()
            ),
        ))
    }
}

/// `obj`'s `<role>_token_id` keys moved to the new ids.
fn remap_ids(obj: &mut Value, remap: &Remap<'_>, file: &Path) -> Result<()> {
    remap_token_ids(obj, &mut |role, key, old| remap.id(old, role, key, file))
}

/// `cfg`'s new text: sizes set to `new_rows` (config.json), special ids moved.
pub(super) fn edit(cfg: &ConfigFile, new_rows: u64, remap: &Remap<'_>) -> Result<JsonEdit> {
    let mut v = cfg.value.clone();
    if cfg.name == "config.json" {
        update_config(&mut v, new_rows);
    }
    remap_ids(&mut v, remap, &cfg.path)?;
    if let Some(tc) = v.get_mut("text_config").filter(|t| t.is_object()) {
        remap_ids(tc, remap, &cfg.path)?;
    }
    json_text::rewrite(&cfg.text, &v).map_err(|e| Error::format(&cfg.path, e))
}
