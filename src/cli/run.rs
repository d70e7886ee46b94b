//! What every tool does around its job: parse its command line, print its report, fail with
//! an error's line, kind and exit code.

use crate::error::Error;
use std::ffi::OsString;
use std::io::Write;

/// Parse `args` as clap would in a binary: help and version go to `out` (exit 0), a usage error
/// to `err` (exit 2).
pub(super) fn parse<A: clap::Parser>(
    args: Vec<OsString>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<A, u8> {
    let json = args.iter().any(|a| a == "--json");
    A::try_parse_from(args).map_err(|e| {
        let text = if use_color() {
            e.render().ansi().to_string()
        } else {
            e.render().to_string()
        };
        if e.use_stderr() {
            let _ = write!(err, "{text}");
            // A refused command line is a usage error like any other: with `--json`, its kind.
            if json {
                let line = e.render().to_string();
                let line = line.lines().next().unwrap_or_default();
                let line = line.strip_prefix("error: ").unwrap_or(line);
                let doc = serde_json::json!({ "error": line, "kind": "usage" });
                let _ = writeln!(out, "{doc}");
            }
        } else {
            let _ = write!(out, "{text}");
        }
        e.exit_code() as u8
    })
}

/// Colour help and usage errors only on a terminal (as clap does).
fn use_color() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// A tool's report on `out`: pretty JSON with `--json`, else the human rendering.
pub(super) fn print<R: serde::Serialize>(
    out: &mut dyn Write,
    json: bool,
    report: &R,
    text: impl FnOnce() -> String,
) {
    let _ = if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(report).unwrap_or_default()
        )
    } else {
        write!(out, "{}", text())
    };
}

/// A library error: its line, `{"error": …, "kind": …}` with `--json`, and the exit code of its
/// kind (1 for a failed check, 2 otherwise).
pub(super) fn fail_with(
    tool: &str,
    e: &Error,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let msg = e.to_string();
    let _ = writeln!(err, "{tool}: {}", e.line());
    if json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::json!({ "error": msg, "kind": e.kind() })
        );
    }
    e.exit_code() as u8
}
