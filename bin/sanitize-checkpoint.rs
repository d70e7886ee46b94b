//! sanitize-checkpoint: make a training checkpoint safe to resume after a vocabulary change.
//! The command line lives in `ckpt_surgery::cli` (shared with the Python package).

ckpt_surgery::use_mimalloc!();

fn main() -> std::process::ExitCode {
    ckpt_surgery::cli::main_of("sanitize-checkpoint")
}
