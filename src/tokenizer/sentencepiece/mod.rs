//! SentencePiece `.model` files (a `ModelProto` protobuf), read and appended at the byte level:
//! new pieces are inserted after the last existing piece and every other byte is kept, including
//! fields this module does not understand (trainer spec, normalizer, self-test data, …).

pub mod check;
mod proto;

pub(crate) use proto::fields;
pub use proto::PieceType;
use std::collections::HashMap;
use std::ops::Range;

/// One piece; its id is its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub piece: String,
    pub score: f32,
    pub kind: PieceType,
    /// The whole field (tag, length, message) in the file.
    pub raw: Range<usize>,
}

/// A parsed model: the original bytes and what we need from them.
#[derive(Debug, Clone)]
pub struct SpModel {
    pub bytes: Vec<u8>,
    pub pieces: Vec<Piece>,
    /// Where the last piece field ends: new pieces are inserted here.
    pub insert_at: usize,
    /// `trainer_spec.model_type`: 1 unigram, 2 BPE, 3 word, 4 char (None when absent).
    pub model_type: Option<u64>,
}

/// Parse a `.model`. Errors say what is wrong, for "not a SentencePiece model" messages.
pub fn parse(bytes: Vec<u8>) -> Result<SpModel, String> {
    let mut pieces = Vec::new();
    let mut insert_at = None;
    let mut model_type = None;
    for (whole, f) in fields(&bytes)? {
        match (f.number, f.wire) {
            (1, 2) => {
                let sub = &bytes[f.value.clone()];
                let (mut piece, mut score, mut kind) = (None, 0f32, PieceType::Normal);
                for (_, g) in fields(sub)? {
                    match (g.number, g.wire) {
                        (1, 2) => {
                            piece = Some(
                                std::str::from_utf8(&sub[g.value.clone()])
                                    .map_err(|_| format!("piece {} is not UTF-8", pieces.len()))?
                                    .to_string(),
                            )
                        }
                        (2, 5) => {
                            let s = &sub[g.value.clone()];
                            score = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                        }
                        (3, 0) => kind = PieceType::from_code(g.varint),
                        _ => {}
                    }
                }
                let piece = piece.ok_or_else(|| format!("piece {} has no text", pieces.len()))?;
                pieces.push(Piece {
                    piece,
                    score,
                    kind,
                    raw: whole.clone(),
                });
                insert_at = Some(whole.end);
            }
            (2, 2) => {
                for (_, g) in fields(&bytes[f.value.clone()])? {
                    // An enum value protobuf does not know is an unknown field: the last known
                    // one stands (sentencepiece keeps BPE where a stray 0 follows it).
                    if (g.number, g.wire) == (3, 0) && (1..=4).contains(&g.varint) {
                        model_type = Some(g.varint);
                    }
                }
            }
            (1 | 2, _) => return Err(format!("field {} has the wrong wire type", f.number)),
            _ => {}
        }
    }
    let insert_at = insert_at.ok_or("no pieces: not a SentencePiece model")?;
    let model = SpModel {
        bytes,
        pieces,
        insert_at,
        model_type,
    };
    let pieces = model
        .pieces
        .iter()
        .map(|p| (p.piece.as_str(), p.score, p.kind));
    check::check(&model.bytes, pieces, &normalizer(&model).charsmap)?;
    Ok(model)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// The bytes of one `pieces` field.
pub fn encode_piece(piece: &str, score: f32, kind: PieceType) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.push(0x0a);
    put_varint(&mut msg, piece.len() as u64);
    msg.extend_from_slice(piece.as_bytes());
    msg.push(0x15);
    msg.extend_from_slice(&score.to_le_bytes());
    msg.push(0x18);
    put_varint(&mut msg, kind.code());
    let mut field = vec![0x0a];
    put_varint(&mut field, msg.len() as u64);
    field.extend_from_slice(&msg);
    field
}

/// The model with `new` pieces appended after the last piece; all other bytes unchanged.
pub fn append(model: &SpModel, new: &[(String, f32, PieceType)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(model.bytes.len() + new.len() * 16);
    out.extend_from_slice(&model.bytes[..model.insert_at]);
    for (p, s, k) in new {
        out.extend_from_slice(&encode_piece(p, *s, *k));
    }
    out.extend_from_slice(&model.bytes[model.insert_at..]);
    out
}

/// The model with only the pieces `keep` marks (by id), every other byte kept except two: the
/// trainer spec's `vocab_size`, set to the pieces left, and the self-test samples, dropped (their
/// expected splits may name dropped pieces, and SentencePiece checks them when it loads a model).
pub fn without_pieces(model: &SpModel, keep: &[bool]) -> Vec<u8> {
    let b = &model.bytes;
    let left = keep.iter().filter(|&&k| k).count() as u64;
    let mut out = Vec::with_capacity(b.len());
    // `parse` read these fields already: walking them again cannot fail. Piece fields come in id
    // order, as `parse` numbered them.
    let mut id = 0;
    for (whole, f) in fields(b).unwrap_or_default() {
        match (f.number, f.wire) {
            (1, 2) => {
                if keep.get(id).copied().unwrap_or(false) {
                    out.extend_from_slice(&b[whole]);
                }
                id += 1;
            }
            (2, 2) => {
                let mut spec = Vec::new();
                for (sub, g) in fields(&b[f.value.clone()]).unwrap_or_default() {
                    if (g.number, g.wire) == (4, 0) {
                        spec.push(0x20);
                        put_varint(&mut spec, left);
                    } else {
                        spec.extend_from_slice(
                            &b[f.value.start + sub.start..f.value.start + sub.end],
                        );
                    }
                }
                out.push(0x12);
                put_varint(&mut out, spec.len() as u64);
                out.extend_from_slice(&spec);
            }
            (4, 2) => {}
            _ => out.extend_from_slice(&b[whole]),
        }
    }
    out
}

/// What SentencePiece's normaliser does before the pieces are looked up, as the model's
/// `normalizer_spec` says (protobuf defaults where a field is absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalizer {
    /// `nmt_nfkc`, `nfkc`, `identity`, …
    pub name: String,
    /// The precompiled character map the name stands for (empty: none, as `identity`).
    pub charsmap: Vec<u8>,
    pub add_dummy_prefix: bool,
    pub remove_extra_whitespaces: bool,
    pub escape_whitespaces: bool,
}

impl Normalizer {
    /// `nmt_nfkc_cf` / `nfkc_cf`: text is folded to lower case before the model sees it.
    pub fn folds_case(&self) -> bool {
        self.name.ends_with("_cf")
    }
}

/// The model's normaliser settings.
pub fn normalizer(model: &SpModel) -> Normalizer {
    let mut n = Normalizer {
        name: String::new(),
        charsmap: Vec::new(),
        add_dummy_prefix: true,
        remove_extra_whitespaces: true,
        escape_whitespaces: true,
    };
    let b = &model.bytes;
    for (_, f) in fields(b).unwrap_or_default() {
        if (f.number, f.wire) != (3, 2) {
            continue;
        }
        let spec = &b[f.value.clone()];
        for (_, g) in fields(spec).unwrap_or_default() {
            match (g.number, g.wire) {
                (1, 2) => n.name = String::from_utf8_lossy(&spec[g.value.clone()]).into_owned(),
                (2, 2) => n.charsmap = spec[g.value.clone()].to_vec(),
                (3, 0) => n.add_dummy_prefix = g.varint != 0,
                (4, 0) => n.remove_extra_whitespaces = g.varint != 0,
                (5, 0) => n.escape_whitespaces = g.varint != 0,
                _ => {}
            }
        }
    }
    n
}

/// The score just below `score`: one less, or the next `f32` down where one less rounds back to
/// `score` (a model whose lowest piece scores -1e9, as Mistral's do: new pieces scored -1e9 - 1
/// would all tie, and BPE would join them in another order than planned).
pub fn below(score: f32) -> f32 {
    let one_less = score - 1.0;
    if one_less < score {
        one_less
    } else {
        score.next_down()
    }
}

/// Best unigram segmentation of `text` over the model's pieces (user-defined pieces scored as
/// SentencePiece's encoder scores them, see `PieceIndex::score`). Returns the piece ids. No
/// normaliser is applied.
pub fn viterbi(pieces: &[(String, f32, PieceType)], text: &str) -> Vec<usize> {
    viterbi_with(pieces, &piece_index(pieces), text)
}

/// Piece → id for the pieces a segmentation may use (normal and user-defined), built once for
/// many [`viterbi_with`] calls (one per new token: building it per call was quadratic in the
/// vocabulary — minutes for 20 000 tokens on a 262144-piece model). FxHash: the lookups hash
/// every substring Viterbi and BPE try, and SipHash was half their time.
pub fn piece_index(pieces: &[(String, f32, PieceType)]) -> PieceIndex<'_> {
    let ids = pieces
        .iter()
        .enumerate()
        .filter(|(_, p)| matches!(p.2, PieceType::Normal | PieceType::UserDefined))
        .map(|(i, p)| (p.0.as_str(), i))
        .collect();
    PieceIndex { ids }
}

/// Piece → id, as [`piece_index`] builds it.
pub struct PieceIndex<'p> {
    ids: crate::tokenizer::fxhash::FxHashMap<&'p str, usize>,
}

impl PieceIndex<'_> {
    /// The id of `piece`, a normal or user-defined piece.
    pub fn get(&self, piece: &str) -> Option<&usize> {
        self.ids.get(piece)
    }

    /// What Viterbi scores piece `id` (of `pieces`) with: its score, or for a user-defined piece
    /// of n bytes 0.1 × n − 0.1 whatever the model's scores, as sentencepiece 0.2.3's unigram
    /// encoder does (measured: the score a new `▁hello` needs to beat `▁` + user-defined `hello`
    /// is 0.4 above `▁`'s, with every normal score shifted by −5, 0 or +5). A bonus, not a
    /// certainty: a normal piece scored above it wins.
    fn score(&self, pieces: &[(String, f32, PieceType)], id: usize) -> f64 {
        match pieces[id].2 {
            PieceType::UserDefined => 0.1 * pieces[id].0.len() as f64 - 0.1,
            _ => f64::from(pieces[id].1),
        }
    }
}

/// [`viterbi`] with the piece index built by [`piece_index`].
pub fn viterbi_with(
    pieces: &[(String, f32, PieceType)],
    index: &PieceIndex,
    text: &str,
) -> Vec<usize> {
    viterbi_unk(pieces, index, text, None)
}

/// [`viterbi_with`] where a character no piece starts with is one `usize::MAX` step scored
/// `unknown` (as SentencePiece's unknown piece, far below any piece), instead of no segmentation.
pub fn viterbi_unk(
    pieces: &[(String, f32, PieceType)],
    index: &PieceIndex,
    text: &str,
    unknown: Option<f64>,
) -> Vec<usize> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let n = chars.len();
    let offs = |i: usize| chars.get(i).map_or(text.len(), |c| c.0);
    let mut best: Vec<Option<(f64, usize, usize)>> = vec![None; n + 1];
    best[0] = Some((0.0, 0, usize::MAX));
    for end in 1..=n {
        for start in 0..end {
            let Some((prev, ..)) = best[start] else {
                continue;
            };
            if let Some(&id) = index.get(&text[offs(start)..offs(end)]) {
                let s = prev + index.score(pieces, id);
                if best[end].is_none_or(|(b, ..)| s > b) {
                    best[end] = Some((s, start, id));
                }
            }
        }
        if let (Some(u), Some((prev, ..)), None) = (unknown, best[end - 1], best[end]) {
            best[end] = Some((prev + u, end - 1, usize::MAX));
        }
    }
    let mut ids = Vec::new();
    let mut at = n;
    while at > 0 {
        match best[at] {
            Some((_, start, id)) => {
                ids.push(id);
                at = start;
            }
            None => return Vec::new(),
        }
    }
    ids.reverse();
    ids
}

/// SentencePiece BPE over `text`'s characters (no normaliser, as [`viterbi`]): the adjacent pair
/// whose join is a piece with the highest `score` is joined first, the leftmost among equals,
/// until no join is a piece. The symbols left: pieces, or characters the model does not have.
pub fn bpe_pieces(score: impl Fn(&str) -> Option<f32>, text: &str) -> Vec<String> {
    bpe_join(score, text.chars().map(String::from).collect())
}

/// [`bpe_pieces`] continued from symbols already joined: where every piece added since they were
/// made scores below every other, the symbols BPE from the characters reaches first. The joinable
/// pairs wait in a heap (best score first, then the leftmost), each looked up again only when a
/// join changes one of its symbols: a token of n characters costs O(n log n), not O(n²).
pub fn bpe_join(score: impl Fn(&str) -> Option<f32>, mut syms: Vec<String>) -> Vec<String> {
    use std::cmp::Reverse;
    let n = syms.len();
    // Symbol i's neighbours (n: none); a symbol joined into its left neighbour is emptied.
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| i.checked_sub(1).unwrap_or(n)).collect();
    // (score, leftmost first, the two symbols' lengths when pushed: a pair whose symbols have
    // grown since is stale).
    let mut heap = std::collections::BinaryHeap::new();
    let mut joined = String::new();
    let mut push =
        |heap: &mut std::collections::BinaryHeap<_>, syms: &[String], i: usize, j: usize| {
            if j >= n {
                return;
            }
            joined.clear();
            joined.push_str(&syms[i]);
            joined.push_str(&syms[j]);
            if let Some(s) = score(&joined) {
                heap.push((Score(s), Reverse(i), syms[i].len(), syms[j].len()));
            }
        };
    for i in 0..n {
        push(&mut heap, &syms, i, i + 1);
    }
    while let Some((_, Reverse(i), li, lj)) = heap.pop() {
        let j = next[i];
        if syms[i].len() != li || j >= n || syms[j].len() != lj || li == 0 {
            continue;
        }
        let right = std::mem::take(&mut syms[j]);
        syms[i].push_str(&right);
        next[i] = next[j];
        if next[j] < n {
            prev[next[j]] = i;
        }
        push(&mut heap, &syms, i, next[i]);
        if prev[i] < n {
            push(&mut heap, &syms, prev[i], i);
        }
    }
    syms.retain(|s| !s.is_empty());
    syms
}

/// A score ordered by `f32::total_cmp`, for the heap.
#[derive(PartialEq)]
struct Score(f32);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl SpModel {
    /// The pieces as (text, score, type), the form [`viterbi`] and [`segmenter`] take.
    pub fn triples(&self) -> Vec<(String, f32, PieceType)> {
        self.pieces
            .iter()
            .map(|p| (p.piece.clone(), p.score, p.kind))
            .collect()
    }

    /// A BPE-type model (`trainer_spec.model_type` 2)? Other types split by score (unigram).
    pub fn is_bpe(&self) -> bool {
        self.model_type == Some(2)
    }
}

/// How the model splits `text` written in its own symbols (`▁` for a space; no normaliser, no
/// dummy prefix), as SentencePiece's encoder splits text once normalised. BPE: USER_DEFINED pieces
/// matched whole first (the longest at each position, as SentencePiece's prefix matcher), the
/// stretches between them joined by score ([`bpe_pieces`]); other model types: the best unigram
/// segmentation ([`viterbi_unk`]). A symbol no piece has becomes its `<0xNN>` byte pieces where
/// the model has them (byte fallback, as Llama's), else `None` (SentencePiece's unknown piece).
pub fn segmenter(
    pieces: &[(String, f32, PieceType)],
    bpe: bool,
) -> impl Fn(&str) -> Vec<Option<u32>> + '_ {
    let index = piece_index(pieces);
    let of_type = |t: PieceType| -> HashMap<&str, u32> {
        pieces
            .iter()
            .enumerate()
            .filter(|(_, p)| p.2 == t)
            .map(|(i, p)| (p.0.as_str(), i as u32))
            .collect()
    };
    let (bytes, user) = (of_type(PieceType::Byte), of_type(PieceType::UserDefined));
    let longest = user.keys().map(|u| u.chars().count()).max().unwrap_or(0);
    let lowest = pieces.iter().map(|p| f64::from(p.1)).fold(0.0, f64::min);
    move |text: &str| {
        let unknown = |symbol: &str, out: &mut Vec<Option<u32>>| {
            let fallback: Option<Vec<u32>> = symbol
                .bytes()
                .map(|b| bytes.get(format!("<0x{b:02X}>").as_str()).copied())
                .collect();
            match fallback {
                Some(ids) if !ids.is_empty() => out.extend(ids.into_iter().map(Some)),
                _ => out.push(None),
            }
        };
        let mut out = Vec::new();
        if bpe {
            for (run, whole) in user_runs(text, &user, longest) {
                if whole {
                    out.push(user.get(run).copied());
                    continue;
                }
                for p in bpe_pieces(|p| index.get(p).map(|&i| pieces[i].1), run) {
                    match index.get(p.as_str()) {
                        Some(&i) => out.push(Some(i as u32)),
                        None => unknown(&p, &mut out),
                    }
                }
            }
            return out;
        }
        let mut at = 0;
        for id in viterbi_unk(pieces, &index, text, Some(lowest - 10.0)) {
            let len = if id == usize::MAX {
                let c = text[at..].chars().next().map_or(1, char::len_utf8);
                unknown(&text[at..at + c], &mut out);
                c
            } else {
                out.push(Some(id as u32));
                pieces[id].0.len()
            };
            at += len;
        }
        out
    }
}

/// `text` cut where USER_DEFINED pieces match, the longest (up to `longest` characters) at each
/// position: (stretch, whether it is one such piece).
fn user_runs<'t>(text: &'t str, user: &HashMap<&str, u32>, longest: usize) -> Vec<(&'t str, bool)> {
    let mut out = Vec::new();
    let (mut start, mut at) = (0, 0);
    while at < text.len() {
        let ends = text[at..]
            .char_indices()
            .skip(1)
            .map(|(i, _)| at + i)
            .chain([text.len()])
            .take(longest);
        match ends.filter(|&e| user.contains_key(&text[at..e])).last() {
            Some(end) => {
                if start < at {
                    out.push((&text[start..at], false));
                }
                out.push((&text[at..end], true));
                (start, at) = (end, end);
            }
            None => at += text[at..].chars().next().map_or(1, char::len_utf8),
        }
    }
    if start < text.len() {
        out.push((&text[start..], false));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_pieces_parse_back_and_every_other_byte_is_kept() {
        let mut bytes = encode_piece("<unk>", 0.0, PieceType::Unknown);
        bytes.extend(encode_piece("▁a", -1.5, PieceType::Normal));
        // An unknown top-level field (number 9, varint) after the pieces must survive.
        bytes.extend([0x48, 0x07]);
        let m = parse(bytes.clone()).unwrap();
        assert_eq!(m.pieces.len(), 2);
        let out = append(&m, &[("ሀ".into(), -3.0, PieceType::UserDefined)]);
        let back = parse(out.clone()).unwrap();
        assert_eq!(back.pieces.len(), 3);
        assert_eq!(back.pieces[2].piece, "ሀ");
        assert_eq!(back.pieces[2].kind, PieceType::UserDefined);
        assert_eq!(&out[..m.insert_at], &bytes[..m.insert_at]);
        assert_eq!(&out[out.len() - 2..], &[0x48, 0x07]);
    }

    #[test]
    fn without_pieces_drops_them_sets_the_size_and_keeps_other_fields() {
        let mut bytes = encode_piece("<unk>", 0.0, PieceType::Unknown);
        bytes.extend(encode_piece("a", -1.0, PieceType::Normal));
        bytes.extend(encode_piece("b", -2.0, PieceType::Normal));
        // trainer_spec { model_type: 2, vocab_size: 3 }, self_test_data {}, field 9 = 7.
        bytes.extend([0x12, 0x04, 0x18, 0x02, 0x20, 0x03, 0x22, 0x00, 0x48, 0x07]);
        let m = parse(bytes).unwrap();
        let out = without_pieces(&m, &[true, false, true]);
        let back = parse(out.clone()).unwrap();
        let names: Vec<&str> = back.pieces.iter().map(|p| p.piece.as_str()).collect();
        assert_eq!(names, ["<unk>", "b"]);
        assert_eq!(back.model_type, Some(2));
        let tail = &out[back.insert_at..];
        assert_eq!(tail, [0x12, 0x04, 0x18, 0x02, 0x20, 0x02, 0x48, 0x07]);
    }

    #[test]
    fn scores_below_stay_distinct_where_one_less_rounds_back() {
        assert_eq!(below(-3.0), -4.0);
        let mut s = -1e9f32;
        for _ in 0..1000 {
            let next = below(s);
            assert!(next < s);
            s = next;
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for b in [
            &b""[..],
            b"\x0a\xff\xff\xff\xff\x0f",
            b"\x0b",
            b"hello world",
            b"\x08",
        ] {
            assert!(parse(b.to_vec()).is_err(), "{b:?}");
        }
    }

    #[test]
    fn viterbi_prefers_higher_scores_and_user_defined_pieces() {
        let p = vec![
            ("a".to_string(), -1.0, PieceType::Normal),
            ("b".to_string(), -1.0, PieceType::Normal),
            ("ab".to_string(), -1.5, PieceType::Normal),
            ("abab".to_string(), -9.0, PieceType::UserDefined),
        ];
        assert_eq!(viterbi(&p, "ab"), vec![2]);
        assert_eq!(viterbi(&p, "abab"), vec![3]);
        assert!(viterbi(&p, "c").is_empty());
        // A user-defined piece of n bytes scores 0.1 × n − 0.1 (0.1 for "xy"), as sentencepiece's
        // encoder, whatever its own score: a normal piece scored above that wins.
        let q = vec![
            ("x".to_string(), -3.0, PieceType::Normal),
            ("z".to_string(), -3.0, PieceType::Normal),
            ("xyz".to_string(), 0.2, PieceType::Normal),
            ("xy".to_string(), -50.0, PieceType::UserDefined),
        ];
        assert_eq!(viterbi(&q, "xyz"), vec![2]);
        assert_eq!(viterbi(&q, "xyzxy"), vec![2, 3]);
        // With z at 0.5, xy + z (0.6) beats xyz (0.2).
        let mut r = q.clone();
        r[1].1 = 0.5;
        assert_eq!(viterbi(&r, "xyz"), vec![3, 1]);
    }

    #[test]
    fn segmenter_matches_user_pieces_whole_and_falls_back_to_bytes() {
        let p = vec![
            ("<unk>".to_string(), 0.0, PieceType::Unknown),
            ("<0xC3>".to_string(), 0.0, PieceType::Byte),
            ("<0xA9>".to_string(), 0.0, PieceType::Byte),
            ("a".to_string(), -1.0, PieceType::Normal),
            ("b".to_string(), -1.0, PieceType::Normal),
            ("ab".to_string(), -1.5, PieceType::Normal),
            ("ba".to_string(), -3.0, PieceType::UserDefined),
        ];
        let bpe = segmenter(&p, true);
        // "ba" is matched whole first, so "ab" is not joined across it.
        assert_eq!(bpe("abab"), [Some(3), Some(6), Some(4)]);
        assert_eq!(bpe("abb"), [Some(5), Some(4)]);
        assert_eq!(bpe("aé"), [Some(3), Some(1), Some(2)], "é as its bytes");
        assert_eq!(bpe("ax"), [Some(3), None], "no piece, no byte piece");
        let uni = segmenter(&p, false);
        assert_eq!(uni("abé"), [Some(5), Some(1), Some(2)]);
        assert_eq!(uni("x"), [None]);
    }

    /// The scan BPE joins by: every pair looked up at every step, the best (leftmost among
    /// equals) joined.
    fn bpe_by_scans(score: impl Fn(&str) -> Option<f32>, text: &str) -> Vec<String> {
        let mut syms: Vec<String> = text.chars().map(String::from).collect();
        loop {
            let mut best: Option<(f32, usize)> = None;
            for (i, w) in syms.windows(2).enumerate() {
                if let Some(s) = score(&format!("{}{}", w[0], w[1])) {
                    if best.is_none_or(|(b, _)| s > b) {
                        best = Some((s, i));
                    }
                }
            }
            let Some((_, i)) = best else { return syms };
            let right = syms.remove(i + 1);
            syms[i].push_str(&right);
        }
    }

    /// The heap gives the scans' pieces on random texts over three letters with random pieces
    /// and scores (ties among them), from the characters and continued from part of the way.
    #[test]
    fn bpe_by_heap_equals_bpe_by_scans() {
        let mut r = crate::rng::Rng::new(5, 1);
        let mut below = |n: u64| (r.next_u64() % n) as usize;
        for _ in 0..300 {
            let mut scores: HashMap<String, f32> = HashMap::new();
            for _ in 0..below(40) {
                let len = 2 + below(4);
                let piece: String = (0..len).map(|_| ['a', 'b', 'c'][below(3)]).collect();
                scores.insert(piece, -(below(6) as f32));
            }
            let text: String = (0..below(60)).map(|_| ['a', 'b', 'c'][below(3)]).collect();
            let score = |p: &str| scores.get(p).copied();
            let want = bpe_by_scans(score, &text);
            assert_eq!(bpe_pieces(score, &text), want, "{text} {scores:?}");
            // Continued: pieces made with some pieces missing, then the missing ones scored
            // below every other.
            let lowest = scores.values().copied().fold(0f32, f32::min);
            let part: HashMap<&str, f32> = scores
                .iter()
                .filter(|(_, &s)| s > lowest)
                .map(|(p, &s)| (p.as_str(), s))
                .collect();
            let first = bpe_pieces(|p| part.get(p).copied(), &text);
            let mut all: HashMap<&str, f32> = part.clone();
            for (p, _) in scores.iter().filter(|(_, &s)| s <= lowest) {
                all.insert(p, lowest - 1.0);
            }
            let whole = bpe_by_scans(|p| all.get(p).copied(), &text);
            assert_eq!(bpe_join(|p| all.get(p).copied(), first), whole, "{text}");
        }
    }

    #[test]
    fn bpe_joins_the_best_scoring_pair_first() {
        let scores: std::collections::HashMap<&str, f32> =
            [("ab", -2.0), ("bc", -1.0), ("bcd", -3.0)]
                .into_iter()
                .collect();
        let score = |p: &str| scores.get(p).copied();
        assert_eq!(bpe_pieces(score, "abc"), ["a", "bc"]);
        assert_eq!(bpe_pieces(score, "abd"), ["ab", "d"]);
        assert_eq!(bpe_pieces(score, "abcd"), ["a", "bcd"]);
    }
}
