//! `make test`'s share of fuzzing: every committed input — the corpora libFuzzer grew
//! (fuzz/corpus/<target>) and the inputs that once crashed, hung or over-allocated
//! (fuzz/regressions/<target>) — replays through its harness without a crash; then each
//! harness gets a short run of random mutations of its corpus (byte flips, cuts, splices;
//! seeded, so a failure repeats). The coverage-guided runs are `make fuzz`'s.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

fn inputs(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(rd) = std::fs::read_dir(root.join(dir).join(name)) else {
            continue;
        };
        for entry in rd {
            let p = entry.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            out.push((p, data));
        }
    }
    out.sort();
    out
}

fn run(name: &str, harness: kioku_fuzz::Harness, data: &[u8]) -> Result<(), String> {
    std::panic::catch_unwind(|| harness(data)).map_err(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("{name}: {msg}")
    })
}

#[test]
fn every_committed_fuzz_input_replays_without_a_crash() {
    for (name, harness) in kioku_fuzz::TARGETS {
        let ins = inputs(name);
        assert!(!ins.is_empty(), "no corpus for fuzz target {name}");
        for (p, data) in &ins {
            if let Err(e) = run(name, *harness, data) {
                panic!("{} crashes the harness: {e}", p.display());
            }
        }
        eprintln!("{name}: {} inputs", ins.len());
    }
}

/// Seconds of mutations per target (KIOKU_FUZZ_SECS; default 1: eight targets, a fixed cost of
/// make test's wall time whatever the machine. The search for new inputs is `make fuzz`'s
/// coverage-guided libFuzzer runs; this is a smoke check that the harnesses hold on inputs
/// near the corpus).
fn budget() -> Duration {
    let s = std::env::var("KIOKU_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(1.0);
    Duration::from_secs_f64(s)
}

fn mutate(rng: &mut impl Rng, corpus: &[(PathBuf, Vec<u8>)]) -> Vec<u8> {
    let mut d = corpus[rng.gen_range(0..corpus.len())].1.clone();
    for _ in 0..rng.gen_range(1..8) {
        match rng.gen_range(0..5) {
            0 if !d.is_empty() => {
                let i = rng.gen_range(0..d.len());
                d[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !d.is_empty() => {
                let i = rng.gen_range(0..d.len());
                d[i] = [0, 0xff, 0x7f, 0x80, b'\n'][rng.gen_range(0..5)];
            }
            2 if !d.is_empty() => d.truncate(rng.gen_range(0..d.len())),
            3 => {
                let other = &corpus[rng.gen_range(0..corpus.len())].1;
                let at = rng.gen_range(0..=d.len());
                let from = rng.gen_range(0..=other.len());
                d.splice(at..at, other[from..].iter().copied().take(64));
            }
            _ => {
                let at = rng.gen_range(0..=d.len());
                let n = rng.gen_range(1..16);
                d.splice(at..at, (0..n).map(|_| rng.gen::<u8>()));
            }
        }
    }
    d
}

#[test]
fn a_short_run_of_mutations_from_each_corpus_finds_no_crash() {
    for (name, harness) in kioku_fuzz::TARGETS {
        let corpus = inputs(name);
        assert!(!corpus.is_empty(), "no corpus for fuzz target {name}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6b696f6b75);
        let t0 = Instant::now();
        let mut n = 0u64;
        while t0.elapsed() < budget() {
            let d = mutate(&mut rng, &corpus);
            if let Err(e) = run(name, *harness, &d) {
                let keep = std::env::temp_dir().join(format!("kioku-fuzz-{name}-crash"));
                std::fs::write(&keep, &d).unwrap();
                panic!(
                    "{e}; the input is in {} — add it to fuzz/regressions/{name}/",
                    keep.display()
                );
            }
            n += 1;
        }
        eprintln!("{name}: {n} mutated inputs");
    }
}
