//! Where DeepSpeed puts each parameter's elements: the stage-1/2 and stage-3 partition sizes and
//! the pieces of the flat per-rank partitions that hold each parameter (DeepSpeed's
//! `stage_1_and_2.py`, `stage3.py`, `zero_to_fp32.py`).

use serde::Serialize;

/// Alignment of stage-1/2 groups, in elements per rank: `nccl_start_alignment_factor`.
pub const STAGE12_ALIGN: u64 = 2;

/// A run of one parameter's elements in one rank's flat tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Piece {
    pub rank: usize,
    /// Index of the flat tensor (group for stages 1/2, sub-group for stage 3).
    pub flat: usize,
    /// Element offset in that flat tensor.
    pub start: u64,
    pub len: u64,
}

/// A trainable parameter: its full shape and where its master weights and moments are.
#[derive(Debug, Clone, Serialize)]
pub struct Param {
    pub name: String,
    pub shape: Vec<u64>,
    pub group: usize,
    /// In order: concatenated they are the parameter's elements.
    #[serde(skip)]
    pub pieces: Vec<Piece>,
}

impl Param {
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// Stage-1/2 sizes of a group of `numel` elements: (padded total, partition per rank).
pub fn stage12_partition(numel: u64, world: u64) -> (u64, u64) {
    let align = STAGE12_ALIGN * world;
    let total = numel.div_ceil(align) * align;
    (total, total / world)
}

/// Stage-3 part of a parameter of `numel` elements per rank.
pub fn stage3_partition(numel: u64, world: u64) -> u64 {
    numel.div_ceil(world)
}

/// The stage-1/2 pieces of each parameter; checks each rank's lean length.
pub fn layout_stage12(
    shapes: &[Vec<(String, Vec<u64>)>],
    world: usize,
    lens: &[Vec<u64>],
) -> std::result::Result<Vec<Param>, String> {
    let w = world as u64;
    if lens.iter().any(|l| l.len() != shapes.len()) {
        return Err(format!(
            "param_shapes has {} groups but the optimizer files hold {} flat groups",
            shapes.len(),
            lens[0].len()
        ));
    }
    let mut out = Vec::new();
    for (g, group) in shapes.iter().enumerate() {
        let numel: u64 = group.iter().map(|(_, s)| s.iter().product::<u64>()).sum();
        let (_, part) = stage12_partition(numel, w);
        for (r, l) in lens.iter().enumerate() {
            let lean = numel.saturating_sub(r as u64 * part).min(part);
            if l[g] != lean {
                return Err(format!(
                    "rank {r}'s fp32 partition of group {g} holds {} elements; {numel} parameters over {world} ranks give {lean}: the world size or the shapes do not match",
                    l[g]
                ));
            }
        }
        let mut at = 0u64;
        for (name, shape) in group {
            let n: u64 = shape.iter().product();
            let mut pieces = Vec::new();
            let mut pos = at;
            while pos < at + n {
                let rank = (pos / part) as usize;
                let start = pos % part;
                let len = (part - start).min(at + n - pos);
                pieces.push(Piece {
                    rank,
                    flat: g,
                    start,
                    len,
                });
                pos += len;
            }
            out.push(Param {
                name: name.clone(),
                shape: shape.clone(),
                group: g,
                pieces,
            });
            at += n;
        }
    }
    Ok(out)
}

/// The stage-3 pieces of each parameter over each rank's concatenated flat groups.
pub fn layout_stage3(
    shapes: &[Vec<(String, Vec<u64>)>],
    world: usize,
    lens: &[Vec<u64>],
) -> std::result::Result<Vec<Param>, String> {
    let w = world as u64;
    let mut out = Vec::new();
    let mut offset = 0u64;
    for (g, group) in shapes.iter().enumerate() {
        for (name, shape) in group {
            let n: u64 = shape.iter().product();
            let part = stage3_partition(n, w);
            let mut pieces = Vec::new();
            for (r, rank_lens) in lens.iter().enumerate().take(world) {
                let take = n.saturating_sub(r as u64 * part).min(part);
                if take == 0 {
                    continue;
                }
                let (flat, start) = locate_flat(rank_lens, offset, part).ok_or_else(|| {
                    format!("parameter '{name}' ({n} elements) lies past the end of rank {r}'s fp32 flat groups: the world size or the shapes do not match")
                })?;
                pieces.push(Piece {
                    rank: r,
                    flat,
                    start,
                    len: take,
                });
            }
            out.push(Param {
                name: name.clone(),
                shape: shape.clone(),
                group: g,
                pieces,
            });
            offset += part;
        }
    }
    for (r, l) in lens.iter().enumerate() {
        let total: u64 = l.iter().sum();
        if total != offset {
            return Err(format!(
                "rank {r}'s fp32 flat groups hold {total} elements; the parameters' parts over {world} ranks need {offset}: the world size or the shapes do not match"
            ));
        }
    }
    Ok(out)
}

/// Which flat tensor holds the range [offset, offset + len) of a rank's concatenation.
fn locate_flat(lens: &[u64], offset: u64, len: u64) -> Option<(usize, u64)> {
    let mut at = 0u64;
    for (k, &l) in lens.iter().enumerate() {
        if offset >= at && offset + len <= at + l {
            return Some((k, offset - at));
        }
        at += l;
    }
    None
}
