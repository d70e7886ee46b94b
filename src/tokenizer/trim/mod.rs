//! Pruning a tokenizer to a keep set, every family (knowledge for trim-vocab): what each family
//! keeps beyond the asked tokens so that kept tokens stay reachable and no text newly goes to the
//! unknown token (`rules`), the pruned file in the base's own form (`write`), the corpus check
//! that text tokenizes to the same token strings (`check`), and keep sets from a corpus or from
//! Unicode scripts (`script`).

mod check;
mod pruned;
mod rules;
mod script;
mod write;

pub use check::{check_corpus, corpus_ids, CorpusCheck, CorpusPass, Mismatch};
pub use pruned::{reason, Pruned, PrunedFile};
pub use script::{script_ids, SCRIPTS};

use super::base::{load_base, Base};
use crate::error::{Error, Result};
use std::path::Path;

/// Prune the tokenizer at `base` (a tokenizer.json or a SentencePiece `.model`) to the ids `keep`
/// and what the family needs with them (`rules`): the pruned file, the old → new id map and the
/// tokens kept beyond `keep` (with one of [`reason`]'s words). An id the tokenizer does not have is an [`Error::Arg`] naming
/// `--keep-list`.
pub fn prune(base: &Path, keep: &[u32]) -> Result<Pruned> {
    let b = load_base(base)?;
    let tokens = tokens(&b);
    let kept = rules::kept(&b, &tokens, base, keep)?;
    let map = dense(&kept.kept);
    let file = match &b {
        Base::Hf(t) => PrunedFile::Json(write::json(t, &map).map_err(|e| {
            Error::format(base, format!("cannot write the pruned tokenizer.json: {e}"))
        })?),
        Base::Sp(m) => PrunedFile::Sp(super::sentencepiece::without_pieces(m, &kept.kept)),
    };
    Ok(Pruned {
        file,
        map,
        added: kept.added,
    })
}

/// Each id's token (None: an id no token has), vocab and added tokens alike.
pub(crate) fn tokens(b: &Base) -> Vec<Option<&str>> {
    match b {
        Base::Hf(t) => {
            let n = t.max_id().map_or(0, |m| m as usize + 1);
            let mut out = vec![None; n];
            for a in &t.added {
                out[a.id as usize] = Some(a.content.as_str());
            }
            for (tok, id) in &t.vocab {
                out[*id as usize] = Some(tok.as_str());
            }
            out
        }
        Base::Sp(m) => m.pieces.iter().map(|p| Some(p.piece.as_str())).collect(),
    }
}

/// old id → new id: the kept ids numbered densely in the old order.
fn dense(kept: &[bool]) -> Vec<Option<u32>> {
    let mut next = 0u32;
    kept.iter()
        .map(|&k| {
            k.then(|| {
                next += 1;
                next - 1
            })
        })
        .collect()
}
