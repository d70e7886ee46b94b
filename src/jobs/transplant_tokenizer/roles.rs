//! The special roles (bos, eos, pad, unk, …) each side names: the base's from config.json's
//! `<role>_token_id` keys and its folder's tokenizer_config.json; NEW's from the
//! tokenizer_config.json / special_tokens_map.json beside it. A role names a token by its text;
//! its id is the tokenizer's id of that text.

use super::matching::Roles;
use crate::error::{Error, Result};
use crate::model::config::token_ids;
use crate::tokenizer::base::Base;
use serde_json::Value;
use std::path::Path;

/// The files beside a tokenizer that name its special tokens by role.
pub(super) const ROLE_FILES: [&str; 2] = ["tokenizer_config.json", "special_tokens_map.json"];

/// `<role>_token` keys of a tokenizer_config-like object: (role, text).
fn role_tokens(v: &Value) -> Vec<(String, String)> {
    let Some(obj) = v.as_object() else {
        return Vec::new();
    };
    obj.iter()
        .filter_map(|(k, v)| {
            let role = k.strip_suffix("_token")?;
            let text = match v {
                Value::String(s) => s.clone(),
                v => v.get("content")?.as_str()?.to_string(),
            };
            Some((role.to_string(), text))
        })
        .collect()
}

fn read_json(p: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, "read", e))?;
    serde_json::from_str(&text).map_err(|e| Error::format(p, format!("not valid JSON: {e}")))
}

/// The roles the tokenizer files in `dir` name, as ids of `tok` (a role whose text `tok` lacks is
/// left out).
pub(super) fn from_tokenizer_files(dir: Option<&Path>, tok: &Base) -> Result<Roles> {
    let mut roles = Roles::new();
    let Some(dir) = dir else { return Ok(roles) };
    let ids = tok.ids();
    for f in ROLE_FILES {
        let p = dir.join(f);
        if !p.is_file() {
            continue;
        }
        for (role, text) in role_tokens(&read_json(&p)?) {
            if let Some(&id) = ids.get(text.as_str()) {
                roles.entry(role).or_insert(u64::from(id));
            }
        }
    }
    Ok(roles)
}

/// The roles config.json names by id (`eos_token_id`; the first of a list), added to `roles`
/// where the tokenizer files did not name them.
pub(super) fn add_config_roles(roles: &mut Roles, config: Option<&Value>) {
    let Some(cfg) = config else { return };
    let objs = [Some(cfg), cfg.get("text_config")];
    for obj in objs.into_iter().flatten() {
        for (role, _, ids, _) in token_ids(obj) {
            if let Some(&id) = ids.first() {
                roles.entry(role.to_string()).or_insert(id);
            }
        }
    }
}
