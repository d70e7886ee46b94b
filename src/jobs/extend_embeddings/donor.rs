//! `--init omp` for extend-embeddings: its flags checked and its tokenizers found (the merged
//! one from `--tokenizer`, the base's from `--base-tokenizer` or the folder's own), then the
//! donor init ([`crate::rows::donor`]) asked for the merged tokenizer's new ids,
//! `old_rows..new_rows`.

pub use super::options::Donor;
use super::options::{Options, Target};
use crate::error::{Error, Result};
use crate::rows::donor::{self as rows_donor, BaseRows, DonorRequest, Solver};
pub use crate::rows::donor::{render, DonorReport, PursuitReport, Sample};
use crate::rows::init::Init;
use crate::tokenizer::base::folder_tokenizer;
use std::path::{Path, PathBuf};

/// The base's and the merged tokenizer (paths).
fn tokenizer_paths(input: &Path, opts: &Options) -> Result<(PathBuf, PathBuf)> {
    let Target::Tokenizer(merged) = &opts.target else {
        return Err(Error::arg(
            "--tokenizer",
            "--init omp needs --tokenizer MERGED (the new tokens are its ids past the base's)",
        ));
    };
    let base = match &opts.base_tokenizer {
        Some(b) => b.clone(),
        None => input
            .is_dir()
            .then(|| folder_tokenizer(input))
            .flatten()
            .ok_or_else(|| {
                Error::arg(
                    "--base-tokenizer",
                    format!(
                        "{}: --init omp needs the base's tokenizer: give --base-tokenizer",
                        input.display()
                    ),
                )
            })?,
    };
    Ok((base, merged.clone()))
}

/// `--donor` with its k, refusing what omp cannot do.
fn checked_donor(opts: &Options) -> Result<&Donor> {
    let d = opts.donor.as_ref().ok_or_else(|| {
        Error::arg(
            "--donor",
            "--init omp needs --donor DONOR (a model folder, or its weight file with --donor-tokenizer)",
        )
    })?;
    rows_donor::check_k(d.k)?;
    if opts.segments > 1 {
        return Err(Error::arg(
            "--segments",
            "--segments grows codebooks: --init omp names rows of one vocabulary",
        ));
    }
    Ok(d)
}

/// The donor init: the combinations for every new row, and its report (its held-out tokens
/// chosen by `--seed`, compared with the rows of `base`).
pub(crate) fn plan(
    input: &Path,
    opts: &Options,
    (old_rows, new_rows): (u64, u64),
    (base_rows, untied_head): (BaseRows, bool),
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<(Init, DonorReport)> {
    let d = checked_donor(opts)?;
    let (base, merged) = tokenizer_paths(input, opts)?;
    let targets: Vec<u64> = (old_rows..new_rows).collect();
    let req = DonorRequest {
        donor: &d.path,
        donor_tokenizer: d.tokenizer.as_deref(),
        k: d.k,
        seed: opts.seed,
        base: base_rows,
        base_tokenizer: &base,
        new_tokenizer: &merged,
        loaded: None,
        old_rows,
        targets: &targets,
        untied_head,
        open: &opts.open,
        device: opts.device,
        solver: Solver::Omp,
    };
    rows_donor::plan(&req, inputs, fallbacks)
}
