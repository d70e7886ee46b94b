//! What an optimizer's moments say about whose they are, when neither stored names nor positions
//! do (a Trainer folder: model.safetensors sorts the names, Trainer numbers its groups in module
//! order). An input embedding's row gets a gradient only where its id is an input, so for an id
//! never seen as input every moment of that row stays exactly zero (AdamW's, Adam's without L2,
//! Adagrad's `sum` from 0). An output head's softmax gives every row a gradient at every predicted
//! position, so none of its rows stays zero. Of an embedding and a head of one shape, the index
//! whose moments are exactly zero in some rows while the other's are in none is the embedding's;
//! both or neither tells nothing, and the caller says so instead of guessing.

use super::state::{state_path, state_tensors, FoundOpt};
use crate::formats::torch::TorchFile;

/// Of parameter `idx` of `o`, the state tensors shaped like `shape` but perhaps for the rows
/// (moments left at another vocabulary size, seed 001): the rows in which every one of them is
/// exactly zero (±0.0), their rows and their names; none when it has no such floating tensor or
/// one cannot be read.
struct ZeroRows {
    zero: u64,
    rows: u64,
    names: Vec<String>,
}

fn zero_rows(t: &TorchFile, o: &FoundOpt, idx: u64, shape: &[u64]) -> Option<ZeroRows> {
    let mut zero: Vec<bool> = Vec::new();
    let mut names = Vec::new();
    for (sname, s) in state_tensors(&t.pickle, o.id, idx) {
        let alike = !s.is_empty() && s.len() == shape.len() && s[1..] == shape[1..];
        let rows = usize::try_from(s.first().copied().unwrap_or(0)).unwrap_or(0);
        if !alike || rows == 0 || (!names.is_empty() && rows != zero.len()) {
            continue;
        }
        let path = state_path(&o.key, idx, &sname);
        let x = t.tensor_refs().find(|x| x.name == path)?;
        if !x.dtype.is_convertible_float() {
            return None;
        }
        let bytes = x.try_bytes().ok()?;
        let esize = usize::try_from(x.dtype.bits() / 8).ok()?;
        let row = bytes.len() / rows;
        if names.is_empty() {
            zero = vec![true; rows];
        }
        for (r, z) in zero.iter_mut().enumerate().filter(|(_, z)| **z) {
            *z = bytes
                .get(r * row..(r + 1) * row)
                .is_some_and(|b| b.chunks_exact(esize).all(is_zero));
        }
        names.push(sname);
    }
    (!names.is_empty()).then(|| ZeroRows {
        zero: zero.iter().filter(|&&z| z).count() as u64,
        rows: zero.len() as u64,
        names,
    })
}

/// A little-endian float element equal to zero: every bit but the sign's clear.
fn is_zero(e: &[u8]) -> bool {
    e.split_last()
        .is_none_or(|(hi, lo)| hi & 0x7f == 0 && lo.iter().all(|&b| b == 0))
}

/// Which of two indices holding an embedding's and a head's state of one shape is the
/// embedding's, by the rows their moments never left at zero.
pub(crate) struct Verdict {
    /// The position in the pair of the embedding's index (the other is the head's).
    pub embedding: usize,
    /// The evidence, in words.
    pub why: String,
}

/// The verdict on `pair` (each `(optimizer, index)`, shown as `show` names them), or why the
/// moments do not tell.
pub(crate) fn embedding_of(
    t: &TorchFile,
    opts: &[FoundOpt],
    pair: [(usize, u64); 2],
    shape: &[u64],
    show: &dyn Fn((usize, u64)) -> String,
) -> Result<Verdict, String> {
    let read = |(k, i): (usize, u64)| {
        opts.get(k)
            .and_then(|o| zero_rows(t, o, i, shape))
            .ok_or_else(|| format!("{} has no floating moment of that shape", show((k, i))))
    };
    let (a, b) = (read(pair[0])?, read(pair[1])?);
    let (embedding, z) = match (a.zero, b.zero) {
        (n, 0) if n > 0 => (0, a),
        (0, n) if n > 0 => (1, b),
        (0, 0) => return Err("no moment row is exactly zero in either".into()),
        _ => return Err("both have moment rows exactly zero".into()),
    };
    Ok(Verdict {
        embedding,
        why: format!(
            "{}'s {} are exactly zero in {} of {} rows (ids never seen as input: an embedding's), {}'s in none (an output head's softmax gives every row a gradient)",
            show(pair[embedding]),
            z.names.join(" and "),
            z.zero,
            z.rows,
            show(pair[1 - embedding]),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::is_zero;

    #[test]
    fn a_moment_element_is_zero_at_either_sign_and_at_no_subnormal() {
        for (z, want) in [
            (0.0f32, true),
            (-0.0, true),
            (f32::from_bits(1), false),
            (1e-30, false),
        ] {
            assert_eq!(is_zero(&z.to_le_bytes()), want, "{z:e}");
        }
        // bf16 -0.0 and its smallest subnormal; f64 -0.0.
        assert!(is_zero(&[0x00, 0x80]));
        assert!(!is_zero(&[0x01, 0x00]));
        assert!(is_zero(&(-0.0f64).to_le_bytes()));
    }
}
