//! One donor pursuit per donor matrix: each target the donor has, as a combination of shared
//! tokens' rows (the solver: omp or knn), the main init's and the held-out report's alike.

use super::read::{rows_f32, Matrix};
use crate::error::Result;
use crate::formats::Tensors;
use crate::rows::device::Device;
use crate::rows::init::omp::{Combination, Rows};
use crate::vocab::Role;
use serde::Serialize;

/// How a target's donor row becomes a combination of shared tokens' donor rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Solver {
    /// Orthogonal matching pursuit with at most k atoms (`Device::omp`: CPU or CUDA).
    #[default]
    Omp,
    /// The k nearest shared tokens in the donor's space, weighted (tokensurgeon's
    /// `common_interpolation`; `init::knn`, CPU only).
    Knn(crate::rows::init::knn::Knn),
}

/// Per donor matrix, each target's combination (None: the donor lacks the token).
pub(super) type Combinations = Vec<Vec<Option<Combination>>>;

/// What every pursuit of one donor init shares: the donor, the shared and the found tokens.
pub(super) struct Pursuits<'a> {
    pub(super) ckpt: &'a Tensors,
    pub(super) shared: &'a [(u32, u32)],
    /// Targets the donor has: (position in targets, donor id).
    pub(super) found: &'a [(usize, u32)],
    /// How many targets.
    pub(super) targets: usize,
    pub(super) solver: Solver,
    pub(super) device: &'a Device,
    /// A donor id as the user knows it (its token), for errors.
    pub(super) what: &'a dyn Fn(u32) -> String,
}

impl Pursuits<'_> {
    /// One pursuit per donor matrix: each target the donor has as a combination of the base's
    /// rows of shared tokens (the atoms are base ids), and the pursuit's report.
    pub(super) fn run(
        &self,
        mats: &[Matrix],
        k: usize,
    ) -> Result<(Combinations, Vec<PursuitReport>)> {
        let dn_ids: Vec<u32> = self.shared.iter().map(|s| s.1).collect();
        let tg_ids: Vec<u32> = self.found.iter().map(|f| f.1).collect();
        let (mut combos, mut pursuits) = (Vec::new(), Vec::new());
        for (name, role, _, cols) in mats {
            let dict = rows_f32(self.ckpt, name, &dn_ids, self.what)?;
            let ys = rows_f32(self.ckpt, name, &tg_ids, self.what)?;
            let dr = Rows {
                data: &dict,
                rows: dn_ids.len(),
                cols: *cols,
            };
            let yr = Rows {
                data: &ys,
                rows: tg_ids.len(),
                cols: *cols,
            };
            let got = self.solve(dr, yr, k)?;
            pursuits.push(pursuit_report(name, *role, dr, yr, &got));
            let mut rows: Vec<Option<Combination>> = vec![None; self.targets];
            for ((j, _), mut c) in self.found.iter().zip(got) {
                c.atoms
                    .iter_mut()
                    .for_each(|a| *a = self.shared[*a].0 as usize);
                rows[*j] = Some(c);
            }
            combos.push(rows);
        }
        Ok((combos, pursuits))
    }

    /// Each target row as a combination of at most k dictionary rows, by the solver.
    pub(super) fn solve(&self, dict: Rows, ys: Rows, k: usize) -> Result<Vec<Combination>> {
        Ok(match self.solver {
            Solver::Omp => self.device.omp(dict, ys, k)?,
            Solver::Knn(how) => crate::rows::init::knn::knn(dict, ys, k, how),
        })
    }
}

/// One pursuit: the donor matrix it read and how well it did.
#[derive(Debug, Clone, Serialize)]
pub struct PursuitReport {
    pub donor_tensor: String,
    /// `embedding`, or `head` (the base's head and its bias).
    pub used_for: String,
    pub mean_atoms: f64,
    /// Mean ‖donor row − its combination‖ / ‖donor row‖.
    pub mean_relative_residual: f64,
}

/// One pursuit's figures: mean atoms and mean relative residual over its targets.
pub(crate) fn pursuit_report(
    name: &str,
    role: Role,
    dict: Rows,
    ys: Rows,
    got: &[Combination],
) -> PursuitReport {
    let n = got.len().max(1) as f64;
    let resid: f64 = got
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let y = ys.row(i);
            let mut r: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
            for (&a, &x) in c.atoms.iter().zip(&c.coefs) {
                for (o, &v) in r.iter_mut().zip(dict.row(a)) {
                    *o -= x * f64::from(v);
                }
            }
            let yy: f64 = y.iter().map(|&v| f64::from(v).powi(2)).sum();
            if yy == 0.0 {
                0.0
            } else {
                (r.iter().map(|v| v * v).sum::<f64>() / yy).sqrt()
            }
        })
        .sum();
    PursuitReport {
        donor_tensor: name.to_string(),
        used_for: if role == Role::Head {
            "head"
        } else {
            "embedding"
        }
        .into(),
        mean_atoms: got.iter().map(|c| c.atoms.len()).sum::<usize>() as f64 / n,
        mean_relative_residual: resid / n,
    }
}
