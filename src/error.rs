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

    /// The request cannot be carried out as asked (bad arguments, refusing to overwrite an input).
    #[error("{0}")]
    Usage(String),

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

    /// The process exit code for this error: bad input, bad arguments and failed writes are all 2;
    /// 1 is a check that ran and found problems.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Check { .. } => 1,
            _ => 2,
        }
    }
}
