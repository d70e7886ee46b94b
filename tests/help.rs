//! Every tool's --help: an example, and help text on every flag.

mod common;
use common::*;
use std::ffi::OsStr;

const TOOLS: [&str; 8] = [
    "inspect-checkpoint",
    "merge-tokenizers",
    "extend-embeddings",
    "sanitize-checkpoint",
    "check-vocab",
    "vocab-blocks",
    "transplant-tokenizer",
    "trim-vocab",
];

/// The flags of a `--help` text that have no description (clap prints the description after
/// the flag on its line, or on the next, more indented line).
fn undocumented(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let mut out = Vec::new();
    let mut in_options = false;
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("Options:") || l.starts_with("Arguments:") {
            in_options = true;
            continue;
        }
        if l.is_empty() || !l.starts_with(' ') {
            in_options = false;
            continue;
        }
        let t = l.trim_start();
        if !in_options || !(t.starts_with('-') || t.starts_with('[') || t.starts_with('<')) {
            continue;
        }
        let same_line = t.split("  ").skip(1).any(|s| !s.trim().is_empty());
        let next = lines.get(i + 1).copied().unwrap_or("");
        let indent = |s: &str| s.len() - s.trim_start().len();
        let next_line = !next.trim().is_empty()
            && indent(next) > indent(l)
            && !next.trim_start().starts_with('-');
        if !same_line && !next_line {
            out.push(t.to_string());
        }
    }
    out
}

#[test]
fn every_flag_of_every_tool_has_help_text_and_an_example() {
    for tool in TOOLS {
        let o = run(tool, &[OsStr::new("--help")]);
        assert_eq!(o.status.code(), Some(0), "{tool}");
        let help = stdout(&o);
        assert!(help.contains("Examples:"), "{tool}: no examples");
        assert!(help.contains("--json"), "{tool}: no --json");
        let missing = undocumented(&help);
        assert!(
            missing.is_empty(),
            "{tool}: flags without help: {missing:?}"
        );
    }
    // The rule itself catches a bare flag.
    assert_eq!(
        undocumented("Options:\n      --json\n  -h, --help\n          Print help\n"),
        ["--json"]
    );
}
