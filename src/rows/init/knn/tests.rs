use super::*;
use crate::rng::Rng;
use serde_json::Value;

const METRICS: [(Metric, &str); 2] = [(Metric::Euclidean, "euclidean"), (Metric::Cosine, "cosine")];
const WEIGHTINGS: [(Weighting, &str); 3] = [
    (Weighting::DistanceProportional, "distance_proportional"),
    (Weighting::Barycentric, "barycentric"),
    (Weighting::LeastSquares, "least_squares"),
];

fn every_how() -> impl Iterator<Item = Knn> {
    METRICS.iter().flat_map(|&(metric, _)| {
        WEIGHTINGS
            .iter()
            .map(move |&(weights, _)| Knn { metric, weights })
    })
}

fn rows(data: &[f32], cols: usize) -> Rows<'_> {
    Rows {
        data,
        rows: data.len() / cols,
        cols,
    }
}

fn matrix(v: &Value) -> (Vec<f32>, usize) {
    let rows = v.as_array().unwrap();
    let cols = rows[0].as_array().unwrap().len();
    let data = rows
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    (data, cols)
}

fn random(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n).map(|_| rng.normal() as f32).collect()
}

/// testdata/knn/reference.json (testdata/generate.py, `knn_reference`): numpy's atoms and
/// weights for every metric × weighting, on integer-valued rows with equal rows, targets equal
/// to rows (one of them to two), a target twice a row, and k above the width (least squares and
/// barycentric underdetermined: the least-norm answer). Atoms exactly, weights to 1e-9.
#[test]
fn matches_the_numpy_reference_for_every_metric_and_weighting() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/knn/reference.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in doc["cases"].as_array().unwrap() {
        let (dict, cols) = matrix(&case["dict"]);
        let (targets, _) = matrix(&case["targets"]);
        let k = case["k"].as_u64().unwrap() as usize;
        for (metric, mname) in METRICS {
            for (weights, wname) in WEIGHTINGS {
                let got = knn(
                    rows(&dict, cols),
                    rows(&targets, cols),
                    k,
                    Knn { metric, weights },
                );
                let want = &case["expected"][format!("{mname}/{wname}")];
                let at = |i: usize| format!("{} {mname}/{wname} target {i}", case["name"]);
                for (i, c) in got.iter().enumerate() {
                    let atoms: Vec<usize> = want["atoms"][i]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|a| a.as_u64().unwrap() as usize)
                        .collect();
                    assert_eq!(c.atoms, atoms, "{}", at(i));
                    let coefs = want["coefs"][i].as_array().unwrap();
                    assert_eq!(c.coefs.len(), coefs.len(), "{}", at(i));
                    for (g, w) in c.coefs.iter().zip(coefs) {
                        let w = w.as_f64().unwrap();
                        assert!(
                            (g - w).abs() <= 1e-9,
                            "{}: {:?} vs {coefs:?}",
                            at(i),
                            c.coefs
                        );
                    }
                }
            }
        }
    }
}

/// A target equal to a dictionary row: that row is the first atom. Euclidean distance-
/// proportional gives it weight exactly 1 (mergekit ≈ 1 − Σ 1/(10⁶·dⱼ)), least squares and
/// barycentric 1 to rounding (the exact solution), the others 0; cosine distance-proportional
/// weighs by similarity, so the row gets 1 / Σ similarities, the largest weight (as mergekit).
/// Two equal rows share the weight half and half.
#[test]
fn a_target_equal_to_a_dictionary_row_gets_that_row_with_weight_one() {
    let (s, d, k) = (300, 32, 8);
    let mut rng = Rng::new(46, 1);
    let mut dict = random(s * d, &mut rng);
    dict.copy_within(40 * d..41 * d, 250 * d); // row 250 = row 40
    let mut targets = Vec::new();
    for r in [7, 123, 40] {
        targets.extend_from_slice(&dict[r * d..(r + 1) * d]);
    }
    for how in every_how() {
        let got = knn(rows(&dict, d), rows(&targets, d), k, how);
        for (c, r) in got[..2].iter().zip([7, 123]) {
            assert_eq!(c.atoms[0], r, "{how:?}");
            match (how.metric, how.weights) {
                (Metric::Cosine, Weighting::DistanceProportional) => {
                    assert!(c.coefs[1..].iter().all(|&w| w < c.coefs[0]), "{how:?}");
                    assert!((c.coefs.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{how:?}");
                }
                (Metric::Euclidean, Weighting::DistanceProportional) => {
                    assert_eq!(c.coefs[0], 1.0, "{how:?}");
                    assert!(c.coefs[1..].iter().all(|&w| w == 0.0), "{how:?}");
                }
                _ => {
                    assert!((c.coefs[0] - 1.0).abs() < 1e-9, "{how:?}: {:?}", c.coefs);
                    assert!(c.coefs[1..].iter().all(|w| w.abs() < 1e-9), "{how:?}");
                }
            }
        }
        let twins = &got[2];
        assert_eq!(twins.atoms[..2], [40, 250], "{how:?}");
        if how.weights != Weighting::DistanceProportional || how.metric == Metric::Euclidean {
            for w in &twins.coefs[..2] {
                assert!((w - 0.5).abs() < 1e-9, "{how:?}: {:?}", twins.coefs);
            }
        }
    }
}

/// The brute-force answer: every distance in f64, sorted (ties: the lower row).
fn brute_atoms(dict: Rows, t: &[f32], k: usize, metric: Metric) -> Vec<usize> {
    let tn = dot64(t, t).sqrt();
    let mut all: Vec<(f64, usize)> = (0..dict.rows)
        .map(|j| {
            let d = dict.row(j);
            (distance(metric, t, tn, d, dot64(d, d).sqrt()), j)
        })
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    all.truncate(k);
    all.into_iter().map(|a| a.1).collect()
}

/// 2500 rows (three GEMM column blocks), 213 targets: random ones, some halfway between two
/// rows, and some at the centre c (‖c‖ ≈ 100) of 150 rows c + u (‖u‖ = 1): their distances and
/// angles differ by less than the f32 products resolve (‖t‖² + ‖d‖² − 2·t·d cancels 10⁴ down
/// to 1), so which of them are the k nearest is decided in f64. The atoms are the brute-force
/// f64 ones; the whole answer is bit-identical with 1 or 3 threads and with the targets taken
/// 7 at a time.
#[test]
fn atoms_are_the_exact_nearest_whatever_the_thread_count_or_chunking() {
    let (s, d, k) = (2500, 48, 12);
    let mut rng = Rng::new(46, 2);
    let mut dict = random(s * d, &mut rng);
    let centre: Vec<f32> = random(d, &mut rng).iter().map(|v| 15.0 * v).collect();
    for j in 0..150 {
        let u = random(d, &mut rng);
        let norm = dot64(&u, &u).sqrt() as f32;
        for (c, (x, y)) in centre.iter().zip(&u).enumerate() {
            dict[(1000 + 7 * j) * d + c] = x + y / norm;
        }
    }
    let mut targets = random(100 * d, &mut rng);
    for i in 0..10 {
        targets.extend(centre.iter().map(|x| x + 1e-3 * i as f32));
    }
    for i in 0..103 {
        let (a, b) = (i * 17 % s, i * 29 % s + 1);
        let eps = if i % 2 == 0 { 0.0 } else { 1e-6 };
        targets.extend(
            (0..d).map(|c| 0.5 * (dict[a * d + c] + dict[b.min(s - 1) * d + c]) + eps as f32),
        );
    }
    let (dm, tm) = (rows(&dict, d), rows(&targets, d));
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    for how in every_how() {
        let one = pool(1).install(|| knn(dm, tm, k, how));
        let three = pool(3).install(|| knn(dm, tm, k, how));
        let chunked = pool(3).install(|| knn_chunked(dm, tm, k, how, 7));
        assert!(one == three && one == chunked, "{how:?}");
        if how.weights == Weighting::DistanceProportional {
            for (i, c) in one.iter().enumerate() {
                assert_eq!(
                    c.atoms,
                    brute_atoms(dm, tm.row(i), k, how.metric),
                    "{how:?} {i}"
                );
            }
        }
    }
}

/// k above the rows (clipped), k = 0, a zero target, a zero dictionary, k above the width,
/// equal rows (a singular Gram): no panic, every weight finite.
#[test]
fn degenerate_inputs_give_finite_weights() {
    let d = 6;
    let mut rng = Rng::new(46, 3);
    let mut dict = random(10 * d, &mut rng);
    dict.copy_within(0..d, d); // rows 0 and 1 equal
    let mut targets = random(3 * d, &mut rng);
    targets[..d].fill(0.0);
    let zeros = vec![0f32; 4 * d];
    for how in every_how() {
        for (dict, k) in [(&dict, 50), (&dict, 9), (&zeros, 3)] {
            let got = knn(rows(dict, d), rows(&targets, d), k, how);
            assert_eq!(got.len(), 3);
            for c in &got {
                assert_eq!(c.atoms.len(), k.min(dict.len() / d), "{how:?}");
                assert_eq!(c.coefs.len(), c.atoms.len(), "{how:?}");
                assert!(c.coefs.iter().all(|w| w.is_finite()), "{how:?} {c:?}");
            }
        }
        let none = knn(rows(&dict, d), rows(&targets, d), 0, how);
        assert!(none
            .iter()
            .all(|c| c.atoms.is_empty() && c.coefs.is_empty()));
    }
}

/// mergekit's defaults: Euclidean, distance-proportional, k = 64.
#[test]
fn the_default_is_mergekits() {
    assert_eq!(
        Knn::default(),
        Knn {
            metric: Metric::Euclidean,
            weights: Weighting::DistanceProportional
        }
    );
    assert_eq!(DEFAULT_K, 64);
}
