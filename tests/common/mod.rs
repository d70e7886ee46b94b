//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

/// Run one of the package's binaries.
pub fn run(bin: &str, args: &[&std::ffi::OsStr]) -> Output {
    let exe = match bin {
        "inspect-checkpoint" => env!("CARGO_BIN_EXE_inspect-checkpoint"),
        "merge-tokenizers" => env!("CARGO_BIN_EXE_merge-tokenizers"),
        "extend-embeddings" => env!("CARGO_BIN_EXE_extend-embeddings"),
        "sanitize-checkpoint" => env!("CARGO_BIN_EXE_sanitize-checkpoint"),
        "check-vocab" => env!("CARGO_BIN_EXE_check-vocab"),
        "vocab-blocks" => env!("CARGO_BIN_EXE_vocab-blocks"),
        "transplant-tokenizer" => env!("CARGO_BIN_EXE_transplant-tokenizer"),
        "trim-vocab" => env!("CARGO_BIN_EXE_trim-vocab"),
        other => panic!("unknown binary {other}"),
    };
    Command::new(exe).args(args).output().expect("binary runs")
}

/// Run a binary with `--json` added: (exit code, the JSON it printed or Null, stderr).
pub fn run_json(bin: &str, args: &[&std::ffi::OsStr]) -> (Option<i32>, serde_json::Value, String) {
    let mut a = args.to_vec();
    a.push(std::ffi::OsStr::new("--json"));
    let o = run(bin, &a);
    (
        o.status.code(),
        serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null),
        stderr(&o),
    )
}

/// `bin INPUT --output OUT EXTRA… --json`, the shape of every writing job.
pub fn run_job(
    bin: &str,
    input: &Path,
    out: &Path,
    extra: &[&str],
) -> (Option<i32>, serde_json::Value, String) {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        input.as_os_str(),
        std::ffi::OsStr::new("--output"),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    run_json(bin, &args)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// sha256 hex computed independently of the library (tests cross-check the library with it).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// BLAKE3 hex from the reference implementation (the manifests' default algorithm).
pub fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Every file under `dir`, recursively, with its bytes: to prove inputs were not modified.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let b = std::fs::read(&p).unwrap();
                out.push((p, b));
            }
        }
    }
    out.sort();
    out
}

use ckpt_surgery::formats::torch::value::{Id, Node, Pickle};
use serde_json::{json, Value};

/// Decimal text of a little-endian two's complement integer of any length.
pub fn big_int_text(le: &[u8]) -> String {
    let neg = le.last().is_some_and(|b| b & 0x80 != 0);
    // Magnitude as little-endian bytes.
    let mut mag: Vec<u8> = if neg {
        let mut carry = 1u16;
        le.iter()
            .map(|&b| {
                let v = u16::from(!b) + carry;
                carry = v >> 8;
                v as u8
            })
            .collect()
    } else {
        le.to_vec()
    };
    let mut digits = Vec::new();
    while mag.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in mag.iter_mut().rev() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(char::from(b'0' + rem as u8));
    }
    if digits.is_empty() {
        digits.push('0');
    }
    if neg {
        digits.push('-');
    }
    digits.iter().rev().collect()
}

/// The canonical form testdata/generate.py writes for a loaded torch object (see `canonical`
/// there): tensors become {"tensor": path}; floats are compared by value; sets by sorted items.
pub fn canonical(p: &Pickle, id: Id, path: &str) -> Value {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    if p.tensor_of(id).is_some() {
        return json!({ "tensor": path });
    }
    let key_text = |k: Id| ckpt_surgery::formats::torch::key_text(p, k);
    let dict = |entries: &[(Id, Id)]| json!({ "dict": entries.iter().map(|&(k, v)| json!([canonical(p, k, ""), canonical(p, v, &join(&key_text(k)))])).collect::<Vec<_>>() });
    match p.node(id) {
        Node::None => Value::Null,
        Node::Bool(b) => json!(b),
        Node::Str(s) => json!(s),
        Node::Int(i) => json!({ "int": i.to_string() }),
        Node::BigInt(b) => json!({ "int": big_int_text(b) }),
        Node::Float(f) => json!({ "float": format!("{f:?}") }),
        Node::Bytes(b) => {
            json!({ "bytes": b.iter().map(|x| format!("{x:02x}")).collect::<String>() })
        }
        Node::List(v) => Value::Array(
            v.iter()
                .enumerate()
                .map(|(i, &c)| canonical(p, c, &join(&i.to_string())))
                .collect(),
        ),
        Node::Tuple(v) => {
            json!({ "tuple": v.iter().enumerate().map(|(i, &c)| canonical(p, c, &join(&i.to_string()))).collect::<Vec<_>>() })
        }
        Node::Set(v) | Node::FrozenSet(v) => {
            let mut items: Vec<String> =
                v.iter().map(|&c| canonical(p, c, "").to_string()).collect();
            items.sort();
            json!({ "set": items })
        }
        Node::Dict(e) => dict(e),
        Node::Object { dict_items, .. } if p.is_ordered_dict(id) => dict(dict_items),
        Node::Object {
            callable, state, ..
        } => {
            let state = state.map_or(Value::Null, |s| match p.node(s) {
                Node::Dict(e) => dict(e),
                _ => canonical(p, s, &join("state")),
            });
            json!({ "object": p.global_name(*callable).unwrap_or_default(), "state": state })
        }
        other => json!({ "unexpected": format!("{other:?}") }),
    }
}

/// Python's canonical tree, with floats re-rendered the way Rust's `{:?}` writes the same value
/// and set items re-serialised compactly, so the two can be compared as JSON.
pub fn normalise_python(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.len() == 1 && m.contains_key("float") => {
            let f: f64 = m["float"].as_str().unwrap().parse().unwrap();
            json!({ "float": format!("{f:?}") })
        }
        Value::Object(m) if m.len() == 1 && m.contains_key("set") => {
            let mut items: Vec<String> = m["set"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    normalise_python(&serde_json::from_str(s.as_str().unwrap()).unwrap())
                        .to_string()
                })
                .collect();
            items.sort();
            json!({ "set": items })
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), normalise_python(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalise_python).collect()),
        other => other.clone(),
    }
}

/// Every file of a folder: name → bytes.
pub fn files_of(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// The GPT-2 fixture's tokenizer merged with testdata/tokenizers/gpt2_addition.txt (1047 ids: each word bare and after a space, with the pieces their merges pass through),
/// written by the real merge-tokenizers into `dir`.
pub fn merged_gpt2_tokenizer(dir: &Path) -> PathBuf {
    let merged = dir.join("merged.json");
    let o = run(
        "merge-tokenizers",
        &[
            std::ffi::OsStr::new("--base"),
            testdata("gpt2/tokenizer.json").as_os_str(),
            std::ffi::OsStr::new("--add"),
            testdata("tokenizers/gpt2_addition.txt").as_os_str(),
            std::ffi::OsStr::new("--output"),
            merged.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    merged
}

/// Run a fix command as check-vocab printed it, its `--output` moved to `out`: the exit code and
/// stderr.
pub fn run_fix(fix: &str, out: &Path) -> (Option<i32>, String) {
    let mut words: Vec<String> = fix.split_whitespace().map(str::to_string).collect();
    let at = words
        .iter()
        .position(|w| w == "--output")
        .expect("fix has --output")
        + 1;
    words[at] = out.display().to_string();
    let args: Vec<&std::ffi::OsStr> = words[1..].iter().map(std::ffi::OsStr::new).collect();
    let o = run(&words[0], &args);
    (o.status.code(), stderr(&o))
}

/// (name, dtype, shape) of every tensor in a JSON list of them (a plan's `tensors`, a manifest's),
/// sorted by name.
pub fn tensor_triples(list: &[serde_json::Value]) -> Vec<(String, String, Vec<u64>)> {
    let mut v: Vec<(String, String, Vec<u64>)> = list
        .iter()
        .map(|t| {
            let shape = t["shape"].as_array().unwrap();
            (
                t["name"].as_str().unwrap().to_string(),
                t["dtype"].as_str().unwrap().to_string(),
                shape.iter().map(|d| d.as_u64().unwrap()).collect(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A tensor's bytes (a test may unwrap: the library's callers get the error).
#[allow(dead_code)]
pub fn bytes<'a>(t: &ckpt_surgery::formats::TensorRef<'a>) -> std::borrow::Cow<'a, [u8]> {
    t.try_bytes().expect("the tensor's bytes")
}

/// One SentencePiece `ModelProto.pieces` field (field 1: piece = 1, score = 2, type = 3), written
/// from the protobuf spec, independently of the library. Appended to a `.model`'s bytes it adds a
/// piece after the last (repeated fields concatenate); alone, a list of them is a `.model`.
/// Types: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte.
pub fn sp_piece_field(piece: &str, score: f32, kind: u8) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: usize) {
        while v >= 0x80 {
            out.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let mut msg = vec![0x0a];
    varint(&mut msg, piece.len());
    msg.extend_from_slice(piece.as_bytes());
    msg.push(0x15);
    msg.extend_from_slice(&score.to_le_bytes());
    msg.extend_from_slice(&[0x18, kind]);
    let mut field = vec![0x0a];
    varint(&mut field, msg.len());
    field.extend_from_slice(&msg);
    field
}

/// testdata/sp_only/expected.json's list `which` ("bpe" or "unigram"): new pieces and the ids real
/// sentencepiece splits each into with that base's pieces.
pub fn sp_expected_splits(which: &str) -> Vec<(String, Vec<usize>)> {
    let text = std::fs::read_to_string(testdata("sp_only/expected.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v[which]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let ids = e[1].as_array().unwrap();
            let ids = ids.iter().map(|i| i.as_u64().unwrap() as usize).collect();
            (e[0].as_str().unwrap().to_string(), ids)
        })
        .collect()
}

/// `base` (a `.model`) with `pieces` appended as normal pieces scored below every other: the merged
/// tokenizer a SentencePiece base is extended with. Written to `out`.
pub fn sp_merged(base: &Path, pieces: &[&str], out: &Path) {
    let mut bytes = std::fs::read(base).unwrap();
    for (i, p) in pieces.iter().enumerate() {
        bytes.extend(sp_piece_field(p, -1e6 - i as f32, 1));
    }
    std::fs::write(out, bytes).unwrap();
}

/// Copy the folder `from` into `to`, recursively.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// `bytes` with every `from` replaced by `to` (the same length) in the zip record `name` (stored,
/// as torch.save writes it, its CRC-32 in a data descriptor after the data and in the central
/// directory), the CRC made right again: a whole file with other content.
pub fn patch_zip_record(bytes: &[u8], name: &str, from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]) as usize;
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
    let central = (0..bytes.len() - 46)
        .find(|&c| {
            &bytes[c..c + 4] == b"PK\x01\x02"
                && &bytes[c + 46..c + 46 + u16_at(c + 28)] == name.as_bytes()
        })
        .expect("the record's central directory entry");
    let (len, local) = (u32_at(central + 20), u32_at(central + 42));
    let start = local + 30 + u16_at(local + 26) + u16_at(local + 28);
    let mut out = bytes.to_vec();
    let data = &mut out[start..start + len];
    let hits: Vec<usize> = (0..=len - from.len())
        .filter(|&i| &data[i..i + from.len()] == from)
        .collect();
    assert!(!hits.is_empty(), "{name} holds the bytes to replace");
    for i in hits {
        data[i..i + to.len()].copy_from_slice(to);
    }
    let crc = crc32fast::hash(data).to_le_bytes();
    out[central + 16..central + 20].copy_from_slice(&crc);
    assert_eq!(&bytes[start + len..start + len + 4], b"PK\x07\x08");
    out[start + len + 4..start + len + 8].copy_from_slice(&crc);
    out
}

/// A job's refusal as its `--json` run reports it: exit 2 and one line holding every one of
/// `needles`; the message.
pub fn one_line_refusal(
    (code, doc, err): (Option<i32>, &serde_json::Value, &str),
    needles: &[&str],
) -> String {
    assert_eq!(code, Some(2), "{err}");
    let msg = doc["error"].as_str().unwrap_or(err).to_string();
    assert!(
        needles.iter().all(|n| msg.contains(n)) && !msg.trim().contains('\n'),
        "{msg}"
    );
    msg
}

/// A Megatron save root's `iter_0000010/common.pt` written back with every `from` replaced by
/// `to` (the same length) in its pickle ([`patch_zip_record`]).
pub fn patch_megatron_common(root: &Path, from: &[u8], to: &[u8]) {
    let common = root.join("iter_0000010/common.pt");
    let bytes = std::fs::read(&common).unwrap();
    let patched = patch_zip_record(&bytes, "common/data.pkl", from, to);
    std::fs::write(&common, patched).unwrap();
}
