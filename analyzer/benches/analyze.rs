//! Analyzer throughput on a synthetic trace (`gmem_prof_analyzer::synth`),
//! in trace bytes/s and events/s:
//!
//!     cargo bench -p gmem-prof-analyzer
//!
//! For the 50-million-event figure, write a trace with the `synth` example
//! and time `gmem-prof report` on it (see the README of this crate).

use std::sync::OnceLock;

use divan::counter::{BytesCount, ItemsCount};
use divan::Bencher;

const EVENTS: u64 = 2_000_000;

fn trace() -> &'static (Vec<u8>, u64) {
    static TRACE: OnceLock<(Vec<u8>, u64)> = OnceLock::new();
    TRACE.get_or_init(|| {
        let mut data = Vec::new();
        let n = gmem_prof_analyzer::synth::write_trace(&mut data, EVENTS).expect("in memory");
        (data, n)
    })
}

#[divan::bench(sample_count = 5)]
fn analyze_synthetic(b: Bencher) {
    let (data, events) = trace();
    b.counter(BytesCount::new(data.len()))
        .counter(ItemsCount::new(*events))
        .bench(|| {
            gmem_prof_analyzer::analyze(&[data], &["synthetic".into()], &Default::default())
                .expect("analyzes")
        });
}

fn main() {
    divan::main();
}
