//! What a ZeRO checkpoint's parameters mean for a vocabulary change, as the row-surgery
//! interface asks: which trainable parameters are vocabulary matrices (detected from
//! `param_shapes`, or named), and per parameter the entries that change with it — the module's
//! weight (stages 1 and 2; stage 3 keeps none whole), the fp32 master copy on every rank, and the
//! Adam moments.

use crate::error::{Error, Result};
use crate::formats::vocabulary::{self as interface, Entry};
use crate::formats::zero::Zero;
use crate::plan::Role;

/// The vocabulary parameters' names and roles: `named` (roles by name), or detected among the
/// trainable and frozen parameters; refused when none or several row counts are candidates.
fn vocabulary(z: &Zero, named: &[String]) -> Result<Vec<Entry>> {
    if !named.is_empty() {
        return named
            .iter()
            .map(|n| {
                let shape = z.param(n).map(|p| p.shape.clone()).unwrap_or_default();
                Ok(interface::named(n, &shape))
            })
            .collect();
    }
    let all = z
        .params
        .iter()
        .map(|p| (p.name.as_str(), &p.shape[..]))
        .chain(z.frozen.iter().map(|(n, s)| (n.as_str(), &s[..])));
    let det = crate::vocab::detect(all);
    if det.vocabulary.is_some() {
        return Ok(interface::weights(&det));
    }
    if det.ambiguous.is_empty() {
        return Err(Error::format(
            &z.dir,
            "no vocabulary matrix among the parameters: name it with --tensor",
        ));
    }
    let rows: Vec<String> = det.ambiguous.iter().map(|g| g.rows.to_string()).collect();
    Err(Error::format(
        &z.dir,
        format!(
            "several candidate vocabulary sizes ({}): name the matrices with --tensor",
            rows.join(", ")
        ),
    ))
}

/// The interface's answer for a ZeRO checkpoint: per vocabulary parameter (in `param_shapes`
/// order as detected, or as named) its module weight (stages 1/2), its master copy and its
/// moments, all of the parameter's shape. A frozen or unknown parameter is refused by name.
pub fn entries(z: &Zero, named: &[String]) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for w in vocabulary(z, named)? {
        let n = &w.tensor;
        if z.frozen.iter().any(|(f, _)| f == n) {
            return Err(Error::format(
                &z.dir,
                format!("'{n}' is a frozen parameter (frozen_param_shapes): resizing frozen ZeRO parameters is not supported"),
            ));
        }
        let p = z.param(n).ok_or_else(|| {
            Error::format(
                &z.dir,
                format!("no trainable parameter '{n}' in param_shapes"),
            )
        })?;
        if z.stage < 3 {
            out.push(Entry::weight(n, w.role, &p.shape));
        }
        out.push(Entry::state(n, Role::MasterCopy, &p.shape, n));
        out.push(Entry::state(n, Role::Moment, &p.shape, n));
    }
    Ok(out)
}
