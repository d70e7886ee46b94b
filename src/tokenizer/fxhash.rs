//! A fast hash for the tokenizer maps a merge builds over a whole vocabulary (262k tokens, as many
//! merges): FxHash, the multiply-rotate hash rustc uses for its own tables. Keys are a tokenizer's
//! strings on the user's own machine, so the flooding resistance of std's SipHash buys nothing
//! and costs a third of a big merge's hashing.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed with [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// A `HashSet` hashed with [`FxHasher`].
pub type FxHashSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

/// A map with room for `n` entries.
pub fn map_with_capacity<K, V>(n: usize) -> FxHashMap<K, V> {
    FxHashMap::with_capacity_and_hasher(n, BuildHasherDefault::default())
}

/// FxHash: each word is mixed in by a rotate, an xor and a multiply.
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // Byte by byte (a copy of a short slice is a call), the length in the top bits:
            // "a" and "a\0" differ.
            let w = rest
                .iter()
                .enumerate()
                .fold(0u64, |w, (i, &b)| w | (u64::from(b) << (8 * i)));
            self.add(w ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_that_differ_hash_apart_and_maps_find_them() {
        let h = |s: &str| {
            let mut x = FxHasher::default();
            x.write(s.as_bytes());
            x.finish()
        };
        assert_ne!(h("a"), h("a\0"));
        assert_ne!(h("abcdefgh"), h("abcdefgh\0"));
        let mut m: FxHashMap<String, usize> = map_with_capacity(4);
        for (i, w) in ["Ġthe", "the", "Ġ", "ĠtheĠ"].iter().enumerate() {
            m.insert((*w).to_string(), i);
        }
        assert_eq!(m.get("the"), Some(&1));
        assert_eq!(m.get("Ġthe"), Some(&0));
        assert_eq!(m.get("th"), None);
    }
}
