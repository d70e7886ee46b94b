//! `--init`: the methods that make new vocabulary rows, and a method resolved against the
//! tokenizers it needs into an [`Init`]. extend-embeddings and sanitize-checkpoint (files,
//! Trainer folders) resolve theirs here, from the narrow [`InitOptions`].

use super::init::Init;
use super::subword::subword_lists;
use crate::error::{Error, Result};
use crate::tokenizer::base::load_tokenizer;
use std::path::{Path, PathBuf};

/// `--init`, as the user named it.
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    Mean,
    Hewitt,
    Zeros,
    Normal,
    SubwordMean,
    /// `copy:TOKEN` (a token string, or an id).
    Copy(String),
    /// Orthogonal matching pursuit over a donor model's rows (`--donor`).
    Omp,
    /// The k nearest shared tokens in a donor model's space, weighted (`--donor`;
    /// transplant-tokenizer).
    Knn,
}

impl Method {
    pub fn parse(s: &str) -> std::result::Result<Method, String> {
        Ok(match s {
            "mean" => Method::Mean,
            "hewitt" => Method::Hewitt,
            "zeros" => Method::Zeros,
            "normal" => Method::Normal,
            "subword-mean" => Method::SubwordMean,
            "omp" => Method::Omp,
            "knn" => Method::Knn,
            _ => match s.strip_prefix("copy:") {
                Some(t) if !t.is_empty() => Method::Copy(t.to_string()),
                _ => {
                    return Err(format!(
                    "unknown --init '{s}': mean, hewitt, zeros, normal, subword-mean, omp or copy:TOKEN"
                ))
                }
            },
        })
    }

    /// The name as `--init` spells it (the report's `init`).
    pub fn name(&self) -> String {
        match self {
            Method::Mean => "mean".into(),
            Method::Hewitt => "hewitt".into(),
            Method::Zeros => "zeros".into(),
            Method::Normal => "normal".into(),
            Method::SubwordMean => "subword-mean".into(),
            Method::Copy(t) => format!("copy:{t}"),
            Method::Omp => "omp".into(),
            Method::Knn => "knn".into(),
        }
    }
}

/// What resolving an init needs: the method and its parameters, and the tokenizers it may read.
#[derive(Debug, Clone)]
pub struct InitOptions {
    pub method: Method,
    /// ε of `hewitt` (transformers uses 1e-9).
    pub epsilon: f64,
    /// Standard deviation of `normal`.
    pub std: f64,
    pub seed: u64,
    /// The base tokenizer (`--base-tokenizer`): `subword-mean` splits new tokens with it.
    pub base_tokenizer: Option<PathBuf>,
    /// The merged tokenizer the target rows come from (`--tokenizer`), when they do.
    pub tokenizer: Option<PathBuf>,
}

impl InitOptions {
    /// `method` with `seed`, the other parameters at extend-embeddings' defaults.
    pub fn new(method: Method, seed: u64) -> InitOptions {
        InitOptions {
            method,
            epsilon: 1e-9,
            std: 0.02,
            seed,
            base_tokenizer: None,
            tokenizer: None,
        }
    }
}

/// Token id for `copy:TOKEN`: a number, or a token of the base / merged tokenizer.
fn donor_id(token: &str, tokenizers: &[&Path]) -> Result<usize> {
    if let Ok(i) = token.parse::<usize>() {
        return Ok(i);
    }
    for p in tokenizers {
        if let Some(id) = load_tokenizer(p)
            .ok()
            .and_then(|b| b.ids().get(token).copied())
        {
            return Ok(id as usize);
        }
    }
    Err(Error::arg(
        "--init",
        format!("--init copy:{token}: not an id, and no given tokenizer has that token"),
    ))
}

/// The init method, resolved against the tokenizers it needs (added to `inputs`, which outputs
/// must never overwrite).
pub fn resolve_init(
    opts: &InitOptions,
    old_rows: u64,
    new_rows: u64,
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<Init> {
    Ok(match &opts.method {
        Method::Mean => Init::Mean,
        Method::Hewitt => Init::Hewitt {
            epsilon: opts.epsilon,
            seed: opts.seed,
        },
        Method::Zeros => Init::Zeros,
        Method::Normal => Init::Normal {
            std: opts.std,
            seed: opts.seed,
        },
        Method::Copy(tok) => {
            let mut ts: Vec<&Path> = opts.base_tokenizer.iter().map(PathBuf::as_path).collect();
            if let Some(p) = &opts.tokenizer {
                ts.push(p);
            }
            let id = donor_id(tok, &ts)?;
            if id as u64 >= old_rows {
                return Err(Error::arg(
                    "--init",
                    format!("--init copy:{tok}: id {id} is not an old row (< {old_rows})"),
                ));
            }
            Init::Copy(id)
        }
        Method::SubwordMean => {
            let (Some(merged), Some(base)) = (&opts.tokenizer, &opts.base_tokenizer) else {
                // The flag to add: the merged tokenizer first, then the base's.
                let missing = match opts.tokenizer {
                    Some(_) => "--base-tokenizer",
                    None => "--tokenizer",
                };
                return Err(Error::arg(
                    missing,
                    "--init subword-mean needs --tokenizer MERGED and --base-tokenizer BASE",
                ));
            };
            inputs.push(base.clone());
            let ids: Vec<u64> = (old_rows..new_rows).collect();
            Init::SubwordMean(subword_lists(merged, base, old_rows, &ids, fallbacks)?)
        }
        Method::Omp => {
            return Err(Error::arg(
                "--init",
                "--init omp takes a donor model: it is an extend-embeddings init (--donor)",
            ))
        }
        Method::Knn => {
            return Err(Error::arg(
                "--init",
                "--init knn takes a donor model: it is a transplant-tokenizer init (--donor)",
            ))
        }
    })
}
