//! trim-vocab's [`Plan`]: every vocabulary tensor with its row map, the tensors tied to it, the
//! optimizer moments gathered with them, and the files beside the weights it changes.

use super::files::MAP_FILE;
use super::report::Report;
use crate::plan::{Edit, KeyChange, Plan, Role, RowSource, SideEdit, SideWhat};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The plan of trimming `input` into `output`, from the planner's report.
pub fn to_plan(r: &Report, input: &Path, output: &Path) -> Plan {
    let (layout, folder) = r.layout;
    let layout = if folder {
        format!("{layout} ({})", r.format.name())
    } else {
        layout.to_string()
    };
    let mut plan = Plan::new("trim-vocab", input, output, layout, r);
    let mapped = RowSource::Mapped {
        from: r
            .row_map
            .as_ref()
            .and_then(|m| serde_json::to_value(m).ok())
            .unwrap_or_default(),
    };
    for c in &r.changed {
        let edit = |tensor: &str, role, rows: RowSource| Edit {
            tensor: tensor.to_string(),
            role,
            from: c.old_shape.clone(),
            to: c.new_shape.clone(),
            rows,
        };
        plan.edits
            .push(edit(&c.name, Role::from(c.role), mapped.clone()));
        for t in &c.tied {
            let role = crate::vocab::role_by_name(t).map_or(Role::Head, Role::from);
            plan.edits.push(edit(
                t,
                role,
                RowSource::Tied {
                    follows: c.name.clone(),
                },
            ));
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
    plan.side_files = side_files(r, folder);
    plan
}

fn side_files(r: &Report, folder: bool) -> Vec<SideEdit> {
    let mut side: Vec<SideEdit> = r
        .edited
        .iter()
        .filter_map(|e| {
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
                file: PathBuf::from(e.file.file_name()?),
                what: SideWhat::Keys { changes },
            })
        })
        .collect();
    if folder {
        let name = match r.tokenizer.extension().and_then(|e| e.to_str()) {
            Some("json") => "tokenizer.json",
            _ => "tokenizer.model",
        };
        side.push(SideEdit {
            file: name.into(),
            what: SideWhat::Written {
                why: "the trimmed tokenizer".into(),
            },
        });
        side.push(SideEdit {
            file: MAP_FILE.into(),
            what: SideWhat::Written {
                why: "old id → new id".into(),
            },
        });
    }
    side
}

fn parse(text: &Option<String>) -> Value {
    text.as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}
