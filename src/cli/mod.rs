//! The command lines of the binaries: arguments → library → report. Each tool is a function of
//! its arguments that prints to the writers it is given and returns its exit code, so the
//! binaries (`bin/`, one line each) and the Python package (`python/`, in process) run the same
//! code: same options, same reports, same messages, same exit codes.

use std::ffi::OsString;
use std::io::Write;

mod args;
pub mod check_vocab;
pub mod extend_embeddings;
pub mod inspect_checkpoint;
pub mod merge_tokenizers;
mod run;
pub mod sanitize_checkpoint;
pub mod transplant_tokenizer;
pub mod trim_vocab;
pub mod vocab_blocks;

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
const TABLE: [Tool; 8] = [
    tool::<inspect_checkpoint::Args>("inspect-checkpoint", inspect_checkpoint::main),
    tool::<merge_tokenizers::Args>("merge-tokenizers", merge_tokenizers::main),
    tool::<extend_embeddings::Args>("extend-embeddings", extend_embeddings::main),
    tool::<sanitize_checkpoint::Args>("sanitize-checkpoint", sanitize_checkpoint::main),
    tool::<check_vocab::Args>("check-vocab", check_vocab::main),
    tool::<vocab_blocks::Args>("vocab-blocks", vocab_blocks::main),
    tool::<transplant_tokenizer::Args>("transplant-tokenizer", transplant_tokenizer::main),
    tool::<trim_vocab::Args>("trim-vocab", trim_vocab::main),
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
    // The process ends after this run: what it built is left to the exit to free.
    crate::release::process_ends_after_run();
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
/// order, named as `arguments` names them. None for a name that is not a tool.
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
