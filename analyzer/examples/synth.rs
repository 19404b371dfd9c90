//! Writes a large synthetic trace for benchmarking the analyzer (see
//! `gmem_prof_analyzer::synth`):
//!
//!     cargo run --release -p gmem-prof-analyzer --example synth -- OUT.bin EVENTS

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: synth OUT.bin EVENTS");
        std::process::exit(2);
    }
    let Ok(events) = args[2].parse::<u64>() else {
        eprintln!("synth: EVENTS must be a number, not {:?}", args[2]);
        std::process::exit(2);
    };
    let out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&args[1])?);
    let written = gmem_prof_analyzer::synth::write_trace(out, events)?;
    eprintln!("wrote {} with {written} events", args[1]);
    Ok(())
}
