//! The one plan every writing job prints with `--dry-run --json`, for every layout: which tool,
//! which input, where it writes, the job's report as its `--json` gives it (every key users read
//! stays, flattened in), every tensor that changes (`edits`: its role, its shape before and
//! after, where its rows come from) and every file beside the tensors that changes
//! (`side_files`: config.json keys, a tokenizer replaced, DCP's `.metadata`, ZeRO's `latest`).
//! A tensor no edit names is written with the input's bytes.
//!
//! A plan not yet made by its tool (check-vocab's fix for a finding) carries the [`Request`]:
//! which tool, which input, which target; its command line is rendered from it
//! ([`Plan::command`]), never stored.
//!
//! The row-surgery interface's [`Entry`] (a vocabulary matrix or its optimizer state, as every
//! format answers; `formats::vocabulary` re-exports it) lives here beside the [`Edit`] it makes,
//! so a format's own modules build entries without importing `formats::vocabulary`.
//!
//! Knowledge below the jobs: it imports no job; each job builds its `Plan` from what its planner
//! computed.

mod request;
pub use request::{quoted, GgufEdit, KeyEdit, Request};

use crate::rowmap::RowMap;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What a writing job will do, decided before anything is written.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The tool (`extend-embeddings`, `sanitize-checkpoint`, `vocab-blocks`, `merge-tokenizers`).
    pub tool: &'static str,
    pub input: PathBuf,
    /// Where the run writes.
    pub output: PathBuf,
    /// The input's layout as `formats::open` saw it (`Checkpoint::layout`: `safetensors`,
    /// `torch zip (torch.save)`, `model folder (sharded safetensors)`, `Hugging Face Trainer
    /// checkpoint folder`, `torch distributed checkpoint (DCP)`, `DeepSpeed ZeRO checkpoint`), or
    /// a tokenizer's format for merge-tokenizers.
    pub layout: String,
    /// The job's report as its `--json` prints it (without its own `input`/`output`, which are
    /// the plan's).
    #[serde(flatten)]
    pub report: serde_json::Map<String, Value>,
    pub edits: Vec<Edit>,
    pub side_files: Vec<SideEdit>,
    /// What was asked, when the plan is not yet the tool's (a finding's fix).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<Request>,
}

/// What a changed tensor is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Embedding,
    Head,
    HeadBias,
    /// An optimizer moment (Adam's `exp_avg`, `exp_avg_sq`, Adagrad's `sum`, …).
    Moment,
    /// A ZeRO rank's fp32 master copy of a parameter (with its moments).
    MasterCopy,
    /// A matrix named by the user (`--tensor`, vocab-blocks' blocks) the detector did not class.
    Other,
}

impl From<crate::vocab::Role> for Role {
    fn from(r: crate::vocab::Role) -> Self {
        match r {
            crate::vocab::Role::Embedding => Role::Embedding,
            crate::vocab::Role::Head => Role::Head,
            crate::vocab::Role::HeadBias => Role::HeadBias,
        }
    }
}

impl std::fmt::Display for Role {
    /// As `--json` writes it (`embedding`, `head`, `head-bias`, `moment`, `master-copy`, `other`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Role::Embedding => "embedding",
            Role::Head => "head",
            Role::HeadBias => "head-bias",
            Role::Moment => "moment",
            Role::MasterCopy => "master-copy",
            Role::Other => "other",
        };
        f.write_str(name)
    }
}

impl Role {
    /// A weight's role by its name (what [`crate::vocab::role_by_name`] says), else `Other`.
    pub fn of_weight(name: &str) -> Role {
        crate::vocab::role_by_name(name).map_or(Role::Other, Role::from)
    }

    /// A vocabulary tensor's role from its name and shape: a 1-D tensor (the vocabulary's length)
    /// is a head bias, a matrix what its name says.
    pub fn of_tensor(name: &str, shape: &[u64]) -> Role {
        match shape.len() {
            1 => Role::HeadBias,
            _ => Role::of_weight(name),
        }
    }
}

/// Where a changed tensor's rows come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RowSource {
    /// The old rows kept, the new rows made by `init` (`mean`, `normal`, `hewitt`, `omp`, …).
    Grown { init: String },
    /// The same new rows as `follows` (a tie: one parameter under two names).
    Tied { follows: String },
    /// Rows past the new end dropped; the rest kept.
    Cut,
    /// Old rows kept, new rows `value` (a moment: 0; Adagrad's `sum`: its initial accumulator).
    Filled { value: f64 },
    /// Rows taken from other tensors or places (vocab-blocks' split and join; a row map).
    Mapped { from: Value },
    /// Not written: its rows went to the tensors whose `mapped` names it (`to` is empty).
    Removed,
}

/// One tensor the run changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Edit {
    pub tensor: String,
    pub role: Role,
    /// Its shape in the input (empty: a tensor the run makes).
    pub from: Vec<u64>,
    pub to: Vec<u64>,
    pub rows: RowSource,
}

impl Edit {
    /// `tensor` from `from` to `to` rows (along [`crate::vocab::row_axis`]): grown by `init`,
    /// cut, or (a moment) filled.
    pub fn resize(tensor: &str, role: Role, from: &[u64], to: &[u64], grown: RowSource) -> Edit {
        let axis = crate::vocab::row_axis(tensor, from);
        let rows = match (from.get(axis), to.get(axis)) {
            (Some(a), Some(b)) if b < a => RowSource::Cut,
            _ => grown,
        };
        Edit {
            tensor: tensor.to_string(),
            role,
            from: from.to_vec(),
            to: to.to_vec(),
            rows,
        }
    }

    /// `tensor` (of shape `from`) left out of the output.
    pub fn removed(tensor: &str, role: Role, from: &[u64]) -> Edit {
        Edit {
            tensor: tensor.to_string(),
            role,
            from: from.to_vec(),
            to: Vec::new(),
            rows: RowSource::Removed,
        }
    }
}

/// One JSON key changed: its value before (null: absent) and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyChange {
    pub key: String,
    pub old: Value,
    pub new: Value,
}

impl KeyChange {
    /// A change as a JSON edit reports it: each side's compact text (none: absent) parsed, text
    /// that is not JSON kept as a string.
    pub fn from_text(key: &str, old: Option<&str>, new: Option<&str>) -> KeyChange {
        let json = |t: Option<&str>| {
            t.map_or(Value::Null, |t| {
                serde_json::from_str(t).unwrap_or_else(|_| t.into())
            })
        };
        KeyChange {
            key: key.to_string(),
            old: json(old),
            new: json(new),
        }
    }
}

/// A vocabulary tensor gathered by a row map, as a job's report lists it: its name and role,
/// its shape before and after, the names tied to it (they follow it).
pub struct Gathered<'a> {
    pub tensor: &'a str,
    pub role: Role,
    pub from: &'a [u64],
    pub to: &'a [u64],
    pub tied: &'a [String],
}

/// What happens to a file beside the tensors.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SideWhat {
    /// JSON keys set (config.json's vocabulary size); every other byte kept.
    Keys { changes: Vec<KeyChange> },
    /// The file written from `from` (the merged tokenizer replacing the folder's own).
    Replaced { from: PathBuf },
    /// The file written new (a merged tokenizer; DCP's `.metadata` naming the new chunks).
    Written { why: String },
    /// ZeRO's `latest`: the tag written.
    Latest { tag: String },
    /// A file of the input folder the output leaves out on purpose (a dropped optimizer's
    /// optimizer.pt, its scheduler.pt), and why.
    LeftOut { why: String },
}

/// A file beside the tensors the run changes, relative to the output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideEdit {
    pub file: PathBuf,
    #[serde(flatten)]
    pub what: SideWhat,
}

impl SideEdit {
    /// A file of the input that the output leaves out on purpose, and why.
    pub fn left_out(file: impl Into<PathBuf>, why: &str) -> SideEdit {
        SideEdit {
            file: file.into(),
            what: SideWhat::LeftOut { why: why.into() },
        }
    }
}

impl Plan {
    /// A plan of `tool` from its report (any `Serialize` value: its `input` and `output` keys give
    /// way to the plan's).
    pub fn new(
        tool: &'static str,
        input: &Path,
        output: &Path,
        layout: impl Into<String>,
        report: &impl Serialize,
    ) -> Plan {
        let mut report = match serde_json::to_value(report) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        report.remove("input");
        report.remove("output");
        Plan {
            tool,
            input: input.to_path_buf(),
            output: output.to_path_buf(),
            layout: layout.into(),
            report,
            edits: Vec::new(),
            side_files: Vec::new(),
            request: None,
        }
    }

    /// The plan of a request not yet planned by its tool: the tool, its input and output, and
    /// the side files a JSON edit changes (the old values are the tool's to read: null here).
    pub fn of_request(request: Request) -> Plan {
        let (tool, input, output) = match &request {
            Request::Extend { input, output, .. } => ("extend-embeddings", input, output),
            Request::Sanitize { input, output, .. } => ("sanitize-checkpoint", input, output),
            Request::EditGguf { input, output, .. } => ("check-vocab", input, output),
            Request::EditJson { .. } => ("edit-json", &PathBuf::new(), &PathBuf::new()),
            Request::Manual { .. } => ("manual", &PathBuf::new(), &PathBuf::new()),
        };
        let mut plan = Plan::new(tool, input, output, "", &Value::Null);
        if let Request::EditJson { edits } = &request {
            for e in edits {
                let change = KeyChange {
                    key: e.key.clone(),
                    old: Value::Null,
                    new: e.value.clone(),
                };
                match plan.side_files.iter_mut().find(|f| f.file == e.file) {
                    Some(SideEdit {
                        what: SideWhat::Keys { changes },
                        ..
                    }) => changes.push(change),
                    _ => plan.side_files.push(SideEdit {
                        file: e.file.clone(),
                        what: SideWhat::Keys {
                            changes: vec![change],
                        },
                    }),
                }
            }
        }
        plan.request = Some(request);
        plan
    }

    /// The command line (or JSON edits, or instruction) that carries the plan out: its request
    /// rendered; a tool's own plan as `TOOL INPUT --output OUTPUT`.
    pub fn command(&self) -> String {
        match &self.request {
            Some(r) => r.text(),
            None => format!(
                "{} {} --output {}",
                self.tool,
                self.input.display(),
                self.output.display()
            ),
        }
    }

    /// The edits of a row-map job (transplant, trim): every tensor gathered by `map` (each tied
    /// name following its tensor) and each optimizer entry `(tensor, role, from, to)` (a moment,
    /// a ZeRO master copy) gathered by the same map.
    pub fn push_gathered<'a>(
        &mut self,
        map: Option<&crate::rowmap::RowMap>,
        tensors: impl IntoIterator<Item = Gathered<'a>>,
        moments: impl IntoIterator<Item = (&'a str, Role, &'a [u64], &'a [u64])>,
    ) {
        let mapped = RowSource::Mapped {
            from: map
                .and_then(|m| serde_json::to_value(m).ok())
                .unwrap_or_default(),
        };
        let edit = |tensor: &str, role, from: &[u64], to: &[u64], rows| Edit {
            tensor: tensor.to_string(),
            role,
            from: from.to_vec(),
            to: to.to_vec(),
            rows,
        };
        for g in tensors {
            self.edits
                .push(edit(g.tensor, g.role, g.from, g.to, mapped.clone()));
            for t in g.tied {
                let role = crate::vocab::role_by_name(t).map_or(Role::Head, Role::from);
                let follows = RowSource::Tied {
                    follows: g.tensor.to_string(),
                };
                self.edits.push(edit(t, role, g.from, g.to, follows));
            }
        }
        for (tensor, role, from, to) in moments {
            self.edits
                .push(edit(tensor, role, from, to, mapped.clone()));
        }
    }

    /// The plan's edit of `tensor`, if it changes.
    pub fn edit(&self, tensor: &str) -> Option<&Edit> {
        self.edits.iter().find(|e| e.tensor == tensor)
    }
}

/// One vocabulary-sized tensor of a checkpoint: a matrix of the model, or optimizer state that
/// belongs to one (`of`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub tensor: String,
    pub role: Role,
    pub shape: Vec<u64>,
    /// For optimizer state (a moment, a master copy): the weight it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of: Option<String>,
    /// A moment's value in new rows when it is not 0 (Adagrad's `sum` starts at the optimizer's
    /// `initial_accumulator_value`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<f64>,
}

impl Entry {
    /// A matrix (or bias) of the model.
    pub fn weight(tensor: &str, role: Role, shape: &[u64]) -> Entry {
        Entry {
            tensor: tensor.to_string(),
            role,
            shape: shape.to_vec(),
            of: None,
            fill: None,
        }
    }

    /// Optimizer state of `of` (a moment, a master copy).
    pub fn state(tensor: &str, role: Role, shape: &[u64], of: &str) -> Entry {
        Entry {
            tensor: tensor.to_string(),
            role,
            shape: shape.to_vec(),
            of: Some(of.to_string()),
            fill: None,
        }
    }

    /// The same state with its new rows at `value` (the optimizer's initial value).
    pub fn with_fill(self, value: f64) -> Entry {
        Entry {
            fill: Some(value),
            ..self
        }
    }

    /// Its rows (0 for a scalar).
    pub fn rows(&self) -> u64 {
        self.shape.first().copied().unwrap_or(0)
    }

    /// Whether it is optimizer state (its new rows are the optimizer's initial value, not the
    /// init's).
    pub fn is_state(&self) -> bool {
        self.role == Role::Moment
    }

    /// The edit that brings it to `map`'s rows: an append map keeps its rows and adds rows made
    /// by `init` (weights and master copies) or its fill (moments: 0 unless [`Entry::fill`]
    /// says), or cuts; any other map takes rows by the map.
    pub fn edit(&self, map: &RowMap, init: &str) -> Edit {
        let mut to = self.shape.clone();
        if let Some(first) = to.first_mut() {
            *first = map.new_rows();
        }
        let rows = if !map.is_append() {
            RowSource::Mapped {
                from: serde_json::to_value(map).unwrap_or_default(),
            }
        } else if map.new_rows() < map.old_rows() {
            RowSource::Cut
        } else if self.is_state() {
            RowSource::Filled {
                value: self.fill.unwrap_or(0.0),
            }
        } else {
            RowSource::Grown {
                init: init.to_string(),
            }
        };
        Edit {
            tensor: self.tensor.clone(),
            role: self.role,
            from: self.shape.clone(),
            to,
            rows,
        }
    }
}
