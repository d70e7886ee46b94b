//! check-vocab on a model checkpoint (file, sharded set, model folder, training file or Trainer
//! folder): what is read once ([`Context`]), then one step per check, each adding findings.

use super::checks::{check_freeze, check_pair, check_tokenizer, config_vocab, embedding_rows};
use super::data::{id_tensors, max_token_id};
use super::finding::{finding, summarize, Finding, Report, Severity};
use super::fix::fixed_path;
use super::inputs::{Inputs, Opened, OptimizerAnswer, OptimizerQuestion, TokenIds};
use super::optimizer::{check_optimizer, drop_everywhere};
use super::read::{allowed_globals, dir_of, load_tok, read_json, target_rows, tokenizer_in, Tok};
use super::specials::check_specials;
use crate::error::{Error, Result};
use crate::formats::{Checkpoint, Tensors};
use crate::plan::{KeyEdit as Edit, Request as Fix};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What every check of one run reads: the checkpoint, its tokenizers and config, the rows the
/// weights have and the rows they should have.
struct Context<'a> {
    inp: &'a Inputs,
    ckpt: &'a Tensors,
    /// Token-id data, as the layer above read it.
    token_ids: Option<&'a TokenIds>,
    ck_dir: PathBuf,
    tok_paths: Vec<PathBuf>,
    toks: Vec<Tok>,
    config_path: Option<PathBuf>,
    config: Option<Value>,
    /// The config's vocabulary-size keys and values.
    config_keys: Vec<(String, u64)>,
    /// The checkpoint whose optimizer is checked: the input itself when it holds one, or the one
    /// given with --training-checkpoint.
    training_path: Option<PathBuf>,
    is_training: bool,
    folder_input: bool,
    rows: u64,
    /// The most ids a tokenizer uses.
    needed: Option<u64>,
    config_rows: Option<u64>,
    /// The rows the weights should have ([`target_rows`]).
    target: u64,
    files: BTreeMap<String, Vec<PathBuf>>,
}

/// The tokenizers: those given (a model folder means its tokenizer), else the one beside the
/// checkpoint.
fn tokenizer_paths(inp: &Inputs, ck_dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let mut tok_paths = inp
        .tokenizers
        .iter()
        .map(|p| tokenizer_in(p))
        .collect::<Result<Vec<_>>>()?;
    if tok_paths.is_empty() {
        if let Some(p) = ["tokenizer.json", "tokenizer.model"]
            .iter()
            .map(|n| ck_dir.join(n))
            .find(|p| p.is_file())
        {
            tok_paths.push(p);
        }
    }
    Ok(tok_paths)
}

/// config.json: the one given (a model folder means its config.json), else the one beside.
fn config_path(inp: &Inputs, ck_dir: &std::path::Path) -> Result<Option<PathBuf>> {
    Ok(match &inp.config {
        Some(c) if c.is_dir() => {
            let f = c.join("config.json");
            if !f.is_file() {
                return Err(Error::format(c, "a folder with no config.json"));
            }
            Some(f)
        }
        Some(c) => Some(c.clone()),
        None => Some(ck_dir.join("config.json")).filter(|p| p.is_file()),
    })
}

/// Read everything the checks need. Unreadable input is an error (exit 2), never a finding; the
/// vocabulary matrices disagreeing on rows is a finding (`findings`).
fn read<'a>(
    inp: &'a Inputs,
    (opened, other): (&'a Checkpoint, &'a Opened),
    findings: &mut Vec<Finding>,
) -> Result<Context<'a>> {
    let ckpt = opened.tensors_for(
        "check-vocab",
        "check-vocab on a DCP folder or ZeRO checkpoint",
    )?;
    // A file's folder, or the folder itself.
    let folder_input = !matches!(opened, Checkpoint::File(_));
    let ck_dir = match opened {
        Checkpoint::File(_) => dir_of(&inp.checkpoint),
        _ => opened.path().to_path_buf(),
    };
    let tok_paths = tokenizer_paths(inp, &ck_dir)?;
    let config_path = config_path(inp, &ck_dir)?;
    let toks: Vec<Tok> = tok_paths
        .iter()
        .map(|p| load_tok(p))
        .collect::<Result<_>>()?;
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    files.insert("checkpoint".into(), vec![ckpt.path.clone()]);
    files.insert("tokenizers".into(), tok_paths.clone());
    if let Some(c) = &config_path {
        files.insert("config".into(), vec![c.clone()]);
    }
    let config = config_path.as_ref().map(|p| read_json(p)).transpose()?;
    // A training checkpoint given apart was opened by the layer above (unreadable input is
    // exit 2, never a finding).
    let training_path: Option<PathBuf> = match &inp.training_checkpoint {
        Some(tp) => Some(tp.clone()),
        // A training file holding an optimizer, or a Trainer folder with its optimizer.pt: the
        // optimizer is checked with the weights, and a fix keeps it (sanitize, not extend).
        None => (ckpt.has_optimizer() || matches!(opened, Checkpoint::Trainer(_)))
            .then(|| inp.checkpoint.clone()),
    };
    // 4. Embedding vs head vs bias (and the rows everything else is checked against).
    let rows = embedding_rows(ckpt, findings)?;
    let needed = toks.iter().map(|t| t.needed).max();
    let config_keys = config
        .as_ref()
        .map(|c| config_vocab(c, &crate::model::config::CONFIG_KEYS))
        .unwrap_or_default();
    let config_rows = config_keys.first().map(|(_, v)| *v);
    Ok(Context {
        is_training: training_path.as_deref() == Some(inp.checkpoint.as_path()),
        folder_input,
        token_ids: other.token_ids.as_ref(),
        target: target_rows(rows, needed, config_rows),
        inp,
        ckpt,
        ck_dir,
        tok_paths,
        toks,
        config_path,
        config,
        config_keys,
        training_path,
        rows,
        needed,
        config_rows,
        files,
    })
}

impl Context<'_> {
    /// The fix that gives the weights `to` rows: sanitize-checkpoint for a training checkpoint
    /// (it keeps the optimizer), extend-embeddings otherwise.
    fn fix_rows(&self, to: u64) -> Fix {
        let inp = self.inp;
        let output = fixed_path(&inp.checkpoint);
        let allow_global = allowed_globals(&inp.open);
        // The tokenizer that says `to` goes with the fix (a folder gets it in place).
        let tok = self.toks.iter().find(|t| t.needed == to);
        if self.is_training {
            // A Trainer folder takes the tokenizer into the output folder.
            return Fix::Sanitize {
                input: inp.checkpoint.clone(),
                output,
                vocab_rows: to,
                tokenizer: tok.filter(|_| self.folder_input).map(|t| t.path.clone()),
                drop_optimizer: false,
                allow_shrink: to < self.rows,
                allow_global,
            };
        }
        // A folder comes out complete, its config.json updated (another config named with
        // --config is used instead); a file output is that one file.
        let config = self
            .config_path
            .as_ref()
            .filter(|c| self.folder_input && **c != self.ck_dir.join("config.json"))
            .cloned();
        Fix::Extend {
            input: inp.checkpoint.clone(),
            output,
            rows: to,
            tokenizer: tok.map(|t| t.path.clone()),
            allow_shrink: to < self.rows,
            config,
            tensors: Vec::new(),
            allow_global,
        }
    }

    /// Special-token ids (check 2), in every file beside the tokenizers and the checkpoint that names them.
    fn specials(&mut self, findings: &mut Vec<Finding>) -> Result<()> {
        let mut special_files: Vec<PathBuf> = Vec::new();
        for d in self
            .tok_paths
            .iter()
            .map(|p| dir_of(p))
            .chain([self.ck_dir.clone()])
        {
            for n in [
                "tokenizer_config.json",
                "special_tokens_map.json",
                "generation_config.json",
            ] {
                let p = d.join(n);
                if p.is_file() && !special_files.contains(&p) {
                    special_files.push(p);
                }
            }
        }
        self.files
            .insert("special_tokens".into(), special_files.clone());
        check_specials(
            &self.toks,
            (&self.config_path, self.config.as_ref()),
            &special_files,
            (self.rows, self.target),
            &|to| self.fix_rows(to),
            findings,
        )
    }

    /// Config vocab keys vs rows (check 3). When the weights change (to the tokenizer's rows)
    /// and the config already says that many, the weights' fix is the config's; otherwise the
    /// config key is what is wrong, and the fix sets it.
    fn config(&self, findings: &mut Vec<Finding>) {
        let Some(p) = &self.config_path else { return };
        let (rows, target) = (self.rows, self.target);
        for (key, v) in &self.config_keys {
            if *v == rows {
                continue;
            }
            let why = self
                .needed
                .map(|n| format!(" and the tokenizer uses {n} ids"))
                .unwrap_or_default();
            let msg = format!("{}: {key} = {v} but the embedding has {rows} rows{why}: a model built from this config would not load the weights", p.display());
            let numbers = json!({"config_key": key, "config_value": v, "embedding_rows": rows, "target_rows": target});
            // The weights' fix is the config's too when it brings the weights to the config's
            // value, or writes a new config.json (a folder comes out complete).
            let f = if target != rows && (*v == target || (self.folder_input && !self.is_training))
            {
                finding(
                    Severity::Error,
                    "config-vs-embedding",
                    format!("{msg}; the weights are what is wrong: they should have {target} rows"),
                    numbers,
                    Some(self.fix_rows(target)),
                )
            } else {
                let edit = Edit {
                    file: p.clone(),
                    key: key.clone(),
                    value: json!(target),
                };
                let mut alt = Vec::new();
                if *v > rows && target == rows && !self.is_training {
                    alt.push(format!(
                        "if the model should have {v} rows (the tokenizer grew and the weights did not), grow the weights instead: {}",
                        self.fix_rows(*v).text()
                    ));
                }
                finding(
                    Severity::Error,
                    "config-vs-embedding",
                    format!("{msg}; {key} is what is wrong: it should be {target}"),
                    numbers,
                    None,
                )
                .edits(vec![edit])
                .alternatives(alt)
            };
            findings.push(f);
        }
    }

    /// Optimizer moments vs weights (check 6), read by sanitize-checkpoint's own code.
    fn optimizer(&mut self, answer: Option<&OptimizerAnswer>, findings: &mut Vec<Finding>) {
        let Some(tp) = self.training_path.clone() else {
            return;
        };
        self.files
            .insert("training_checkpoint".into(), vec![tp.clone()]);
        // Sure of the target unless it rests only on the rows past the tokenizer not looking
        // like padding (config.json, when it agrees, makes it sure).
        let target = self.target;
        let sure = target >= self.rows || self.config_rows == Some(target);
        let fix = (self.is_training && self.folder_input).then(|| self.fix_rows(target));
        let rows = self.rows;
        let Some(answer) = answer else {
            return;
        };
        check_optimizer(
            answer,
            &tp,
            (target, sure, rows),
            &self.inp.open,
            fix,
            findings,
        );
    }

    /// Token ids of an already-tokenised dataset: a saved batch, a .npy or raw ids.
    fn token_ids(&mut self, findings: &mut Vec<Finding>) -> Result<()> {
        let inp = self.inp;
        let Some(p) = &inp.token_ids else {
            return Ok(());
        };
        self.files.insert("token_ids".into(), vec![p.clone()]);
        let bytes = match self.token_ids {
            Some(TokenIds::Batch(batch)) => {
                let tensors = id_tensors(batch)?;
                let rows = Some(self.rows);
                super::batch::check_batch(p, &tensors, rows, inp.codebook_size, findings);
                return Ok(());
            }
            Some(TokenIds::Bytes(b)) => b.as_slice(),
            None => &[],
        };
        let max = max_token_id(p, bytes, inp.token_ids_dtype.as_deref())?;
        if let Some(m) = max.filter(|&m| m >= self.rows) {
            findings.push(self.ids_past_rows(p, m));
        }
        Ok(())
    }

    /// The finding for data whose largest id `m` is past the rows: another tokenizer's data, or
    /// a table too small.
    fn ids_past_rows(&self, p: &std::path::Path, m: u64) -> Finding {
        let (rows, needed, inp) = (self.rows, self.needed, self.inp);
        let numbers = json!({"max_id": m, "embedding_rows": rows, "tokenizer_ids": needed});
        let grow = self.fix_rows(self.target.max(m + 1)).text();
        match (needed, self.toks.iter().max_by_key(|t| t.needed)) {
            (Some(n), Some(t)) if m >= n => finding(
                Severity::Error,
                "data-vs-embedding",
                format!("{}: the largest token id is {m}, past the embedding's {rows} rows and past the {n} ids of {} too: the data was most likely tokenised with another tokenizer; re-tokenise it with {}", p.display(), t.path.display(), t.path.display()),
                numbers,
                None,
            )
            .alternatives(vec![
                format!("if the data's tokenizer is another one, check against it: check-vocab {} --tokenizer DATA_TOKENIZER --token-ids {}", inp.checkpoint.display(), p.display()),
                format!("if the ids are right and both the tokenizer and the table are behind, grow the table (the tokenizer stays wrong): {grow}"),
            ]),
            (Some(_), _) => finding(
                Severity::Error,
                "data-vs-embedding",
                format!("{}: the largest token id is {m} but the embedding has {rows} rows: the tokenizer has that id, the table is too small (indexing it is the device-side assert)", p.display()),
                numbers,
                Some(self.fix_rows(self.target)),
            ),
            _ => finding(
                Severity::Error,
                "data-vs-embedding",
                format!("{}: the largest token id is {m} but the embedding has {rows} rows (indexing it is the device-side assert): either the data was tokenised with another tokenizer, or the table is too small; give --tokenizer to tell which", p.display()),
                numbers,
                None,
            )
            .alternatives(vec![format!("if the table is too small, grow it: {grow}")]),
        }
    }
}

/// The training checkpoint [`run`] checks the optimizer of, and the target rows.
pub(super) fn optimizer_question(
    inp: &Inputs,
    ckpt: &Checkpoint,
    opened: &Opened,
) -> Result<Option<OptimizerQuestion>> {
    let cx = read(inp, (ckpt, opened), &mut Vec::new())?;
    Ok(cx.training_path.clone().map(|tp| OptimizerQuestion {
        training_checkpoint: tp,
        target_rows: cx.target,
    }))
}

/// Every check of a model checkpoint that the inputs allow.
pub(super) fn run(inp: &Inputs, ckpt: &Checkpoint, opened: &Opened) -> Result<Report> {
    let mut findings = Vec::new();
    let mut cx = read(inp, (ckpt, opened), &mut findings)?;
    // 1. Tokenizer ids vs rows.
    for t in &cx.toks {
        check_tokenizer(t, cx.rows, cx.target, &|to| cx.fix_rows(to), &mut findings);
    }
    cx.specials(&mut findings)?;
    cx.config(&mut findings);
    // 5. freeze_until_index.
    if let Some(n) = inp.freeze_until {
        let base = inp
            .base_tokenizer
            .as_ref()
            .map(|p| load_tok(p))
            .transpose()?
            .map(|t| t.needed);
        check_freeze(n, cx.rows, base, &mut findings);
    }
    cx.optimizer(opened.optimizer.as_ref(), &mut findings);
    // 7. Two tokenizers agree on shared tokens.
    for (i, a) in cx.toks.iter().enumerate() {
        for b in &cx.toks[i + 1..] {
            check_pair(a, b, &mut findings);
        }
    }
    cx.token_ids(&mut findings)?;
    // When only a fresh optimizer gets sanitize past its refusal, every sanitize fix needs it:
    // a fix must work when run.
    if let Some(tp) = &cx.training_path {
        drop_everywhere(tp, &mut findings);
    }
    findings.sort_by_key(|f| f.severity);
    Ok(summarize(cx.ckpt.path.clone(), cx.rows, cx.files, findings))
}
