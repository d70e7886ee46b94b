//! Which tensors are the vocabulary matrices: embeddings, output heads and head biases.
//!
//! Rules, in order: a 2-D tensor whose module name (the part before `.weight`) reads like an
//! embedding (`embed_tokens`, `wte`, `word_embeddings`, `text_emb`, `shared`, …) or an output head
//! (`lm_head`, `text_head`, `output`, `embed_out`) is a candidate. Positional and type embeddings,
//! other modalities (`speech_emb`, `audio_*`, `vision_*`) and matrices with fewer rows than
//! columns (`tfmr.embed_tokens` [8, 1024] in Chatterbox) are lookalikes, never the vocabulary.
//! Candidates are grouped by row count; one group is the vocabulary, several are ambiguous.
//! A 1-D head bias of the vocabulary's length joins it: a head's own (`lm_head.bias`) or the
//! bias a tied head keeps apart from the embedding (BERT's `cls.predictions.bias`, its
//! `decoder.bias`, DistilBERT's `vocab_projector.bias`), which must grow with the tie.

use serde::Serialize;

/// What a vocabulary tensor is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Embedding,
    Head,
    HeadBias,
}

/// One tensor of the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VocabTensor {
    pub name: String,
    pub role: Role,
    pub shape: Vec<u64>,
}

/// A set of tensors sharing one row count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vocabulary {
    pub rows: u64,
    pub tensors: Vec<VocabTensor>,
}

/// A tensor that looks like a vocabulary matrix but is not treated as one, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lookalike {
    pub name: String,
    pub shape: Vec<u64>,
    pub reason: String,
}

/// The outcome of [`detect`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Detection {
    /// The vocabulary, when exactly one group of candidates exists.
    pub vocabulary: Option<Vocabulary>,
    /// All groups when there is more than one (the caller must ask which).
    pub ambiguous: Vec<Vocabulary>,
    pub lookalikes: Vec<Lookalike>,
}

/// Markers matched against the whole name: short ones as whole words (split on `.` and `_`,
/// so `text_pos_emb` matches `pos` but `compose` does not), long ones as substrings.
const POSITIONAL: (&[&str], &[&str]) = (
    &["pos", "wpe", "rel"],
    &["position", "token_type", "segment", "relative"],
);
const OTHER_MODALITY: (&[&str], &[&str]) = (
    &["mel", "spk", "spkr", "cond"],
    &[
        "speech", "audio", "speaker", "image", "vision", "visual", "video", "patch", "codebook",
    ],
);
const EMBEDDING_EXACT: [&str; 4] = ["wte", "wpe", "shared", "tok_embeddings"];
const HEAD_EXACT: [&str; 5] = [
    "output",
    "embed_out",
    "lm_head",
    "logits",
    "vocab_projector",
];
/// Modules whose `bias` of the vocabulary's length is the head's bias (the tied head itself is
/// not stored, or stored under the embedding's storage).
const HEAD_BIAS_MODULES: [&str; 2] = ["predictions", "decoder"];

/// The module name: the component before a trailing `weight`/`bias`, lower-cased.
fn module_name(name: &str) -> String {
    let mut parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 1 && matches!(parts.last(), Some(&"weight") | Some(&"bias")) {
        parts.pop();
    }
    parts.last().copied().unwrap_or("").to_ascii_lowercase()
}

fn is_embedding_name(module: &str) -> bool {
    EMBEDDING_EXACT.contains(&module) || module.contains("emb")
}

fn is_head_name(module: &str) -> bool {
    HEAD_EXACT.contains(&module) || module.ends_with("head")
}

fn marker<'a>(name: &str, (words, substrings): (&[&'a str], &[&'a str])) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    let word = lower
        .split(['.', '_'])
        .find_map(|w| words.iter().copied().find(|m| *m == w));
    word.or_else(|| substrings.iter().copied().find(|m| lower.contains(m)))
}

/// A positional or type table by its name (`wpe`, `pos_emb`, `token_type_embeddings`): never the
/// vocabulary, and its rows are kept when the vocabulary grows, even when it has as many.
pub fn is_positional(name: &str) -> bool {
    marker(name, POSITIONAL).is_some()
}

/// What a matrix is by its name alone (the rule [`detect`] applies first): an output head
/// (`lm_head`, `output`, `embed_out`, `*head`), an embedding (`embed_tokens`, `wte`, `*emb*`), or
/// neither.
pub fn role_by_name(name: &str) -> Option<Role> {
    let module = module_name(name);
    if is_head_name(&module) {
        Some(Role::Head)
    } else if is_embedding_name(&module) {
        Some(Role::Embedding)
    } else {
        None
    }
}

/// Find the vocabulary among `(name, shape)` pairs.
pub fn detect<'a>(tensors: impl IntoIterator<Item = (&'a str, &'a [u64])>) -> Detection {
    let tensors: Vec<(&str, &[u64])> = tensors.into_iter().collect();
    let mut det = Detection::default();
    let mut groups: Vec<Vocabulary> = Vec::new();
    for &(name, shape) in &tensors {
        let Some(role) = role_by_name(name) else {
            continue;
        };
        let [rows, cols] = shape else { continue };
        let lookalike = |reason: String| Lookalike {
            name: name.to_string(),
            shape: shape.to_vec(),
            reason,
        };
        if let Some(m) = marker(name, POSITIONAL) {
            det.lookalikes.push(lookalike(format!(
                "positional or type embedding ('{m}' in its name), not a vocabulary"
            )));
        } else if let Some(m) = marker(name, OTHER_MODALITY) {
            det.lookalikes.push(lookalike(format!(
                "'{m}' in its name: another modality's table, not the text vocabulary (name it with --tensor to include it)"
            )));
        } else if rows < cols {
            det.lookalikes.push(lookalike(format!(
                "{rows} rows is fewer than its width {cols}: too few for a vocabulary"
            )));
        } else {
            let t = VocabTensor {
                name: name.to_string(),
                role,
                shape: shape.to_vec(),
            };
            match groups.iter_mut().find(|g| g.rows == *rows) {
                Some(g) => g.tensors.push(t),
                None => groups.push(Vocabulary {
                    rows: *rows,
                    tensors: vec![t],
                }),
            }
        }
    }
    // Head biases join the group whose row count they match. One group is the vocabulary,
    // several are for the caller to choose from.
    for g in &mut groups {
        for &(name, shape) in &tensors {
            if let [len] = shape {
                let module = module_name(name);
                if *len == g.rows
                    && name.ends_with("bias")
                    && (is_head_name(&module) || HEAD_BIAS_MODULES.contains(&module.as_str()))
                {
                    g.tensors.push(VocabTensor {
                        name: name.to_string(),
                        role: Role::HeadBias,
                        shape: shape.to_vec(),
                    });
                }
            }
        }
    }
    if groups.len() == 1 {
        det.vocabulary = groups.pop();
    } else {
        det.ambiguous = groups;
    }
    det
}

/// A tensor of the vocabulary's length along a later dimension, one value per token: BART's
/// `final_logits_bias` [1, V] (mBART, Marian, Pegasus, Blenderbot keep one too). Its rows are
/// along [`row_axis`]; the layouts whose writers do not place rows there refuse such a model
/// rather than leave this tensor at the old length (the output would not load).
pub fn per_token_elsewhere<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a [u64])>,
    rows: u64,
) -> Option<(&'a str, &'a [u64])> {
    tensors
        .into_iter()
        .find(|(name, shape)| row_axis(name, shape) == 1 && shape[1] == rows)
}

/// The dimension a vocabulary tensor's rows lie along: the first, except for a logits bias
/// [1, V] (BART's `final_logits_bias`), whose V values lie along the second. Its bytes are those
/// of a `[V]` tensor, so the row surgery sees it as one ([`rows_shape`]) and the writers put the
/// new length back at this axis ([`with_rows`]).
pub fn row_axis(name: &str, shape: &[u64]) -> usize {
    let bias = matches!(shape, [1, _]) && name.to_ascii_lowercase().ends_with("logits_bias");
    usize::from(bias)
}

/// The shape the row surgery sees: `shape` without the dimensions before [`row_axis`] (all 1).
pub fn rows_shape<'s>(name: &str, shape: &'s [u64]) -> &'s [u64] {
    &shape[row_axis(name, shape)..]
}

/// `shape` with `rows` rows along [`row_axis`].
pub fn with_rows(name: &str, shape: &[u64], rows: u64) -> Vec<u64> {
    let mut out = shape.to_vec();
    if let Some(r) = out.get_mut(row_axis(name, shape)) {
        *r = rows;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &Vocabulary) -> Vec<(&str, Role)> {
        v.tensors
            .iter()
            .map(|t| (t.name.as_str(), t.role))
            .collect()
    }

    #[test]
    fn bart_final_logits_bias_is_one_value_per_token_along_its_second_dimension() {
        let t: Vec<(&str, Vec<u64>)> = vec![
            ("model.shared.weight", vec![700, 16]),
            ("final_logits_bias", vec![1, 700]),
            ("model.encoder.layer_scale_bias", vec![1, 16]),
        ];
        let all = || t.iter().map(|(n, s)| (*n, s.as_slice()));
        let found = per_token_elsewhere(all(), 700);
        assert_eq!(found, Some(("final_logits_bias", &[1u64, 700][..])));
        assert_eq!(per_token_elsewhere(all(), 16), None, "not a logits bias");
        assert_eq!(per_token_elsewhere(all(), 699), None);
        // Its rows lie along the second dimension; every other tensor's along the first.
        assert_eq!(row_axis("final_logits_bias", &[1, 700]), 1);
        assert_eq!(rows_shape("final_logits_bias", &[1, 700]), [700]);
        assert_eq!(with_rows("final_logits_bias", &[1, 700], 710), [1, 710]);
        for (name, shape) in [
            ("model.shared.weight", &[700u64, 16][..]),
            ("lm_head.bias", &[700]),
            ("final_logits_bias", &[2, 700]),
            ("model.encoder.layer_scale_bias", &[1, 16]),
        ] {
            assert_eq!(row_axis(name, shape), 0, "{name} {shape:?}");
            assert_eq!(with_rows(name, shape, 9)[0], 9, "{name}");
        }
    }

    #[test]
    fn chatterbox_text_vocabulary_skips_speech_and_tiny_llama_table() {
        let t: Vec<(&str, Vec<u64>)> = vec![
            ("tfmr.embed_tokens.weight", vec![8, 64]),
            ("speech_emb.weight", vec![8194, 64]),
            ("speech_head.weight", vec![8194, 64]),
            ("text_emb.weight", vec![2454, 64]),
            ("text_head.weight", vec![2454, 64]),
            ("text_pos_emb.emb.weight", vec![2050, 64]),
            ("tfmr.layers.0.mlp.up_proj.weight", vec![128, 64]),
        ];
        let d = detect(t.iter().map(|(n, s)| (*n, s.as_slice())));
        let v = d.vocabulary.expect("one vocabulary");
        assert_eq!(v.rows, 2454);
        assert_eq!(
            names(&v),
            vec![
                ("text_emb.weight", Role::Embedding),
                ("text_head.weight", Role::Head)
            ]
        );
        let looks: Vec<&str> = d.lookalikes.iter().map(|l| l.name.as_str()).collect();
        assert!(looks.contains(&"tfmr.embed_tokens.weight"));
        assert!(looks.contains(&"speech_emb.weight"));
        assert!(looks.contains(&"speech_head.weight"));
        assert!(d.ambiguous.is_empty());
    }

    #[test]
    fn gpt2_tied_embedding_is_the_vocabulary_and_wpe_is_not() {
        let t: Vec<(&str, Vec<u64>)> = vec![
            ("transformer.wte.weight", vec![1000, 64]),
            ("transformer.wpe.weight", vec![128, 64]),
            ("transformer.h.0.attn.c_attn.weight", vec![64, 192]),
        ];
        let d = detect(t.iter().map(|(n, s)| (*n, s.as_slice())));
        let v = d.vocabulary.unwrap();
        assert_eq!(names(&v), vec![("transformer.wte.weight", Role::Embedding)]);
        assert_eq!(d.lookalikes.len(), 1);
    }

    #[test]
    fn head_bias_of_vocabulary_length_joins_and_mismatched_groups_are_ambiguous() {
        let t: Vec<(&str, Vec<u64>)> = vec![
            ("model.embed_tokens.weight", vec![1000, 64]),
            ("lm_head.weight", vec![1000, 64]),
            ("lm_head.bias", vec![1000]),
            ("layers.0.attention.output.dense.weight", vec![64, 64]),
        ];
        let d = detect(t.iter().map(|(n, s)| (*n, s.as_slice())));
        let v = d.vocabulary.unwrap();
        assert_eq!(v.tensors.len(), 3);
        assert_eq!(v.tensors[2].role, Role::HeadBias);

        let t: Vec<(&str, Vec<u64>)> = vec![
            ("model.embed_tokens.weight", vec![1000, 64]),
            ("lm_head.weight", vec![1064, 64]),
        ];
        let d = detect(t.iter().map(|(n, s)| (*n, s.as_slice())));
        assert!(d.vocabulary.is_none());
        assert_eq!(d.ambiguous.len(), 2);
    }

    #[test]
    fn a_tied_heads_own_bias_joins_and_a_layer_bias_does_not() {
        // BertForMaskedLM as save_pretrained writes it: the decoder weight is the embedding, its
        // bias is stored as cls.predictions.bias. A torch.save state dict also holds the
        // decoder's names (same storages).
        let t: Vec<(&str, Vec<u64>)> = vec![
            ("bert.embeddings.word_embeddings.weight", vec![120, 32]),
            ("bert.encoder.layer.0.intermediate.dense.bias", vec![120]),
            ("cls.predictions.bias", vec![120]),
            ("cls.predictions.decoder.bias", vec![120]),
            ("cls.predictions.transform.dense.bias", vec![32]),
        ];
        let d = detect(t.iter().map(|(n, s)| (*n, s.as_slice())));
        let v = d.vocabulary.unwrap();
        assert_eq!(
            names(&v),
            vec![
                ("bert.embeddings.word_embeddings.weight", Role::Embedding),
                ("cls.predictions.bias", Role::HeadBias),
                ("cls.predictions.decoder.bias", Role::HeadBias)
            ]
        );
    }
}
