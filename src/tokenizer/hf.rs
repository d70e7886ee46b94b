//! Hugging Face `tokenizer.json`: read the pieces a merge changes (model vocab, merges, added
//! tokens) and write them back into the same JSON document, leaving everything else as it was.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
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
}

/// Refuses a `model.vocab` object that repeats a token (serde_json would keep the last silently).
struct VocabProbe;

impl<'de> Deserialize<'de> for VocabProbe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = VocabProbe;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a vocab object or list")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<VocabProbe, A::Error> {
                let mut seen = HashSet::new();
                while let Some(k) = m.next_key::<String>()? {
                    if !seen.insert(k.clone()) {
                        return Err(de::Error::custom(format_args!(
                            "token '{k}' appears twice in model.vocab"
                        )));
                    }
                    m.next_value::<IgnoredAny>()?;
                }
                Ok(VocabProbe)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<VocabProbe, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(VocabProbe)
            }
        }
        d.deserialize_any(V)
    }
}

/// Deserialised only for its side effect: refusing a vocab that repeats a token.
#[derive(Deserialize)]
#[allow(dead_code)]
struct Probe {
    model: ProbeModel,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ProbeModel {
    vocab: Option<VocabProbe>,
}

fn id_of(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|i| u32::try_from(i).ok())
}

/// Parse a tokenizer.json. Errors are one line, for the user.
pub fn parse(text: &str) -> Result<HfTokenizer, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    serde_json::from_str::<Probe>(text).map_err(|e| format!("not a tokenizer.json: {e}"))?;
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
    let mut vocab = Vec::new();
    let mut scores = Vec::new();
    match (model_type.as_str(), model.get("vocab")) {
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
    let mut merges = Vec::new();
    let mut merges_as_pairs = false;
    if model_type == "BPE" {
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
    }
    let t = HfTokenizer {
        json,
        model_type,
        vocab,
        scores,
        added,
        merges,
        merges_as_pairs,
    };
    t.check()?;
    // Only added tokens outside model.vocab can be numbered otherwise than the file says;
    // loading a 262k-token file in `tokenizers` costs half a second, so only then.
    if !t.added_only().is_empty() {
        t.check_loads_as_written(text)?;
    }
    Ok(t)
}

impl HfTokenizer {
    /// Ids are unique (a token and an added token may share one only if they are the same
    /// string), and BPE merges only use tokens of the vocab.
    fn check(&self) -> Result<(), String> {
        let mut by_id: HashMap<u32, &str> = HashMap::new();
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
        if self.model_type == "BPE" {
            let vocab: HashSet<&str> = self.vocab.iter().map(|(t, _)| t.as_str()).collect();
            // One buffer for every merge's result: no allocation per merge (262k of them).
            let mut joined = String::new();
            for (i, (a, b)) in self.merges.iter().enumerate() {
                joined.clear();
                joined.push_str(a);
                joined.push_str(b);
                for part in [a.as_str(), b.as_str(), joined.as_str()] {
                    if !vocab.contains(part) {
                        return Err(format!(
                            "BPE merge #{i} ('{a}', '{b}') uses '{part}', which is not in model.vocab: the tokenizer is broken"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// `tokenizers` gives added tokens that are not in model.vocab the ids after the vocab, in
    /// file order, whatever the file says. A file whose ids disagree with that is inconsistent:
    /// which id would a merge have to keep?
    fn check_loads_as_written(&self, text: &str) -> Result<(), String> {
        let loaded = tokenizers::Tokenizer::from_bytes(text.as_bytes())
            .map_err(|e| format!("does not load in tokenizers: {e}"))?;
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
        let vocab: HashSet<&str> = self.vocab.iter().map(|(t, _)| t.as_str()).collect();
        self.added
            .iter()
            .filter(|a| !vocab.contains(a.content.as_str()))
            .collect()
    }

    /// Every id the tokenizer uses, vocab and added tokens alike; the largest + 1 is the next free.
    pub fn max_id(&self) -> Option<u32> {
        self.vocab
            .iter()
            .map(|(_, i)| *i)
            .chain(self.added.iter().map(|a| a.id))
            .max()
    }

    /// token → id over vocab and added tokens.
    pub fn ids(&self) -> HashMap<String, u32> {
        let mut m: HashMap<String, u32> = self.vocab.iter().cloned().collect();
        for a in &self.added {
            m.entry(a.content.clone()).or_insert(a.id);
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

/// Apply edits to a copy of the base document and return the new JSON text (pretty, as HF saves).
pub fn apply(base: &HfTokenizer, edits: &[Edit<'_>]) -> Result<String, String> {
    let mut json = base.json.clone();
    for e in edits {
        match e {
            Edit::Vocab { content, id, score } => {
                let vocab = json
                    .pointer_mut("/model/vocab")
                    .ok_or("model.vocab vanished")?;
                match vocab {
                    Value::Object(m) => {
                        m.insert(content.to_string(), json!(id));
                    }
                    Value::Array(a) => {
                        if a.len() as u32 != *id {
                            return Err(format!(
                                "Unigram vocab has {} pieces, so '{content}' cannot take id {id}",
                                a.len()
                            ));
                        }
                        a.push(json!([content, score]));
                    }
                    _ => return Err("model.vocab has an unexpected shape".into()),
                }
            }
            Edit::Added {
                content,
                id,
                special,
                template,
            } => {
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
                match json.get_mut("added_tokens") {
                    Some(Value::Array(a)) => a.push(Value::Object(obj)),
                    _ => {
                        if let Some(root) = json.as_object_mut() {
                            root.insert("added_tokens".into(), json!([Value::Object(obj)]));
                        }
                    }
                }
            }
            Edit::Merge { a, b } => {
                let merges = json
                    .pointer_mut("/model/merges")
                    .and_then(Value::as_array_mut)
                    .ok_or("model.merges missing")?;
                merges.push(if base.merges_as_pairs {
                    json!([a, b])
                } else {
                    json!(format!("{a} {b}"))
                });
            }
        }
    }
    let mut text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}
