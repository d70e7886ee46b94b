//! A tokenizer as the jobs read it (model knowledge, no job): a tokenizer.json or a SentencePiece
//! model, its ids, form and size; the loaders that refuse formats no job can use (tekken,
//! tiktoken ranks) naming what to convert them with.

use super::form::Form;
use super::fxhash::{self, FxHashMap};
use super::hf::{self, HfTokenizer};
use super::sentencepiece::{self as sp, SpModel};
use crate::error::{Error, Result};
use crate::formats::model_folder::TokenizerFile;
use std::path::Path;

/// A base tokenizer.
pub enum Base {
    Hf(HfTokenizer),
    Sp(SpModel),
}

impl Base {
    /// token → id over everything the tokenizer can produce: vocab and added tokens (HF), or the
    /// pieces (SentencePiece, first occurrence wins).
    pub fn ids(&self) -> FxHashMap<&str, u32> {
        match self {
            Base::Hf(t) => t.ids(),
            Base::Sp(m) => {
                let mut ids = fxhash::map_with_capacity(m.pieces.len());
                for (i, p) in m.pieces.iter().enumerate() {
                    ids.entry(p.piece.as_str()).or_insert(i as u32);
                }
                ids
            }
        }
    }

    /// How its vocabulary writes text.
    pub fn form(&self) -> Form {
        match self {
            Base::Hf(t) => Form::of_tokenizer_json(&t.json),
            Base::Sp(_) => Form::Metaspace,
        }
    }

    /// The ids it uses: its largest id + 1 (the rows an embedding needs).
    pub fn size(&self) -> u64 {
        match self {
            Base::Hf(t) => t.max_id().map_or(0, |m| u64::from(m) + 1),
            Base::Sp(m) => m.pieces.len() as u64,
        }
    }
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, "read", e))
}

pub(crate) fn is_json(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// Does the file start like JSON (a tokenizer.json)?
pub(crate) fn is_json_file(p: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    std::fs::File::open(p)
        .and_then(|mut f| f.read(&mut head))
        .is_ok_and(|n| is_json(&head[..n]))
}

/// Load BASE: a tokenizer.json or a SentencePiece model.
pub fn load_base(path: &Path) -> Result<Base> {
    load_as(path, "base tokenizer", hf::parse)
}

/// [`load_base`] for a caller that loads a tokenizer.json BASE in `tokenizers` too: the one
/// check that needs that load ([`hf::parse_unloaded`]) is the caller's, so the file is loaded
/// once.
pub fn load_base_unloaded(path: &Path) -> Result<Base> {
    load_as(path, "base tokenizer", hf::parse_unloaded)
}

/// Load a tokenizer where no merge is involved (the model's tokenizer: check-vocab,
/// extend-embeddings --tokenizer): the same reader, the plain word in messages.
pub fn load_tokenizer(path: &Path) -> Result<Base> {
    load_as(path, "tokenizer", hf::parse)
}

/// Tokenizer files this tool cannot merge, recognised so that the message says what they are and
/// what to convert them with (rather than "not a tokenizer", or a ranks file read as a token list).
pub(crate) fn unmergeable(bytes: &[u8]) -> Option<&'static str> {
    if is_json(bytes) {
        // A tekken.json's first vocab entry has "token_bytes" (found in its first bytes; a
        // tokenizer.json of 262k tokens is not parsed twice for this).
        let head = &bytes[..bytes.len().min(1 << 16)];
        let tekken = head.windows(14).any(|w| w == b"\"token_bytes\":");
        return tekken.then_some(
            "a Mistral tekken.json (byte ranks, not a tokenizer.json): convert it first with transformers, `transformers.integrations.mistral.convert_tekken_tokenizer(FILE).save_pretrained(DIR)` (needs mistral-common), and merge DIR/tokenizer.json",
        );
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(32)
        .peekable();
    lines.peek()?;
    let ranks = lines.all(|l| {
        l.split_once(' ').is_some_and(|(tok, rank)| {
            tok.len() % 4 == 0
                && tok
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
                && !rank.is_empty()
                && rank.bytes().all(|b| b.is_ascii_digit())
        })
    });
    ranks.then_some(
        "a tiktoken ranks file (base64 token and rank per line): convert it to tokenizer.json first with transformers, `transformers.convert_slow_tokenizer.TikTokenConverter(vocab_file=FILE).converted().save(\"tokenizer.json\")` (needs tiktoken; give the model's pattern= where it is not GPT-4's)",
    )
}

/// A tokenizer file told by its content, the JSON not yet parsed (for readers that hand it to the
/// `tokenizers` library): a tokenizer.json's text, or a SentencePiece model.
pub enum Source {
    Json(String),
    Sp(SpModel),
}

/// Read a tokenizer file as [`load_tokenizer`] does, leaving a tokenizer.json's text unparsed.
pub fn load_source(path: &Path) -> Result<Source> {
    source_as(path, "tokenizer")
}

fn source_as(path: &Path, what: &str) -> Result<Source> {
    let bytes = read(path)?;
    let bad = |why: String| Error::format(path, format!("not a usable {what}: {why}"));
    if let Some(why) = unmergeable(&bytes) {
        return Err(bad(why.into()));
    }
    if is_json(&bytes) {
        let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
        return Ok(Source::Json(text));
    }
    sp::parse(bytes)
        .map(Source::Sp)
        .map_err(|e| match sp::check::REFUSED {
            end if e.ends_with(end) => bad(format!("a SentencePiece model, but {e}")),
            _ => bad(format!(
                "neither tokenizer.json nor a SentencePiece model ({e})"
            )),
        })
}

fn load_as(
    path: &Path,
    what: &str,
    parse: fn(&str) -> std::result::Result<HfTokenizer, String>,
) -> Result<Base> {
    match source_as(path, what)? {
        Source::Json(text) => parse(&text)
            .map(Base::Hf)
            .map_err(|why| Error::format(path, format!("not a usable {what}: {why}"))),
        Source::Sp(m) => Ok(Base::Sp(m)),
    }
}

/// How a merged tokenizer goes into a model folder: tokenizer.json or tokenizer.model by its
/// content, read back with [`load_tokenizer`].
pub(crate) fn folder_file(path: &Path) -> Result<TokenizerFile<'_>> {
    let (name, other) = match load_tokenizer(path)? {
        Base::Hf(_) => ("tokenizer.json", "tokenizer.model"),
        Base::Sp(_) => ("tokenizer.model", "tokenizer.json"),
    };
    Ok(TokenizerFile {
        path,
        name,
        other,
        check: |p| load_tokenizer(p).map(|_| ()),
    })
}

/// A model folder's tokenizer: tokenizer.json, else its SentencePiece model
/// ([`folder_sentencepiece`]).
pub fn folder_tokenizer(dir: &Path) -> Option<std::path::PathBuf> {
    let json = dir.join("tokenizer.json");
    if json.is_file() {
        return Some(json);
    }
    folder_sentencepiece(dir)
}

/// A model folder's SentencePiece model: tokenizer.model, else its one `*.model` (T5, ALBERT
/// and XLNet name it spiece.model, XLM-R sentencepiece.bpe.model), alone or beside transformers'
/// tokenizer.json.
pub fn folder_sentencepiece(dir: &Path) -> Option<std::path::PathBuf> {
    let named = dir.join("tokenizer.model");
    if named.is_file() {
        return Some(named);
    }
    // A bare file name's folder is "": the current one.
    let listed = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut models: Vec<std::path::PathBuf> = std::fs::read_dir(listed)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "model") && p.is_file())
        .collect();
    models.sort();
    (models.len() == 1).then(|| models.remove(0))
}
