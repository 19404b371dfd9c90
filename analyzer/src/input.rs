//! Reading traces in time order with bounded memory.
//!
//! Chunks are framed once (cheap: headers and checksums), grouped by stream
//! (one stream per process), then decoded in batches in parallel. Within a
//! stream, records come nearly in time order: activity buffers can arrive up
//! to a flush period late, so each stream keeps a reordering window and
//! events are released in global time order only once every stream has read
//! past them by `WINDOW_NS`. The stream that has read least is always fed
//! next, so memory stays bounded by the window, not by the trace.

use std::borrow::Cow;

use gmem_prof_traces::file::RawChunk;
use gmem_prof_traces::record::ApiFunc;
use gmem_prof_traces::{ChunkRecords, Record, TraceReader, Warning};
use rayon::prelude::*;

/// How late (in trace time) a record may arrive after later ones of its
/// stream and still be put in its place.
pub const WINDOW_NS: u64 = 3_000_000_000;
/// Chunks decoded per batch.
pub const BATCH: usize = 16;

/// One event, compact, with its place in time.
#[derive(Clone, Debug)]
pub struct TimedEvent {
    pub time: u64,
    /// File order within the run: breaks ties deterministically.
    pub seq: u64,
    pub stream: u32,
    pub event: Event,
}

/// A device-side allocation or free.
#[derive(Clone, Copy, Debug)]
pub struct MemoryEv {
    pub alloc: bool,
    pub kind: u8,
    pub address: u64,
    pub bytes: u64,
    pub device: u32,
    pub context: u32,
    pub correlation: u32,
    /// (pool address, pool size) for stream-ordered allocations.
    pub pool: Option<(u64, u64)>,
}

/// An API call seen on the calling thread.
#[derive(Clone, Copy, Debug)]
pub struct ApiEv {
    pub func: ApiFunc,
    pub result: u32,
    pub bytes: u64,
    pub address: u64,
    pub tid: u32,
    pub correlation: u32,
    pub stack: u32,
    pub internal: bool,
}

#[derive(Clone, Debug)]
pub enum Event {
    Memory(MemoryEv),
    Api(ApiEv),
    Pool {
        op: u8,
        address: u64,
        size: u64,
        device: u32,
    },
    Kernel {
        end: u64,
        name: u32,
        device: u32,
        stream: u32,
    },
    /// The collector shut down cleanly in this process.
    End,
}

/// A decoded chunk: definitions (applied in file order) and events.
pub struct Decoded {
    pub stream: u32,
    pub defs: Vec<Record>,
    pub events: Vec<TimedEvent>,
    pub records: u64,
    pub error: Option<(u64, String)>,
}

/// A framed chunk, not yet decoded.
pub struct ChunkRef<'a> {
    pub ordinal: u64,
    pub stream: u32,
    pub raw: RawChunk<'a>,
}

/// Frames every chunk of every file. Streams of different files get
/// different global numbers (files are separate runs or processes).
pub fn frame<'a>(
    files: &[&'a [u8]],
    names: &[String],
) -> Result<(Vec<ChunkRef<'a>>, u32, Vec<String>), crate::AnalyzeError> {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    let mut next_stream = 0u32;
    for (i, data) in files.iter().enumerate() {
        let mut reader = TraceReader::new(data).map_err(|e| crate::AnalyzeError::Trace {
            file: names[i].clone(),
            source: e,
        })?;
        let mut ids: Vec<(u32, u32)> = Vec::new();
        while let Some(raw) = reader.next_chunk() {
            let stream = match ids.iter().find(|(s, _)| *s == raw.stream) {
                Some((_, g)) => *g,
                None => {
                    ids.push((raw.stream, next_stream));
                    next_stream += 1;
                    next_stream - 1
                }
            };
            out.push(ChunkRef {
                ordinal: out.len() as u64,
                stream,
                raw,
            });
        }
        for w in reader.warnings {
            // A missing trailer is reported per process (clean exit or not).
            if !matches!(w, Warning::NoTrailer) {
                warnings.push(format!("{}: {w}", names[i]));
            }
        }
    }
    Ok((out, next_stream, warnings))
}

/// Decodes chunks in parallel, each into definitions and events.
pub fn decode_batch(chunks: &[&ChunkRef]) -> Vec<Decoded> {
    chunks.par_iter().map(|c| decode(c)).collect()
}

fn decode(c: &ChunkRef) -> Decoded {
    let mut d = Decoded {
        stream: c.stream,
        defs: Vec::new(),
        events: Vec::new(),
        records: 0,
        error: None,
    };
    let payload: Cow<[u8]> = match c.raw.payload() {
        Ok(p) => p,
        Err(e) => {
            d.error = Some((c.raw.offset, e.to_string()));
            return d;
        }
    };
    for (i, r) in ChunkRecords::new(&payload).enumerate() {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                d.error = Some((c.raw.offset, format!("undecodable record: {e}")));
                break;
            }
        };
        d.records += 1;
        let seq = (c.ordinal << 26) | i as u64;
        let timed = |time: u64, event: Event| TimedEvent {
            time,
            seq,
            stream: c.stream,
            event,
        };
        match r {
            Record::Memory(m) => d.events.push(timed(
                m.time.0,
                Event::Memory(MemoryEv {
                    alloc: m.alloc,
                    kind: m.kind,
                    address: m.address,
                    bytes: m.bytes.0,
                    device: m.device,
                    context: m.context,
                    correlation: m.correlation,
                    pool: (m.pool_type != 0).then_some((m.pool_address, m.pool_size)),
                }),
            )),
            // Placed at the call's entry: the device-side record of what it
            // allocated falls inside the call, and must find the call first.
            Record::Api(a) => d.events.push(timed(
                a.time.0.saturating_sub(a.duration.0),
                Event::Api(ApiEv {
                    func: a.func,
                    result: a.result,
                    bytes: a.bytes.0,
                    address: a.address,
                    tid: a.tid,
                    correlation: a.correlation,
                    stack: a.stack.0,
                    internal: a.internal,
                }),
            )),
            Record::Pool(p) => d.events.push(timed(
                p.time.0,
                Event::Pool {
                    op: p.op,
                    address: p.address,
                    size: p.size.0,
                    device: p.device,
                },
            )),
            Record::Kernel(k) => d.events.push(timed(
                k.start.0,
                Event::Kernel {
                    end: k.end.0,
                    name: k.name.0,
                    device: k.device,
                    stream: k.stream,
                },
            )),
            Record::ProcessEnd(e) => d.events.push(timed(e.time.0, Event::End)),
            other => d.defs.push(other),
        }
    }
    if !d.events.is_sorted_by_key(|e| (e.time, e.seq)) {
        d.events.sort_unstable_by_key(|e| (e.time, e.seq));
    }
    d
}

/// Merges two sorted runs into one sorted vector.
pub fn merge_sorted(a: Vec<TimedEvent>, b: Vec<TimedEvent>) -> Vec<TimedEvent> {
    if a.is_empty() {
        return b;
    }
    if b.is_empty() {
        return a;
    }
    if a.last().map(key) <= b.first().map(key) {
        let mut a = a;
        a.extend(b);
        return a;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let mut ia = a.into_iter().peekable();
    let mut ib = b.into_iter().peekable();
    loop {
        let take_a = match (ia.peek(), ib.peek()) {
            (Some(x), Some(y)) => key(x) <= key(y),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_a { ia.next() } else { ib.next() };
        out.extend(next);
    }
    out
}

fn key(e: &TimedEvent) -> (u64, u64) {
    (e.time, e.seq)
}
