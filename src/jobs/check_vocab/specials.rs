//! The special-token check: bos/eos/pad/… ids named by config.json, generation_config.json,
//! tokenizer_config.json and special_tokens_map.json, against the table and each other, with the
//! edit that sets a wrong id to the tokenizer's.

use super::finding::{finding, Finding, Severity};
use super::read::{read_json, Tok};
use crate::error::Result;
use crate::plan::{KeyEdit as Edit, Request as Fix};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::model::config::{token_ids, TOKEN_ID_ROLES as ROLES};

/// Token strings that, when exactly one of them is in the tokenizer, are the role's token.
fn well_known(role: &str) -> &'static [&'static str] {
    match role {
        "bos" => &[
            "<s>",
            "<bos>",
            "<|begin_of_text|>",
            "<|startoftext|>",
            "<|endoftext|>",
            "[CLS]",
        ],
        "eos" => &[
            "</s>",
            "<eos>",
            "<|end_of_text|>",
            "<|endoftext|>",
            "<|im_end|>",
            "<|eot_id|>",
            "[SEP]",
        ],
        "pad" => &["<pad>", "[PAD]", "<|pad|>"],
        "unk" => &["<unk>", "[UNK]", "<|unk|>"],
        "mask" => &["<mask>", "[MASK]"],
        "sep" => &["[SEP]", "<sep>"],
        "cls" => &["[CLS]", "<cls>"],
        _ => &[],
    }
}

/// One role's ids as one file names them.
struct Named {
    file: PathBuf,
    role: &'static str,
    ids: Vec<u64>,
    /// The JSON key holding the ids (`eos_token_id`, `text_config.eos_token_id`) when they are
    /// written as ids; None when the file names a token string (tokenizer_config.json).
    key: Option<String>,
    /// Written as a list (generation_config.json's `eos_token_id: [1, 106]`).
    list: bool,
}

/// Every `<role>_token_id` key of a config-like object.
fn ids_named(file: &Path, obj: &Value, prefix: &str) -> Vec<Named> {
    token_ids(obj)
        .into_iter()
        .map(|(role, key, ids, list)| Named {
            file: file.to_path_buf(),
            role,
            ids,
            key: Some(format!("{prefix}{key}")),
            list,
        })
        .collect()
}

/// The id the tokenizer gives a role's token: the one the tokenizer files name by string, else
/// the one well-known token of that role the tokenizer has; None when that is not one id.
fn role_truth(role: &str, named: &[Named], toks: &[Tok]) -> Option<u64> {
    let mut from_files: Vec<u64> = named
        .iter()
        .filter(|n| n.role == role && n.key.is_none())
        .flat_map(|n| n.ids.iter().copied())
        .collect();
    from_files.sort_unstable();
    from_files.dedup();
    if !from_files.is_empty() {
        return (from_files.len() == 1).then(|| from_files[0]);
    }
    let mut known: Vec<u64> = well_known(role)
        .iter()
        .filter_map(|s| {
            toks.iter()
                .find_map(|t| t.ids.get(*s))
                .map(|&i| u64::from(i))
        })
        .collect();
    known.sort_unstable();
    known.dedup();
    (known.len() == 1).then(|| known[0])
}

/// The edit that puts `truth` where `n` names ids that are wrong (`bad`): the id itself, or, in
/// a list, the bad ids replaced (and `truth` first if the list lacks it).
fn edit_to(n: &Named, truth: u64, bad: &dyn Fn(u64) -> bool) -> Option<Edit> {
    let key = n.key.clone()?;
    let value = if n.list {
        let mut v: Vec<u64> = Vec::new();
        for &i in &n.ids {
            let i = if bad(i) { truth } else { i };
            if !v.contains(&i) {
                v.push(i);
            }
        }
        if !v.contains(&truth) {
            v.insert(0, truth);
        }
        json!(v)
    } else {
        json!(truth)
    };
    Some(Edit {
        file: n.file.clone(),
        key,
        value,
    })
}

/// Every id a file names for a role: `<role>_token_id` keys of config.json (and its
/// text_config) and generation_config.json, and the tokens tokenizer_config.json and
/// special_tokens_map.json name by string, as the tokenizer's ids.
fn named_ids(
    toks: &[Tok],
    (config_path, config): (&Option<PathBuf>, Option<&Value>),
    special_files: &[PathBuf],
) -> Result<Vec<Named>> {
    let ids_of = |s: &str| toks.iter().find_map(|t| t.ids.get(s).copied());
    let mut named: Vec<Named> = Vec::new();
    if let (Some(c), Some(p)) = (config, config_path) {
        named.extend(ids_named(p, c, ""));
        if let Some(tc) = c.get("text_config") {
            named.extend(ids_named(p, tc, "text_config."));
        }
    }
    for f in special_files {
        let v = read_json(f)?;
        if f.ends_with("generation_config.json") {
            named.extend(ids_named(f, &v, ""));
            continue;
        }
        for r in ROLES {
            let s = match v.get(format!("{r}_token")) {
                Some(Value::String(s)) => s.clone(),
                Some(o) => match o.get("content").and_then(Value::as_str) {
                    Some(s) => s.to_string(),
                    None => continue,
                },
                None => continue,
            };
            if let Some(id) = ids_of(&s) {
                named.push(Named {
                    file: f.clone(),
                    role: r,
                    ids: vec![u64::from(id)],
                    key: None,
                    list: false,
                });
            }
        }
    }
    Ok(named)
}

/// An id at or past the rows: the table is too small when the tokenizer has the id (the fix
/// grows it), else the file is wrong and the fix sets it to the tokenizer's id for the role.
fn ids_past_rows(
    named: &[Named],
    toks: &[Tok],
    (rows, target): (u64, u64),
    fix_rows: &dyn Fn(u64) -> Fix,
    findings: &mut Vec<Finding>,
) {
    let needed = toks.iter().map(|t| t.needed).max();
    for n in named {
        let past: Vec<u64> = n.ids.iter().copied().filter(|&i| i >= rows).collect();
        let Some(&id) = past.iter().max() else {
            continue;
        };
        let (file, role) = (n.file.display(), n.role);
        let numbers = json!({"file": n.file, "role": role, "id": id, "embedding_rows": rows});
        if needed.is_some_and(|need| id < need) {
            // The tokenizer has the id: the table is too small.
            findings.push(finding(
                Severity::Error,
                "special-token-ids",
                format!("{file}: {role} token id {id} is not below the embedding's {rows} rows (the tokenizer has it): generation or the loss will index past the table"),
                numbers,
                Some(fix_rows(target.max(id + 1))),
            ));
            continue;
        }
        let past_tok = match needed {
            Some(need) => format!(" and past the tokenizer's {need} ids"),
            None => String::new(),
        };
        let truth = role_truth(role, named, toks).filter(|&t| t < rows.min(target));
        let key = n.key.as_deref().unwrap_or("?");
        let f = match truth.and_then(|t| edit_to(n, t, &|i| i >= rows)) {
            Some(edit) => finding(
                Severity::Error,
                "special-token-ids",
                format!("{file}: {key} {id} is past the embedding's {rows} rows{past_tok}: this id is what is wrong (the tokenizer's {role} token is {})", truth.unwrap_or_default()),
                numbers,
                None,
            )
            .edits(vec![edit]),
            None => finding(
                Severity::Error,
                "special-token-ids",
                format!("{file}: {key} {id} is past the embedding's {rows} rows{past_tok}: this id is what is wrong, and no tokenizer token tells which id the {role} token is: set {key} to it (or remove the key)"),
                numbers,
                None,
            ),
        };
        findings.push(f);
    }
}

/// The same role must name overlapping ids everywhere; where two files disagree, the edits set
/// the one that is wrong to the tokenizer's id.
fn roles_agree(named: &[Named], toks: &[Tok], findings: &mut Vec<Finding>) {
    for r in ROLES {
        let sets: Vec<&Named> = named.iter().filter(|n| n.role == r).collect();
        for (i, a) in sets.iter().enumerate() {
            for b in &sets[i + 1..] {
                if a.ids.iter().any(|x| b.ids.contains(x)) {
                    continue;
                }
                let truth = role_truth(r, named, toks);
                let edits: Vec<Edit> = match truth {
                    Some(t) => [a, b]
                        .iter()
                        .filter(|n| !n.ids.contains(&t))
                        .filter_map(|n| edit_to(n, t, &|i| i != t))
                        .collect(),
                    None => Vec::new(),
                };
                let complete = truth
                    .is_some_and(|t| [a, b].iter().all(|n| n.ids.contains(&t) || n.key.is_some()));
                let msg = format!(
                    "{r} token: {:?} in {} but {:?} in {}{}",
                    a.ids,
                    a.file.display(),
                    b.ids,
                    b.file.display(),
                    match truth {
                        Some(t) => format!("; the tokenizer's {r} token is {t}"),
                        None => String::new(),
                    }
                );
                let numbers = json!({"role": r, "a": {"file": a.file, "ids": a.ids}, "b": {"file": b.file, "ids": b.ids}});
                let f = finding(Severity::Error, "special-token-ids", msg, numbers, None);
                findings.push(if complete && !edits.is_empty() {
                    f.edits(edits)
                } else {
                    f.alternatives(vec![format!(
                        "make {r}_token_id agree in {} and {}: the tokenizer's {r} token id is the truth",
                        a.file.display(),
                        b.file.display()
                    )])
                });
            }
        }
    }
}

/// Special-token ids named by the config, generation config, tokenizer config and special tokens
/// map: each below the rows, and the same role naming the same id everywhere. An id the
/// tokenizer has but the table lacks means the table is too small; an id past the tokenizer's
/// ids too means the file is wrong (a GPT-2 config's 50256 on a 1000-token model), and the fix
/// sets it to the tokenizer's id for that role.
pub(super) fn check_specials(
    toks: &[Tok],
    config: (&Option<PathBuf>, Option<&Value>),
    special_files: &[PathBuf],
    rows_target: (u64, u64),
    fix_rows: &dyn Fn(u64) -> Fix,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    let named = named_ids(toks, config, special_files)?;
    ids_past_rows(&named, toks, rows_target, fix_rows, findings);
    roles_agree(&named, toks, findings);
    Ok(())
}
