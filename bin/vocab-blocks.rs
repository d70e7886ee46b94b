//! vocab-blocks: split a vocabulary matrix into a frozen and a trainable block, or join them.
//! The command line lives in `ckpt_surgery::cli` (shared with the Python package).

ckpt_surgery::use_mimalloc!();

fn main() -> std::process::ExitCode {
    ckpt_surgery::cli::main_of("vocab-blocks")
}
