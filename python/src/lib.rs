//! `ckpt_surgery._native`: the tools' command lines run in process. The Python package
//! (`python/ckpt_surgery/`) turns keyword arguments into those command lines and the `--json`
//! report into a dict; this module only runs them, with the GIL released.

use ckpt_surgery::cli;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::ffi::OsString;

ckpt_surgery::use_mimalloc!();

/// The command line of `tool` with `args` (the program name first); a name that is not a tool
/// is a ValueError naming the tools.
fn argv(tool: &str, args: Vec<String>) -> PyResult<Vec<OsString>> {
    if !cli::TOOLS.contains(&tool) {
        return Err(no_tool(tool));
    }
    Ok(std::iter::once(OsString::from(tool))
        .chain(args.into_iter().map(OsString::from))
        .collect())
}

fn no_tool(tool: &str) -> PyErr {
    PyValueError::new_err(format!(
        "no tool '{tool}' (tools: {})",
        cli::TOOLS.join(", ")
    ))
}

/// Run `tool` (a binary name, e.g. "check-vocab") on `args` (without the program name), as its
/// binary would. Returns (exit code, stdout, stderr). `progress`: draw progress bars on stderr
/// (when it is a terminal), as the binaries do.
#[pyfunction]
#[pyo3(signature = (tool, args, progress = false))]
fn run(
    py: Python<'_>,
    tool: &str,
    args: Vec<String>,
    progress: bool,
) -> PyResult<(u8, Vec<u8>, Vec<u8>)> {
    let argv = argv(tool, args)?;
    let tool = tool.to_string();
    Ok(py.detach(move || {
        ckpt_surgery::output::progress::set_enabled(progress);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = cli::run(&tool, argv, &mut out, &mut err).unwrap_or(2);
        (code, out, err)
    }))
}

/// Run `tool` on `args` (without the program name) exactly as its binary: printing to this
/// process's stdout and stderr, progress bars on a terminal. Returns the exit code.
#[pyfunction]
fn main(py: Python<'_>, tool: &str, args: Vec<String>) -> PyResult<u8> {
    let argv = argv(tool, args)?;
    let tool = tool.to_string();
    Ok(py.detach(move || {
        ckpt_surgery::output::progress::set_enabled(true);
        cli::run(&tool, argv, &mut std::io::stdout(), &mut std::io::stderr()).unwrap_or(2)
    }))
}

/// A tool's options as its command line defines them: (name, takes a value, repeatable,
/// positional) for each argument; a flag by its long name (`new-rows`).
#[pyfunction]
fn options(tool: &str) -> PyResult<Vec<(String, bool, bool, bool)>> {
    cli::options(tool).ok_or_else(|| no_tool(tool))
}

/// A tool's arguments with their help texts: (name, text), named as `options` names them.
#[pyfunction]
fn option_help(tool: &str) -> PyResult<Vec<(String, String)>> {
    cli::option_help(tool).ok_or_else(|| no_tool(tool))
}

/// The tools, by binary name.
#[pyfunction]
fn tools() -> Vec<&'static str> {
    cli::TOOLS.to_vec()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(options, m)?)?;
    m.add_function(wrap_pyfunction!(option_help, m)?)?;
    m.add_function(wrap_pyfunction!(tools, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
