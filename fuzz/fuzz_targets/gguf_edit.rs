//! A GGUF file, once it opens, edited as check-vocab --fix edits one (each special role set to a
//! token, a token typed control, the chat template, `<arch>.vocab_size`, padding tokens, a key
//! removed; all at once, then each alone) and grown as extend-embeddings --new-rows grows one,
//! each written into a temp file through the direct writer. Refusals are fine; a panic, or a
//! written file that its own read-back refused (Error::Verify), is a bug.
#![no_main]
use ckpt_surgery::error::Error;
use ckpt_surgery::formats::gguf::{edit, keys, write, Gguf};
use ckpt_surgery::jobs::extend_embeddings::{gguf as grow, Options, Target};
use ckpt_surgery::plan::GgufEdit;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

/// Every kind of edit, named by the file's own tokens.
fn edits(g: &Gguf, template: &Path) -> Vec<GgufEdit> {
    let tokens = keys::tokens(g).unwrap_or_default();
    let (first, last) = (tokens.first(), tokens.last());
    let mut e = vec![
        GgufEdit::ChatTemplate {
            file: template.to_path_buf(),
        },
        GgufEdit::VocabSize {
            rows: g.tensor(keys::EMBEDDING).map_or(7, |t| t.rows()),
        },
        GgufEdit::PadTokens,
        GgufEdit::Remove {
            key: g.kv.first().map_or(String::new(), |kv| kv.key.clone()),
        },
    ];
    if let (Some(a), Some(b)) = (first, last) {
        for (role, token) in [("eos", a), ("bos", b), ("pad", a)] {
            e.push(GgufEdit::Special {
                role: role.into(),
                token: (*token).into(),
            });
        }
        e.push(GgufEdit::TokenType {
            token: (*b).into(),
            kind: "control".into(),
        });
    }
    e
}

/// Write `edits` made on `g`; a read-back that refuses what was written is a bug.
fn write_edited(g: &Gguf, edits: &[GgufEdit], out: &Path) {
    let Ok(plan) = edit::apply(g, edits) else {
        return;
    };
    match write::write_gguf(&plan, out) {
        Err(e @ Error::Verify { .. }) => panic!("the writer refused its own output: {e}"),
        Ok(_) => {
            Gguf::open(out).expect("a written GGUF opens");
        }
        Err(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    // Every output, however small, through the direct writer (chunks, the grid read-back).
    static DIRECT: std::sync::Once = std::sync::Once::new();
    DIRECT.call_once(|| std::env::set_var("CKPT_SURGERY_TEST_DIRECT_FROM", "0"));
    let p = ckpt_surgery_fuzz::put("model.gguf", data);
    let Ok(g) = Gguf::open(&p) else {
        return;
    };
    let dir = ckpt_surgery_fuzz::scratch();
    let template = dir.join("template.jinja");
    std::fs::write(
        &template,
        "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
    )
    .expect("scratch write");
    let out = dir.join("edited.gguf");
    let all = edits(&g, &template);
    write_edited(&g, &all, &out);
    for e in &all {
        write_edited(&g, std::slice::from_ref(e), &out);
    }
    // A table short of its tokens grows to them; otherwise rows + 2, which a file with tokens
    // refuses (rows no token names) and one without grows.
    let rows = g.tensor(keys::EMBEDDING).map_or(0, |t| t.rows());
    let tokens = keys::tokens(&g).map_or(0, |t| t.len() as u64);
    let opts = Options {
        target: Target::Rows(if tokens > rows { tokens } else { rows + 2 }),
        overwrite: true,
        ..Options::default()
    };
    let grown = dir.join("grown.gguf");
    match grow::run(&ckpt_surgery::formats::gguf::GgufAt::new(&p), &grown, &opts) {
        Err(e @ Error::Verify { .. }) => panic!("the writer refused its own output: {e}"),
        Ok(r) if r.written.is_some() => {
            Gguf::open(&grown).expect("a grown GGUF opens");
        }
        _ => {}
    }
});
