//! `gmem-prof dump`: one line per record, in file order. The format's
//! debugging view and the snapshot format of the compatibility tests.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};

use anyhow::{bail, Result};
use gmem_prof_traces::{decode_chunk, Record, TraceReader};

use crate::cli::DumpArgs;

pub fn run(a: DumpArgs) -> Result<()> {
    let files = crate::inputs::expand(&a.traces)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failures = 0;
    for (i, path) in files.iter().enumerate() {
        let data = crate::merge::map(path)?;
        let mut reader = match TraceReader::new(&data) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("gmem-prof: {}: {e}", path.display());
                failures += 1;
                continue;
            }
        };
        if files.len() > 1 && !a.json {
            writeln!(out, "# file {i}: {}", path.display())?;
        }
        let mut line = String::new();
        while let Some(raw) = reader.next_chunk() {
            let (chunk, err) = match decode_chunk(&raw) {
                Ok(c) => (c, None),
                Err((c, why)) => (c, Some(why)),
            };
            for r in &chunk.records {
                if matches!(r, Record::Trailer(_)) {
                    reader.mark_trailer_seen();
                }
                line.clear();
                if a.json {
                    let mut v = serde_json::to_value(r)?;
                    if let Some(o) = v.as_object_mut() {
                        // Not "stream" and "file": records have fields of
                        // those names (a CUDA stream, a Python file) that
                        // these must not replace.
                        o.insert("trace_stream".into(), chunk.stream.into());
                        if files.len() > 1 {
                            o.insert("trace_file".into(), i.into());
                        }
                        if let Record::Api(call) = r {
                            o.insert("func_name".into(), call.func.name().unwrap_or("").into());
                        }
                    }
                    line = v.to_string();
                } else {
                    text_line(&mut line, chunk.stream, r);
                }
                writeln!(out, "{line}")?;
            }
            if let Some(why) = err {
                eprintln!(
                    "gmem-prof: warning: {}: chunk at byte {}: {why}",
                    path.display(),
                    raw.offset
                );
            }
        }
        for w in &reader.warnings {
            eprintln!("gmem-prof: warning: {}: {w}", path.display());
        }
    }
    out.flush()?;
    if failures == files.len() {
        bail!("no readable trace");
    }
    Ok(())
}

/// A record's line: its stream, then the record's own dump line.
fn text_line(l: &mut String, stream: u32, r: &Record) {
    let _ = write!(l, "s{stream} ");
    let _ = r.dump_line(l);
}
