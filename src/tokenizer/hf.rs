//! Hugging Face `tokenizer.json`: read the pieces a merge changes (model vocab, merges, added
//! tokens) and write them back into the same JSON document, leaving everything else as it was.

use super::fxhash::{self, FxHashMap, FxHashSet};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::fmt;

/// An added token as the file has it.
#[derive(Debug, Clone)]
pub struct AddedToken {
    pub id: u32,
    pub content: String,
    pub special: bool,
    /// The whole object (flags such as lstrip, normalized), kept as written.
    pub raw: Value,
}

/// What a merge needs from a tokenizer.json.
#[derive(Debug, Clone)]
pub struct HfTokenizer {
    pub json: Value,
    /// `BPE`, `WordPiece`, `WordLevel` or `Unigram`.
    pub model_type: String,
    /// (token, id) in file order (for Unigram the id is the position).
    pub vocab: Vec<(String, u32)>,
    /// Unigram scores, by position.
    pub scores: Vec<f64>,
    pub added: Vec<AddedToken>,
    pub merges: Vec<(String, String)>,
    /// Merges written as `["a", "b"]` pairs (newer files) rather than `"a b"` strings.
    pub merges_as_pairs: bool,
    /// Which of `added` are not in model.vocab (found once, by [`HfTokenizer::check`]).
    above: Vec<usize>,
}

/// Where a value of the document is: a key repeated in model.vocab is refused (serde_json would
/// keep the last silently, and so would `tokenizers`: which id would the token have?).
#[derive(Clone, Copy, PartialEq)]
enum Where {
    Root,
    Model,
    Vocab,
    Other,
}

/// The document as a [`Value`], exactly as `serde_json` reads one, in the same single pass
/// refusing a repeated model.vocab key.
struct Doc(Where);

impl<'de> DeserializeSeed<'de> for Doc {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.0 {
            Where::Other => Value::deserialize(d),
            _ => d.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Doc {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Value, A::Error> {
        Value::deserialize(de::value::SeqAccessDeserializer::new(s))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = m.next_key::<String>()? {
            let inner = match (self.0, k.as_str()) {
                (Where::Root, "model") => Where::Model,
                (Where::Model, "vocab") => Where::Vocab,
                _ => Where::Other,
            };
            let v = m.next_value_seed(Doc(inner))?;
            match out.entry(k) {
                serde_json::map::Entry::Occupied(e) if self.0 == Where::Vocab => {
                    return Err(de::Error::custom(format_args!(
                        "token '{}' appears twice in model.vocab",
                        e.key()
                    )));
                }
                serde_json::map::Entry::Occupied(mut e) => {
                    e.insert(v);
                }
                serde_json::map::Entry::Vacant(e) => {
                    e.insert(v);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// The document, its model.vocab keys each once.
fn read_doc(text: &str) -> Result<Value, String> {
    let mut d = serde_json::Deserializer::from_str(text);
    let json = Doc(Where::Root)
        .deserialize(&mut d)
        .and_then(|v| d.end().map(|()| v));
    json.map_err(|e| match e.classify() {
        serde_json::error::Category::Data => format!("not a tokenizer.json: {e}"),
        _ => format!("not valid JSON: {e}"),
    })
}

fn id_of(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|i| u32::try_from(i).ok())
}

/// A model's vocab: (token, id) in file order, and a Unigram's scores (empty for the others).
type Vocab = (Vec<(String, u32)>, Vec<f64>);

/// The model's vocab as (token, id) in file order, and the scores of a Unigram's pieces.
fn parse_vocab(model_type: &str, model: &serde_json::Map<String, Value>) -> Result<Vocab, String> {
    let mut vocab = Vec::new();
    let mut scores = Vec::new();
    match (model_type, model.get("vocab")) {
        ("BPE" | "WordPiece" | "WordLevel", Some(Value::Object(m))) => {
            for (k, v) in m {
                let id = id_of(v).ok_or_else(|| format!("model.vocab['{k}'] is not an id"))?;
                vocab.push((k.clone(), id));
            }
        }
        ("Unigram", Some(Value::Array(a))) => {
            for (i, e) in a.iter().enumerate() {
                let (Some(p), Some(s)) = (
                    e.get(0).and_then(Value::as_str),
                    e.get(1).and_then(Value::as_f64),
                ) else {
                    return Err(format!("model.vocab[{i}] is not a [piece, score] pair"));
                };
                vocab.push((p.to_string(), i as u32));
                scores.push(s);
            }
        }
        (t @ ("BPE" | "WordPiece" | "WordLevel" | "Unigram"), _) => {
            return Err(format!("{t} model has no vocab of the expected shape"))
        }
        (t, _) => {
            return Err(format!(
                "model type '{t}' is not supported (BPE, WordPiece, WordLevel, Unigram)"
            ))
        }
    }
    Ok((vocab, scores))
}

/// The `added_tokens` table, each with its id, content, special flag and raw object.
fn parse_added(json: &Value) -> Result<Vec<AddedToken>, String> {
    let mut added = Vec::new();
    for (i, a) in json
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        let (Some(id), Some(content)) = (
            a.get("id").and_then(id_of),
            a.get("content").and_then(Value::as_str),
        ) else {
            return Err(format!("added_tokens[{i}] has no id or content"));
        };
        added.push(AddedToken {
            id,
            content: content.to_string(),
            special: a.get("special").and_then(Value::as_bool).unwrap_or(false),
            raw: a.clone(),
        });
    }
    Ok(added)
}

/// A BPE model's merges, as "a b" strings or [a, b] pairs (and whether pairs were used).
fn parse_merges(
    model: &serde_json::Map<String, Value>,
) -> Result<(Vec<(String, String)>, bool), String> {
    let mut merges = Vec::new();
    let mut merges_as_pairs = false;
    for (i, m) in model
        .get("merges")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        let pair = match m {
            Value::String(s) => s
                .split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string())),
            Value::Array(p) => {
                merges_as_pairs = true;
                match (
                    p.first().and_then(Value::as_str),
                    p.get(1).and_then(Value::as_str),
                ) {
                    (Some(a), Some(b)) if p.len() == 2 => Some((a.to_string(), b.to_string())),
                    _ => None,
                }
            }
            _ => None,
        };
        merges.push(pair.ok_or_else(|| format!("model.merges[{i}] is not a pair of tokens"))?);
    }
    Ok((merges, merges_as_pairs))
}

/// Parse a tokenizer.json. Errors are one line, for the user.
pub fn parse(text: &str) -> Result<HfTokenizer, String> {
    let t = parse_unloaded(text)?;
    // Only added tokens outside model.vocab can be numbered otherwise than the file says;
    // loading a 262k-token file in `tokenizers` costs half a second, so only then.
    if !t.added_only().is_empty() {
        let loaded = super::library::load(text.as_bytes())
            .map_err(|e| format!("does not load in tokenizers: {e}"))?;
        t.check_loaded(&loaded)?;
    }
    Ok(t)
}

/// [`parse`] for a caller that loads the file in `tokenizers` anyway (a merge encodes text with
/// it): every check but the one that needs that load, [`HfTokenizer::check_loaded`], which the
/// caller makes when [`HfTokenizer::added_only`] is not empty — the file is loaded once.
pub fn parse_unloaded(text: &str) -> Result<HfTokenizer, String> {
    let json = read_doc(text)?;
    let model = json
        .get("model")
        .and_then(Value::as_object)
        .ok_or("not a tokenizer.json: no \"model\" object")?;
    let model_type = match model.get("type").and_then(Value::as_str) {
        Some(t) => t.to_string(),
        None if model.get("merges").is_some() => "BPE".to_string(),
        None if model.get("vocab").is_some_and(Value::is_array) => "Unigram".to_string(),
        None => return Err("model has no \"type\"".into()),
    };
    let (vocab, scores) = parse_vocab(&model_type, model)?;
    let added = parse_added(&json)?;
    let (merges, merges_as_pairs) = if model_type == "BPE" {
        parse_merges(model)?
    } else {
        (Vec::new(), false)
    };
    let mut t = HfTokenizer {
        json,
        model_type,
        vocab,
        scores,
        added,
        merges,
        merges_as_pairs,
        above: Vec::new(),
    };
    t.above = t.check()?;
    Ok(t)
}

/// Ids index a table's rows: ids that leave a gap far larger than the tokens there are (an id of
/// 2^31 among a thousand tokens) are refused here, before any job sizes a table, a row map or a
/// per-id list by them.
fn check_gap(vocab: &FxHashMap<u32, &str>, added: &HashSet<u32>) -> Result<(), String> {
    let ids = vocab.keys().chain(added.iter());
    let Some(&max) = ids.clone().max() else {
        return Ok(());
    };
    let tokens = vocab.len() + added.iter().filter(|a| !vocab.contains_key(a)).count();
    if u64::from(max) < 2 * tokens as u64 + MAX_GAP {
        return Ok(());
    }
    Err(format!(
        "the largest id is {max} for {tokens} tokens: a table they index would have {} rows, most of them no token's (ids with so large a gap are not a tokenizer's): check the ids",
        u64::from(max) + 1
    ))
}

/// The unused ids [`check_gap`] allows beyond twice the tokens.
const MAX_GAP: u64 = 1 << 16;

impl HfTokenizer {
    /// Ids are unique (a token and an added token may share one only if they are the same
    /// string), and BPE merges only use tokens of the vocab. The added tokens outside the vocab,
    /// by index.
    fn check(&self) -> Result<Vec<usize>, String> {
        let mut by_id: FxHashMap<u32, &str> = fxhash::map_with_capacity(self.vocab.len());
        for (t, id) in &self.vocab {
            if let Some(other) = by_id.insert(*id, t) {
                return Err(format!(
                    "id collision: '{other}' and '{t}' both have id {id} in model.vocab"
                ));
            }
        }
        let mut added_ids = HashSet::new();
        for a in &self.added {
            if !added_ids.insert(a.id) {
                return Err(format!("id collision: two added tokens have id {}", a.id));
            }
            if let Some(other) = by_id.get(&a.id) {
                if *other != a.content {
                    return Err(format!(
                        "id collision: added token '{}' has id {}, which model.vocab gives to '{other}'",
                        a.content, a.id
                    ));
                }
            }
        }
        check_gap(&by_id, &added_ids)?;
        let mut vocab: FxHashSet<&str> = FxHashSet::with_capacity_and_hasher(
            self.vocab.len(),
            std::hash::BuildHasherDefault::default(),
        );
        vocab.extend(self.vocab.iter().map(|(t, _)| t.as_str()));
        if self.model_type == "BPE" {
            // One buffer for every merge's result: no allocation per merge (262k of them).
            let mut joined = String::new();
            for (i, (a, b)) in self.merges.iter().enumerate() {
                joined.clear();
                joined.push_str(a);
                joined.push_str(b);
                for part in [a.as_str(), b.as_str(), joined.as_str()] {
                    if !vocab.contains(part) {
                        if let Some(p) = self.subword_prefix() {
                            return Err(format!(
                                "BPE with continuing_subword_prefix '{p}' (a merge's result drops that prefix from its second part: merge #{i} ('{a}', '{b}')) is not supported yet"
                            ));
                        }
                        return Err(format!(
                            "BPE merge #{i} ('{a}', '{b}') uses '{part}', which is not in model.vocab: the tokenizer is broken"
                        ));
                    }
                }
            }
        }
        Ok((0..self.added.len())
            .filter(|&i| !vocab.contains(self.added[i].content.as_str()))
            .collect())
    }

    /// A BPE model's `continuing_subword_prefix`, when it sets one.
    fn subword_prefix(&self) -> Option<&str> {
        self.json["model"]["continuing_subword_prefix"]
            .as_str()
            .filter(|p| !p.is_empty())
    }

    /// `tokenizers` gives added tokens that are not in model.vocab the ids after the vocab, in
    /// file order, whatever the file says. A file whose ids disagree with that is inconsistent:
    /// which id would a merge have to keep? `loaded` is this file in `tokenizers`.
    pub fn check_loaded(&self, loaded: &tokenizers::Tokenizer) -> Result<(), String> {
        for a in &self.added {
            let got = loaded.token_to_id(&a.content);
            if got != Some(a.id) {
                return Err(format!(
                    "id collision: added token '{}' has id {} in the file but tokenizers loads it as {} (added tokens outside model.vocab are numbered after it): fix the ids in the file",
                    a.content,
                    a.id,
                    got.map_or("nothing".into(), |g| g.to_string())
                ));
            }
        }
        Ok(())
    }

    /// Added tokens that are not in model.vocab.
    pub fn added_only(&self) -> Vec<&AddedToken> {
        self.above.iter().map(|&i| &self.added[i]).collect()
    }

    /// Every id the tokenizer uses, vocab and added tokens alike; the largest + 1 is the next free.
    pub fn max_id(&self) -> Option<u32> {
        self.vocab
            .iter()
            .map(|(_, i)| *i)
            .chain(self.added.iter().map(|a| a.id))
            .max()
    }

    /// token → id over vocab and added tokens (borrowed: no copy of a 262k-token vocab).
    pub fn ids(&self) -> FxHashMap<&str, u32> {
        let mut m = fxhash::map_with_capacity(self.vocab.len() + self.added.len());
        m.extend(self.vocab.iter().map(|(t, id)| (t.as_str(), *id)));
        for a in &self.added {
            m.entry(a.content.as_str()).or_insert(a.id);
        }
        m
    }

    /// A piece of the pre-processing pipeline, for comparing base and addition.
    pub fn pipeline(&self, key: &str) -> Value {
        self.json.get(key).cloned().unwrap_or(Value::Null)
    }
}

/// One change to write into the JSON.
pub enum Edit<'a> {
    /// A model vocab entry (Unigram: with its score).
    Vocab {
        content: &'a str,
        id: u32,
        score: f64,
    },
    /// An added token; `template` supplies flags (lstrip, normalized, …) when the addition had them.
    Added {
        content: &'a str,
        id: u32,
        special: bool,
        template: Option<&'a Value>,
    },
    Merge {
        a: &'a str,
        b: &'a str,
    },
}

/// Apply edits to the base document: the new JSON text (pretty, as HF saves) and the entries it
/// appended (`extra_of`, then `write`).
pub fn apply(base: &HfTokenizer, edits: &[Edit<'_>]) -> Result<(String, Extra), String> {
    let extra = extra_of(base, edits)?;
    let text = write(base, &extra)?;
    Ok((text, extra))
}

/// The base document with `extra` appended, as JSON text. The base is not copied: the text is
/// written from it with the new entries appended where they go (a copy of a 262k-token document
/// costs more than writing it). Entries that replace one (a vocab key already there or given
/// twice, an `added_tokens` that is not a list) are applied to a copy instead.
pub fn write(base: &HfTokenizer, extra: &Extra) -> Result<String, String> {
    let vocab = base.json.pointer("/model/vocab").and_then(Value::as_object);
    let mut new_keys = HashSet::new();
    let replaces = extra
        .vocab
        .iter()
        .any(|(k, _)| !new_keys.insert(k.as_str()) || vocab.is_some_and(|m| m.contains_key(k)))
        || (!extra.added.is_empty()
            && base.json.get("added_tokens").is_some_and(|a| !a.is_array()));
    if replaces {
        return pretty(&with_extra(base.json.clone(), extra.clone()));
    }
    pretty(&Edited {
        v: &base.json,
        at: At::Root,
        extra,
    })
}

/// The JSON text as HF saves it: pretty, with a final newline.
fn pretty(doc: &impl serde::Serialize) -> Result<String, String> {
    let mut text = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}

/// What `edits` add, checked against the base document (the only place edits are read).
pub fn extra_of(base: &HfTokenizer, edits: &[Edit<'_>]) -> Result<Extra, String> {
    let mut extra = Extra::default();
    let vocab = base.json.pointer("/model/vocab");
    let mut pieces = match vocab {
        Some(Value::Array(a)) => a.len() as u32,
        _ => 0,
    };
    let merges_listed = base
        .json
        .pointer("/model/merges")
        .is_some_and(Value::is_array);
    for e in edits {
        match e {
            Edit::Vocab { content, id, score } => match vocab {
                Some(Value::Object(_)) => extra.vocab.push(((*content).to_string(), json!(id))),
                Some(Value::Array(_)) => {
                    if pieces != *id {
                        return Err(format!(
                            "Unigram vocab has {pieces} pieces, so '{content}' cannot take id {id}"
                        ));
                    }
                    pieces += 1;
                    extra.pieces.push(json!([content, score]));
                }
                None => return Err("model.vocab vanished".into()),
                _ => return Err("model.vocab has an unexpected shape".into()),
            },
            Edit::Added {
                content,
                id,
                special,
                template,
            } => extra
                .added
                .push(added_token(content, *id, *special, *template)),
            Edit::Merge { a, b } => {
                if !merges_listed {
                    return Err("model.merges missing".into());
                }
                extra.merges.push(if base.merges_as_pairs {
                    json!([a, b])
                } else {
                    json!(format!("{a} {b}"))
                });
            }
        }
    }
    Ok(extra)
}

/// `extra` applied to a copy of the document: vocab entries inserted (replacing a key already
/// there, in its place), the rest appended; an `added_tokens` that is not a list is replaced.
fn with_extra(mut json: Value, extra: Extra) -> Value {
    match json.pointer_mut("/model/vocab") {
        Some(Value::Object(m)) => m.extend(extra.vocab),
        Some(Value::Array(a)) => a.extend(extra.pieces),
        _ => {}
    }
    if let Some(Value::Array(m)) = json.pointer_mut("/model/merges") {
        m.extend(extra.merges);
    }
    if !extra.added.is_empty() {
        match json.get_mut("added_tokens") {
            Some(Value::Array(a)) => a.extend(extra.added),
            _ => {
                if let Some(root) = json.as_object_mut() {
                    root.insert("added_tokens".into(), Value::Array(extra.added));
                }
            }
        }
    }
    json
}

/// An added-token object as `tokenizers` writes it, flags from `template` where it had them.
fn added_token(content: &str, id: u32, special: bool, template: Option<&Value>) -> Value {
    let mut obj: Map<String, Value> = match template.and_then(Value::as_object) {
        Some(t) => t.clone(),
        None => Map::new(),
    };
    obj.insert("id".into(), json!(id));
    obj.insert("content".into(), json!(content));
    for (k, v) in [("single_word", false), ("lstrip", false), ("rstrip", false)] {
        obj.entry(k).or_insert(json!(v));
    }
    obj.entry("normalized").or_insert(json!(!special));
    obj.insert("special".into(), json!(special));
    Value::Object(obj)
}

/// What the edits append, as written: model.vocab entries (object vocab) or pieces (Unigram),
/// added tokens, merges.
#[derive(Default, Clone)]
pub struct Extra {
    pub vocab: Vec<(String, Value)>,
    pub pieces: Vec<Value>,
    pub added: Vec<Value>,
    pub merges: Vec<Value>,
}

#[derive(Clone, Copy)]
enum At {
    Root,
    Model,
}

/// What goes after an array's items or an object's entries.
enum More<'x> {
    Items(&'x [Value]),
    Entries(&'x [(String, Value)]),
}

/// A part of the base document, written with the edits' entries appended.
struct Edited<'a> {
    v: &'a Value,
    at: At,
    extra: &'a Extra,
}

impl serde::Serialize for Edited<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let x = self.extra;
        let Value::Object(m) = self.v else {
            return self.v.serialize(s);
        };
        let new_added = matches!(self.at, At::Root)
            && !x.added.is_empty()
            && !m.get("added_tokens").is_some_and(Value::is_array);
        let mut map = s.serialize_map(Some(m.len() + usize::from(new_added)))?;
        for (k, v) in m {
            let more = match (self.at, k.as_str(), v) {
                (At::Root, "model", _) => {
                    map.serialize_entry(
                        k,
                        &Edited {
                            v,
                            at: At::Model,
                            extra: x,
                        },
                    )?;
                    continue;
                }
                (At::Root, "added_tokens", _) => More::Items(&x.added),
                (At::Model, "vocab", _) => match v {
                    Value::Object(_) => More::Entries(&x.vocab),
                    _ => More::Items(&x.pieces),
                },
                (At::Model, "merges", _) => More::Items(&x.merges),
                _ => More::Items(&[]),
            };
            match (more, v) {
                (More::Items(items), Value::Array(a)) if !items.is_empty() => map.serialize_entry(
                    k,
                    &Appended {
                        base: a,
                        more: items,
                    },
                )?,
                (More::Entries(entries), Value::Object(o)) if !entries.is_empty() => map
                    .serialize_entry(
                        k,
                        &Extended {
                            base: o,
                            more: entries,
                        },
                    )?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        if new_added {
            map.serialize_entry("added_tokens", &x.added)?;
        }
        map.end()
    }
}

/// An array with more items after its own.
struct Appended<'a> {
    base: &'a [Value],
    more: &'a [Value],
}

impl serde::Serialize for Appended<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.base.len() + self.more.len()))?;
        for v in self.base.iter().chain(self.more) {
            seq.serialize_element(v)?;
        }
        seq.end()
    }
}

/// An object with more entries after its own (keys it does not have).
struct Extended<'a> {
    base: &'a Map<String, Value>,
    more: &'a [(String, Value)],
}

impl serde::Serialize for Extended<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.base.len() + self.more.len()))?;
        for (k, v) in self
            .base
            .iter()
            .chain(self.more.iter().map(|(k, v)| (k, v)))
        {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids that leave a gap far past the tokens there are (a vocab id of 2^31, or an added
    /// token's) are refused when the file is read; a modest gap is a tokenizer's own business.
    #[test]
    fn ids_with_a_gap_far_past_the_tokens_are_refused() {
        let doc = |vocab_id: u64, added_id: u64| {
            format!(
                r#"{{"model":{{"type":"WordLevel","vocab":{{"a":0,"b":1,"c":{vocab_id}}},"unk_token":"a"}},
                "added_tokens":[{{"id":{added_id},"content":"<s>","special":true}}]}}"#
            )
        };
        assert!(parse_unloaded(&doc(2, 3)).is_ok());
        assert!(parse_unloaded(&doc(60_000, 3)).is_ok());
        for (v, a) in [(1 << 31, 3), (2, 1 << 31), (70_000, 3)] {
            let e = parse_unloaded(&doc(v, a)).map(|_| ()).unwrap_err();
            assert!(
                e.contains(&format!("the largest id is {} for 4 tokens", v.max(a))),
                "{e}"
            );
        }
    }

    /// With `continuing_subword_prefix`, `tokenizers` makes a merge's result without the prefix
    /// of its second part (`@@i` + `@@n` = `@@in`), which the tools do not model: refused as
    /// not supported, not called broken.
    #[test]
    fn a_bpe_with_a_continuing_subword_prefix_is_refused_as_unsupported() {
        let doc = |prefix: &str| {
            format!(
                r#"{{"model":{{"type":"BPE","vocab":{{"i":0,"n":1,"@@i":2,"@@n":3,"@@in":4}},"merges":["@@i @@n"]{prefix}}}}}"#
            )
        };
        let e = parse_unloaded(&doc(r#","continuing_subword_prefix":"@@""#))
            .map(|_| ())
            .unwrap_err();
        assert!(
            e.contains("continuing_subword_prefix '@@'") && e.contains("not supported"),
            "{e}"
        );
        let e = parse_unloaded(&doc("")).map(|_| ()).unwrap_err();
        assert!(e.contains("the tokenizer is broken"), "{e}");
    }

    #[test]
    fn the_document_reads_as_serde_json_reads_it_and_a_repeated_vocab_token_is_refused() {
        let doc = r#"{"version":"1.0","normalizer":{"a":1,"a":[2.5,-3,-3.7117018769183803,1.7976931348623157e308,"\u00e9"]},
            "model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"],"x":{"vocab":{"q":1,"q":2}}},
            "added_tokens":[{"id":3,"content":"<s>","special":true}],"n":18446744073709551615,"m":-1.5e-7}"#;
        let ours = read_doc(doc).unwrap();
        assert_eq!(ours, serde_json::from_str::<Value>(doc).unwrap());
        assert_eq!(
            pretty(&ours).unwrap(),
            pretty(&serde_json::from_str::<Value>(doc).unwrap()).unwrap()
        );
        let twice = r#"{"model":{"type":"BPE","vocab":{"a":0,"b":1,"a":2},"merges":[]}}"#;
        let err = parse(twice).unwrap_err();
        assert!(
            err.starts_with("not a tokenizer.json: token 'a' appears twice in model.vocab"),
            "{err}"
        );
        assert!(parse("{\"model\": ")
            .unwrap_err()
            .starts_with("not valid JSON"));
        assert!(read_doc("{} x").unwrap_err().starts_with("not valid JSON"));
    }

    /// The written-in-place path gives the bytes the copying path gives, for every shape of
    /// vocab, merges and added tokens.
    #[test]
    fn apply_without_a_copy_writes_what_the_copy_writes() {
        let docs = [
            r#"{"version":"1.0","added_tokens":[{"id":0,"content":"<s>","special":true}],"model":{"type":"BPE","vocab":{"<s>":0,"a":1,"b":2,"ab":3},"merges":["a b"]},"post":null}"#,
            r#"{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]}}"#,
            r#"{"added_tokens":null,"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}"#,
            r#"{"added_tokens":[],"model":{"type":"Unigram","vocab":[["a",-1.0],["b",-2.0]]}}"#,
            r#"{"model":{"type":"WordLevel","vocab":{"a":0,"b":1},"unk_token":"a"},"added_tokens":[{"id":2,"content":"<x>","single_word":false,"lstrip":true,"rstrip":false,"normalized":true,"special":false}]}"#,
        ];
        let tpl = json!({"single_word": true, "normalized": false});
        for doc in docs {
            let t = parse(doc).unwrap();
            let unigram = t.model_type == "Unigram";
            let n = t.vocab.len() as u32
                + u32::from(t.added.iter().any(|a| a.id >= t.vocab.len() as u32));
            let mut edits = vec![
                Edit::Vocab {
                    content: "ba",
                    id: n,
                    score: -3.5,
                },
                Edit::Vocab {
                    content: "é\"q",
                    id: n + 1,
                    score: 0.0,
                },
                Edit::Added {
                    content: "é\"q",
                    id: n + 1,
                    special: true,
                    template: Some(&tpl),
                },
                Edit::Added {
                    content: "<y>",
                    id: n + 2,
                    special: false,
                    template: None,
                },
            ];
            if t.model_type == "BPE" {
                edits.push(Edit::Merge { a: "b", b: "a" });
            }
            if unigram {
                edits.retain(|e| !matches!(e, Edit::Added { content: "<y>", .. }));
            }
            let (fast, _) = apply(&t, &edits).unwrap();
            let extra = extra_of(&t, &edits).unwrap();
            let copy = pretty(&with_extra(t.json.clone(), extra)).unwrap();
            assert_eq!(fast, copy, "{doc}");
            assert!(fast.contains("\"ba\""), "{fast}");
        }
    }
}
