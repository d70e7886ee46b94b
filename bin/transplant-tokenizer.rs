//! transplant-tokenizer: give a model another tokenizer's vocabulary (ids and all).
//! The command line lives in `ckpt_surgery::cli` (shared with the Python package).

ckpt_surgery::use_mimalloc!();

fn main() -> std::process::ExitCode {
    ckpt_surgery::cli::main_of("transplant-tokenizer")
}
