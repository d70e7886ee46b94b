//! inspect-checkpoint on a Megatron-Core `torch_dist` checkpoint: the iteration, the parallel
//! layout, the vocabulary (padded size, true size where known, the matrices and their
//! tensor-parallel row chunks), the optimizer's layout, then the DCP folder's tensors.

use crate::formats::megatron::{self, common::Args, Megatron};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The inspect report of a Megatron checkpoint.
#[derive(Debug, Serialize)]
pub struct Report {
    pub path: PathBuf,
    pub format: &'static str,
    /// The iteration folder read (the save root's newest, or the folder given).
    pub iteration_dir: PathBuf,
    /// The folder's number (its name or the tracker file's), else the one `common.pt` holds
    /// (what Megatron-LM resumes from); None for `release` or neither.
    pub iteration: Option<u64>,
    pub parallel: Parallel,
    pub vocabulary: Vocabulary,
    pub optimizer: Optimizer,
    /// `common.pt`'s args (Megatron-LM), when there.
    pub args: Option<ArgsReport>,
    /// The DCP folder underneath: every tensor and its chunks (inspect-checkpoint's DCP report).
    pub tensors: serde_json::Value,
    /// That report's human text.
    #[serde(skip)]
    pub tensors_text: String,
}

/// Tensor and pipeline parallel sizes, as the chunks show them and as the args say.
#[derive(Debug, Serialize)]
pub struct Parallel {
    /// The vocabulary matrices' row chunks.
    pub tensor_parallel: u64,
    /// The distributed optimizer's model-parallel groups (TP x PP) over the tensor-parallel
    /// size, where its flat buckets show them.
    pub pipeline_parallel: Option<u64>,
    pub args_tensor_parallel: Option<u64>,
    pub args_pipeline_parallel: Option<u64>,
    /// The model chunks per pipeline rank the args say (`virtual_pipeline_model_parallel_size`,
    /// the interleaved schedule: a buffer of the optimizer's each); absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_virtual_pipeline: Option<u64>,
    /// The data-parallel replicas (`data_parallel_size`) the args say: how many parts each of
    /// the distributed optimizer's buckets is saved in.
    pub args_data_parallel: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Vocabulary {
    /// The vocabulary matrices' rows (Megatron's padded vocabulary size).
    pub padded_vocab_size: u64,
    pub args_padded_vocab_size: Option<u64>,
    /// The tokenizer's true size, where the checkpoint records it (args.vocab_size); otherwise
    /// check-vocab --tokenizer gives it.
    pub true_vocab_size: Option<u64>,
    pub make_vocab_size_divisible_by: Option<u64>,
    /// Is the padded size a multiple of make_vocab_size_divisible_by x TP (Megatron's rule)?
    pub padding_rule_holds: Option<bool>,
    pub tensors: Vec<VocabTensor>,
    /// Where the output layer is when the args tie it to the embedding and no item holds it
    /// (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tied_output_layer: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct VocabTensor {
    pub name: &'static str,
    pub role: &'static str,
    pub dtype: String,
    pub shape: Vec<u64>,
    /// Per tensor-parallel rank: rows [start, end) and the file.
    pub tp_chunks: Vec<TpChunk>,
}

#[derive(Debug, Serialize)]
pub struct TpChunk {
    pub tp_rank: usize,
    pub rows: [u64; 2],
    pub file: String,
}

#[derive(Debug, Serialize)]
pub struct Optimizer {
    /// Megatron's name for the distributed optimizer's checkpoint layout; None: no optimizer.
    pub form: Option<String>,
    pub source: &'static str,
    pub states: Vec<String>,
    pub groups: u64,
    pub tensors: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ArgsReport {
    pub padded_vocab_size: Option<u64>,
    pub vocab_size: Option<u64>,
    pub make_vocab_size_divisible_by: Option<u64>,
    pub tensor_model_parallel_size: Option<u64>,
    pub pipeline_model_parallel_size: Option<u64>,
    pub untie_embeddings_and_output_weights: Option<bool>,
    pub tokenizer_type: Option<String>,
    pub tokenizer_model: Option<String>,
}

impl From<&Args> for ArgsReport {
    fn from(a: &Args) -> Self {
        ArgsReport {
            padded_vocab_size: a.padded_vocab_size,
            vocab_size: a.vocab_size,
            make_vocab_size_divisible_by: a.make_vocab_size_divisible_by,
            tensor_model_parallel_size: a.tensor_model_parallel_size,
            pipeline_model_parallel_size: a.pipeline_model_parallel_size,
            untie_embeddings_and_output_weights: a.untie_embeddings_and_output_weights,
            tokenizer_type: a.tokenizer_type.clone(),
            tokenizer_model: a.tokenizer_model.clone(),
        }
    }
}

/// Describe an open Megatron checkpoint; `tensors`: the DCP folder's report, JSON and text.
pub fn report(m: &Megatron, tensors: (serde_json::Value, String)) -> Report {
    let args = m.args();
    let rows = m.vocab.first().map_or(0, |v| v.shape[0]);
    let divisible = args.and_then(|a| a.make_vocab_size_divisible_by);
    let o = &m.optimizer;
    let pp = (o.form.as_deref() == Some("dp_reshardable") && o.groups.checked_rem(m.tp) == Some(0))
        .then(|| o.groups / m.tp);
    Report {
        path: m.path.clone(),
        format: "megatron-core",
        iteration_dir: m.dir.clone(),
        iteration: m.iteration.or_else(|| {
            let saved = m.common.as_ref().and_then(|c| c.iteration);
            saved.filter(|_| !megatron::is_release(&m.dir))
        }),
        parallel: Parallel {
            tensor_parallel: m.tp,
            pipeline_parallel: pp,
            args_tensor_parallel: args.and_then(|a| a.tensor_model_parallel_size),
            args_pipeline_parallel: args.and_then(|a| a.pipeline_model_parallel_size),
            args_virtual_pipeline: args.and_then(|a| a.virtual_pipeline_model_parallel_size),
            args_data_parallel: args.and_then(|a| a.data_parallel_size),
        },
        vocabulary: Vocabulary {
            padded_vocab_size: rows,
            args_padded_vocab_size: args.and_then(|a| a.padded_vocab_size),
            true_vocab_size: args.and_then(|a| a.vocab_size),
            make_vocab_size_divisible_by: divisible,
            padding_rule_holds: divisible.map(|d| {
                d.checked_mul(m.tp)
                    .is_some_and(|k| k > 0 && rows.is_multiple_of(k))
            }),
            tensors: m.vocab.iter().map(vocab_tensor).collect(),
            tied_output_layer: tied_output_layer(m),
        },
        optimizer: Optimizer {
            form: o.form.clone(),
            source: o.source,
            states: o.states.clone(),
            groups: o.groups,
            tensors: o.tensors.clone(),
        },
        args: args.map(ArgsReport::from),
        tensors: tensors.0,
        tensors_text: tensors.1,
    }
}

/// The output layer of a save whose args tie it to the embedding and which has no item of it:
/// the embedding itself, or with pipeline stages the last stage's copy of it (saved as a
/// replica of the embedding's item).
fn tied_output_layer(m: &Megatron) -> Option<String> {
    let args = m.args()?;
    let head = m.vocab.iter().any(|v| v.role == "head");
    if !args.tied() || head {
        return None;
    }
    let pp = args.pipeline_model_parallel_size.unwrap_or(1);
    Some(match m.tied_pipelined() {
        true => format!("tied to the embedding (args untie_embeddings_and_output_weights false): the last of {pp} pipeline stages holds a copy, saved as a replica of the embedding's item"),
        false => "tied to the embedding (args untie_embeddings_and_output_weights false): no item of its own".to_string(),
    })
}

fn vocab_tensor(v: &crate::formats::megatron::layout::VocabTensor) -> VocabTensor {
    VocabTensor {
        name: v.name,
        role: v.role,
        dtype: v.dtype.torch_name().to_string(),
        shape: v.shape.clone(),
        tp_chunks: v
            .chunks
            .iter()
            .enumerate()
            .map(|(i, c)| TpChunk {
                tp_rank: i,
                rows: [c.start, c.end],
                file: c.file.clone(),
            })
            .collect(),
    }
}

pub(super) fn or_unknown(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".to_string(), |n| n.to_string())
}

/// The vocabulary line both Megatron reports print: the padded rows (the tensors', the args'),
/// the true size, and Megatron's padding rule (its divisor, whether the rows follow it).
pub(super) fn vocabulary_line(
    s: &mut String,
    [padded, args_padded]: [Option<u64>; 2],
    true_size: Option<u64>,
    (by, holds): (Option<u64>, Option<bool>),
) {
    let _ = writeln!(
        s,
        "vocabulary: padded {} rows (args padded_vocab_size {}), true size {}, make_vocab_size_divisible_by {}{}",
        or_unknown(padded),
        or_unknown(args_padded),
        true_size.map_or_else(|| "unknown (check-vocab --tokenizer)".to_string(), |n| n.to_string()),
        or_unknown(by),
        match holds {
            Some(true) => " (a multiple of it x TP, as Megatron pads)",
            Some(false) => " (NOT a multiple of it x TP: not Megatron's padding)",
            None => "",
        }
    );
}

/// The human rendering of [`Report`].
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: Megatron-Core distributed checkpoint (torch_dist), iteration {} in {}",
        r.path.display(),
        or_unknown(r.iteration),
        r.iteration_dir.display()
    );
    let p = &r.parallel;
    let virtual_pipeline = p.args_virtual_pipeline.map_or(String::new(), |v| {
        format!(", {v} model chunks per pipeline rank (args virtual_pipeline_model_parallel_size)")
    });
    let _ = writeln!(
        s,
        "parallel: tensor {} (vocabulary row chunks; args {}), pipeline {} (optimizer groups; args {}){virtual_pipeline}, data {} (args)",
        p.tensor_parallel,
        or_unknown(p.args_tensor_parallel),
        or_unknown(p.pipeline_parallel),
        or_unknown(p.args_pipeline_parallel),
        or_unknown(p.args_data_parallel)
    );
    let v = &r.vocabulary;
    let padded = [Some(v.padded_vocab_size), v.args_padded_vocab_size];
    let rule = (v.make_vocab_size_divisible_by, v.padding_rule_holds);
    vocabulary_line(&mut s, padded, v.true_vocab_size, rule);
    for t in &v.tensors {
        let chunks: Vec<String> = t
            .tp_chunks
            .iter()
            .map(|c| {
                format!(
                    "tp {}: rows {}..{} ({})",
                    c.tp_rank, c.rows[0], c.rows[1], c.file
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "  {} ({}) {} {:?}: {}",
            t.name,
            t.role,
            t.dtype,
            t.shape,
            chunks.join(", ")
        );
    }
    if let Some(t) = &v.tied_output_layer {
        let _ = writeln!(s, "  output_layer.weight (head): {t}");
    }
    let o = &r.optimizer;
    match &o.form {
        Some(form) => {
            // Flat buckets are saved per model-parallel group; model-space state per parameter.
            let groups = match o.groups {
                0 => String::new(),
                1 => " in 1 model-parallel group".to_string(),
                n => format!(" in {n} model-parallel groups"),
            };
            let _ = writeln!(
                s,
                "optimizer: distributed, {form} (from {}), state per parameter: {}; {} tensors{groups}",
                o.source,
                o.states.join(", "),
                o.tensors.len(),
            );
        }
        None => s.push_str("optimizer: none saved\n"),
    }
    s.push_str("tensors (the DCP folder underneath):\n");
    s.push_str(&r.tensors_text);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// testdata/megatron/tp2, opened.
    fn tp2() -> Megatron {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/megatron/tp2");
        match crate::formats::open(&root, &Default::default()) {
            Ok(crate::formats::Checkpoint::Megatron(m)) => *m,
            _ => panic!("tp2 is a Megatron save"),
        }
    }

    #[test]
    fn an_output_layer_tied_to_the_embedding_is_named_where_it_is() {
        let mut m = tp2();
        // Untied, with its output_layer item: nothing to say.
        assert_eq!(tied_output_layer(&m), None);
        // A tied run has no output_layer item; its args say so.
        m.vocab.retain(|v| v.role != "head");
        let set = |m: &mut Megatron, pp| {
            let a = m.common.as_mut().and_then(|c| c.args.as_mut()).unwrap();
            a.untie_embeddings_and_output_weights = Some(false);
            a.pipeline_model_parallel_size = Some(pp);
        };
        set(&mut m, 2);
        let r = report(&m, (serde_json::Value::Null, String::new()));
        let text = render(&r);
        assert!(
            text.contains("output_layer.weight (head): tied to the embedding")
                && text.contains("the last of 2 pipeline stages holds a copy"),
            "{text}"
        );
        set(&mut m, 1);
        assert!(tied_output_layer(&m).is_some_and(|t| t.ends_with("no item of its own")));
    }

    #[test]
    fn model_chunks_per_pipeline_rank_are_shown_where_the_args_say_them() {
        let mut m = tp2();
        let shown = |m: &Megatron| {
            let r = report(m, (serde_json::Value::Null, String::new()));
            let json = serde_json::to_value(&r.parallel).unwrap();
            (render(&r), json.get("args_virtual_pipeline").cloned())
        };
        let (text, json) = shown(&m);
        assert!(!text.contains("model chunks") && json.is_none(), "{text}");
        let a = m.common.as_mut().and_then(|c| c.args.as_mut()).unwrap();
        a.virtual_pipeline_model_parallel_size = Some(2);
        let (text, json) = shown(&m);
        assert!(
            text.contains("groups; args 1), 2 model chunks per pipeline rank (args virtual_"),
            "{text}"
        );
        assert_eq!(json, Some(serde_json::json!(2)));
    }
}
