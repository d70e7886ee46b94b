//! trim-vocab: keep the tokens a language or a corpus needs.
//! The command line lives in `ckpt_surgery::cli` (shared with the Python package).

ckpt_surgery::use_mimalloc!();

fn main() -> std::process::ExitCode {
    ckpt_surgery::cli::main_of("trim-vocab")
}
