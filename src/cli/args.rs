//! The flag groups the tools share (flattened into each tool's arguments).

use crate::error::Error;
use crate::formats::torch::pickle::GlobalPolicy;

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

/// `--optimizer-param NAME=INDEX`.
pub(super) fn parse_pin(s: &str) -> Result<(String, u64), String> {
    let (name, idx) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s}: expected NAME=INDEX"))?;
    let idx = idx
        .parse()
        .map_err(|_| format!("{s}: INDEX must be a parameter index (0, 1, …)"))?;
    Ok((name.to_string(), idx))
}
