//! config.json: where it is read from, the vocabulary-size keys set to the new rows, and what
//! becomes of it (a folder output's new text, or a warning for a file output).

use super::Options;
use crate::error::{Error, Result};
use crate::formats;
use crate::model::config::{update_config, ConfigChange};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// config.json: `--config`, or the one beside the input (read first: it says what is tied).
pub(super) fn read_config(
    input: &Path,
    opts: &Options,
    inputs: &mut Vec<PathBuf>,
) -> Result<Option<(PathBuf, Value)>> {
    let Some(cin) = opts
        .config
        .clone()
        .or_else(|| formats::config_beside(input))
    else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&cin).map_err(|e| Error::io(&cin, "read", e))?;
    let cfg: Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(&cin, format!("not valid JSON: {e}")))?;
    inputs.push(cin.clone());
    Ok(Some((cin, cfg)))
}

/// config.json's changes, and its new text when the output is a folder (a file output is that
/// one file: the changes become a warning).
pub(super) fn config_output(
    config: Option<(PathBuf, Value)>,
    new_rows: u64,
    opts: &Options,
    folder: bool,
    warnings: &mut Vec<String>,
) -> Result<(Vec<ConfigChange>, Option<String>)> {
    let Some((cin, mut cfg)) = config else {
        return Ok((Vec::new(), None));
    };
    // Segments are codebooks: the text vocabulary keys of config.json do not count them.
    if opts.segments > 1 {
        warnings.push("config.json not changed: --segments grows codebooks, and their size key (codebook_size, audio_num_codebook_tokens, …) is model-specific: set it to the new segment size yourself".into());
        return Ok((Vec::new(), None));
    }
    let changes = update_config(&mut cfg, new_rows);
    let mut t =
        serde_json::to_string_pretty(&cfg).map_err(|e| Error::format(&cin, e.to_string()))?;
    t.push('\n');
    if folder {
        return Ok((changes, Some(t)));
    }
    if !changes.is_empty() {
        let keys: Vec<String> = changes
            .iter()
            .map(|c| format!("{} to {}", c.key, c.new))
            .collect();
        warnings.push(format!(
            "{} not written: a file output is that one file; set {} in it, or give the model folder for a complete output folder",
            cin.display(),
            keys.join(", ")
        ));
    }
    Ok((changes, None))
}
