//! How the rows of tokens the base lacks are made: `--init` resolved for the made ids (in new-id
//! order), padding rows last (the column mean where a method needs a token). subword-mean splits
//! each token's text into the base's pieces; omp and knn rebuild the donor's row of it from
//! shared tokens (`rows::donor`), the base's row being the same combination of the base's rows.

use super::matching::Matching;
use super::options::Options;
use crate::error::{Error, Result};
use crate::rows::donor::{self, BaseRows, DonorReport, DonorRequest, Solver};
use crate::rows::init::Init;
use crate::rows::subword::subword_lists;
use crate::rows::Method;
use crate::tokenizer::base::Base;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What resolving the init reads: the two tokenizers, the base's rows, whether the base has a
/// head of its own.
pub(super) struct Sources<'a> {
    /// The base's own vocabulary matrices (tie followers left out): the held-out report's truth.
    pub base: BaseRows<'a>,
    pub base_tokenizer: &'a Path,
    pub new_tokenizer: &'a Path,
    /// Those two as the job loaded them (the donor init reads them, not their files again).
    pub loaded: (&'a Base, &'a Base),
    pub old_rows: u64,
    pub untied_head: bool,
}

/// The init for the made rows of `m`, and the donor's report for omp and knn.
pub(super) fn resolve(
    opts: &Options,
    m: &Matching,
    src: &Sources<'_>,
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<(Init, Option<DonorReport>)> {
    let targets: Vec<u64> = m.made.iter().map(|t| t.id).collect();
    let padding = m.padding_rows as usize;
    let init = match &opts.method {
        Method::Mean => Init::Mean,
        Method::Zeros => Init::Zeros,
        Method::Normal => Init::Normal {
            std: 0.02,
            seed: opts.seed,
        },
        Method::Hewitt => Init::Hewitt {
            epsilon: 1e-9,
            seed: opts.seed,
        },
        Method::SubwordMean => {
            let mut lists = subword_lists(
                src.new_tokenizer,
                src.base_tokenizer,
                src.old_rows,
                &targets,
                fallbacks,
            )?;
            lists.extend(std::iter::repeat_n(None, padding));
            Init::SubwordMean(lists)
        }
        Method::Omp | Method::Knn => return from_donor(opts, &targets, padding, src, inputs, fallbacks),
        Method::Copy(_) => {
            return Err(Error::arg(
                "--init",
                "--init copy:TOKEN is not a transplant init: mean, subword-mean, omp, knn, hewitt, zeros or normal",
            ))
        }
    };
    if opts.donor.is_some() {
        return Err(Error::arg(
            "--donor",
            "--donor is for --init omp or knn: add one of them, or leave --donor out",
        ));
    }
    Ok((init, None))
}

/// omp / knn: each target the donor has rebuilt from shared tokens; padding rows the mean.
fn from_donor(
    opts: &Options,
    targets: &[u64],
    padding: usize,
    src: &Sources<'_>,
    inputs: &mut Vec<PathBuf>,
    fallbacks: &mut Vec<String>,
) -> Result<(Init, Option<DonorReport>)> {
    let d = opts.donor.as_ref().ok_or_else(|| {
        Error::arg(
            "--donor",
            format!(
                "--init {} needs --donor DONOR (a model folder, or its weight file with --donor-tokenizer)",
                opts.method.name()
            ),
        )
    })?;
    let solver = match opts.method {
        Method::Knn => Solver::Knn(Default::default()),
        _ => Solver::Omp,
    };
    let req = DonorRequest {
        donor: &d.path,
        donor_tokenizer: d.tokenizer.as_deref(),
        k: d.k,
        seed: opts.seed,
        base: src.base,
        base_tokenizer: src.base_tokenizer,
        new_tokenizer: src.new_tokenizer,
        loaded: Some(src.loaded),
        old_rows: src.old_rows,
        targets,
        untied_head: src.untied_head,
        open: &opts.open,
        device: opts.device,
        solver,
    };
    let (init, report) = donor::plan(&req, inputs, fallbacks)?;
    let init = match init {
        Init::Donor { embedding, head } => Init::Donor {
            embedding: padded(embedding, padding),
            head: padded(head, padding),
        },
        other => other,
    };
    Ok((init, Some(report)))
}

/// Combinations with `n` padding rows (None: the column mean) after them.
fn padded<T: Clone>(rows: Arc<Vec<Option<T>>>, n: usize) -> Arc<Vec<Option<T>>> {
    if n == 0 {
        return rows;
    }
    let mut v = (*rows).clone();
    v.extend(std::iter::repeat_n(None, n));
    Arc::new(v)
}
