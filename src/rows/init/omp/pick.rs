//! Each target's next atom: the one of largest |α₀ − G_Λ·x| not yet selected (the first on a
//! tie); None when every correlation is 0 and for targets already done. Every value is α₀ minus
//! its target's atoms' terms in selection order, in f32, whichever way it is computed here.

use super::gram::{Gram, ROWS};
use super::pursuit::Pursuit;
use rayon::prelude::*;

/// Values one target works through at a time when reading Gram columns ([`pick_columns`]).
const CHUNK: usize = 4096;
// A row within a panel is kept as a u8 in [`Work::selected`].
const _: () = assert!(ROWS <= 256);

/// The picks of every target of a block: from panels when the whole Gram is held (a0 as
/// [`super::gram::products_panels`] lays it out), else from columns (a0 row-major).
pub(super) fn pick(ps: &[Pursuit], a0: &[f32], gram: &Gram) -> Vec<Option<usize>> {
    if gram.panels {
        pick_panels(ps, a0, gram)
    } else {
        pick_columns(ps, a0, gram)
    }
}

/// One target at a time, streaming its t Gram columns past [`CHUNK`] running values.
fn pick_columns(ps: &[Pursuit], a0: &[f32], gram: &Gram) -> Vec<Option<usize>> {
    let s = gram.s;
    ps.par_iter()
        .zip(a0.par_chunks(s.max(1)))
        .map_init(
            || vec![0f32; s],
            |c, (p, a0)| {
                if p.done {
                    return None;
                }
                let cols: Vec<(&[f32], f32)> = p
                    .atoms
                    .iter()
                    .zip(&p.x)
                    .map(|(&a, &x)| (gram.col(a), x as f32))
                    .collect();
                for (i, (cs, src)) in c.chunks_mut(CHUNK).zip(a0.chunks(CHUNK)).enumerate() {
                    cs.copy_from_slice(src);
                    let at = i * CHUNK;
                    for (g, x) in &cols {
                        for (ci, gi) in cs.iter_mut().zip(&g[at..at + src.len()]) {
                            *ci -= x * gi;
                        }
                    }
                }
                for &a in &p.atoms {
                    c[a] = 0.0;
                }
                largest(c, 0).1
            },
        )
        .collect()
}

/// Values [`largest`] takes the maximum of in one branch-free pass before looking for its row.
const RUN: usize = 64;

/// The first largest |value| above 0 in `c` (rows from `at`), as (|value|, row); NaNs are
/// passed over. By runs of [`RUN`] values: each run's largest |value| with no branch (16 lanes,
/// so it vectorises), and only in a run that beats every earlier run the first row holding it —
/// the row a scan value by value keeping the first strictly larger |value| finds.
pub(super) fn largest(c: &[f32], at: usize) -> (f32, Option<usize>) {
    let (mut best, mut row) = (0f32, None);
    for (r, run) in c.chunks(RUN).enumerate() {
        let mut lanes = [0f32; 16];
        let lanes_run = run.chunks_exact(16);
        let rest = lanes_run.remainder();
        for vs in lanes_run {
            for (m, v) in lanes.iter_mut().zip(vs) {
                let a = v.abs();
                *m = if a > *m { a } else { *m };
            }
        }
        let more = |m: f32, a: f32| if a > m { a } else { m };
        let top = rest
            .iter()
            .fold(lanes.iter().fold(0f32, |m, &a| more(m, a)), |m, v| {
                more(m, v.abs())
            });
        if top > best {
            best = top;
            row = run
                .iter()
                .position(|v| v.abs() == top)
                .map(|i| at + r * RUN + i);
        }
    }
    (best, row)
}

/// Every target together, one panel of [`ROWS`] rows at a time: the panel (S × ROWS floats, a
/// few MiB, in one piece) stays in the cache while every target reads the entries of its atoms
/// from it, so an entry read from memory once serves every target that selected that atom.
/// Panels are shared among the threads in runs; the runs' results are joined in row order.
fn pick_panels(ps: &[Pursuit], a0: &[f32], gram: &Gram) -> Vec<Option<usize>> {
    let panels = gram.sp() / ROWS;
    let work = Work::new(ps, panels);
    let run = panels.div_ceil(4 * rayon::current_num_threads()).max(1);
    let starts: Vec<usize> = (0..panels).step_by(run).collect();
    let parts: Vec<Vec<(f32, Option<usize>)>> = starts
        .into_par_iter()
        .map(|c0| panel_run(&work, a0, gram, c0..(c0 + run).min(panels)))
        .collect();
    let mut out = vec![None; ps.len()];
    for (i, &b) in work.active.iter().enumerate() {
        let mut best = (0f32, None);
        for part in &parts {
            if part[i].0 > best.0 {
                best = part[i];
            }
        }
        out[b] = best.1;
    }
    out
}

/// What the panels' pass reads for each target, laid out in one piece each (the targets'
/// own vectors lie all over the heap, and reading them for every panel missed the cache).
struct Work {
    /// The targets not done, in order.
    active: Vec<usize>,
    /// Their (atom, coefficient) pairs in selection order, one after the other.
    terms: Vec<(u32, f32)>,
    /// Where each active target's terms start in `terms` (and one past the last).
    starts: Vec<usize>,
    /// For each panel, (active target, row within the panel) of every selected atom in it,
    /// in target order: those values are left out of the pick.
    selected: Vec<Vec<(u32, u8)>>,
}

impl Work {
    fn new(ps: &[Pursuit], panels: usize) -> Work {
        let active: Vec<usize> = (0..ps.len()).filter(|&b| !ps[b].done).collect();
        let (mut terms, mut starts) = (Vec::new(), vec![0]);
        let mut selected = vec![Vec::new(); panels];
        for (i, &b) in active.iter().enumerate() {
            let p = &ps[b];
            for (&a, &x) in p.atoms.iter().zip(&p.x) {
                terms.push((a as u32, x as f32));
                selected[a / ROWS].push((i as u32, (a % ROWS) as u8));
            }
            starts.push(terms.len());
        }
        Work {
            active,
            terms,
            starts,
            selected,
        }
    }
}

/// Every active target's largest |value| (and its row) in the panels `run`. Compiled for AVX
/// where the CPU has it (the same multiplications and subtractions, eight at a time: the values
/// do not change).
fn panel_run(
    work: &Work,
    a0: &[f32],
    gram: &Gram,
    run: std::ops::Range<usize>,
) -> Vec<(f32, Option<usize>)> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX.
        return unsafe { panel_run_avx(work, a0, gram, run) };
    }
    panel_run_body(work, a0, gram, run)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn panel_run_avx(
    work: &Work,
    a0: &[f32],
    gram: &Gram,
    run: std::ops::Range<usize>,
) -> Vec<(f32, Option<usize>)> {
    panel_run_body(work, a0, gram, run)
}

#[inline(always)]
fn panel_run_body(
    work: &Work,
    a0: &[f32],
    gram: &Gram,
    run: std::ops::Range<usize>,
) -> Vec<(f32, Option<usize>)> {
    let (n, sp) = (work.starts.len() - 1, gram.sp());
    let all = a0.len() / sp.max(1); // every target of the block, done or not
    let mut best = vec![(0f32, None); n];
    for c in run {
        let panel = &gram.data[c * sp * ROWS..(c + 1) * sp * ROWS];
        let a0c = &a0[c * all * ROWS..(c + 1) * all * ROWS];
        let (at, mut skip) = (c * ROWS, work.selected[c].iter().peekable());
        for (i, &b) in work.active.iter().enumerate() {
            if let Some(next) = work.starts.get(i + AHEAD..i + AHEAD + 2) {
                prefetch(panel, &work.terms[next[0]..next[1]]);
            }
            let Ok(src) = <&[f32; ROWS]>::try_from(&a0c[b * ROWS..(b + 1) * ROWS]) else {
                continue; // Sizes agree by construction.
            };
            let mut v = *src;
            subtract(
                &mut v,
                &work.terms[work.starts[i]..work.starts[i + 1]],
                panel,
            );
            while let Some(&(_, r)) = skip.next_if(|&&(j, _)| j as usize == i) {
                v[usize::from(r)] = 0.0;
            }
            let here = largest(&v, at);
            if here.0 > best[i].0 {
                best[i] = here;
            }
        }
    }
    best
}

/// How many targets ahead [`panel_run_body`] asks for the panel entries it will read.
const AHEAD: usize = 3;

/// Ask the CPU to bring `terms`' entries of `panel` into the cache (a hint; reads nothing).
#[inline(always)]
fn prefetch(panel: &[f32], terms: &[(u32, f32)]) {
    #[cfg(target_arch = "x86_64")]
    for &(a, _) in terms {
        if let Some(g) = panel.get(a as usize * ROWS) {
            // SAFETY: a prefetch hint on an address inside `panel`; it never faults.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    (g as *const f32).cast(),
                );
            }
        }
    }
}

/// v −= x·(atom's ROWS entries of the panel), for each selected atom in order, on a fixed-size
/// block the compiler keeps in registers.
#[inline(always)]
fn subtract(v: &mut [f32; ROWS], terms: &[(u32, f32)], panel: &[f32]) {
    for &(a, x) in terms {
        let a = a as usize;
        if let Ok(g) = <&[f32; ROWS]>::try_from(&panel[a * ROWS..(a + 1) * ROWS]) {
            for i in 0..ROWS {
                v[i] -= x * g[i];
            }
        }
    }
}
