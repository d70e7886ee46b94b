//! config.json: where it is read from, the vocabulary-size keys set to the new rows, and what
//! becomes of it (a folder output's new text, or a warning for a file output).

use super::options::Options;
use crate::error::{Error, Result};
use crate::formats;
use crate::model::config::{resize_config, ConfigChange};
use crate::output::json_text::JsonEdit;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// config.json as read: where from, its text (the edit keeps it), its value.
pub(super) struct ConfigFile {
    pub path: PathBuf,
    pub text: String,
    pub value: Value,
}

/// config.json: `--config`, or the one beside the input (read first: it says what is tied).
pub(super) fn read_config(
    input: &Path,
    opts: &Options,
    inputs: &mut Vec<PathBuf>,
) -> Result<Option<ConfigFile>> {
    let Some(cin) = opts
        .config
        .clone()
        .or_else(|| formats::config_beside(input))
    else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&cin).map_err(|e| Error::io(&cin, "read", e))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(&cin, format!("not valid JSON: {e}")))?;
    inputs.push(cin.clone());
    Ok(Some(ConfigFile {
        path: cin,
        text,
        value,
    }))
}

/// config.json's changes, and its edit when the output is a folder (a file output is that one
/// file: the changes become a warning).
pub(super) fn config_output(
    config: Option<ConfigFile>,
    new_rows: u64,
    opts: &Options,
    folder: bool,
    warnings: &mut Vec<String>,
) -> Result<(Vec<ConfigChange>, Option<JsonEdit>)> {
    let Some(cfg) = config else {
        return Ok((Vec::new(), None));
    };
    // Segments are codebooks: the text vocabulary keys of config.json do not count them.
    if opts.segments > 1 {
        warnings.push("config.json not changed: --segments grows codebooks, and their size key (codebook_size, audio_num_codebook_tokens, …) is model-specific: set it to the new segment size yourself".into());
        return Ok((Vec::new(), None));
    }
    let (edit, changes) = resize_config(&cfg.path, &cfg.text, new_rows)?;
    if folder {
        return Ok((changes, Some(edit)));
    }
    if !changes.is_empty() {
        let keys: Vec<String> = changes
            .iter()
            .map(|c| format!("{} to {}", c.key, c.new))
            .collect();
        warnings.push(format!(
            "{} not written: a file output is that one file; set {} in it, or give the model folder for a complete output folder",
            cfg.path.display(),
            keys.join(", ")
        ));
    }
    Ok((changes, None))
}
