//! merge-tokenizers: base tokenizer + additions → merged tokenizer, every base id unchanged.
//! The command line lives in `ckpt_surgery::cli` (shared with the Python package).

ckpt_surgery::use_mimalloc!();

fn main() -> std::process::ExitCode {
    ckpt_surgery::cli::main_of("merge-tokenizers")
}
