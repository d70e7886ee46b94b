//! The command lines of the binaries: arguments → library → report. Each tool is a function of
//! its arguments that prints to the writers it is given and returns its exit code, so the
//! binaries (`bin/`, one line each) and the Python package (`python/`, in process) run the same
//! code: same options, same reports, same messages, same exit codes.

use crate::error::Error;
use crate::formats::torch::pickle::GlobalPolicy;
use std::ffi::OsString;
use std::io::Write;

pub mod check_vocab;
pub mod extend_embeddings;
pub mod inspect_checkpoint;
pub mod merge_tokenizers;
pub mod sanitize_checkpoint;
pub mod vocab_blocks;

/// The manifest flags every writing tool (and inspect's `--hash`) shares.
#[derive(clap::Args)]
pub(crate) struct ManifestArgs {
    /// Hash the manifest with sha256 (the manifests of versions before 0.2) instead of BLAKE3,
    /// the default: ~3.7x faster per core here, and the manifest names its algorithm either way.
    #[arg(long)]
    sha256: bool,
}

impl ManifestArgs {
    /// Set this run's manifest algorithm.
    pub(crate) fn apply(&self) {
        use crate::output::manifest::{set_algorithm, HashAlg};
        set_algorithm(if self.sha256 {
            HashAlg::Sha256
        } else {
            HashAlg::Blake3
        });
    }
}

/// `--json`, shared by every tool.
#[derive(clap::Args)]
pub(crate) struct PrintArgs {
    /// Print the report as JSON on stdout (errors too: {"error", "kind"}).
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--allow-global`, shared by every tool that opens torch files.
#[derive(clap::Args)]
pub(crate) struct GlobalsArgs {
    /// Trust one more pickle global in torch files (e.g. argparse.Namespace); repeatable.
    /// Globals that run code (os.*, subprocess.*, builtins.eval, pickle.loads, …) are never allowed.
    #[arg(long, value_name = "MODULE.NAME")]
    allow_global: Vec<String>,
}

impl GlobalsArgs {
    /// The pickle globals trusted beyond the defaults; a refused name is a usage error naming
    /// `--allow-global`.
    pub(crate) fn policy(&self) -> Result<GlobalPolicy, Error> {
        GlobalPolicy::with_allowed(&self.allow_global)
    }
}

/// `--device`: where new rows are computed.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum DeviceArg {
    /// The GPU for matrices of 256 MiB and more when there is one, else the CPU (saying why).
    Auto,
    /// The reference.
    Cpu,
    /// A build with --features cuda and a GPU; else exit 2.
    Cuda,
}

impl DeviceArg {
    pub(crate) fn request(self) -> crate::rows::device::Request {
        use crate::rows::device::Request;
        match self {
            DeviceArg::Auto => Request::Auto,
            DeviceArg::Cpu => Request::Cpu,
            DeviceArg::Cuda => Request::Cuda,
        }
    }
}

/// A tool's `main`: its arguments (the program name first) and writers in, its exit code out.
type Main = fn(Vec<OsString>, &mut dyn Write, &mut dyn Write) -> u8;

/// One tool: its binary name, its `main`, and its command line (for [`options`]).
struct Tool {
    name: &'static str,
    main: Main,
    command: fn() -> clap::Command,
}

const fn tool<A: clap::CommandFactory>(name: &'static str, main: Main) -> Tool {
    Tool {
        name,
        main,
        command: command::<A>,
    }
}

/// Every tool, once, in the order the README lists them.
const TABLE: [Tool; 6] = [
    tool::<inspect_checkpoint::Args>("inspect-checkpoint", inspect_checkpoint::main),
    tool::<merge_tokenizers::Args>("merge-tokenizers", merge_tokenizers::main),
    tool::<extend_embeddings::Args>("extend-embeddings", extend_embeddings::main),
    tool::<sanitize_checkpoint::Args>("sanitize-checkpoint", sanitize_checkpoint::main),
    tool::<check_vocab::Args>("check-vocab", check_vocab::main),
    tool::<vocab_blocks::Args>("vocab-blocks", vocab_blocks::main),
];

fn command<A: clap::CommandFactory>() -> clap::Command {
    A::command()
}

/// The tools by binary name, in the order the README lists them.
pub const TOOLS: [&str; TABLE.len()] = {
    let mut names = [""; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        names[i] = TABLE[i].name;
        i += 1;
    }
    names
};

fn entry(name: &str) -> Option<&'static Tool> {
    TABLE.iter().find(|t| t.name == name)
}

/// Run the tool named `tool` (a binary name) on `args` (the program name first). None for a
/// name that is not a tool.
pub fn run(
    tool: &str,
    args: Vec<OsString>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Option<u8> {
    entry(tool).map(|t| (t.main)(args, out, err))
}

/// A binary's `main`: the tool on this process's arguments, stdout and stderr.
pub fn main_of(tool: &str) -> std::process::ExitCode {
    // Unlocked handles: progress bars draw on stderr from worker threads meanwhile.
    let code = run(
        tool,
        std::env::args_os().collect(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
    .unwrap_or(2);
    std::process::ExitCode::from(code)
}

/// Parse `args` as clap would in a binary: help and version go to `out` (exit 0), a usage error
/// to `err` (exit 2).
fn parse<A: clap::Parser>(
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
fn print<R: serde::Serialize>(
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
fn fail_with(tool: &str, e: &Error, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let msg = e.to_string();
    let _ = writeln!(err, "{tool}: {msg}");
    if json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::json!({ "error": msg, "kind": e.kind() })
        );
    }
    e.exit_code() as u8
}

/// A tool's arguments as its command line defines them, `--help` and `--version` left out, each
/// with the name bindings use: a flag by its long name, a positional argument by its field name.
fn arguments(tool: &str) -> Option<Vec<(String, clap::Arg)>> {
    let cmd = (entry(tool)?.command)();
    Some(
        cmd.get_arguments()
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
            .map(|a| {
                let name = a.get_long().unwrap_or(a.get_id().as_str()).to_string();
                (name, a.clone())
            })
            .collect(),
    )
}

/// Each argument's help text as `--help` shows it, with its default and possible values: (name,
/// text) in the command line's order, named as [`options`] names them (the Python API's
/// docstrings). None for a name that is not a tool.
pub fn option_help(tool: &str) -> Option<Vec<(String, String)>> {
    let describe = |a: &clap::Arg| {
        let mut text = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect();
        if !values.is_empty() && a.get_action().takes_values() {
            text.push_str(&format!(" [one of: {}]", values.join(", ")));
        }
        let default: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        if !default.is_empty() && a.get_action().takes_values() {
            text.push_str(&format!(" [default: {}]", default.join(", ")));
        }
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    Some(
        arguments(tool)?
            .into_iter()
            .map(|(name, a)| (name, describe(&a)))
            .collect(),
    )
}

/// A tool's options as its command line defines them, for bindings that offer them as keyword
/// arguments: (name, takes a value, repeatable, positional) per argument, in the command line's
/// order, named as [`arguments`] names them. None for a name that is not a tool.
pub fn options(tool: &str) -> Option<Vec<(String, bool, bool, bool)>> {
    Some(
        arguments(tool)?
            .into_iter()
            .map(|(name, a)| {
                let repeatable = matches!(a.get_action(), clap::ArgAction::Append)
                    || a.get_value_delimiter().is_some();
                match a.get_long() {
                    Some(_) => (name, a.get_action().takes_values(), repeatable, false),
                    None => (name, true, repeatable, true),
                }
            })
            .collect(),
    )
}
