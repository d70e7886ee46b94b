//! The glue every row-map job (trim-vocab, transplant-tokenizer) needs between its plan and a
//! training checkpoint's optimizer state: the plan's row map and vocabulary tensors handed to the
//! layout's gatherer ([`super::apply`]), the moved entries and the weights' names as the
//! checkpoint's reader gives them written back into the job's report. Each job's report answers
//! [`Planned`]; the jobs keep only their own decisions.

use super::apply::{
    gather_trainer_optimizer, training_optimizer, zero_beside_optimizer, Optimizer, DROPPED_IN_FILE,
};
use crate::error::{Error, Result};
pub use crate::formats::torch::optimizer::gather::Moved;
use crate::formats::trainer::Trainer;
use crate::formats::zero::Zero;
use crate::formats::Training;
use crate::rowmap::RowMap;
use crate::ties::Tie;
use std::path::Path;

/// What a row-map job's report says that the optimizer glue reads and writes.
pub(crate) trait Planned {
    /// The old → new row map (None: no vocabulary matrix).
    fn row_map(&self) -> Option<&RowMap>;
    /// The tensors the map changes (tie followers left out).
    fn vocab(&self) -> Vec<String>;
    fn ties(&self) -> &[Tie];
    /// The optimizer entries moved with the rows.
    fn set_moved(&mut self, moved: Vec<Moved>);
    /// Every changed tensor's name (and its ties') renamed by `to`.
    fn rename(&mut self, to: &dyn Fn(&str) -> String);
    fn warn(&mut self, line: String);
}

/// The plan's row map, or the refusal of `path` that has no vocabulary matrix to `what`.
fn map_of(p: &impl Planned, path: &Path, what: &str) -> Result<RowMap> {
    p.row_map()
        .cloned()
        .ok_or_else(|| Error::format(path, format!("no vocabulary matrix to {what}")))
}

/// A training checkpoint ([`Training`]: a torch training file, ZeRO, DCP) whose weights the plan
/// was made on: its optimizer state moved by the plan's map (`drop`: removed, where the layout
/// allows), the report's names as the checkpoint's reader gives them.
pub(crate) fn training<'c>(
    p: &mut impl Planned,
    tr: &'c Training<'c>,
    (pinned, drop): (&[(String, u64)], bool),
    what: &str,
) -> Result<Optimizer<'c>> {
    let map = map_of(p, &tr.weights().path, what)?;
    let (optimizer, moved) = training_optimizer(tr, p.ties(), &p.vocab(), &map, (pinned, drop))?;
    p.rename(&|n| tr.weight_name(n).to_string());
    if drop {
        p.warn(DROPPED_IN_FILE.into());
    }
    p.set_moved(moved);
    Ok(optimizer)
}

/// A Hugging Face Trainer folder's optimizer.pt moved by the plan's map.
pub(crate) fn trainer<'t>(
    p: &mut impl Planned,
    t: &'t Trainer,
    pinned: &[(String, u64)],
    what: &str,
) -> Result<Optimizer<'t>> {
    let map = map_of(p, &t.dir, what)?;
    let (layout, moved) = gather_trainer_optimizer(t, p.ties(), &p.vocab(), &map, pinned)?;
    p.set_moved(moved);
    Ok(layout)
}

/// A DeepSpeed run's Trainer checkpoint, the plan made on the weights beside `global_step*/`:
/// the ZeRO state moved by the same map into the same folder.
pub(crate) fn zero_beside<'c>(
    p: &mut impl Planned,
    z: &'c Zero,
    drop: bool,
    what: &str,
) -> Result<Optimizer<'c>> {
    let map = map_of(p, z.path(), what)?;
    let (optimizer, moved) = zero_beside_optimizer(z, &p.vocab(), &map, drop)?;
    p.set_moved(moved);
    Ok(optimizer)
}

/// The [`Planned`] answers of a job's report with the row-map jobs' fields (`row_map`,
/// `changed` with `name` and `tied`, `ties`, `optimizer`, `warnings`).
macro_rules! planned_report {
    ($report:ty) => {
        impl $crate::rows::moves::Planned for $report {
            fn row_map(&self) -> Option<&$crate::rowmap::RowMap> {
                self.row_map.as_ref()
            }
            fn vocab(&self) -> Vec<String> {
                // A logits bias [1, V] is a buffer: no optimizer holds state for it.
                self.changed
                    .iter()
                    .filter(|c| $crate::vocab::row_axis(&c.name, &c.old_shape) == 0)
                    .map(|c| c.name.clone())
                    .collect()
            }
            fn ties(&self) -> &[$crate::ties::Tie] {
                &self.ties
            }
            fn set_moved(&mut self, moved: Vec<$crate::formats::torch::optimizer::gather::Moved>) {
                self.optimizer = moved;
            }
            fn rename(&mut self, to: &dyn Fn(&str) -> String) {
                for c in &mut self.changed {
                    c.name = to(&c.name);
                    for t in &mut c.tied {
                        *t = to(t);
                    }
                }
            }
            fn warn(&mut self, line: String) {
                self.warnings.push(line);
            }
        }
    };
}
pub(crate) use planned_report;
