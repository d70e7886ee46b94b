//! Which row each id of the new tokenizer takes: the base's row of the same token (its text
//! compared as bytes, whatever each tokenizer's form: `Ġ`, `▁`, `<0xNN>`), else the base's row
//! of the same special role (NEW's `eos_token` takes the base's eos row), else a row the init
//! makes. Base rows no new id takes are dropped.

use crate::error::{Error, Result};
use crate::rowmap::RowMap;
use crate::tokenizer::base::Base;
use crate::tokenizer::surface::{by_id, by_surface, form, surface};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// Special roles by name (`eos`), each its token id.
pub(super) type Roles = HashMap<String, u64>;

/// The tokenizers being matched, with the special roles each names.
pub(super) struct Sides<'a> {
    pub base: &'a Base,
    pub base_roles: &'a Roles,
    pub new: &'a Base,
    pub new_roles: &'a Roles,
    /// NEW's file, for messages.
    pub new_path: &'a Path,
    /// A donor makes the rows (a NEW that shares nothing with the base is then possible).
    pub donor: bool,
}

/// A token and its id, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct Token {
    pub id: u64,
    pub token: String,
}

/// A new id that takes the base's row of the same special role.
#[derive(Debug, Clone, Serialize)]
pub struct RoleMatch {
    pub role: String,
    pub new: Token,
    pub base: Token,
}

/// The row map and what it says.
#[derive(Debug, Clone, Serialize)]
pub struct Matching {
    /// New id → base row; None: the init makes it.
    #[serde(skip)]
    pub ids: Vec<Option<u64>>,
    /// Rows of the new matrices (NEW's size, rounded up to `--pad-to-multiple-of`).
    pub new_rows: u64,
    /// NEW's size (its largest id + 1).
    pub new_tokens: u64,
    /// New ids whose token the base has (same text).
    pub same_token: u64,
    /// New ids that take the base's row of their special role.
    pub same_role: Vec<RoleMatch>,
    /// New ids whose rows the init makes (tokens the base lacks, ids NEW has no token for), in
    /// new-id order: the init's rows are theirs, then the padding rows'.
    #[serde(skip)]
    pub made: Vec<Token>,
    /// How many of them.
    pub made_rows: u64,
    /// Padding rows past NEW's size (also made by the init).
    pub padding_rows: u64,
    /// Base tokens (with a row) NEW lacks: their trained rows are dropped.
    pub dropped_tokens: u64,
    /// The first of them.
    pub dropped_first: Vec<Token>,
    /// Base rows past the base tokenizer's size (padding), dropped.
    pub dropped_padding_rows: u64,
}

impl Matching {
    /// The row map for matrices of `old_rows` rows.
    pub fn row_map(&self, old_rows: u64, source: &Path) -> Result<RowMap> {
        RowMap::from_ids(&self.ids, old_rows, source)
    }
}

/// Match every id of NEW against the base's `old_rows` rows.
pub(super) fn match_tokens(s: &Sides<'_>, old_rows: u64, pad_to: Option<u64>) -> Result<Matching> {
    let new_size = s.new.size();
    let new_rows = match pad_to {
        Some(0) => {
            return Err(Error::arg(
                "--pad-to-multiple-of",
                "--pad-to-multiple-of must be at least 1",
            ))
        }
        Some(m) => new_size.div_ceil(m) * m,
        None => new_size,
    };
    let base_ids: HashMap<Vec<u8>, u32> = by_surface(s.base)
        .into_iter()
        .filter(|(_, id)| u64::from(*id) < old_rows)
        .collect();
    let (new_names, base_names) = (by_id(s.new), by_id(s.base));
    let new_form = form(s.new);
    let role_of_new: HashMap<u64, &str> = s
        .new_roles
        .iter()
        .map(|(r, id)| (*id, r.as_str()))
        .collect();
    let name = |names: &HashMap<u32, String>, id: u64| {
        u32::try_from(id)
            .ok()
            .and_then(|i| names.get(&i).cloned())
            .unwrap_or_else(|| format!("<id {id}>"))
    };
    let mut m = Matching {
        ids: Vec::with_capacity(new_rows as usize),
        new_rows,
        new_tokens: new_size,
        same_token: 0,
        same_role: Vec::new(),
        made: Vec::new(),
        made_rows: 0,
        padding_rows: new_rows - new_size,
        dropped_tokens: 0,
        dropped_first: Vec::new(),
        dropped_padding_rows: 0,
    };
    for id in 0..new_size {
        let tok = u32::try_from(id).ok().and_then(|i| new_names.get(&i));
        let same = tok.and_then(|t| base_ids.get(&surface(new_form, t)));
        let role = role_of_new.get(&id).and_then(|r| {
            let b = *s.base_roles.get(*r)?;
            (b < old_rows).then_some((*r, b))
        });
        let row = match (same, role) {
            (Some(&b), _) => {
                m.same_token += 1;
                Some(u64::from(b))
            }
            (None, Some((r, b))) => {
                m.same_role.push(RoleMatch {
                    role: r.to_string(),
                    new: Token {
                        id,
                        token: name(&new_names, id),
                    },
                    base: Token {
                        id: b,
                        token: name(&base_names, b),
                    },
                });
                Some(b)
            }
            (None, None) => {
                m.made.push(Token {
                    id,
                    token: name(&new_names, id),
                });
                None
            }
        };
        m.ids.push(row);
    }
    m.ids.resize(new_rows as usize, None);
    m.made_rows = m.made.len() as u64 + m.padding_rows;
    if m.same_token == 0 && m.same_role.is_empty() && !s.donor {
        return Err(Error::format(
            s.new_path,
            "shares no token with the model's tokenizer: every row would be made up from nothing; check --tokenizer (and --base-tokenizer), or give a --donor whose tokenizer has the new tokens (--init omp or knn)",
        ));
    }
    let map = m.row_map(old_rows, s.new_path)?;
    dropped(&mut m, &map, s.base.size(), &base_names);
    Ok(m)
}

/// Base rows no new id takes (the row map's own `dropped`): tokens (counted, the first listed)
/// and padding rows.
fn dropped(m: &mut Matching, map: &RowMap, base_size: u64, names: &HashMap<u32, String>) {
    for r in map.dropped() {
        let tokens = r.start.min(base_size)..r.end.min(base_size);
        m.dropped_padding_rows += (r.end - r.start) - (tokens.end - tokens.start);
        m.dropped_tokens += tokens.end - tokens.start;
        for b in tokens.take(10 - m.dropped_first.len().min(10)) {
            let token = u32::try_from(b)
                .ok()
                .and_then(|i| names.get(&i).cloned())
                .unwrap_or_else(|| format!("<id {b}>"));
            m.dropped_first.push(Token { id: b, token });
        }
    }
}
