//! Times one analysis of a trace, for profiling the analyzer:
//!
//!     cargo run --release -p gmem-prof-analyzer --example synth -- /tmp/t.bin 10000000
//!     cargo build --release -p gmem-prof-analyzer --example analyze_bench
//!     perf record -g target/release/examples/analyze_bench /tmp/t.bin
//!     DECODE_ONLY=5 RAYON_NUM_THREADS=1 target/release/examples/analyze_bench /tmp/t.bin

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: analyze_bench TRACE");
        std::process::exit(2);
    };
    if let Some(rounds) = std::env::var_os("DECODE_ONLY") {
        // Decoding alone (set RAYON_NUM_THREADS=1 for one core's figure),
        // of the file read beforehand, as many times as DECODE_ONLY says:
        // the fastest round is the least disturbed by the machine.
        let rounds: u32 = rounds.to_str().and_then(|r| r.parse().ok()).unwrap_or(1);
        let data = std::fs::read(&path).expect("readable trace");
        let mut best = f64::MAX;
        for _ in 0..rounds.max(1) {
            let t = std::time::Instant::now();
            let n = gmem_prof_analyzer::decode_only(&data).expect("a trace");
            let s = t.elapsed().as_secs_f64();
            best = best.min(s);
            eprintln!(
                "decoded {n} events in {s:.3} s: {:.2} M events/s",
                n as f64 / s / 1e6
            );
        }
        eprintln!("fastest: {best:.3} s");
        return;
    }
    let t = std::time::Instant::now();
    match gmem_prof_analyzer::analyze_files(&[path.into()], &Default::default()) {
        Ok(a) => {
            let events = a.input.memory_events + a.input.api_calls + a.input.kernels;
            let s = t.elapsed().as_secs_f64();
            eprintln!(
                "{events} events, {} bytes in {s:.2} s: {:.2} M events/s, {:.1} MB/s",
                a.input.bytes,
                events as f64 / s / 1e6,
                a.input.bytes as f64 / s / 1e6
            );
        }
        Err(e) => {
            eprintln!("analyze_bench: {e}");
            std::process::exit(2);
        }
    }
}
