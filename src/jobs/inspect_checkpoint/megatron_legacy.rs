//! inspect-checkpoint on Megatron-LM's legacy per-rank checkpoint (`mp_rank_TT[_PPP]/
//! model_optim_rng.pt`): the iteration, the parallel layout from the folder names and the args,
//! the padded and true vocabulary, the vocabulary matrices' rows per tensor-parallel rank, and
//! which of Megatron's optimizers saved the optimizer state.

use super::megatron::{or_unknown, vocabulary_line, ArgsReport};
use super::Options;
use crate::error::Result;
use crate::formats::megatron::legacy::{Legacy, LAYOUT};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, Serialize)]
pub struct Report {
    pub path: PathBuf,
    pub format: &'static str,
    pub iteration_dir: PathBuf,
    /// The folder's number (its name or the tracker file's), else the one the rank files hold;
    /// None for `release` or neither.
    pub iteration: Option<u64>,
    /// From the rank folders' names.
    pub tensor_parallel: u64,
    pub pipeline_parallel: u64,
    /// Model chunks per rank file (`model0`, `model1`, … of virtual pipeline stages); absent
    /// for one (`model`).
    #[serde(skip_serializing_if = "is_one")]
    pub model_chunks: u64,
    pub rank_files: Vec<PathBuf>,
    pub padded_vocab_size: u64,
    pub true_vocab_size: Option<u64>,
    /// Is the padded size a multiple of make_vocab_size_divisible_by x TP (Megatron's rule)?
    pub padding_rule_holds: Option<bool>,
    pub vocab_tensors: Vec<VocabTensor>,
    pub optimizer: Optimizer,
    pub args: Option<ArgsReport>,
}

#[derive(Debug, Serialize)]
pub struct VocabTensor {
    pub name: &'static str,
    pub role: &'static str,
    pub pipeline_rank: Option<u64>,
    pub dtype: String,
    pub shape: Vec<u64>,
    /// Rows [start, end) per tensor-parallel rank.
    pub tp_rows: Vec<[u64; 2]>,
}

#[derive(Debug, Serialize)]
pub struct Optimizer {
    /// Megatron's optimizer class whose state_dict() is saved; None: none saved.
    pub form: Option<&'static str>,
    pub states: Vec<String>,
    /// Parameters per parameter group.
    pub groups: Vec<u64>,
    pub distrib_optim: Option<PathBuf>,
}

/// The report of an open legacy checkpoint, JSON and the human text.
pub fn inspect(l: &Legacy, _opts: &Options) -> Result<(serde_json::Value, String)> {
    let r = report(l);
    Ok((serde_json::to_value(&r).unwrap_or_default(), render(&r)))
}

fn report(l: &Legacy) -> Report {
    let args = l.args.as_ref();
    let rows = l.padded_rows();
    Report {
        path: l.path.clone(),
        format: "megatron-lm-legacy",
        iteration_dir: l.dir.clone(),
        iteration: l.iteration.or_else(|| {
            let saved = l.saved_iteration();
            saved.filter(|_| !crate::formats::megatron::is_release(&l.dir))
        }),
        tensor_parallel: l.tp,
        pipeline_parallel: l.pp,
        model_chunks: l.ranks.first().map_or(1, |r| {
            crate::formats::megatron::legacy::model_dicts(&r.file.pickle).len() as u64
        }),
        rank_files: l.ranks.iter().map(|r| r.path.clone()).collect(),
        padded_vocab_size: rows,
        true_vocab_size: args.and_then(|a| a.vocab_size),
        padding_rule_holds: args.and_then(|a| a.make_vocab_size_divisible_by).map(|d| {
            d.checked_mul(l.tp)
                .is_some_and(|k| k > 0 && rows.is_multiple_of(k))
        }),
        vocab_tensors: l
            .vocab
            .iter()
            .map(|v| VocabTensor {
                name: v.name,
                role: v.role,
                pipeline_rank: v.pp,
                dtype: v.dtype.torch_name().to_string(),
                shape: v.shape.clone(),
                tp_rows: v.rows.clone(),
            })
            .collect(),
        optimizer: Optimizer {
            form: l.optimizer.form,
            states: l.optimizer.states.clone(),
            groups: l.optimizer.groups.clone(),
            distrib_optim: l.optimizer.distrib_optim.clone(),
        },
        args: args.map(ArgsReport::from),
    }
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

/// What the text says of `n` model chunks per rank file: nothing for one.
fn chunks_text(n: u64) -> String {
    match n {
        1 => String::new(),
        n => format!(
            ", {n} model chunks per rank (model0..model{}: virtual pipeline stages)",
            n - 1
        ),
    }
}

fn render(r: &Report) -> String {
    let mut s = String::new();
    let a = r.args.as_ref();
    let _ = writeln!(
        s,
        "{}: {LAYOUT}, iteration {} in {}",
        r.path.display(),
        or_unknown(r.iteration),
        r.iteration_dir.display()
    );
    let _ = writeln!(
        s,
        "parallel: tensor {} (rank folders; args {}), pipeline {} (rank folders; args {}){}; {} rank files",
        r.tensor_parallel,
        or_unknown(a.and_then(|a| a.tensor_model_parallel_size)),
        r.pipeline_parallel,
        or_unknown(a.and_then(|a| a.pipeline_model_parallel_size)),
        chunks_text(r.model_chunks),
        r.rank_files.len()
    );
    let padded = [
        Some(r.padded_vocab_size),
        a.and_then(|a| a.padded_vocab_size),
    ];
    let rule = (
        a.and_then(|a| a.make_vocab_size_divisible_by),
        r.padding_rule_holds,
    );
    vocabulary_line(&mut s, padded, r.true_vocab_size, rule);
    for t in &r.vocab_tensors {
        let rows: Vec<String> = t
            .tp_rows
            .iter()
            .enumerate()
            .map(|(i, [a, b])| format!("tp {i}: rows {a}..{b}"))
            .collect();
        let stage = t
            .pipeline_rank
            .map_or_else(String::new, |p| format!(" [pipeline rank {p}]"));
        let _ = writeln!(
            s,
            "  {} ({}){stage} {} {:?}: {}",
            t.name,
            t.role,
            t.dtype,
            t.shape,
            rows.join(", ")
        );
    }
    let o = &r.optimizer;
    match o.form {
        // Its param groups list no parameters and hold no per-parameter state: that is in
        // distrib_optim.pt, named below.
        Some(form) if o.distrib_optim.is_some() => {
            let _ = writeln!(s, "optimizer: {form}");
        }
        Some(form) => {
            let _ = writeln!(
                s,
                "optimizer: {form}; state per parameter: {}; parameter groups of {:?} parameters",
                o.states.join(", "),
                o.groups
            );
        }
        None => s.push_str("optimizer: none in model_optim_rng.pt\n"),
    }
    if let Some(d) = &o.distrib_optim {
        let _ = writeln!(s, "distributed optimizer state: {} (Megatron's distributed optimizer saves its parameter state there)", d.display());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_chunks_of_virtual_pipeline_stages_are_named_and_one_model_says_nothing() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/megatron/legacy_tp2");
        let Ok(crate::formats::Checkpoint::MegatronLegacy(l)) =
            crate::formats::open(&root, &Default::default())
        else {
            panic!("legacy_tp2 is a legacy Megatron save");
        };
        let mut r = report(&l);
        assert_eq!(r.model_chunks, 1, "its rank files hold 'model'");
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("model_chunks").is_none());
        assert!(render(&r).contains("(rank folders; args 1); 2 rank files"));
        r.model_chunks = 3;
        let text = render(&r);
        assert!(
            text.contains("args 1), 3 model chunks per rank (model0..model2: virtual pipeline"),
            "{text}"
        );
        assert_eq!(serde_json::to_value(&r).unwrap()["model_chunks"], 3);
    }
}
