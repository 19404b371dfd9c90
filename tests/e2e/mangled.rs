//! Traces that are well framed (every checksum right) but whose records a
//! faulty or killed writer could have produced: records lost, repeated, out
//! of order, from another run, or with a field's value changed. Every
//! command that reads traces must give a report or a clear error for them,
//! never a panic. The debug build the tests run checks arithmetic, so a
//! size that would overflow a sum panics here rather than wrapping into
//! garbage as it would in a release build.
//!
//! Every real sample is mangled in each round; `MANGLED_ROUNDS=N` runs N
//! rounds (default 4, about 16 s; 60 rounds passed when this was written).

use std::path::Path;
use std::process::Command;

use gmem_prof_traces::file::frame_chunk;
use gmem_prof_traces::{file_header, read_all, DecodedChunk, Enc, Record, TraceWriter};

use crate::util::*;

/// xorshift64: the test's cases are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

fn records_of(path: &Path) -> Vec<(u32, Record)> {
    let data = std::fs::read(path).unwrap();
    let (chunks, _) = read_all(&data).unwrap();
    chunks
        .into_iter()
        .flat_map(
            |DecodedChunk {
                 stream, records, ..
             }| { records.into_iter().map(move |r| (stream, r)) },
        )
        .collect()
}

/// `r` with one of its fields' values replaced (0, huge, random), if what
/// comes out still decodes as one record (else `r` as it was).
fn with_a_field_changed(stream: u32, r: &Record, rng: &mut Rng) -> Record {
    // A chunk's payload of this one record, relative to base time 0.
    let mut payload = Enc::default();
    payload.var(0);
    r.encode(&mut payload, &mut Enc::default(), 0);
    let payload = payload.buf;
    // The payload: the chunk's base time, the record's tag, its body's
    // length (varints), then the body, fields as varints or bytes. One
    // varint of the body is replaced (a byte of a string may be taken for
    // one: what comes out of that rarely decodes, and is then not used).
    let varint_end =
        |b: &[u8], from: usize| from + b[from..].iter().take_while(|x| **x & 0x80 != 0).count() + 1;
    let tag_at = varint_end(&payload, 0);
    let body_at = varint_end(&payload, tag_at + 1);
    if body_at >= payload.len() {
        return r.clone();
    }
    let body = &payload[body_at..];
    let starts: Vec<usize> = (0..body.len())
        .filter(|&i| i == 0 || body[i - 1] & 0x80 == 0)
        .collect();
    let at = starts[rng.below(starts.len())];
    let end = varint_end(body, at).min(body.len());
    let value = match rng.below(5) {
        0 => 0,
        1 => u64::MAX,
        2 => u64::MAX / 2 + rng.below(1000) as u64,
        3 => rng.next() >> rng.below(64),
        _ => rng.below(16) as u64,
    };
    let mut new_body = Enc {
        buf: body[..at].to_vec(),
    };
    new_body.var(value);
    new_body.buf.extend_from_slice(&body[end..]);
    let mut new_payload = Enc {
        buf: payload[..=tag_at].to_vec(),
    };
    new_payload.var(new_body.buf.len() as u64);
    new_payload.buf.extend_from_slice(&new_body.buf);
    let payload = new_payload.buf;
    let mut again = file_header().to_vec();
    frame_chunk(stream, &payload, false, &mut again);
    match read_all(&again) {
        Ok((chunks, _)) => match chunks.into_iter().next().map(|c| c.records) {
            Some(mut rs) if rs.len() == 1 => rs.pop().unwrap(),
            _ => r.clone(),
        },
        Err(_) => r.clone(),
    }
}

fn write(records: &[(u32, Record)], path: &Path) {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    let mut stream = u32::MAX;
    for (s, r) in records {
        if *s != stream {
            w.flush_chunk().unwrap();
            w.set_stream(*s).unwrap();
            stream = *s;
        }
        w.push(r).unwrap();
    }
    std::fs::write(path, w.finish().unwrap()).unwrap();
}

fn mangle(records: &[(u32, Record)], other: &[(u32, Record)], rng: &mut Rng) -> Vec<(u32, Record)> {
    let drop = [0, 20, 200][rng.below(3)];
    let repeat = [0, 20, 100][rng.below(3)];
    let change = [0, 10, 50][rng.below(3)];
    let mut out = Vec::with_capacity(records.len());
    for (s, r) in records {
        if rng.chance(drop) {
            continue;
        }
        let r = if rng.chance(change) {
            with_a_field_changed(*s, r, rng)
        } else {
            r.clone()
        };
        if rng.chance(repeat) {
            out.push((*s, r.clone()));
        }
        out.push((*s, r));
    }
    // Some records moved elsewhere.
    for _ in 0..rng.below(4) * out.len() / 50 {
        let (a, b) = (rng.below(out.len()), rng.below(out.len()));
        out.swap(a, b);
    }
    // Records of another run spliced in.
    if rng.chance(300) && !other.is_empty() {
        let at = rng.below(out.len());
        let from = rng.below(other.len());
        let n = rng.below(other.len() - from);
        let spliced: Vec<_> = other[from..from + n].to_vec();
        out.splice(at..at, spliced);
    }
    if rng.chance(200) {
        out.truncate(rng.below(out.len()));
    }
    out
}

/// Runs `cmd`; fails on a panic (exit 101 or a panic's message), on a
/// signal, or on an exit code the CLI does not document (0, 1, 2).
fn never_panics(cmd: &mut Command, what: &str) {
    let out = cmd.env("RUST_BACKTRACE", "1").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(
        matches!(code, Some(0..=2)) && !err.contains("panicked"),
        "{what}: exit {code:?}\n{err}"
    );
}

#[test]
fn mangled_records_never_panic_any_command() {
    let s = scratch("mangled");
    let names = all_samples();
    let rounds: usize = std::env::var("MANGLED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let all: Vec<Vec<(u32, Record)>> = names.iter().map(|p| records_of(p)).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..rounds {
        for (i, path) in names.iter().enumerate() {
            let other = &all[(i + 1 + rng.below(names.len() - 1)) % names.len()];
            let mangled = mangle(&all[i], other, &mut rng);
            let name = path.file_stem().unwrap().to_string_lossy();
            let trace = s.join(format!("{name}-{round}.bin"));
            write(&mangled, &trace);
            let what = format!("{} round {round}", path.display());
            let out = s.join(format!("{name}-{round}"));
            never_panics(
                Command::new(gmem())
                    .arg("report")
                    .arg(&trace)
                    .arg("-o")
                    .arg(&out),
                &format!("report of {what}"),
            );
            never_panics(
                Command::new(gmem())
                    .args(["check", "--max-peak", "1GiB", "--max-leaked", "1MiB"])
                    .args(["--max-allocated", "1GiB", "--max-growth", "1MiB"])
                    .args(["--max-fragmentation", "0.5", "--max-ooms", "0"])
                    // Budgets judged even on a run that looks cut short.
                    .arg("--allow-unprofiled")
                    .arg(&trace),
                &format!("check of {what}"),
            );
            never_panics(
                Command::new(gmem()).arg("diff").arg(path).arg(&trace),
                &format!("diff of {what}"),
            );
            never_panics(
                Command::new(gmem()).arg("dump").arg(&trace),
                &format!("dump of {what}"),
            );
            never_panics(
                Command::new(gmem())
                    .args(["symbolize", "-f", "-o"])
                    .arg(s.join(format!("{name}-{round}.symbolized.bin")))
                    .arg(&trace),
                &format!("symbolize of {what}"),
            );
            for format in ["perfetto", "parquet"] {
                never_panics(
                    Command::new(gmem())
                        .args(["export", "-q", "--format", format, "-o"])
                        .arg(s.join(format!("{name}-{round}.{format}")))
                        .arg(&trace),
                    &format!("{format} export of {what}"),
                );
            }
        }
    }
}
