//! Bad input: warnings and partial results, or a clear error; never a panic.

use gmem_prof_analyzer::{analyze, AnalyzeError, Options};

use crate::util::*;

fn sample_bytes(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("traces/samples").join(name)).unwrap()
}

fn run(data: &[u8]) -> Result<gmem_prof_analyzer::model::Analysis, AnalyzeError> {
    analyze(&[data], &["t.bin".into()], &Options::default())
}

#[test]
fn empty_and_garbage_are_errors() {
    assert!(matches!(run(&[]), Err(AnalyzeError::Trace { .. })));
    assert!(matches!(
        run(b"not a trace at all, just text"),
        Err(AnalyzeError::Trace { .. })
    ));
}

#[test]
fn truncated_trace_gives_a_partial_analysis_with_a_warning() {
    let full = sample_bytes("torch_growth_leak.bin");
    let whole = run(&full).unwrap();
    let cut = run(&full[..full.len() * 2 / 3]).unwrap();
    assert!(
        cut.input.warnings.iter().any(|w| w.contains("cut short")),
        "{:?}",
        cut.input.warnings
    );
    assert!(cut.input.memory_events < whole.input.memory_events);
    assert!(cut.input.memory_events > 0);
}

#[test]
fn corrupted_bytes_are_skipped_with_a_warning() {
    let mut data = sample_bytes("torch_async.bin");
    let n = data.len();
    for i in (n / 3..n / 3 + 64).step_by(7) {
        data[i] ^= 0x5a;
    }
    let a = run(&data).unwrap();
    assert!(
        a.input.warnings.iter().any(|w| w.contains("damaged")),
        "{:?}",
        a.input.warnings
    );
}

#[test]
fn every_prefix_and_random_damage_never_panics() {
    let data = sample_bytes("kinds.bin");
    for cut in (0..data.len()).step_by(37) {
        let _ = run(&data[..cut]);
    }
    let mut seed = 0x1234_5678_u64;
    for _ in 0..200 {
        let mut d = data.clone();
        for _ in 0..4 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed as usize) % d.len();
            d[i] = (seed >> 32) as u8;
        }
        let _ = run(&d);
    }
}
