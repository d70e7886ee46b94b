//! How the new rows are made: `--init` resolved against the tokenizers and the donor it needs.

use super::init::Init;
use super::subword::subword_lists;
use super::{donor, Method, Options, Target};
use crate::error::{Error, Result};
use crate::tokenizer::base::load_tokenizer;
use std::path::{Path, PathBuf};

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
pub(crate) fn resolve_init(
    opts: &Options,
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
            if let Target::Tokenizer(p) = &opts.target {
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
            let (Target::Tokenizer(merged), Some(base)) = (&opts.target, &opts.base_tokenizer)
            else {
                // The flag to add: the merged tokenizer first, then the base's.
                let missing = match opts.target {
                    Target::Tokenizer(_) => "--base-tokenizer",
                    Target::Rows(_) => "--tokenizer",
                };
                return Err(Error::arg(
                    missing,
                    "--init subword-mean needs --tokenizer MERGED and --base-tokenizer BASE",
                ));
            };
            inputs.push(base.clone());
            Init::SubwordMean(subword_lists(merged, base, old_rows, new_rows, fallbacks)?)
        }
        Method::Omp => {
            return Err(Error::arg(
                "--init",
                "--init omp takes a donor model: it is an extend-embeddings init (--donor)",
            ))
        }
    })
}

/// A folder's own tokenizer stands for `--base-tokenizer` when an init needs the base's
/// tokenizer and none was given; the note says so.
pub(super) fn with_own_tokenizer(
    input: &Path,
    opts: &Options,
) -> (Option<Options>, Option<String>) {
    let needs = matches!(opts.method, Method::SubwordMean | Method::Copy(_));
    if !needs || opts.base_tokenizer.is_some() || !input.is_dir() {
        return (None, None);
    }
    let Some(own) = donor::folder_tokenizer(input) else {
        return (None, None);
    };
    let note = format!(
        "base tokenizer: {} (the folder's own; --base-tokenizer names another)",
        own.display()
    );
    let mut o = opts.clone();
    o.base_tokenizer = Some(own);
    (Some(o), Some(note))
}

/// How the new rows are made: the init, the donor's report for omp, and the tokens that fell
/// back to the mean.
#[allow(clippy::type_complexity)]
pub(super) fn choose_init(
    input: &Path,
    opts: &Options,
    rows: (u64, u64),
    untied: bool,
    inputs: &mut Vec<PathBuf>,
) -> Result<(Init, Option<donor::DonorReport>, Vec<String>)> {
    let mut fallbacks = Vec::new();
    let (init, donor_report) = match opts.method {
        // A tied base's head is its embedding: one pursuit, the bias by its coefficients.
        Method::Omp => {
            let (i, r) = donor::plan(input, opts, rows, untied, inputs, &mut fallbacks)?;
            (i, Some(r))
        }
        _ if opts.donor.is_some() => {
            return Err(Error::arg(
                "--donor",
                "--donor is for --init omp: add --init omp, or leave --donor out",
            ))
        }
        _ => (
            resolve_init(opts, rows.0, rows.1, inputs, &mut fallbacks)?,
            None,
        ),
    };
    Ok((init, donor_report, fallbacks))
}
