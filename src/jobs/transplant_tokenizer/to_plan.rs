//! transplant-tokenizer's [`Plan`]: every vocabulary tensor with its row map (new id → old row or
//! init), the tensors tied to it, and the files beside the weights it changes (config files'
//! keys, the new tokenizer's files).

use super::report::Report;
use crate::plan::{Edit, KeyChange, Plan, Role, RowSource, SideEdit, SideWhat};
use serde_json::Value;
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
    let mapped = RowSource::Mapped {
        from: r
            .row_map
            .as_ref()
            .and_then(|m| serde_json::to_value(m).ok())
            .unwrap_or_default(),
    };
    for c in &r.changed {
        let role = Role::from(c.role);
        plan.edits.push(Edit {
            tensor: c.name.clone(),
            role,
            from: c.old_shape.clone(),
            to: c.new_shape.clone(),
            rows: mapped.clone(),
        });
        for t in &c.tied {
            let role = crate::vocab::role_by_name(t).map_or(Role::Head, Role::from);
            plan.edits.push(Edit {
                tensor: t.clone(),
                role,
                from: c.old_shape.clone(),
                to: c.new_shape.clone(),
                rows: RowSource::Tied {
                    follows: c.name.clone(),
                },
            });
        }
    }
    for m in &r.optimizer {
        plan.edits.push(Edit {
            tensor: m.tensor.clone(),
            role: Role::Moment,
            from: m.old_shape.clone(),
            to: m.new_shape.clone(),
            rows: mapped.clone(),
        });
    }
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
                .map(|c| KeyChange {
                    key: c.key.clone(),
                    old: parse(&c.old),
                    new: parse(&c.new),
                })
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
    side
}

/// A changed value's compact text as JSON (null: absent).
fn parse(text: &Option<String>) -> Value {
    text.as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}
