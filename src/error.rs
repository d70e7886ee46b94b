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

    /// The compute device (CUDA) could not be used or failed while running: `problem` is the whole
    /// one-line message, naming `--device cpu` where that is the way out.
    #[error("{problem}")]
    Device { problem: String },

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
    pub fn device(problem: impl Into<String>) -> Self {
        Error::Device {
            problem: problem.into(),
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
            Error::Format { .. } | Error::Tensor { .. } => "bad-input",
            Error::Unsupported { .. } => "unsupported",
            Error::Arg { .. } => "usage",
            Error::Device { .. } => "device",
            Error::Check { .. } => "check-failed",
            Error::Verify { .. } => "verify-failed",
        }
    }
}
