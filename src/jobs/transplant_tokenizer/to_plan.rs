//! transplant-tokenizer's [`Plan`]: every vocabulary tensor with its row map (new id → old row or
//! init), the tensors tied to it, and the files beside the weights it changes (config files'
//! keys, the new tokenizer's files).

use super::report::Report;
use crate::plan::{Gathered, KeyChange, Plan, Role, SideEdit, SideWhat};
use crate::rows::moves::Moved;
use std::path::{Path, PathBuf};

/// The plan of transplanting into `output`, from the planner's report and its row map.
pub fn to_plan(r: &Report, input: &Path, output: &Path) -> Plan {
    let (layout, folder) = r.layout;
    let layout = if folder {
        format!("{layout} ({})", r.format.name())
    } else {
        layout.to_string()
    };
    let mut plan = Plan::new("transplant-tokenizer", input, output, layout, r);
    let tensors = r.changed.iter().map(|c| Gathered {
        tensor: &c.name,
        role: Role::from(c.role),
        from: &c.old_shape,
        to: &c.new_shape,
        tied: &c.tied,
    });
    let moments = r.optimizer.iter().map(Moved::plan_entry);
    plan.push_gathered(r.row_map.as_ref(), tensors, moments);
    plan.side_files = side_files(r);
    plan
}

/// The keys of the config files the run edits, and the tokenizer files it writes.
fn side_files(r: &Report) -> Vec<SideEdit> {
    let mut side: Vec<SideEdit> = r
        .edited
        .iter()
        .filter_map(|e| {
            let file = PathBuf::from(e.file.file_name()?);
            let changes = e
                .changes
                .iter()
                .map(|c| KeyChange::from_text(&c.key, c.old.as_deref(), c.new.as_deref()))
                .collect();
            Some(SideEdit {
                file,
                what: SideWhat::Keys { changes },
            })
        })
        .collect();
    for (name, from) in &r.tokenizer_sources {
        side.push(SideEdit {
            file: PathBuf::from(name),
            what: SideWhat::Replaced { from: from.clone() },
        });
    }
    side.extend(
        r.left_planned
            .iter()
            .map(|(file, why)| SideEdit::left_out(file, why)),
    );
    side
}
