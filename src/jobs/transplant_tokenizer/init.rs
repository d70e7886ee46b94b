//! How the rows of tokens the base lacks are made: `--init` resolved for the made ids (in new-id
//! order; padding rows last, by the column mean where a method needs a token).

use super::matching::Matching;
use super::options::Options;
use crate::error::{Error, Result};
use crate::rows::init::Init;
use crate::rows::Method;

/// The init for the made rows of `m`.
pub(super) fn resolve(opts: &Options, _m: &Matching, _fallbacks: &mut Vec<String>) -> Result<Init> {
    Ok(match &opts.method {
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
        other => {
            return Err(Error::arg(
                "--init",
                format!(
                    "--init {} is not a transplant init: mean, hewitt, zeros or normal",
                    other.name()
                ),
            ))
        }
    })
}
