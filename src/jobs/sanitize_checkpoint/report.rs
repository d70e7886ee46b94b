//! What sanitize-checkpoint answers for a torch training checkpoint file or a Trainer folder: the
//! report (`rows::layout::report`, as `--json` prints it) and its human rendering.

use crate::rows::layout::options::{OptimizerAction, SchedulerAction};
pub use crate::rows::layout::report::{
    Finding, NonFinite, OptimizerReport, PlannedTensor, Report, Resized, SameShape,
};
use crate::ties;
use std::fmt::Write as _;

/// The human report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {}, model under '{}', vocabulary {} rows → target {}",
        r.input.display(),
        r.format.name(),
        r.model_key,
        r.old_rows,
        r.target_rows
    );
    for t in &r.ties {
        let _ = writeln!(s, "tied: {}", ties::render(t));
    }
    render_before(&mut s, r);
    for c in &r.model_changed {
        let _ = writeln!(
            s,
            "model: {} {:?} → {:?}",
            c.tensor, c.old_shape, c.new_shape
        );
    }
    for o in &r.optimizers {
        render_optimizer(&mut s, o);
    }
    if let Some((k, a)) = &r.scheduler {
        let _ = writeln!(
            s,
            "scheduler '{k}': {}",
            if *a == SchedulerAction::Drop {
                "dropped"
            } else {
                "kept"
            }
        );
    }
    for n in &r.nonfinite {
        let _ = writeln!(
            s,
            "non-finite: {} has {} NaN, {} Inf",
            n.tensor, n.nan, n.inf
        );
    }
    let _ = writeln!(s, "freeze_until_index: {}", r.freeze_until_index);
    render_outcome(&mut s, r);
    s
}

/// What did not fit the target before.
fn render_before(s: &mut String, r: &Report) {
    if r.inconsistent_before.is_empty() {
        let _ = writeln!(s, "before: consistent with the target");
        return;
    }
    let _ = writeln!(
        s,
        "before: {} tensors do not fit {} rows:",
        r.inconsistent_before.len(),
        r.target_rows
    );
    for f in &r.inconsistent_before {
        let _ = writeln!(s, "  {} {:?}", f.tensor, f.found_shape);
    }
}

/// One optimizer: its parameters, then what was done to it.
fn render_optimizer(s: &mut String, o: &OptimizerReport) {
    let mut map: Vec<String> = o
        .vocabulary_params
        .iter()
        .map(|(i, n)| format!("param {i} = {n}"))
        .collect();
    map.extend(o.same_shape.iter().map(SameShape::describe));
    let map = if map.is_empty() {
        "no vocabulary parameter".to_string()
    } else {
        map.join(", ")
    };
    // A dropped optimizer is not matched: nothing to say about its parameters.
    let how = if o.action == OptimizerAction::Drop {
        String::new()
    } else {
        format!("; {map} (matched by {})", o.matched_by)
    };
    let _ = writeln!(
        s,
        "optimizer '{}': {} groups, {} params{how}",
        o.key, o.param_groups, o.params
    );
    match o.action {
        OptimizerAction::Repair => {
            for c in &o.repaired {
                let _ = writeln!(
                    s,
                    "  repaired {} {:?} → {:?} ({})",
                    c.tensor,
                    c.old_shape,
                    c.new_shape,
                    repaired_rows(c)
                );
            }
            let _ = writeln!(s, "  kept byte-identical: the state of {} other parameters, step counts, param_groups", o.kept_state_entries);
        }
        OptimizerAction::Drop => {
            let _ = writeln!(
                s,
                "  dropped (with the scheduler): the training script starts a fresh optimizer"
            );
        }
        OptimizerAction::Keep => {
            let _ = writeln!(s, "  kept as it was");
        }
    }
}

/// What a repaired moment's rows became: cut, or new rows at their fill.
fn repaired_rows(c: &Resized) -> String {
    let rows = |v: &[u64]| v.first().copied().unwrap_or(0);
    if rows(&c.new_shape) < rows(&c.old_shape) {
        return "rows past the target cut".to_string();
    }
    match c.fill {
        Some(f) if f != 0.0 => format!("new rows at {f}, its group's initial_accumulator_value"),
        _ => "new rows at 0".to_string(),
    }
}

/// Files carried, warnings, and whether (and what) anything was written.
fn render_outcome(s: &mut String, r: &Report) {
    s.push_str(&crate::output::json_text::render(&r.edited));
    s.push_str(&crate::output::folder::render_carried(
        &r.carried,
        &r.left_out,
    ));
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    if r.failed {
        let _ = writeln!(
            s,
            "failed: non-finite values found (--fail-on-nonfinite); nothing written"
        );
    } else if r.dry_run {
        let _ = writeln!(s, "dry run: nothing written");
    }
    for m in &r.manifest {
        let _ = writeln!(s, "{}", m.wrote());
    }
}
