//! Times one analysis of a trace, for profiling the analyzer:
//!
//!     cargo run --release -p gmem-prof-analyzer --example synth -- /tmp/t.bin 10000000
//!     cargo build --release -p gmem-prof-analyzer --example analyze_bench
//!     perf record -g target/release/examples/analyze_bench /tmp/t.bin
//!     DECODE_ONLY=1 RAYON_NUM_THREADS=1 target/release/examples/analyze_bench /tmp/t.bin

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: analyze_bench TRACE");
        std::process::exit(2);
    };
    let t = std::time::Instant::now();
    if std::env::var_os("DECODE_ONLY").is_some() {
        // Decoding alone (set RAYON_NUM_THREADS=1 for one core's figure).
        let data = std::fs::read(&path).expect("readable trace");
        let n = gmem_prof_analyzer::decode_only(&data).expect("a trace");
        let s = t.elapsed().as_secs_f64();
        eprintln!(
            "decoded {n} events in {s:.2} s: {:.2} M events/s",
            n as f64 / s / 1e6
        );
        return;
    }
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
