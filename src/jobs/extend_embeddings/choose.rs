//! How the new rows are made: `--init` resolved against the tokenizers and the donor it needs.

use super::donor;
use super::options::{Options, Target};
use crate::error::{Error, Result};
use crate::rows::init::Init;
use crate::rows::Method;
use crate::rows::{self, InitOptions};
use crate::tokenizer::base::folder_tokenizer;
use std::path::{Path, PathBuf};

/// The init method, resolved against the tokenizers it needs (added to `inputs`, which outputs
/// must never overwrite): extend-embeddings' options narrowed to [`InitOptions`].
pub(crate) fn resolve_init(
    opts: &Options,
    old_rows: u64,
    new_rows: u64,
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<Init> {
    let how = InitOptions {
        method: opts.method.clone(),
        epsilon: opts.epsilon,
        std: opts.std,
        seed: opts.seed,
        base_tokenizer: opts.base_tokenizer.clone(),
        tokenizer: match &opts.target {
            Target::Tokenizer(p) => Some(p.clone()),
            Target::Rows(_) => None,
        },
    };
    rows::resolve_init(&how, old_rows, new_rows, inputs, fallbacks)
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
    let Some(own) = folder_tokenizer(input) else {
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
    base: (crate::rows::donor::BaseRows, bool),
    inputs: &mut Vec<PathBuf>,
) -> Result<(Init, Option<donor::DonorReport>, Vec<String>)> {
    let mut fallbacks = Vec::new();
    let (init, donor_report) = match opts.method {
        // A tied base's head is its embedding: one pursuit, the bias by its coefficients.
        Method::Omp => {
            let (i, r) = donor::plan(input, opts, rows, base, inputs, &mut fallbacks)?;
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
