//! The `tokenizers` library's boundary: a tokenizer.json loaded there never crashes the tool.

/// Load a tokenizer.json in the `tokenizers` library without letting it panic: its serde code
/// `expect`s on some malformed parts (a `decoder` object that is neither a known type nor
/// tagged), so a broken file would crash the tool instead of being refused. Such a file is an
/// error like any other (found by the `tokenizer_merge` fuzz target); the library's panic message
/// is not printed.
pub fn load(bytes: &[u8]) -> Result<tokenizers::Tokenizer, String> {
    quiet_unwind(|| tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| e.to_string()))
}

/// [`load`] of a file.
pub fn load_file(path: &std::path::Path) -> Result<tokenizers::Tokenizer, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    load(&bytes)
}

thread_local! {
    /// This thread is inside [`quiet_unwind`]: a panic is caught and becomes an error.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, a panic in it turned into an error naming the panic's message; the panic hook stays
/// silent for this thread meanwhile (every other panic is reported as before).
pub(crate) fn quiet_unwind<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    caught(f).unwrap_or_else(|why| Err(format!("the tokenizers library cannot read it: {why}")))
}

/// Run `f`: its value, or the message of a panic in it (the panic hook silent for this thread
/// meanwhile, as in [`quiet_unwind`]).
pub(crate) fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    r.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a malformed part".into())
    })
}

#[cfg(test)]
mod tests {
    use super::quiet_unwind;

    #[test]
    fn a_panic_inside_the_tokenizers_library_becomes_an_error_naming_it() {
        let r: Result<(), String> = quiet_unwind(|| panic!("Helper"));
        let err = r.unwrap_err();
        assert!(
            err.contains("cannot read it") && err.contains("Helper"),
            "{err}"
        );
        // The thread is not left quiet: the next call without a panic goes through.
        assert_eq!(quiet_unwind(|| Ok(3)), Ok(3));
    }

    #[test]
    fn a_valid_tokenizer_json_loads_through_the_guard() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/tokenizers/bytelevel_bpe.json");
        let t = super::load_file(&path).unwrap();
        assert!(t.get_vocab_size(true) > 0);
    }
}
