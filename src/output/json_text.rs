//! JSON side files edited in place (config.json, generation_config.json, tokenizer_config.json,
//! special_tokens_map.json): the values a tool changes spliced into the file's own text, every
//! other byte kept, and each change listed for the report.
//!
//! Why splice instead of writing a `serde_json::Value` back: a `Value` does not hold the text it
//! was read from. An integer past u64 (transformers writes `model_max_length` as
//! `1000000000000000019884624838656`, `int(1e30)`) is read as an f64 and written `1e30`; Python's
//! `1e-05` comes back `1e-5`; strings Python escaped (`ensure_ascii`, config.json's default) come
//! back raw; the indentation and separators are serde's. serde_json's `arbitrary_precision`
//! would keep the numbers' digits only, and it is a crate-wide feature (cargo unifies features:
//! every serde_json user in the build, the `tokenizers` crate included, would read numbers
//! differently), so it is not used.
//!
//! How: the tools still say what they want as a `Value` (the file's parse, edited). [`rewrite`]
//! compares it with the file's own parse, value by value, along a scan of the text that knows
//! where each value starts and ends. A value the tool left alone parses the same both times (a
//! lossy read is lossy the same way twice), so it compares equal and its bytes stay. Only values
//! that differ are replaced, in the file's style at that place (its indentation, `": "` or `":"`,
//! `\u` escapes when the file escapes non-ASCII); a new key goes at the end of its object, a new
//! list item at the end of its list; a key removed takes its separator with it. Key order is the
//! file's. The diff is also the report: each change's key with its text before and after.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// One value an edit changed: where (`text_config.vocab_size`, `extra_special_tokens[1]`), its
/// text in the file before (compact; none: the key was added) and as written (compact; none: the
/// key was removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonChange {
    pub key: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

/// A JSON file's new text and what changed in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonEdit {
    pub text: String,
    pub changes: Vec<JsonChange>,
}

/// A JSON file a run edited (its path in the output) and what changed in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditedFile {
    pub file: PathBuf,
    pub changes: Vec<JsonChange>,
}

/// `text` (a JSON document) with `new`'s differences from it spliced in: every value `new` has
/// as the text has it keeps its bytes. Err when `text` is not JSON.
pub fn rewrite(text: &str, new: &Value) -> Result<JsonEdit, String> {
    let old: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    // serde_json read it: valid, and nested no deeper than its limit (128), so the scan's
    // recursion is bounded.
    let mut sc = Scanner {
        b: text.as_bytes(),
        i: 0,
    };
    sc.ws();
    let root = sc.value()?;
    let mut d = Diff {
        text,
        style: Style::of(text, &root),
        splices: Vec::new(),
        changes: Vec::new(),
    };
    d.node(&root, &old, new, "");
    d.splices.sort_by_key(|s| (s.start, s.end));
    let mut out = String::with_capacity(text.len() + 64);
    let mut at = 0;
    for s in &d.splices {
        out.push_str(&text[at..s.start]);
        out.push_str(&s.with);
        at = s.end;
    }
    out.push_str(&text[at..]);
    Ok(JsonEdit {
        text: out,
        changes: d.changes,
    })
}

/// The edited files as the reports print them: one line per file, its changes `key: old → new`
/// (`(none)` for a key added or removed), the first few when there are many (`--json` has all).
pub fn render(files: &[EditedFile]) -> String {
    const SHOWN: usize = 8;
    let mut s = String::new();
    for f in files {
        let shown: Vec<String> = f
            .changes
            .iter()
            .take(SHOWN)
            .map(|c| {
                let side = |v: &Option<String>| v.clone().unwrap_or_else(|| "(none)".into());
                format!("{}: {} → {}", c.key, side(&c.old), side(&c.new))
            })
            .collect();
        let more = f.changes.len().saturating_sub(SHOWN);
        let more = if more > 0 {
            format!("; and {more} more (--json lists them)")
        } else {
            String::new()
        };
        let _ = writeln!(s, "edited {}: {}{more}", f.file.display(), shown.join("; "));
    }
    s
}

/// Where a value lies in the text, and its parts.
struct Node {
    start: usize,
    end: usize,
    kind: Kind,
}

enum Kind {
    Scalar,
    Object(Vec<Member>),
    Array(Vec<Node>),
}

struct Member {
    key: String,
    key_start: usize,
    key_end: usize,
    value: Node,
}

/// A span-aware reader of JSON text already known to be valid.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn byte(&self) -> Result<u8, String> {
        self.b
            .get(self.i)
            .copied()
            .ok_or_else(|| "JSON text ends early".to_string())
    }

    fn value(&mut self) -> Result<Node, String> {
        let start = self.i;
        let kind = match self.byte()? {
            b'{' => Kind::Object(self.members()?),
            b'[' => Kind::Array(self.items()?),
            b'"' => {
                self.string()?;
                Kind::Scalar
            }
            _ => {
                while !matches!(
                    self.b.get(self.i),
                    None | Some(b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.i += 1;
                }
                Kind::Scalar
            }
        };
        Ok(Node {
            start,
            end: self.i,
            kind,
        })
    }

    /// Past a string (at its opening quote).
    fn string(&mut self) -> Result<(), String> {
        self.i += 1;
        loop {
            match self.byte()? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Ok(());
                }
                _ => self.i += 1,
            }
        }
    }

    /// An object's members (at its `{`), past its `}`.
    fn members(&mut self) -> Result<Vec<Member>, String> {
        let mut out = Vec::new();
        self.i += 1;
        self.ws();
        if self.byte()? == b'}' {
            self.i += 1;
            return Ok(out);
        }
        loop {
            let key_start = self.i;
            self.string()?;
            let key_end = self.i;
            let key: String = serde_json::from_slice(&self.b[key_start..key_end])
                .map_err(|e| format!("a key: {e}"))?;
            self.ws();
            self.i += 1; // ':'
            self.ws();
            let value = self.value()?;
            out.push(Member {
                key,
                key_start,
                key_end,
                value,
            });
            self.ws();
            let c = self.byte()?;
            self.i += 1;
            if c == b'}' {
                return Ok(out);
            }
            self.ws();
        }
    }

    /// A list's items (at its `[`), past its `]`.
    fn items(&mut self) -> Result<Vec<Node>, String> {
        let mut out = Vec::new();
        self.i += 1;
        self.ws();
        if self.byte()? == b']' {
            self.i += 1;
            return Ok(out);
        }
        loop {
            out.push(self.value()?);
            self.ws();
            let c = self.byte()?;
            self.i += 1;
            if c == b']' {
                return Ok(out);
            }
            self.ws();
        }
    }
}

/// How the file writes JSON, for the values spliced in.
struct Style {
    /// One level of indentation (when the file is indented).
    unit: String,
    /// Whether the file is indented (else new containers are written on one line).
    pretty: bool,
    colon: String,
    /// Between a one-line container's items (`, ` as Python writes, `,` as serde does).
    comma: String,
    newline: &'static str,
    /// Non-ASCII written as `\u` escapes (Python's `ensure_ascii`, config.json's default).
    ascii: bool,
}

impl Style {
    fn of(text: &str, root: &Node) -> Style {
        let mut st = Style {
            unit: "  ".into(),
            pretty: false,
            colon: ": ".into(),
            comma: ", ".into(),
            newline: if text.contains("\r\n") { "\r\n" } else { "\n" },
            ascii: text.is_ascii() && escapes_non_ascii(text),
        };
        let (mut unit, mut colon, mut comma) = (None, None, None);
        learn(text, root, &mut unit, &mut colon, &mut comma);
        if let Some(u) = unit {
            st.pretty = true;
            if !u.is_empty() {
                st.unit = u;
            }
        }
        if let Some(c) = colon {
            st.colon = c;
        }
        if let Some(c) = comma {
            st.comma = c;
        }
        st
    }
}

/// The first indentation step, `key: value` separator and one-line item separator the file uses.
fn learn(
    text: &str,
    n: &Node,
    unit: &mut Option<String>,
    colon: &mut Option<String>,
    comma: &mut Option<String>,
) {
    let starts: Vec<usize> = match &n.kind {
        Kind::Scalar => return,
        Kind::Object(m) => {
            if let (None, Some(first)) = (&colon, m.first()) {
                *colon = Some(text[first.key_end..first.value.start].to_string());
            }
            m.iter().map(|m| m.key_start).collect()
        }
        Kind::Array(items) => items.iter().map(|i| i.start).collect(),
    };
    let ends: Vec<usize> = children(n).iter().map(|c| c.end).collect();
    if let Some(&first) = starts.first() {
        if unit.is_none() && text[n.start + 1..first].contains('\n') {
            let outer = line_indent(text, n.start);
            let inner = line_indent(text, first);
            *unit = Some(inner.strip_prefix(outer).unwrap_or(inner).to_string());
        }
    }
    if comma.is_none() && starts.len() > 1 {
        let gap = &text[ends[0]..starts[1]];
        if !gap.contains('\n') {
            *comma = Some(gap.trim_start().to_string());
        }
    }
    for c in children(n) {
        learn(text, c, unit, colon, comma);
    }
}

fn children(n: &Node) -> Vec<&Node> {
    match &n.kind {
        Kind::Scalar => Vec::new(),
        Kind::Object(m) => m.iter().map(|m| &m.value).collect(),
        Kind::Array(items) => items.iter().collect(),
    }
}

/// Does the text write a non-ASCII character as a `\u` escape (`\u00e9`)?
fn escapes_non_ascii(text: &str) -> bool {
    text.match_indices("\\u").any(|(at, _)| {
        text.get(at + 2..at + 6)
            .and_then(|h| u16::from_str_radix(h, 16).ok())
            .is_some_and(|c| c >= 0x80)
    })
}

/// The whitespace that starts the line holding byte `at`.
fn line_indent(text: &str, at: usize) -> &str {
    let line = text[..at].rfind('\n').map_or(0, |p| p + 1);
    let rest = &text[line..at];
    &rest[..rest.len() - rest.trim_start_matches([' ', '\t']).len()]
}

/// A piece of the text replaced (an insertion when `start == end`).
struct Splice {
    start: usize,
    end: usize,
    with: String,
}

struct Diff<'a> {
    text: &'a str,
    style: Style,
    splices: Vec<Splice>,
    changes: Vec<JsonChange>,
}

impl Diff<'_> {
    fn node(&mut self, n: &Node, old: &Value, new: &Value, path: &str) {
        if old == new {
            return;
        }
        match (&n.kind, old, new) {
            (Kind::Object(m), Value::Object(o), Value::Object(nw)) => {
                self.object(n, m, o, nw, path)
            }
            (Kind::Array(items), Value::Array(o), Value::Array(nw)) => {
                self.array(n, items, o, nw, path);
            }
            _ => {
                let base = line_indent(self.text, n.start).to_string();
                let with = self.format(new, &base);
                self.change(path, Some(n), Some(new));
                self.splices.push(Splice {
                    start: n.start,
                    end: n.end,
                    with,
                });
            }
        }
    }

    fn object(
        &mut self,
        n: &Node,
        members: &[Member],
        old: &serde_json::Map<String, Value>,
        new: &serde_json::Map<String, Value>,
        path: &str,
    ) {
        // A repeated key: the last one is the value JSON readers keep.
        let last: HashMap<&str, usize> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.key.as_str(), i))
            .collect();
        let kept: Vec<bool> = members
            .iter()
            .enumerate()
            .map(|(i, m)| last[m.key.as_str()] != i || new.contains_key(&m.key))
            .collect();
        let Some(first_kept) = kept.iter().position(|k| *k) else {
            return self.whole(n, Value::Object(new.clone()), path);
        };
        for (i, m) in members.iter().enumerate() {
            let key = join(path, &m.key);
            if !kept[i] {
                self.change(&key, Some(&m.value), None);
                let (start, end) = if i < first_kept {
                    (m.key_start, members[i + 1].key_start)
                } else {
                    (members[i - 1].value.end, m.value.end)
                };
                self.splices.push(Splice {
                    start,
                    end,
                    with: String::new(),
                });
            } else if last[m.key.as_str()] == i {
                self.node(&m.value, &old[&m.key], &new[&m.key], &key);
            }
        }
        let added: Vec<(&String, &Value)> =
            new.iter().filter(|(k, _)| !old.contains_key(*k)).collect();
        if added.is_empty() {
            return;
        }
        let sep = match members {
            [.., a, b] => &self.text[a.value.end..b.key_start],
            [only] => &self.text[n.start + 1..only.key_start],
            [] => "",
        };
        let sep = if sep.starts_with(',') {
            sep.to_string()
        } else {
            format!(",{sep}")
        };
        let indent = sep.rfind('\n').map(|p| sep[p + 1..].to_string());
        let mut with = String::new();
        for (k, v) in added {
            self.change(&join(path, k), None, Some(v));
            with.push_str(&sep);
            with.push_str(&self.string(k));
            with.push_str(&self.style.colon);
            self.write(v, indent.as_deref(), &mut with);
        }
        // After the last member kept (the members removed after it start there).
        let last_kept = kept.iter().rposition(|k| *k).unwrap_or(first_kept);
        let at = members[last_kept].value.end;
        self.splices.push(Splice {
            start: at,
            end: at,
            with,
        });
    }

    fn array(&mut self, n: &Node, items: &[Node], old: &[Value], new: &[Value], path: &str) {
        if new.is_empty() || items.is_empty() {
            return self.whole(n, Value::Array(new.to_vec()), path);
        }
        for (i, item) in items.iter().enumerate() {
            let key = format!("{path}[{i}]");
            match new.get(i) {
                Some(v) => self.node(item, &old[i], v, &key),
                None => {
                    self.change(&key, Some(item), None);
                    self.splices.push(Splice {
                        start: items[i - 1].end,
                        end: item.end,
                        with: String::new(),
                    });
                }
            }
        }
        if new.len() <= items.len() {
            return;
        }
        let sep = match items {
            [.., a, b] => self.text[a.end..b.start].to_string(),
            _ => format!(",{}", &self.text[n.start + 1..items[0].start]),
        };
        let indent = sep.rfind('\n').map(|p| sep[p + 1..].to_string());
        let mut with = String::new();
        for (i, v) in new.iter().enumerate().skip(items.len()) {
            self.change(&format!("{path}[{i}]"), None, Some(v));
            with.push_str(&sep);
            self.write(v, indent.as_deref(), &mut with);
        }
        let at = items[items.len() - 1].end;
        self.splices.push(Splice {
            start: at,
            end: at,
            with,
        });
    }

    /// A container with nothing of the file's left to keep (it was empty, or every item goes):
    /// written whole, each item that came or went listed.
    fn whole(&mut self, n: &Node, new: Value, path: &str) {
        match (&n.kind, &new) {
            (Kind::Object(m), Value::Object(nw)) => {
                for x in m.iter().filter(|x| !nw.contains_key(&x.key)) {
                    self.change(&join(path, &x.key), Some(&x.value), None);
                }
                let had = |k: &String| m.iter().any(|x| x.key == *k);
                for (k, v) in nw.iter().filter(|(k, _)| !had(k)) {
                    self.change(&join(path, k), None, Some(v));
                }
            }
            (Kind::Array(items), Value::Array(nw)) => {
                for (i, x) in items.iter().enumerate() {
                    self.change(&format!("{path}[{i}]"), Some(x), None);
                }
                for (i, v) in nw.iter().enumerate() {
                    self.change(&format!("{path}[{i}]"), None, Some(v));
                }
            }
            _ => {}
        }
        let base = line_indent(self.text, n.start).to_string();
        let with = self.format(&new, &base);
        self.splices.push(Splice {
            start: n.start,
            end: n.end,
            with,
        });
    }

    fn change(&mut self, key: &str, old: Option<&Node>, new: Option<&Value>) {
        self.changes.push(JsonChange {
            key: key.to_string(),
            old: old.map(|n| compact(&self.text[n.start..n.end])),
            new: new.map(Value::to_string),
        });
    }

    /// `v` as the file writes it, its lines indented from `base` when the file is indented.
    fn format(&self, v: &Value, base: &str) -> String {
        let mut s = String::new();
        self.write(v, self.style.pretty.then_some(base), &mut s);
        s
    }

    fn write(&self, v: &Value, indent: Option<&str>, out: &mut String) {
        let (open, close, len) = match v {
            Value::Object(o) => ('{', '}', o.len()),
            Value::Array(a) => ('[', ']', a.len()),
            Value::String(s) => return out.push_str(&self.string(s)),
            other => return out.push_str(&other.to_string()),
        };
        out.push(open);
        if len > 0 {
            let inner = indent.map(|i| format!("{i}{}", self.style.unit));
            let items: Vec<(Option<&String>, &Value)> = match v {
                Value::Object(o) => o.iter().map(|(k, v)| (Some(k), v)).collect(),
                Value::Array(a) => a.iter().map(|v| (None, v)).collect(),
                _ => Vec::new(),
            };
            for (i, (k, v)) in items.into_iter().enumerate() {
                match &inner {
                    Some(inner) => {
                        out.push_str(if i > 0 { "," } else { "" });
                        out.push_str(self.style.newline);
                        out.push_str(inner);
                    }
                    None if i > 0 => out.push_str(&self.style.comma),
                    None => {}
                }
                if let Some(k) = k {
                    out.push_str(&self.string(k));
                    out.push_str(&self.style.colon);
                }
                self.write(v, inner.as_deref(), out);
            }
            if let Some(i) = indent {
                out.push_str(self.style.newline);
                out.push_str(i);
            }
        }
        out.push(close);
    }

    /// A JSON string as the file writes strings (non-ASCII escaped where the file escapes it).
    fn string(&self, s: &str) -> String {
        let plain = Value::String(s.to_string()).to_string();
        if !self.style.ascii || plain.is_ascii() {
            return plain;
        }
        let mut out = String::with_capacity(plain.len() + 16);
        for c in plain.chars() {
            if c.is_ascii() {
                out.push(c);
            } else {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
        out
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// JSON text without the whitespace outside its strings.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if !c.is_whitespace() {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `text` parsed, changed by `f`, written back.
    fn edit(text: &str, f: impl FnOnce(&mut Value)) -> JsonEdit {
        let mut v: Value = serde_json::from_str(text).unwrap();
        f(&mut v);
        let e = rewrite(text, &v).unwrap();
        let back: Value = serde_json::from_str(&e.text).unwrap();
        assert_eq!(back, v, "reads back as the value asked for:\n{}", e.text);
        e
    }

    const TRANSFORMERS: &str = "{\n  \"add_prefix_space\": false,\n  \"bos_token\": \"<|endoftext|>\",\n  \"extra_special_tokens\": [\n    \"<|im_start|>\"\n  ],\n  \"model_max_length\": 1000000000000000019884624838656,\n  \"sp_model_kwargs\": {\n    \"alpha\": 1e-05,\n    \"nbest_size\": -1\n  },\n  \"vocab_size\": 1000\n}\n";

    #[test]
    fn a_changed_value_is_the_only_bytes_that_change() {
        let e = edit(TRANSFORMERS, |v| v["vocab_size"] = json!(1024));
        assert_eq!(
            e.text,
            TRANSFORMERS.replace("\"vocab_size\": 1000", "\"vocab_size\": 1024")
        );
        assert_eq!(
            e.changes,
            [JsonChange {
                key: "vocab_size".into(),
                old: Some("1000".into()),
                new: Some("1024".into())
            }]
        );
        let e = edit(TRANSFORMERS, |v| {
            v["sp_model_kwargs"]["nbest_size"] = json!(2)
        });
        assert_eq!(e.text, TRANSFORMERS.replace("-1", "2"));
        assert_eq!(e.changes[0].key, "sp_model_kwargs.nbest_size");
        let same = edit(TRANSFORMERS, |_| {});
        assert_eq!((same.text.as_str(), same.changes.len()), (TRANSFORMERS, 0));
    }

    #[test]
    fn new_list_items_and_keys_go_at_the_end_in_the_files_indentation() {
        let e = edit(TRANSFORMERS, |v| {
            v["extra_special_tokens"]
                .as_array_mut()
                .unwrap()
                .push(json!("<|am|>"));
            v["added_tokens_decoder"] = json!({"1000": {"content": "<|am|>", "special": true}});
        });
        let want = TRANSFORMERS
            .replace(
                "\"<|im_start|>\"\n  ]",
                "\"<|im_start|>\",\n    \"<|am|>\"\n  ]",
            )
            .replace(
                "\"vocab_size\": 1000\n}",
                "\"vocab_size\": 1000,\n  \"added_tokens_decoder\": {\n    \"1000\": {\n      \"content\": \"<|am|>\",\n      \"special\": true\n    }\n  }\n}",
            );
        assert_eq!(e.text, want);
        let keys: Vec<(&str, Option<&str>, Option<&str>)> = e
            .changes
            .iter()
            .map(|c| (c.key.as_str(), c.old.as_deref(), c.new.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [
                ("extra_special_tokens[1]", None, Some("\"<|am|>\"")),
                (
                    "added_tokens_decoder",
                    None,
                    Some("{\"1000\":{\"content\":\"<|am|>\",\"special\":true}}")
                )
            ]
        );
    }

    #[test]
    fn an_unsorted_compact_file_keeps_its_order_and_separators() {
        let text = "{\"z\":1e-05,\"a\":[],\"m\":{\"k\":1.0},\"n\":\"\\u00e9\"}";
        let e = edit(text, |v| {
            v["a"] = json!(["é"]);
            v["m"]["j"] = json!(2);
        });
        assert_eq!(
            e.text,
            "{\"z\":1e-05,\"a\":[\"\\u00e9\"],\"m\":{\"k\":1.0,\"j\":2},\"n\":\"\\u00e9\"}"
        );
    }

    #[test]
    fn removed_keys_take_their_separators_and_tabs_and_crlf_are_kept() {
        let text = "{\r\n\t\"a\": 1,\r\n\t\"b\": 2,\r\n\t\"c\": 3\r\n}";
        let e = edit(text, |v| {
            let o = v.as_object_mut().unwrap();
            o.shift_remove("a");
            o.shift_remove("c");
            o.insert("d".into(), json!({"x": [1]}));
        });
        assert_eq!(
            e.text,
            "{\r\n\t\"b\": 2,\r\n\t\"d\": {\r\n\t\t\"x\": [\r\n\t\t\t1\r\n\t\t]\r\n\t}\r\n}"
        );
        assert_eq!(e.changes.len(), 3);
    }

    #[test]
    fn a_repeated_key_edits_the_occurrence_readers_keep() {
        let text = "{\"a\": 1, \"a\": 2}";
        let e = edit(text, |v| v["a"] = json!(3));
        assert_eq!(e.text, "{\"a\": 1, \"a\": 3}");
    }

    #[test]
    fn an_empty_container_is_written_whole_in_the_files_style() {
        let text = "{\n    \"list\": [],\n    \"map\": {}\n}";
        let e = edit(text, |v| {
            v["list"] = json!([1, 2]);
            v["map"] = json!({"k": "v"});
        });
        assert_eq!(
            e.text,
            "{\n    \"list\": [\n        1,\n        2\n    ],\n    \"map\": {\n        \"k\": \"v\"\n    }\n}"
        );
    }

    #[test]
    fn not_json_is_an_error_not_a_panic() {
        for bad in ["", "{", "{\"a\":", "[1,", "nul"] {
            assert!(rewrite(bad, &json!({})).is_err(), "{bad:?}");
        }
    }
}
