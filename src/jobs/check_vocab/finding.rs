//! A finding (its severity, numbers and fix as a plan) and the report that counts them: what
//! every check of the doctor returns.

use crate::plan::{KeyEdit as Edit, Plan, Request as Fix};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

/// A finding. `fix` is offered only when carrying it out turns this finding into a pass and it
/// discards nothing a smaller fix would keep (moments, rows, config keys): a [`Plan`] whose
/// request is a tool run, JSON key edits or a change by hand. `--json` gives it as `fix` (the
/// command line, rendered from the plan), `edits` (a JSON fix's keys) and `action` (the request,
/// which `check-vocab --fix` carries out). `alternatives` are the other explanations, less
/// likely, each with what following it costs.
#[derive(Debug, Clone)]
pub struct Finding {
    pub severity: Severity,
    pub check: &'static str,
    pub message: String,
    pub numbers: Value,
    pub fix: Option<Plan>,
    pub alternatives: Vec<String>,
}

impl Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("severity", &self.severity)?;
        m.serialize_entry("check", self.check)?;
        m.serialize_entry("message", &self.message)?;
        m.serialize_entry("numbers", &self.numbers)?;
        if let Some(command) = self.command() {
            m.serialize_entry("fix", &command)?;
        }
        if let Some(Fix::EditJson { edits }) = self.request() {
            m.serialize_entry("edits", edits)?;
        }
        if !self.alternatives.is_empty() {
            m.serialize_entry("alternatives", &self.alternatives)?;
        }
        if let Some(r) = self.request() {
            m.serialize_entry("action", r)?;
        }
        m.end()
    }
}

pub(super) fn finding(
    severity: Severity,
    check: &'static str,
    message: String,
    numbers: Value,
    fix: Option<Fix>,
) -> Finding {
    Finding {
        severity,
        check,
        message,
        numbers,
        fix: fix.map(Plan::of_request),
        alternatives: Vec::new(),
    }
}

impl Finding {
    /// What the fix asks for (the tool, its input and target; or the JSON edits).
    pub fn request(&self) -> Option<&Fix> {
        self.fix.as_ref().and_then(|p| p.request.as_ref())
    }

    /// The fix's command line, rendered from its plan.
    pub fn command(&self) -> Option<String> {
        self.fix.as_ref().map(Plan::command)
    }

    /// The fix is these JSON edits.
    pub(super) fn edits(mut self, edits: Vec<Edit>) -> Self {
        if !edits.is_empty() {
            self.fix = Some(Plan::of_request(Fix::EditJson { edits }));
        }
        self
    }

    pub(super) fn alternatives(mut self, alternatives: Vec<String>) -> Self {
        self.alternatives = alternatives;
        self
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub checkpoint: PathBuf,
    pub rows: u64,
    pub files: BTreeMap<String, Vec<PathBuf>>,
    pub findings: Vec<Finding>,
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
}

/// The report of a run: the findings, counted by severity.
pub(super) fn summarize(
    checkpoint: PathBuf,
    rows: u64,
    files: BTreeMap<String, Vec<PathBuf>>,
    findings: Vec<Finding>,
) -> Report {
    let count = |s| findings.iter().filter(|f| f.severity == s).count();
    Report {
        checkpoint,
        rows,
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        infos: count(Severity::Info),
        files,
        findings,
    }
}
