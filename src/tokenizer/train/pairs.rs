//! The next pair to learn, without counting every pair again at each step: each distinct word as
//! piece ids with its count, every adjacent pair's count (weighted by the words' counts) kept up
//! to date as the words holding a joined pair are split again, and a heap of pairs by count.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use super::words::Words;

type Pair = (u32, u32);

pub(super) struct Learner<'w> {
    names: Vec<String>,
    ids: HashMap<String, u32>,
    /// Each distinct word: its text, pieces and count.
    words: Vec<(&'w str, Vec<u32>, usize)>,
    count: HashMap<Pair, usize>,
    /// Words a pair may occur in (repeats and stale entries allowed: checked when used).
    at: HashMap<Pair, Vec<u32>>,
    /// Pairs by count, then the smaller pair first. An entry's count is never below its pair's
    /// count: counts that grow are pushed again, stale entries are put back when popped.
    heap: BinaryHeap<(usize, Reverse<(String, String)>)>,
}

impl<'w> Learner<'w> {
    /// `words` split into pieces by `split`.
    pub(super) fn new(words: &'w Words, split: impl Fn(&str) -> Vec<String>) -> Learner<'w> {
        let mut l = Learner {
            names: Vec::new(),
            ids: HashMap::new(),
            words: Vec::new(),
            count: HashMap::new(),
            at: HashMap::new(),
            heap: BinaryHeap::new(),
        };
        for (w, &n) in words {
            let pieces: Vec<u32> = split(w).iter().map(|p| l.id(p)).collect();
            let i = l.words.len() as u32;
            for x in pieces.windows(2) {
                *l.count.entry((x[0], x[1])).or_default() += n;
                l.at.entry((x[0], x[1])).or_default().push(i);
            }
            l.words.push((w.as_str(), pieces, n));
        }
        let heap = l.count.iter().map(|(&p, &n)| (n, Reverse(l.names(p))));
        l.heap = heap.collect();
        l
    }

    fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.ids.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), i);
        i
    }

    fn names(&self, (a, b): Pair) -> (String, String) {
        (
            self.names[a as usize].clone(),
            self.names[b as usize].clone(),
        )
    }

    /// Each piece's count over the words as first split (weighted by the words' counts).
    pub(super) fn piece_counts(&self) -> Vec<(String, usize)> {
        let mut n = vec![0usize; self.names.len()];
        for (_, pieces, c) in &self.words {
            for &p in pieces {
                n[p as usize] += c;
            }
        }
        self.names.iter().cloned().zip(n).collect()
    }

    /// The most frequent pair seen at least twice that `allowed` lets through, the smaller pair
    /// on a tie; None when none is left. A pair `allowed` refuses is dropped (it comes back only
    /// if its count grows).
    pub(super) fn next(
        &mut self,
        allowed: impl Fn(&str, &str) -> bool,
    ) -> Option<(String, String)> {
        while let Some((n, Reverse((a, b)))) = self.heap.pop() {
            if n < 2 {
                return None;
            }
            let now = match (self.ids.get(&a), self.ids.get(&b)) {
                (Some(&ia), Some(&ib)) => self.count.get(&(ia, ib)).copied().unwrap_or(0),
                _ => 0,
            };
            if now != n {
                if now > 0 {
                    self.heap.push((now, Reverse((a, b))));
                }
                continue;
            }
            if allowed(&a, &b) {
                return Some((a, b));
            }
        }
        None
    }

    /// Split again, with `split` (the word, its pieces now), every word holding `a`, `b`
    /// side by side, and keep the counts.
    pub(super) fn rejoin(
        &mut self,
        a: &str,
        b: &str,
        split: impl Fn(&str, &[String]) -> Vec<String>,
    ) {
        let (Some(&ia), Some(&ib)) = (self.ids.get(a), self.ids.get(b)) else {
            return;
        };
        let p = (ia, ib);
        let mut ws = self.at.remove(&p).unwrap_or_default();
        ws.sort_unstable();
        ws.dedup();
        let mut grown = BTreeSet::new();
        for w in ws {
            let Some((text, old, n)) = self.words.get(w as usize).cloned() else {
                continue;
            };
            if !old.windows(2).any(|x| (x[0], x[1]) == p) {
                continue;
            }
            let names: Vec<String> = old
                .iter()
                .map(|&i| self.names[i as usize].clone())
                .collect();
            let new: Vec<u32> = split(text, &names).iter().map(|s| self.id(s)).collect();
            let mut delta: HashMap<Pair, i64> = HashMap::new();
            for x in old.windows(2) {
                *delta.entry((x[0], x[1])).or_default() -= n as i64;
            }
            for x in new.windows(2) {
                *delta.entry((x[0], x[1])).or_default() += n as i64;
            }
            for (q, d) in delta {
                let c = self.count.entry(q).or_default();
                *c = (*c as i64 + d).max(0) as usize;
                if d > 0 {
                    self.at.entry(q).or_default().push(w);
                    grown.insert(q);
                }
            }
            if new.windows(2).any(|x| (x[0], x[1]) == p) {
                self.at.entry(p).or_default().push(w);
            }
            self.words[w as usize].1 = new;
        }
        for q in grown {
            let n = self.count.get(&q).copied().unwrap_or(0);
            self.heap.push((n, Reverse(self.names(q))));
        }
    }
}
