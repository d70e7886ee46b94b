//! The one error type: every variant carries the path, tensor and sizes a user needs to act.

use std::path::{Path, PathBuf};

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong. Messages are one line, written for the person at the terminal:
/// what failed, where, and (where we know) what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system error while touching `path`.
    #[error("{path}: cannot {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// The file's structure is wrong (header, index, container).
    #[error("{path}: {problem}")]
    Format { path: PathBuf, problem: String },

    /// One tensor in the file is wrong.
    #[error("{path}: tensor '{tensor}': {problem}")]
    Tensor {
        path: PathBuf,
        tensor: String,
        problem: String,
    },

    /// A flag or argument cannot be carried out as given: `flag` names the one to change (as the
    /// user types it: `--vocab-rows`, `OUTPUT`); `problem` is the whole one-line message.
    #[error("{problem}")]
    Arg { flag: &'static str, problem: String },

    /// The compute device (CUDA) could not be used or failed while running: `stage` says when,
    /// `detail` what the library said. The message names `--device cpu` where that is the way out.
    #[error("{}", device_message(*stage, detail))]
    Device { stage: DeviceStage, detail: String },

    /// A pickle (torch's `data.pkl`, a legacy torch record, DCP's `.metadata`) is malformed or
    /// breaks a bound. `offset` is the byte of the opcode in the pickle; `record` says which
    /// pickle of the file it is ("" when the file is one pickle).
    #[error("{path}: {problem} at byte {offset}{}", of_record(record))]
    Pickle {
        path: PathBuf,
        record: String,
        offset: usize,
        problem: String,
    },

    /// A pickle names a global outside the allowlist. `allowable`: `--allow-global GLOBAL` would
    /// let it through (plain data the user may trust); false for a global that runs code.
    #[error("{path}: refused global {global} at byte {offset}{}{}", of_record(record), allow_hint(global, *allowable))]
    UnknownGlobal {
        path: PathBuf,
        record: String,
        offset: usize,
        global: String,
        allowable: bool,
    },

    /// A pickle holds a tensor this tool does not read (sparse, quantized, a subclass, …):
    /// `what` it is, the `global` that builds it, and the `fix` (how to save it instead).
    #[error(
        "{path}: {what} ({global}) is not supported at byte {offset}{}: {fix}",
        of_record(record)
    )]
    PickledTensor {
        path: PathBuf,
        record: String,
        offset: usize,
        what: &'static str,
        global: String,
        fix: &'static str,
    },

    /// Trained weight rows would be cut: `tensor` in `path` has `rows` rows and the target is
    /// `target`. The way on is `--allow-shrink` (or a larger target).
    #[error("{path}: {tensor} has {rows} rows; a target of {target} rows would drop its trained rows {target}..{rows}; pass --allow-shrink if that is meant")]
    Shrink {
        path: PathBuf,
        tensor: String,
        rows: u64,
        target: u64,
    },

    /// A new vocabulary would drop trained rows: `tensor` in `path` has `rows` rows, the new
    /// table `target`, and `dropped` of the old tokens (`first` of them named) have no place in
    /// it. The way on is `--allow-shrink`.
    #[error("{path}: {tensor} has {rows} rows; the new vocabulary of {target} rows has no place for {dropped} of its tokens ({first}), whose trained rows would be dropped; pass --allow-shrink if that is meant")]
    Dropped {
        path: PathBuf,
        tensor: String,
        rows: u64,
        target: u64,
        dropped: u64,
        first: String,
    },

    /// The output exists (a file, or a folder that is not empty): `--overwrite` replaces it.
    #[error("{}", exists_message(path, *folder))]
    OutputExists { path: PathBuf, folder: bool },

    /// The output is an input, lies inside an input folder, or holds an input: another
    /// `--output` is the only way on (`--overwrite` does not help).
    #[error("{}", over_input_message(path, input, *overlap))]
    OutputIsInput {
        path: PathBuf,
        input: PathBuf,
        overlap: Overlap,
    },

    /// The input is valid but holds something this tool does not handle (yet): a format, a layout
    /// or a construct, named with what to do instead.
    #[error("{path}: {problem}")]
    Unsupported { path: PathBuf, problem: String },

    /// A check ran and found the result wrong (nothing was written): exit 1.
    #[error("{path}: check failed: {problem}")]
    Check { path: PathBuf, problem: String },

    /// What we wrote did not read back as planned. The output was not put in place.
    #[error(
        "{path}: verification of the written file failed: {problem}; the output was not written"
    )]
    Verify { path: PathBuf, problem: String },
}

impl Error {
    /// The message as one line for a terminal or a log: control characters (a `\n` in a zip
    /// record's name, a GGUF key, a file name) and the bidirectional overrides are escaped, so bytes
    /// from a file cannot break the line or reorder what is shown.
    pub fn line(&self) -> String {
        one_line(&self.to_string())
    }

    pub fn io(path: impl AsRef<Path>, action: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            action,
            source,
        }
    }

    pub fn format(path: impl AsRef<Path>, problem: impl Into<String>) -> Self {
        Error::Format {
            path: path.as_ref().to_path_buf(),
            problem: problem.into(),
        }
    }

    pub fn tensor(path: impl AsRef<Path>, tensor: &str, problem: impl Into<String>) -> Self {
        Error::Tensor {
            path: path.as_ref().to_path_buf(),
            tensor: tensor.to_string(),
            problem: problem.into(),
        }
    }

    /// A flag that cannot be carried out as given ([`Error::Arg`]).
    pub fn arg(flag: &'static str, problem: impl Into<String>) -> Self {
        Error::Arg {
            flag,
            problem: problem.into(),
        }
    }

    /// The compute device failed ([`Error::Device`]).
    pub fn device(stage: DeviceStage, detail: impl Into<String>) -> Self {
        Error::Device {
            stage,
            detail: detail.into(),
        }
    }

    pub fn unsupported(path: impl AsRef<Path>, problem: impl Into<String>) -> Self {
        Error::Unsupported {
            path: path.as_ref().to_path_buf(),
            problem: problem.into(),
        }
    }

    /// The process exit code for this error: bad input, bad arguments and failed writes are all 2;
    /// 1 is a check that ran and found problems.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Check { .. } => 1,
            _ => 2,
        }
    }

    /// The kind, as `--json` error reports and the Python exceptions name it: `io`, `bad-input`
    /// (the file's structure or a tensor is wrong), `unsupported`, `usage`, `device` (CUDA could not be used), `check-failed`,
    /// `verify-failed` (the output did not read back as planned).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::Format { .. }
            | Error::Tensor { .. }
            | Error::Pickle { .. }
            | Error::UnknownGlobal { .. }
            | Error::PickledTensor { .. } => "bad-input",
            Error::Unsupported { .. } => "unsupported",
            Error::Arg { .. }
            | Error::Shrink { .. }
            | Error::Dropped { .. }
            | Error::OutputExists { .. }
            | Error::OutputIsInput { .. } => "usage",
            Error::Device { .. } => "device",
            Error::Check { .. } => "check-failed",
            Error::Verify { .. } => "verify-failed",
        }
    }

    /// The flag the user changes to get past this error, as typed (`--output`, `--allow-shrink`),
    /// where one flag is the way on.
    pub fn flag(&self) -> Option<&'static str> {
        match self {
            Error::Arg { flag, .. } => Some(flag),
            Error::Shrink { .. } | Error::Dropped { .. } => Some("--allow-shrink"),
            Error::OutputExists { .. } => Some("--overwrite"),
            Error::OutputIsInput { .. } => Some("--output"),
            Error::UnknownGlobal {
                allowable: true, ..
            } => Some("--allow-global"),
            Error::Device { .. } => Some("--device"),
            _ => None,
        }
    }
}

/// When the compute device failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceStage {
    /// `--device cuda` was asked for and the GPU could not be opened (no driver, no device).
    Open,
    /// `--device cuda` was asked for and this build has no CUDA path.
    NotBuilt,
    /// The GPU failed while computing (a CUDA call returned an error).
    Run,
    /// The thread computing the new rows panicked.
    Compute,
}

fn device_message(stage: DeviceStage, detail: &str) -> String {
    match stage {
        DeviceStage::Open | DeviceStage::NotBuilt => {
            format!("--device cuda: {detail}; use --device cpu (or auto)")
        }
        DeviceStage::Run => format!("CUDA: {detail}"),
        DeviceStage::Compute => format!("computing the new rows failed ({detail})"),
    }
}

/// How an output overlaps an input ([`Error::OutputIsInput`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// The output is the input (the same path, a link to it, or the same inode).
    Same,
    /// The output lies inside the input folder.
    Inside,
    /// The output is a folder that holds the input.
    Holds,
}

fn over_input_message(dest: &Path, input: &Path, overlap: Overlap) -> String {
    let (dest, input) = (dest.display(), input.display());
    let how = match overlap {
        Overlap::Same => {
            return format!(
                "{dest}: refusing to write over an input ({input}); choose another output path"
            )
        }
        Overlap::Inside => "lies inside the input folder",
        Overlap::Holds => "holds the input",
    };
    format!("{dest}: the output {how} {input}; nothing is ever written inside an input: choose an output path outside it")
}

fn exists_message(path: &Path, folder: bool) -> String {
    if folder {
        format!("{}: the output folder exists and is not empty; give a new folder, or --overwrite to replace it", path.display())
    } else {
        format!(
            "{}: exists; give a new output path, or --overwrite to replace it",
            path.display()
        )
    }
}

/// " of RECORD" after a pickle offset, when the file holds more than one pickle.
fn of_record(record: &str) -> String {
    if record.is_empty() {
        String::new()
    } else {
        format!(" of {record}")
    }
}

/// The way past a refused global, when there is one.
fn allow_hint(global: &str, allowable: bool) -> String {
    if allowable {
        format!(": if you trust this file and {global} is plain data, pass --allow-global {global}")
    } else {
        String::new()
    }
}

/// `text` with control characters and bidirectional overrides escaped (`\n`, `\u{202e}`).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        match c.is_control() || bidi {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_with_bytes_from_a_file_stays_one_line() {
        let e = Error::format("m.gguf", "key 'a\nb\u{202e}c\u{7}' has type 99");
        assert_eq!(e.line(), "m.gguf: key 'a\\nb\\u{202e}c\\u{7}' has type 99");
        assert_eq!(one_line("ሰላም ▁x"), "ሰላም ▁x");
    }

    /// Message, kind and flag of `e`.
    fn seen(e: &Error) -> (String, &'static str, Option<&'static str>) {
        (e.to_string(), e.kind(), e.flag())
    }

    #[test]
    fn a_cut_of_trained_rows_names_file_tensor_both_sizes_and_allow_shrink() {
        let e = Error::Shrink {
            path: "m.safetensors".into(),
            tensor: "embed.weight".into(),
            rows: 2454,
            target: 2000,
        };
        assert_eq!(seen(&e), ("m.safetensors: embed.weight has 2454 rows; a target of 2000 rows would drop its trained rows 2000..2454; pass --allow-shrink if that is meant".into(), "usage", Some("--allow-shrink")));
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn an_existing_output_is_refused_naming_overwrite() {
        let file = Error::OutputExists {
            path: "o.pt".into(),
            folder: false,
        };
        assert_eq!(
            seen(&file),
            (
                "o.pt: exists; give a new output path, or --overwrite to replace it".into(),
                "usage",
                Some("--overwrite")
            )
        );
        let folder = Error::OutputExists {
            path: "out".into(),
            folder: true,
        };
        assert_eq!(seen(&folder), ("out: the output folder exists and is not empty; give a new folder, or --overwrite to replace it".into(), "usage", Some("--overwrite")));
    }

    #[test]
    fn an_output_over_an_input_names_both_paths_and_how_they_overlap() {
        let e = |overlap| Error::OutputIsInput {
            path: "out".into(),
            input: "in".into(),
            overlap,
        };
        assert_eq!(
            seen(&e(Overlap::Same)),
            (
                "out: refusing to write over an input (in); choose another output path".into(),
                "usage",
                Some("--output")
            )
        );
        assert_eq!(e(Overlap::Inside).to_string(), "out: the output lies inside the input folder in; nothing is ever written inside an input: choose an output path outside it");
        assert_eq!(e(Overlap::Holds).to_string(), "out: the output holds the input in; nothing is ever written inside an input: choose an output path outside it");
    }

    #[test]
    fn pickle_errors_name_file_offset_record_and_are_bad_input() {
        let e = Error::Pickle {
            path: "ckpt.pt".into(),
            record: "data.pkl".into(),
            offset: 7,
            problem: "stack underflow".into(),
        };
        assert_eq!(
            seen(&e),
            (
                "ckpt.pt: stack underflow at byte 7 of data.pkl".into(),
                "bad-input",
                None
            )
        );
        let global = |allowable| Error::UnknownGlobal {
            path: ".metadata".into(),
            record: String::new(),
            offset: 2,
            global: "mylib.Config".into(),
            allowable,
        };
        assert_eq!(seen(&global(true)), (".metadata: refused global mylib.Config at byte 2: if you trust this file and mylib.Config is plain data, pass --allow-global mylib.Config".into(), "bad-input", Some("--allow-global")));
        assert_eq!(
            seen(&global(false)),
            (
                ".metadata: refused global mylib.Config at byte 2".into(),
                "bad-input",
                None
            )
        );
        let e = Error::PickledTensor {
            path: "q.pt".into(),
            record: "data.pkl".into(),
            offset: 40,
            what: "a quantized tensor",
            global: "torch._utils._rebuild_qtensor".into(),
            fix: "dequantize it",
        };
        assert_eq!(seen(&e), ("q.pt: a quantized tensor (torch._utils._rebuild_qtensor) is not supported at byte 40 of data.pkl: dequantize it".into(), "bad-input", None));
    }

    #[test]
    fn device_errors_say_when_the_device_failed_and_name_device_cpu_where_it_helps() {
        let e = Error::device(DeviceStage::Open, "no CUDA driver");
        assert_eq!(
            seen(&e),
            (
                "--device cuda: no CUDA driver; use --device cpu (or auto)".into(),
                "device",
                Some("--device")
            )
        );
        assert!(matches!(
            e,
            Error::Device {
                stage: DeviceStage::Open,
                ..
            }
        ));
        assert_eq!(
            Error::device(DeviceStage::Run, "out of memory").to_string(),
            "CUDA: out of memory"
        );
        assert_eq!(
            Error::device(DeviceStage::Compute, "a thread panicked").to_string(),
            "computing the new rows failed (a thread panicked)"
        );
    }
}
