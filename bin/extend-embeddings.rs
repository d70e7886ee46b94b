//! extend-embeddings: grow embedding/head matrices (and bias) to a new vocabulary size.
//! The command line lives in `ckpt_surgery::cli` (shared with the Python package).

ckpt_surgery::use_mimalloc!();

fn main() -> std::process::ExitCode {
    ckpt_surgery::cli::main_of("extend-embeddings")
}
