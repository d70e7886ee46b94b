//! trim-vocab's [`Plan`]: every vocabulary tensor with its row map, the tensors tied to it, the
//! optimizer moments gathered with them, and the files beside the weights it changes.

use super::files::MAP_FILE;
use super::report::Report;
use crate::plan::{Gathered, KeyChange, Plan, Role, SideEdit, SideWhat};
use crate::rows::moves::Moved;
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
    let tensors = r.changed.iter().map(|c| Gathered {
        tensor: &c.name,
        role: Role::from(c.role),
        from: &c.old_shape,
        to: &c.new_shape,
        tied: &c.tied,
    });
    let moments = r.optimizer.iter().map(Moved::plan_entry);
    plan.push_gathered(r.row_map.as_ref(), tensors, moments);
    plan.side_files = side_files(r, r.folder_out);
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
                .map(|c| KeyChange::from_text(&c.key, c.old.as_deref(), c.new.as_deref()))
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
    side.extend(
        r.left_planned
            .iter()
            .map(|(file, why)| SideEdit::left_out(file, why)),
    );
    side
}
