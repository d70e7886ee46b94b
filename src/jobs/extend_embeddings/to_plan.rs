//! extend-embeddings' [`Plan`]: its dry run's report with every tensor it grows and every file
//! beside the weights it changes.

use super::report::Report;
use super::{Options, Target};
use crate::plan::{Edit, KeyChange, Plan, Role, RowSource, SideEdit, SideWhat};
use std::path::{Path, PathBuf};

/// The plan of extending `input` into `output`, from the planner's report.
pub fn to_plan(r: &Report, input: &Path, output: &Path, opts: &Options) -> Plan {
    let (layout, folder) = r.layout;
    let layout = if folder {
        format!("{layout} ({})", r.format.name())
    } else {
        layout.to_string()
    };
    let mut plan = Plan::new("extend-embeddings", input, output, layout, r);
    let shape_of = |name: &str| r.tensors.iter().find(|t| t.name == name).map(|t| &t.shape);
    for t in &r.tensors {
        let (role, from, rows) = match (t.action, &t.follows) {
            ("grow", _) => {
                let Some(c) = r.changed.iter().find(|c| c.name == t.name) else {
                    continue;
                };
                let init = RowSource::Grown {
                    init: r.init.clone(),
                };
                (Role::from(c.role), c.old_shape.clone(), init)
            }
            ("tied", Some(f)) => {
                let Some(c) = r.changed.iter().find(|c| &c.name == f) else {
                    continue;
                };
                let role = crate::vocab::role_by_name(&t.name).map_or(Role::Head, Role::from);
                let tied = RowSource::Tied { follows: f.clone() };
                (role, c.old_shape.clone(), tied)
            }
            _ => continue,
        };
        let to = shape_of(&t.name).cloned().unwrap_or_default();
        plan.edits
            .push(Edit::resize(&t.name, role, &from, &to, rows));
    }
    if folder {
        plan.side_files = side_files(r, opts);
    }
    plan
}

/// A folder output's config.json keys and the tokenizer that replaces the folder's own.
fn side_files(r: &Report, opts: &Options) -> Vec<SideEdit> {
    let mut side = Vec::new();
    let changes: Vec<KeyChange> = r
        .config_changes
        .iter()
        .filter(|c| c.old != c.new)
        .map(|c| KeyChange {
            key: c.key.clone(),
            old: c.old.clone(),
            new: c.new.into(),
        })
        .collect();
    if !changes.is_empty() {
        side.push(SideEdit {
            file: PathBuf::from("config.json"),
            what: SideWhat::Keys { changes },
        });
    }
    if let Target::Tokenizer(tk) = &opts.target {
        side.push(SideEdit {
            file: PathBuf::from(tokenizer_name(tk)),
            what: SideWhat::Replaced { from: tk.clone() },
        });
    }
    side
}

/// The name a tokenizer takes in a model folder: `tokenizer.model` for SentencePiece, else
/// `tokenizer.json`.
pub(crate) fn tokenizer_name(tk: &Path) -> &'static str {
    match tk.extension().and_then(|e| e.to_str()) {
        Some("model") => "tokenizer.model",
        _ => "tokenizer.json",
    }
}
