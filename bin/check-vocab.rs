//! check-vocab: do tokenizer, config, weights, special tokens, optimizer and data agree?
//! The command line lives in `ckpt_surgery::cli` (shared with the Python package).

ckpt_surgery::use_mimalloc!();

fn main() -> std::process::ExitCode {
    ckpt_surgery::cli::main_of("check-vocab")
}
