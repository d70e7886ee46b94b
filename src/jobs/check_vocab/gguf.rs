//! check-vocab on a GGUF file: the token count against `token_embd.weight`'s rows, against
//! `output.weight`'s (absent: tied), against `<arch>.vocab_size` (which llama.cpp ignores: a
//! warning) and against the per-token arrays; every special-token id against the vocabulary; the
//! special tokens the chat template writes against the vocabulary. A table larger than the
//! vocabulary is an error for llama.cpp (its n_vocab is the token count;
//! `scripts/gguf_consumer.py` shows the refusal), fixed by naming the padding rows with tokens. A
//! metadata fix is a [`Fix::EditGguf`]: the check-vocab command that writes the file with that
//! edit (`--fix` carries it out); a short table's fix is extend-embeddings' grow; the rest are
//! changes by hand (`Request::Manual`).

use super::finding::{finding, summarize, Finding, Report, Severity};
use super::inputs::Inputs;
use crate::error::{Error, Result};
use crate::formats::gguf::{keys, Gguf, Value};
use crate::plan::{GgufEdit, Request as Fix};
use serde_json::json;
use std::collections::BTreeMap;

/// What the checks compare: the token strings and the tables' rows.
struct Sizes<'a> {
    tokens: Vec<&'a str>,
    embedding: Option<u64>,
    head: Option<u64>,
    vocab_size: Option<(String, u64)>,
}

fn manual(text: String) -> Option<Fix> {
    Some(Fix::Manual { text })
}

/// check-vocab writing `g` with `edits` beside it (`--fix` carries it out).
fn edit_gguf(g: &Gguf, edits: Vec<GgufEdit>) -> Option<Fix> {
    Some(Fix::EditGguf {
        input: g.path().to_path_buf(),
        output: super::fix::fixed_path(g.path()),
        edits,
    })
}

/// The fix of a table with fewer rows than tokens: extend-embeddings grows every vocabulary
/// table to `rows` (new rows the mean of the old, in the table's ggml type).
fn grow(g: &Gguf, rows: u64) -> Option<Fix> {
    Some(Fix::Extend {
        input: g.path().to_path_buf(),
        output: super::fix::fixed_path(g.path()),
        rows,
        tokenizer: None,
        allow_shrink: false,
        config: None,
        tensors: Vec::new(),
        allow_global: Vec::new(),
    })
}

/// The rows every table must have: the token count against the embedding, the head and
/// `<arch>.vocab_size`.
fn tables(g: &Gguf, s: &Sizes, out: &mut Vec<Finding>) {
    let t = s.tokens.len() as u64;
    if let Some(e) = s.embedding.filter(|&e| e < t) {
        out.push(finding(
            Severity::Error,
            "gguf-embedding-rows",
            format!("{t} tokens but {} has {e} rows: ids {e}..{} index past the table (llama.cpp refuses the shape, or reads past it)", keys::EMBEDDING, t - 1),
            json!({"tokens": t, "rows": e, "tensor": keys::EMBEDDING}),
            grow(g, t),
        ));
    }
    if let (Some(h), Some(e)) = (s.head, s.embedding) {
        if h != e {
            out.push(finding(
                Severity::Error,
                "gguf-head-rows",
                format!("{} has {h} rows but {} has {e}: the logits and the embedding disagree on the vocabulary", keys::HEAD, keys::EMBEDDING),
                json!({"head": h, "embedding": e}),
                grow(g, e.max(t).max(h)),
            ));
        }
    }
    if let Some(e) = s.embedding.filter(|&e| e > t) {
        // llama.cpp (0.3.36) takes n_vocab from the token count, whatever <arch>.vocab_size
        // says, and refuses a table of other rows (check_tensor_dims: wrong shape): padding
        // rows need tokens, as convert_hf_to_gguf.py gives them ([PAD{id}], unused).
        out.push(finding(
            Severity::Error,
            "gguf-padding-rows",
            format!(
                "{} has {e} rows for {t} tokens: rows {t}..{} are padding, and llama.cpp takes n_vocab from the token count and refuses the table's shape (name the padding rows with [PAD{{id}}] tokens)",
                keys::EMBEDDING,
                e - 1
            ),
            json!({"tokens": t, "rows": e, "padding": e - t}),
            edit_gguf(g, vec![GgufEdit::PadTokens]),
        ));
    }
    if let (Some((key, v)), Some(e)) = (&s.vocab_size, s.embedding) {
        if *v != e {
            // A table short of the tokens is grown (the first finding's fix), which brings it
            // to the key; else the key is set to the table.
            let fix = if e < t {
                grow(g, t)
            } else {
                edit_gguf(g, vec![GgufEdit::VocabSize { rows: e }])
            };
            // llama.cpp (0.3.36) loads the file whatever the key says (n_vocab is the token
            // count); other readers take the key: a warning.
            out.push(finding(
                Severity::Warning,
                "gguf-vocab-size",
                format!("{key} is {v} but {} has {e} rows: llama.cpp ignores the key (its n_vocab is the token count), readers that take it as the vocabulary size disagree with the table", keys::EMBEDDING),
                json!({"key": key, "value": v, "rows": e, "tokens": t}),
                fix,
            ));
        }
    }
}

/// The per-token arrays (types, scores) have one entry per token.
fn per_token(g: &Gguf, t: u64, out: &mut Vec<Finding>) {
    for key in [keys::TOKEN_TYPE, keys::SCORES] {
        let Some(n) = g.get(key).and_then(Value::as_array).map(|a| a.len() as u64) else {
            continue;
        };
        if n != t {
            out.push(finding(
                Severity::Error,
                "gguf-token-arrays",
                format!("{key} has {n} entries for {t} tokens: llama.cpp reads one per token"),
                json!({"key": key, "entries": n, "tokens": t}),
                None,
            ));
        }
    }
}

/// The token a role's id should name, by the usual spellings of that role.
fn token_for(role: &str, tokens: &[&str]) -> Option<u64> {
    let names: &[&str] = match role {
        "bos" => &["<|begin_of_text|>", "<s>", "<bos>", "<|endoftext|>"],
        "eos" | "eot" => &["<|endoftext|>", "</s>", "<eos>", "<|im_end|>", "<|eot_id|>"],
        "pad" => &["<pad>", "<|pad|>", "[PAD]", "<|endoftext|>"],
        "unk" => &["<unk>", "[UNK]"],
        _ => &[],
    };
    names
        .iter()
        .find_map(|n| tokens.iter().position(|t| t == n))
        .map(|i| i as u64)
}

/// Every special-token id names a token (and a row).
fn special_ids(g: &Gguf, s: &Sizes, out: &mut Vec<Finding>) {
    let t = s.tokens.len() as u64;
    let rows = s.embedding.unwrap_or(t).min(t);
    for (role, key, id) in keys::special_ids(g) {
        let (bad, fix) = match id {
            Some(id) if id < rows => continue,
            // The token exists; its row does not: the table's fix (grow it) is this one's.
            Some(id) if id < t => (
                format!("{key} is {id} ({:?}), a token without a row ({} has {rows}): the {role} token cannot be embedded or sampled", s.tokens[id as usize], keys::EMBEDDING),
                grow(g, t),
            ),
            Some(id) => (
                format!("{key} is {id}, past the vocabulary ({t} tokens): the {role} id names no token"),
                set_role(g, role, key, &s.tokens),
            ),
            None => (
                format!("{key} is {:?}: not a token id", g.get(key)),
                set_role(g, role, key, &s.tokens),
            ),
        };
        out.push(finding(
            Severity::Error,
            "gguf-special-ids",
            bad,
            json!({"role": role, "key": key, "id": id, "tokens": t}),
            fix,
        ));
    }
}

/// The fix of a special id that names no token: the id of the role's usual token, when the
/// vocabulary has one (its row missing too is the table's finding).
fn set_role(g: &Gguf, role: &str, key: &str, tokens: &[&str]) -> Option<Fix> {
    match token_for(role, tokens) {
        // A token without a row is the table's finding (its fix grows the table).
        Some(good) => edit_gguf(
            g,
            vec![GgufEdit::Special {
                role: role.to_string(),
                token: tokens[good as usize].to_string(),
            }],
        ),
        None => manual(format!(
            "set {key} to the id of the {role} token: check-vocab {} --fix --output OUT --special {role}=TOKEN; or remove the key: --remove-key {key}",
            g.path().display()
        )),
    }
}

/// Special-token spellings in a chat template: `<|…|>`, `<word>` / `</word>`, `[WORD]`.
fn template_specials(template: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let re = regex::Regex::new(
        r"<\|[^<>|\s]{1,64}\|>|</?[A-Za-z_][A-Za-z0-9_]{0,63}>|\[/?[A-Z_]{2,32}\]",
    );
    for m in re.iter().flat_map(|re| re.find_iter(template)) {
        if !found.iter().any(|f| f == m.as_str()) {
            found.push(m.as_str().to_string());
        }
    }
    found
}

/// The tokens among `words` that the vocabulary has but types as plain text (not control or
/// user-defined): llama.cpp splits them as text even where special tokens are parsed.
fn typed_as_text(g: &Gguf, s: &Sizes, words: &[String]) -> Vec<String> {
    let Some(types) = g.get(keys::TOKEN_TYPE).and_then(Value::as_array) else {
        return Vec::new();
    };
    words
        .iter()
        .filter(|w| {
            let id = s.tokens.iter().position(|t| t == w);
            let kind = id.and_then(|i| types.get(i)).and_then(Value::as_u64);
            kind.is_some_and(|k| k != 3 && k != 4)
        })
        .cloned()
        .collect()
}

/// The special tokens a chat template writes are tokens of the vocabulary, typed as special.
fn template_tokens(g: &Gguf, s: &Sizes, out: &mut Vec<Finding>) {
    for (key, template) in keys::chat_templates(g) {
        let plain = typed_as_text(g, s, &template_specials(template));
        if !plain.is_empty() {
            let edits = plain
                .iter()
                .map(|t| GgufEdit::TokenType {
                    token: t.clone(),
                    kind: "control".into(),
                })
                .collect();
            out.push(finding(
                Severity::Error,
                "gguf-chat-template-types",
                format!("{key} writes {}, typed as plain text in {}: llama.cpp splits them into ordinary tokens instead of reading one special token each", plain.join(", "), keys::TOKEN_TYPE),
                json!({"key": key, "plain": plain}),
                edit_gguf(g, edits),
            ));
        }
        let missing: Vec<String> = template_specials(template)
            .into_iter()
            .filter(|w| !s.tokens.contains(&w.as_str()))
            .collect();
        if missing.is_empty() {
            continue;
        }
        out.push(finding(
            Severity::Error,
            "gguf-chat-template",
            format!("{key} writes {} that the vocabulary lacks: llama.cpp tokenizes them as plain text, so the model never sees the special tokens it was trained with", missing.join(", ")),
            json!({"key": key, "missing": missing}),
            manual(format!(
                "give the file a chat template in this vocabulary's tokens (check-vocab {} --fix --output OUT --chat-template FILE), or add {} as control tokens (extend-embeddings {} --tokenizer MERGED.json --output OUT)",
                g.path().display(),
                missing.join(", "),
                g.path().display()
            )),
        ));
    }
}

/// check-vocab on the GGUF file `g` (opened from `inp.checkpoint`).
pub fn run(inp: &Inputs, g: &Gguf) -> Result<Report> {
    let unsupported = [
        (!inp.tokenizers.is_empty(), "--tokenizer"),
        (inp.config.is_some(), "--config"),
        (inp.freeze_until.is_some(), "--freeze-until"),
        (inp.base_tokenizer.is_some(), "--base-tokenizer"),
        (inp.training_checkpoint.is_some(), "--training-checkpoint"),
        (inp.token_ids.is_some(), "--token-ids"),
        (inp.codebook_size.is_some(), "--codebook-size"),
    ];
    if let Some((_, flag)) = unsupported.iter().find(|(set, _)| *set) {
        return Err(Error::arg(
            flag,
            format!("{flag} is not supported for a GGUF file yet: its tokenizer is in the file (check-vocab MODEL.gguf)"),
        ));
    }
    let tokens = keys::tokens(g).ok_or_else(|| {
        Error::format(
            g.path(),
            format!(
                "{} is missing or not an array of strings: no vocabulary to check",
                keys::TOKENS
            ),
        )
    })?;
    let rows = |name| g.tensor(name).map(|t| t.rows());
    let vocab_size =
        keys::vocab_size_key(g).and_then(|k| g.get(&k).and_then(Value::as_u64).map(|v| (k, v)));
    let s = Sizes {
        embedding: rows(keys::EMBEDDING),
        head: rows(keys::HEAD),
        vocab_size,
        tokens,
    };
    let mut findings = Vec::new();
    tables(g, &s, &mut findings);
    per_token(g, s.tokens.len() as u64, &mut findings);
    special_ids(g, &s, &mut findings);
    template_tokens(g, &s, &mut findings);
    let mut files = BTreeMap::new();
    files.insert("checkpoint".to_string(), vec![g.path().to_path_buf()]);
    let table = s.embedding.unwrap_or(0);
    Ok(summarize(inp.checkpoint.clone(), table, files, findings))
}
