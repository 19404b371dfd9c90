//! Reading traces in time order with bounded memory.
//!
//! Chunks are framed once (cheap: headers and checksums), grouped by process
//! (the trace's chunk streams, one per process), then decoded in batches in
//! parallel. Within a process, records come nearly in time order: activity
//! buffers can arrive up to a flush period late, so each process keeps a
//! reordering window and events are released in global time order only once
//! every process has read past them by `WINDOW_NS`. The process that has
//! read least is always fed next, so memory stays bounded by the window, not
//! by the trace.

use std::sync::Mutex;

use gmem_prof_traces::fast;
use gmem_prof_traces::file::RawChunk;
use gmem_prof_traces::record::{self, allocator, AllocatorAction, ApiFunc};
use gmem_prof_traces::{Record, TraceReader, Warning};
use rayon::prelude::*;

/// How late (in trace time) a record may arrive after later ones of its
/// process and still be put in its place.
pub const WINDOW_NS: u64 = 3_000_000_000;
/// Chunks decoded per batch.
pub const BATCH: usize = 16;

/// One event, compact, with its place in time.
///
/// Kept small (64 bytes): every event is written once by a decoding thread
/// and read once by the sweep, and moving them is much of the cost. The
/// process is not stored: each process's events are kept apart.
#[derive(Clone, Copy, Debug)]
pub struct TimedEvent {
    pub time: u64,
    /// File order within the run: breaks ties deterministically.
    pub seq: u64,
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
    /// Stream-ordered: `pool_address` and `pool_size` are set.
    pub pooled: bool,
    pub pool_address: u64,
    pub pool_size: u64,
}

impl MemoryEv {
    /// (pool address, pool size) for stream-ordered allocations.
    pub fn pool(&self) -> Option<(u64, u64)> {
        self.pooled.then_some((self.pool_address, self.pool_size))
    }
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

/// Id of PyTorch's cudaMallocAsync backend in `AllocatorEv::allocator` and
/// `AllocatorOnDevice::allocator` (after the trace's ids, `allocator::*`): the
/// collector records no events of it; the analyzer makes them from the
/// process's stream-ordered allocations (`Engine`), the tensors of that
/// backend.
pub const TORCH_ASYNC: u8 = 0x80;

/// An event inside a framework allocator (`record::AllocatorEvent`).
#[derive(Clone, Copy, Debug)]
pub struct AllocatorEv {
    pub allocator: u8,
    pub action: AllocatorAction,
    /// In 16 bits (keeps `TimedEvent` at 64 bytes; an id beyond, which only
    /// a damaged trace has, reads as the last): `device()` widens it.
    pub device16: u16,
    pub stack: u32,
    /// The thread that made the call.
    pub tid: u32,
    /// The private pool, in 32 bits (keeps `TimedEvent` at 64 bytes): a
    /// CUDA graph's own pool's id, or a `MemPool`'s id with `MEMPOOL_BIT`
    /// set (ids count up from 1); 0 for the default pools.
    pub pool: u32,
    /// For `OOM` and `OOM_REPORT`: the device's free bytes.
    pub address: u64,
    pub bytes: u64,
    /// For `OOM_REPORT`: the limit.
    pub stream: u64,
}

impl AllocatorEv {
    /// The device it happened on.
    #[inline]
    pub fn device(&self) -> u32 {
        u32::from(self.device16)
    }
}

/// Marks a `torch.cuda.MemPool` in `AllocatorEv::pool`.
pub const MEMPOOL_BIT: u32 = 1 << 31;

/// The record's pool (graph pool id in the low 32 bits, MemPool id in the
/// high 32: FORMAT.md) in 32 bits.
pub(crate) fn private_pool(pool: u64) -> u32 {
    let (graph, user) = (pool as u32, (pool >> 32) as u32);
    if user != 0 {
        MEMPOOL_BIT | (user & !MEMPOOL_BIT)
    } else {
        graph & !MEMPOOL_BIT
    }
}

impl AllocatorEv {
    fn from_record(a: &record::AllocatorEvent) -> AllocatorEv {
        let oom = a.action.has_oom_fields();
        AllocatorEv {
            // The cudaMallocAsync backend's errors join the view made of
            // its stream-ordered allocations.
            allocator: if a.allocator == allocator::TORCH_ASYNC_BACKEND {
                TORCH_ASYNC
            } else {
                a.allocator
            },
            action: a.action,
            device16: a.device.min(u32::from(u16::MAX)) as u16,
            stack: a.stack.0,
            tid: a.tid,
            pool: private_pool(a.pool),
            address: if oom { a.device_free } else { a.address },
            bytes: a.bytes.0,
            stream: if a.action == AllocatorAction::OOM_REPORT {
                a.limit
            } else {
                a.stream
            },
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Event {
    Memory(MemoryEv),
    Allocator(AllocatorEv),
    Api(ApiEv),
    Pool {
        op: u8,
        address: u64,
        size: u64,
        device: u32,
    },
    /// A kernel: its run on the device (`end` its end), or, for a
    /// `launch`, the moment the program launched it (`end` = that moment).
    Kernel {
        end: u64,
        name: u32,
        device: u32,
        stream: u32,
        launch: bool,
    },
    /// The device's own view was sampled (NVML: `used` bytes on the
    /// device); the sample itself is among the process's definitions.
    DeviceView {
        device: u32,
        used: u64,
    },
    /// The device of the process's next (failed) allocation call.
    CallDevice {
        device: u32,
    },
    /// The collector shut down cleanly in this process.
    End,
    /// The program finished a step (`record::Step`).
    Step {
        number: u64,
        source: u8,
    },
    /// A range of the program's began (`record::RangeBegin`).
    RangeBegin(RangeBeginEv),
    /// The range `id` ended.
    RangeEnd {
        id: u64,
    },
    /// The program marked an instant (`record::Mark`).
    Mark {
        tid: u32,
        domain: u32,
        name: u32,
    },
    /// The recorded window opened or closed (`record::WindowEdge`; its
    /// words are among the process's definitions).
    Window {
        open: bool,
    },
    /// A copy (`ApiFunc::copies`) of `bytes` from `src` to `dst`;
    /// `from_host`: the call itself says the source is host memory.
    Copy {
        dst: u64,
        src: u64,
        bytes: u64,
        from_host: bool,
    },
}

/// A range's beginning, as the sweep needs it.
#[derive(Clone, Copy, Debug)]
pub struct RangeBeginEv {
    pub id: u64,
    pub tid: u32,
    pub domain: u32,
    pub name: u32,
    pub depth: u32,
}

/// A decoded chunk: definitions (applied in file order) and events.
pub struct Decoded {
    pub proc: u32,
    pub defs: Vec<Record>,
    pub events: Vec<TimedEvent>,
    pub records: u64,
    pub error: Option<(u64, String)>,
}

/// A framed chunk, not yet decoded.
pub struct ChunkRef<'a> {
    pub ordinal: u64,
    pub proc: u32,
    pub raw: RawChunk<'a>,
}

/// Frames every chunk of every file. Streams of different files get
/// different global numbers (files are separate runs or processes).
pub fn frame<'a>(
    files: &[&'a [u8]],
    names: &[String],
) -> Result<(Vec<ChunkRef<'a>>, u32, Vec<crate::model::InputWarning>), crate::AnalyzeError> {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    let mut next_proc = 0u32;
    for (i, data) in files.iter().enumerate() {
        let trace_error = |e| crate::AnalyzeError::Trace {
            file: names[i].clone(),
            source: e,
        };
        // Checksums are verified in parallel after an optimistic framing;
        // a damaged file (a bad checksum or any framing warning) is framed
        // again by the careful reader, which verifies as it goes and resyncs
        // past damage. Both give the same chunks for an undamaged file.
        let reader = TraceReader::new(data)
            .map_err(trace_error)?
            .without_checksums();
        // Framing walks the chunk headers in order, and reading each one
        // maps in the pages around it: most of the time it takes. The
        // second half of the file is read meanwhile on another thread, so
        // that its pages are mapped when framing gets there.
        let ((raw, reader), ()) = rayon::join(
            || frame_file(reader),
            || touch_pages(&data[data.len() / 2..]),
        );
        let intact = reader
            .warnings
            .iter()
            .all(|w| matches!(w, Warning::NoTrailer))
            && raw.par_iter().all(|c| c.checksum_ok());
        let (raw, reader) = if intact {
            (raw, reader)
        } else {
            frame_file(TraceReader::new(data).map_err(trace_error)?)
        };
        let mut ids: Vec<(u32, u32)> = Vec::new();
        for raw in raw {
            let proc = match ids.iter().find(|(s, _)| *s == raw.stream) {
                Some((_, g)) => *g,
                None => {
                    ids.push((raw.stream, next_proc));
                    next_proc += 1;
                    next_proc - 1
                }
            };
            out.push(ChunkRef {
                ordinal: out.len() as u64,
                proc,
                raw,
            });
        }
        for w in reader.warnings {
            // A missing trailer is reported per process (clean exit or not).
            if !matches!(w, Warning::NoTrailer) {
                warnings.push(crate::model::InputWarning::DamagedFile {
                    file: names[i].clone(),
                    damage: w.to_string(),
                });
            }
        }
    }
    Ok((out, next_proc, warnings))
}

/// Reads a byte of every page, so that the mapping's pages are mapped in.
fn touch_pages(data: &[u8]) {
    for i in (0..data.len()).step_by(4096) {
        std::hint::black_box(data[i]);
    }
}

fn frame_file(mut reader: TraceReader<'_>) -> (Vec<RawChunk<'_>>, TraceReader<'_>) {
    let mut chunks = Vec::new();
    while let Some(raw) = reader.next_chunk() {
        chunks.push(raw);
    }
    (chunks, reader)
}

/// Decodes chunks in parallel, each into definitions and events.
pub fn decode_batch(chunks: &[&ChunkRef]) -> Vec<Decoded> {
    chunks.par_iter().map(|c| decode(c)).collect()
}

thread_local! {
    /// Each decoding thread's buffer for decompressed payloads.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Emptied event vectors, kept for the next chunks: a chunk's events take a
/// few MB, and fresh allocations of that size cost page faults every time.
static SPARE_EVENTS: Mutex<Vec<Vec<TimedEvent>>> = Mutex::new(Vec::new());
const SPARE_LIMIT: usize = 4 * BATCH;

fn events_vec() -> Vec<TimedEvent> {
    SPARE_EVENTS
        .lock()
        .ok()
        .and_then(|mut s| s.pop())
        .unwrap_or_default()
}

/// Gives back an event vector whose events were taken.
pub fn recycle(mut v: Vec<TimedEvent>) {
    v.clear();
    if let Ok(mut s) = SPARE_EVENTS.lock() {
        if s.len() < SPARE_LIMIT {
            s.push(v);
        }
    }
}

/// Decodes one chunk into definitions and events.
pub fn decode(c: &ChunkRef) -> Decoded {
    SCRATCH.with(|scratch| {
        let scratch = &mut scratch.borrow_mut();
        let mut d = Decoded {
            proc: c.proc,
            defs: Vec::new(),
            events: events_vec(),
            records: 0,
            error: None,
        };
        let payload = match c.raw.payload_in(scratch) {
            Ok(p) => p,
            Err(e) => {
                d.error = Some((c.raw.offset, e.to_string()));
                return d;
            }
        };
        // The vectors are moved in and out, not borrowed: each push then
        // reaches its vector through one pointer, not two.
        let mut sink = Events {
            ordinal: c.ordinal,
            events: std::mem::take(&mut d.events),
            defs: Vec::new(),
        };
        let read = fast::decode_payload(payload, &mut sink);
        (d.events, d.defs) = (sink.events, sink.defs);
        d.records = read.records;
        if let Some(e) = read.error {
            d.error = Some((c.raw.offset, format!("undecodable record: {e}")));
        }
        // Within a chunk `seq` rises with every record (a chunk of at most
        // MAX_CHUNK_BYTES holds fewer than 2^26 records of two bytes or
        // more), so the events are in (time, seq) order exactly when their
        // times never fall.
        if !d.events.windows(2).all(|w| w[0].time <= w[1].time) {
            d.events.sort_unstable_by_key(key);
        }
        d
    })
}

/// A chunk's records as they are decoded: the frequent kinds straight into
/// events, the rest kept as definitions (two of them also events).
///
/// Each kind of record is pushed where it is decoded: building the event
/// first and pushing it after (one value for every kind) went through a
/// copy on the stack that the processor could not forward, which cost
/// more than decoding the fields.
struct Events {
    /// The chunk's place in the input: the high bits of each event's `seq`.
    ordinal: u64,
    events: Vec<TimedEvent>,
    defs: Vec<Record>,
}

impl Events {
    #[inline(always)]
    fn seq(&self, index: u64) -> u64 {
        (self.ordinal << 26) | index
    }

    #[inline(always)]
    fn push(&mut self, time: u64, index: u64, event: Event) {
        let seq = self.seq(index);
        self.events.push(TimedEvent { time, seq, event });
    }
}

impl fast::Sink for Events {
    #[inline(always)]
    fn memory(&mut self, index: u64, m: &record::MemoryEvent) {
        self.push(
            m.time.0,
            index,
            Event::Memory(MemoryEv {
                alloc: m.alloc,
                kind: m.kind,
                address: m.address,
                bytes: m.bytes.0,
                device: m.device,
                context: m.context,
                correlation: m.correlation,
                pooled: m.pool_type != 0,
                pool_address: m.pool_address,
                pool_size: m.pool_size,
            }),
        );
    }

    #[inline(always)]
    fn api(&mut self, index: u64, a: &record::ApiCall) {
        if a.func.copies() {
            if a.result == 0 {
                let copy = Event::Copy {
                    dst: a.address,
                    src: a.handle,
                    bytes: a.bytes.0,
                    from_host: a.func == ApiFunc::MEMCPY_HTOD,
                };
                self.push(a.time.0.saturating_sub(a.duration.0), index, copy);
            }
            return;
        }
        self.push(
            // Placed at the call's entry: the device-side record of what it
            // allocated falls inside the call, and must find the call first.
            a.time.0.saturating_sub(a.duration.0),
            index,
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
        );
    }

    #[inline(always)]
    fn pool(&mut self, index: u64, p: &record::PoolEvent) {
        self.push(
            p.time.0,
            index,
            Event::Pool {
                op: p.op,
                address: p.address,
                size: p.size.0,
                device: p.device,
            },
        );
    }

    #[inline(always)]
    fn kernel(&mut self, index: u64, k: &record::KernelSpan) {
        self.push(
            k.start.0,
            index,
            Event::Kernel {
                end: k.end.0,
                name: k.name.0,
                device: k.device,
                stream: k.stream,
                launch: false,
            },
        );
    }

    /// A launch: a span of no length at the launch.
    #[inline(always)]
    fn kernel_launch(&mut self, index: u64, k: &record::KernelLaunch) {
        self.push(
            k.time.0,
            index,
            Event::Kernel {
                end: k.time.0,
                name: k.name.0,
                device: k.device,
                stream: k.stream,
                launch: true,
            },
        );
    }

    #[inline(always)]
    fn allocator_event(&mut self, index: u64, a: &record::AllocatorEvent) {
        self.push(
            a.time.0,
            index,
            Event::Allocator(AllocatorEv::from_record(a)),
        );
    }

    #[inline(always)]
    fn process_end(&mut self, index: u64, e: &record::ProcessEnd) {
        self.push(e.time.0, index, Event::End);
    }

    fn other(&mut self, index: u64, record: Record) {
        if let Record::CallDevice(c) = &record {
            self.push(c.time.0, index, Event::CallDevice { device: c.device });
        }
        match &record {
            Record::RangeBegin(r) => {
                let b = RangeBeginEv {
                    id: r.id,
                    tid: r.tid,
                    domain: r.domain.0,
                    name: r.name.0,
                    depth: r.depth,
                };
                return self.push(r.time.0, index, Event::RangeBegin(b));
            }
            Record::RangeEnd(r) => return self.push(r.time.0, index, Event::RangeEnd { id: r.id }),
            Record::Mark(m) => {
                let (tid, domain, name) = (m.tid, m.domain.0, m.name.0);
                return self.push(m.time.0, index, Event::Mark { tid, domain, name });
            }
            _ => {}
        }
        if let Record::Window(w) = &record {
            self.push(w.time.0, index, Event::Window { open: w.open });
        }
        if let Record::Step(s) = &record {
            let (number, source) = (s.number, s.source);
            self.push(s.time.0, index, Event::Step { number, source });
        }
        if let Record::DeviceMemory(m) = &record {
            // In the sweep too: what the trace tracked at that moment.
            self.push(
                m.time.0,
                index,
                Event::DeviceView {
                    device: m.device,
                    used: m.used.0,
                },
            );
        }
        self.defs.push(record);
    }
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

/// The order events are applied in: time, then file order.
pub fn key(e: &TimedEvent) -> (u64, u64) {
    (e.time, e.seq)
}

// The sweep's cost depends on it (see TimedEvent).
const _: () = assert!(std::mem::size_of::<TimedEvent>() == 64);
