//! Bad input: warnings and partial results, or a clear error; never a panic.

use gmem_prof_analyzer::{analyze, AnalyzeError, Options};
use gmem_prof_model::InputWarning;
use gmem_prof_traces::Record;

use crate::util::*;

fn sample_bytes(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("traces/samples").join(name)).unwrap()
}

fn run(data: &[u8]) -> Result<gmem_prof_model::Analysis, AnalyzeError> {
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

/// What a warning says was damaged in the file, as the reader or the
/// decoder said it; empty for warnings of other kinds.
fn damage(w: &InputWarning) -> &str {
    match w {
        InputWarning::DamagedFile { damage, .. } => damage,
        InputWarning::DamagedChunk { reason, .. } => reason,
        _ => "",
    }
}

#[test]
fn truncated_trace_gives_a_partial_analysis_with_a_warning() {
    let full = sample_bytes("torch_growth_leak.bin");
    let whole = run(&full).unwrap();
    let cut = run(&full[..full.len() * 2 / 3]).unwrap();
    assert!(
        cut.input
            .warnings
            .iter()
            .any(|w| damage(w).contains("cut short")),
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
        a.input.warnings.iter().any(|w| !damage(w).is_empty()),
        "{:?}",
        a.input.warnings
    );
}

/// The next number of a xorshift64 sequence: damage the same on every run.
fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
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
            let r = xorshift(&mut seed);
            let i = (r as usize) % d.len();
            d[i] = (r >> 32) as u8;
        }
        let _ = run(&d);
    }
}

/// A record whose stated length is one byte short of its fields, in a chunk
/// whose checksum is right (a faulty writer, not damage in transit): the
/// fast decoder reads the fields past the record's end before it checks,
/// and what it decoded from there must not stay among the events.
#[test]
fn a_record_shorter_than_its_fields_leaves_no_event() {
    use gmem_prof_traces::file::frame_chunk;
    use gmem_prof_traces::record::{Bytes, MemoryEvent, Nanos};
    use gmem_prof_traces::{file_header, ChunkEncoder};

    let memory = |i: u64| {
        Record::Memory(MemoryEvent {
            time: Nanos(1_000 + i),
            alloc: true,
            kind: 3,
            address: 0x1000_0000 + (i << 20),
            bytes: Bytes(1 << 20),
            context: 1,
            correlation: i as u32 + 1,
            ..Default::default()
        })
    };
    let mut enc = ChunkEncoder::new(0);
    for i in 0..40 {
        enc.push(&memory(i));
    }
    let mut chunk = Vec::new();
    enc.finish_into(0, false, &mut chunk);
    // Payload: varint base (0: one byte), then tag, length, body per record.
    let mut payload = chunk[24..].to_vec();
    let len = payload[2];
    assert!(len > 1 && len < 0x80, "one-byte length expected, got {len}");
    payload[2] = len - 1;
    payload.remove(3 + usize::from(len) - 1);

    let mut data = file_header().to_vec();
    frame_chunk(0, &payload, false, &mut data);
    let bad = run(&data).unwrap();
    assert!(
        bad.input
            .warnings
            .iter()
            .any(|w| damage(w).contains("undecodable record")),
        "{:?}",
        bad.input.warnings
    );
    assert_eq!(bad.input.memory_events, 0);
    // The same chunk, intact, gives all 40.
    let mut data = file_header().to_vec();
    data.extend_from_slice(&chunk);
    assert_eq!(run(&data).unwrap().input.memory_events, 40);
}

/// A size no GPU could hold, in a well-framed record (a faulty writer):
/// that event is left out with a warning, and the rest add up as before
/// (the sums of sizes would otherwise overflow).
#[test]
fn an_impossible_size_is_left_out_with_a_warning() {
    let mut records = vec![
        mem(1_000, true, 0x1000_0000, 8 * MIB, None),
        mem(2_000, true, 0x2000_0000, 1 << 62, None),
        mem(2_500, true, 0x2000_0000, u64::MAX, None),
        mem(3_000, true, 0x3000_0000, 4 * MIB, None),
    ];
    let a = analyze_bytes(&trace(&records));
    assert!(
        a.input
            .warnings
            .iter()
            .any(|w| matches!(w, InputWarning::ImpossibleSizes { events: 2, .. })),
        "{:?}",
        a.input.warnings
    );
    assert_eq!(a.input.memory_events, 2);
    assert_eq!(a.devices[0].peak_bytes, 12 * MIB);
    // The largest size that may be real is kept.
    records[1] = mem(2_000, true, 0x2000_0000, (1 << 50) - 1, None);
    let a = analyze_bytes(&trace(&records));
    assert_eq!(a.input.memory_events, 3);
    assert_eq!(a.devices[0].peak_bytes, 12 * MIB + (1 << 50) - 1);
}

/// Nonsense a faulty or hostile writer could produce: records that decode
/// but whose fields make no sense together (frees of what was never
/// allocated, pools and segments that overlap, times out of order, ids
/// that point nowhere). Bytes of the real samples' payloads are changed
/// and each chunk framed again with a right checksum, so the damage gets
/// past the reader to the analysis.
#[test]
fn well_framed_nonsense_never_panics() {
    use gmem_prof_traces::file::frame_chunk;
    use gmem_prof_traces::{file_header, TraceReader};
    let rounds: usize = std::env::var("NONSENSE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || xorshift(&mut seed);
    let mut panics = Vec::new();
    for name in [
        "torch_leak.bin",
        "torch_oom.bin",
        "torch_fragment.bin",
        "torch_spawn.bin",
        "torch_private_pools.bin",
        "kinds.bin",
        "pools.bin",
        "vmm.bin",
        "graph.bin",
        "jax.bin",
        "device_view.bin",
        "cupy_pool.bin",
    ] {
        let data = sample_bytes(name);
        let mut reader = TraceReader::new(&data).unwrap();
        let mut chunks = Vec::new();
        while let Some(c) = reader.next_chunk() {
            chunks.push((c.stream, c.payload().unwrap().into_owned()));
        }
        for round in 0..rounds {
            let mut out = file_header().to_vec();
            for (stream, payload) in &chunks {
                let mut p = payload.clone();
                if p.len() > 1 && next() % 3 == 0 {
                    for _ in 0..1 + next() % 4 {
                        // A byte without the varint continuation bit, for
                        // another such byte: most often a field's value
                        // changes and the record still decodes.
                        let i = 1 + (next() as usize) % (p.len() - 1);
                        if p[i] & 0x80 == 0 {
                            p[i] = next() as u8 & 0x7f;
                        }
                    }
                }
                frame_chunk(*stream, &p, false, &mut out);
            }
            let r = std::panic::catch_unwind(|| run(&out));
            if let Err(e) = r {
                let what = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let path = std::env::temp_dir().join(format!("nonsense-{name}-{round}.bin"));
                std::fs::write(&path, &out).unwrap();
                panics.push(format!("{name} round {round}: {what} ({})", path.display()));
            }
        }
    }
    assert!(panics.is_empty(), "{}", panics.join("\n"));
}
