//! The merged BPE tokenizer in `tokenizers` without parsing the merged JSON: BASE's pipeline and
//! model settings as `tokenizers` reads them, the model made by `tokenizers`' own builder from
//! BASE's vocab and merges and the appended entries, read as its loader reads them, and the added
//! tokens added as its loader adds them. Loading the merged text instead would parse a 262k-token
//! document once more for what differs in the appended entries.

use crate::tokenizer::hf::{Extra, HfTokenizer};
use serde::Deserialize as _;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::{AddedToken, ModelWrapper, Tokenizer};

/// BASE's model entries as `tokenizers`' builder takes them (a copy of every token and merge):
/// made on another core while the merge is decided.
pub(super) struct Prepared {
    vocab: Vocab,
    merges: Vec<(String, String)>,
}

/// [`Prepared`] for a BPE base whose model.vocab is an object; None for the other models.
pub(super) fn prepare(base: &HfTokenizer) -> Option<Prepared> {
    let vocab_is_object = base
        .json
        .pointer("/model/vocab")
        .is_some_and(Value::is_object);
    if base.model_type != "BPE" || !vocab_is_object {
        return None;
    }
    let mut vocab = Vocab::with_capacity(base.vocab.len() + base.vocab.len() / 4);
    vocab.extend(base.vocab.iter().map(|(t, id)| (t.clone(), *id)));
    // As `tokenizers` reads them: a "#version" line of string merges is skipped (a base that
    // loads in `tokenizers` has no other string merge of more or fewer than two parts).
    let skipped = |a: &str| !base.merges_as_pairs && a.starts_with("#version");
    let merges = base
        .merges
        .iter()
        .filter(|(a, _)| !skipped(a))
        .cloned()
        .collect();
    Some(Prepared { vocab, merges })
}

/// The merged tokenizer of a BPE `base` with `extra` appended, as `tokenizers` loads the text
/// `hf::write` writes; None for the other models (their merged text is loaded). `prepared` is
/// [`prepare`]'s (made here when None). An error says what makes the merged tokenizer.json fail
/// to load, or a base token lose its id.
pub(super) fn merged_bpe(
    base: &HfTokenizer,
    prepared: Option<Prepared>,
    extra: &Extra,
) -> Result<Option<Tokenizer>, String> {
    let Some(Prepared {
        mut vocab,
        mut merges,
    }) = prepared.or_else(|| prepare(base))
    else {
        return Ok(None);
    };
    let bad = |e: String| format!("the merged tokenizer.json does not load in tokenizers: {e}");
    // BASE with an empty model and no added tokens: its pipeline and BPE settings.
    let mut tok = pipeline(&base.json).map_err(|e| bad(e.to_string()))?;
    let ModelWrapper::BPE(settings) = tok.get_model() else {
        return Ok(None);
    };
    append_vocab(&mut vocab, extra)?;
    append_merges(&mut merges, base.merges_as_pairs, extra).map_err(bad)?;
    let mut b = BPE::builder()
        .vocab_and_merges(vocab, merges)
        // Each new token is tokenized once: a cache would only be filled (and locked).
        .cache_capacity(0)
        .fuse_unk(settings.fuse_unk)
        .byte_fallback(settings.byte_fallback)
        .ignore_merges(settings.ignore_merges);
    if let Some(p) = settings.dropout {
        b = b.dropout(p);
    }
    if let Some(u) = &settings.unk_token {
        b = b.unk_token(u.clone());
    }
    if let Some(p) = &settings.continuing_subword_prefix {
        b = b.continuing_subword_prefix(p.clone());
    }
    if let Some(s) = &settings.end_of_word_suffix {
        b = b.end_of_word_suffix(s.clone());
    }
    tok.with_model(b.build().map_err(|e| bad(e.to_string()))?);
    // As the loader does: the added tokens once the model is there, BASE's then the new ones.
    let listed = base.json.get("added_tokens").and_then(Value::as_array);
    let added: Vec<AddedToken> = listed
        .into_iter()
        .flatten()
        .chain(&extra.added)
        .map(AddedToken::deserialize)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    tok.add_tokens(added).map_err(|e| bad(e.to_string()))?;
    Ok(Some(tok))
}

/// BASE's document with an empty model (its settings kept) and no added tokens, in `tokenizers`.
fn pipeline(json: &Value) -> serde_json::Result<Tokenizer> {
    let mut small = Map::new();
    for (k, v) in json.as_object().into_iter().flatten() {
        let v = match k.as_str() {
            "model" => {
                let mut m = Map::new();
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    let mv = match mk.as_str() {
                        "vocab" => json!({}),
                        "merges" => json!([]),
                        _ => mv.clone(),
                    };
                    m.insert(mk.clone(), mv);
                }
                Value::Object(m)
            }
            "added_tokens" => json!([]),
            _ => v.clone(),
        };
        small.insert(k.clone(), v);
    }
    Tokenizer::deserialize(&Value::Object(small))
}

/// The appended vocab entries; one that would replace an entry (a base token, or a new token
/// given twice) is refused, naming the token that would lose its id.
fn append_vocab(vocab: &mut Vocab, extra: &Extra) -> Result<(), String> {
    let mut new = HashSet::new();
    for (token, id) in &extra.vocab {
        let id = id
            .as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| format!("new token '{token}' has no id"))?;
        if let Some(was) = vocab.insert(token.clone(), id) {
            return Err(if new.contains(token.as_str()) {
                format!("new token '{token}' does not have its id {was}")
            } else {
                format!("base token '{token}' no longer has id {was}")
            });
        }
        new.insert(token.as_str());
    }
    Ok(())
}

/// The appended merges, read as `tokenizers` reads model.merges: `["a", "b"]` pairs, or
/// `"a b"` strings of exactly two parts (a `#version` line skipped).
fn append_merges(
    merges: &mut Vec<(String, String)>,
    pairs: bool,
    extra: &Extra,
) -> Result<(), String> {
    for m in &extra.merges {
        if pairs {
            merges.push(<(String, String)>::deserialize(m).map_err(|e| e.to_string())?);
            continue;
        }
        let line = m.as_str().unwrap_or_default();
        if line.starts_with("#version") {
            continue;
        }
        match line.split(' ').collect::<Vec<_>>()[..] {
            [a, b] => merges.push((a.to_string(), b.to_string())),
            _ => {
                return Err(format!(
                    "Merges text file invalid at line {}",
                    merges.len() + 1
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::assign::{Assigned, Place};
    use super::super::verify::{loaded_keeping_base_ids, verify_hf};
    use super::*;
    use crate::tokenizer::form::Form;
    use crate::tokenizer::hf::{self, Edit};

    /// A byte-level BPE with an added token, its merges as strings or as pairs.
    fn base(pairs: bool, settings: &str) -> HfTokenizer {
        let merges = if pairs {
            r#"[["a","b"],["Ġ","a"],["ab","c"]]"#
        } else {
            r#"["a b","Ġ a","ab c"]"#
        };
        hf::parse(&format!(
            r#"{{"version":"1.0","truncation":null,"padding":null,
            "added_tokens":[{{"id":7,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}}],
            "normalizer":null,
            "pre_tokenizer":{{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}},
            "post_processor":null,"decoder":null,
            "model":{{"type":"BPE",{settings}
              "vocab":{{"a":0,"b":1,"c":2,"Ġ":3,"ab":4,"Ġa":5,"abc":6,"<s>":7}},"merges":{merges}}}}}"#
        ))
        .unwrap()
    }

    fn vocab_edit(content: &str, id: u32) -> Edit<'_> {
        Edit::Vocab {
            content,
            id,
            score: 0.0,
        }
    }

    #[test]
    fn the_merged_bpe_is_what_tokenizers_loads_from_the_merged_text() {
        let settings = [
            "",
            r#""dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":true,"#,
        ];
        for (pairs, settings) in [(false, settings[0]), (true, settings[1])] {
            let t = base(pairs, settings);
            let edits = [
                vocab_edit("ba", 8),
                vocab_edit("Ġab", 9),
                vocab_edit("<x>", 10),
                // No merge makes it: produced only where the model takes whole words.
                vocab_edit("cab", 11),
                Edit::Added {
                    content: "<x>",
                    id: 10,
                    special: true,
                    template: None,
                },
                Edit::Merge { a: "b", b: "a" },
                Edit::Merge { a: "Ġa", b: "b" },
            ];
            let (text, extra) = hf::apply(&t, &edits).unwrap();
            let built = merged_bpe(&t, None, &extra).unwrap().unwrap();
            let loaded = loaded_keeping_base_ids(&t, &text).unwrap();
            assert_eq!(built.get_vocab(true), loaded.get_vocab(true));
            for line in ["abc ba", "ba ab<x>c", " abab bab", "<s>ba<x>", "cab ab ba"] {
                let ids = |t: &Tokenizer| t.encode(line, false).unwrap().get_ids().to_vec();
                assert_eq!(ids(&built), ids(&loaded), "{line}");
            }
            assert_eq!(ids_of(&built, "ba Ġab"), ids_of(&loaded, "ba Ġab"));
        }
    }

    fn ids_of(t: &Tokenizer, words: &str) -> Vec<Vec<u32>> {
        use tokenizers::Model;
        let model = t.get_model();
        let tokens = words.split(' ').map(|w| model.tokenize(w).unwrap());
        tokens.map(|v| v.iter().map(|x| x.id).collect()).collect()
    }

    #[test]
    fn what_makes_the_merged_text_fail_to_load_or_move_a_base_id_is_refused_here_too() {
        let t = base(false, "");
        let cases: [(Vec<Edit>, &str); 3] = [
            // A base token given again at another id: it would lose its own.
            (
                vec![vocab_edit("ab", 8)],
                "base token 'ab' no longer has id 4",
            ),
            // A merge whose result is not in the vocab.
            (
                vec![Edit::Merge { a: "c", b: "a" }],
                "the merged tokenizer.json does not load in tokenizers",
            ),
            // "a b" + "c" written as the string "a b c": not two parts.
            (
                vec![
                    vocab_edit("a b", 8),
                    vocab_edit("a bc", 9),
                    Edit::Merge { a: "a b", b: "c" },
                ],
                "the merged tokenizer.json does not load in tokenizers",
            ),
        ];
        for (edits, want) in cases {
            let (text, extra) = hf::apply(&t, &edits).unwrap();
            let built = merged_bpe(&t, None, &extra).map(|_| ()).unwrap_err();
            let loaded = loaded_keeping_base_ids(&t, &text).map(|_| ()).unwrap_err();
            assert!(built.contains(want), "{built}");
            assert!(loaded.contains(want), "{loaded}");
        }
    }

    #[test]
    fn a_new_token_no_merge_produces_is_listed_unreachable() {
        let t = base(false, "");
        let edits = [
            vocab_edit("ba", 8),
            vocab_edit("cab", 9),
            Edit::Merge { a: "b", b: "a" },
        ];
        let (text, extra) = hf::apply(&t, &edits).unwrap();
        let added: Vec<Assigned> = [("ba", 8), ("cab", 9)]
            .iter()
            .map(|&(token, id)| Assigned {
                token: token.into(),
                id,
                place: Place::Vocab,
                special: false,
                score: None,
                from: 1,
                template: None,
                piece_type: None,
            })
            .collect();
        let mut unreachable = Vec::new();
        let built = merged_bpe(&t, None, &extra).unwrap();
        verify_hf(&t, &text, built, &added, Form::ByteLevel, &mut unreachable).unwrap();
        assert_eq!(unreachable, ["cab"]);
    }
}
