//! From callbacks to the file: a bounded in-memory queue that app threads and
//! CUPTI's buffer callbacks push to, and the writer thread that turns it into
//! trace chunks.
//!
//! App threads only copy a fixed-size event and its return addresses under a
//! short lock; interning stacks, encoding, compressing and writing happen on
//! the writer thread. If the writer falls behind by more than `MAX_PENDING`
//! items, new items are dropped and counted (the trace says how many), so the
//! app is never blocked without bound.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use gmem_prof_traces::record::{
    AllocatorAction, AllocatorEvent, ApiCall, DropCounts, Frame, KernelLaunch, Mark, ModuleInfo,
    Nanos, ProcessEnd, PyCodeId, RangeBegin, RangeEnd, StackDef, StackId, Step,
};
use gmem_prof_traces::{file_header, ChunkEncoder, Record};

use crate::hashing::WordHash;
use crate::python;
use crate::window::Window;
use gmem_prof_traces::window::WindowPlan;

/// Items waiting for the writer before new ones are dropped. An item is 96
/// bytes, so a stalled writer costs the program at most ~100 MiB (and the
/// frames); at 100,000 events/s the writer would have to stall for ten
/// seconds to get there.
pub const MAX_PENDING: usize = 1 << 20;
/// The writer is woken when this many items wait (else it wakes on its
/// timer): the two batches it swaps with the app threads then stay a few
/// MiB, in cache, rather than growing to a whole flush period's events
/// (tens of MiB under a busy allocator, touched once and evicted).
const WAKE_AT: usize = 8192;
/// A chunk is written when its payload reaches this size…
const CHUNK_BYTES: usize = 512 << 10;

/// What app threads queue. Kept small: every event is copied in here, and
/// the bytes written per event are a cost the program pays in cache misses
/// (a `Record` is 200 bytes, for the sake of records that are rare).
enum Item {
    /// A record whose stack the writer interns; its frames are
    /// `Pending::frames[frames_at..frames_at + frames_len]`.
    WithStack {
        record: Stacked,
        frames_at: u32,
        frames_len: u32,
        truncated: bool,
    },
    /// Stackless records that come at event rates, kept unboxed: an
    /// allocation per event, freed on the writer's thread, made the app's
    /// thread wait on malloc's arena lock (NVTX ranges: 0.8-1.6 µs per
    /// push and pop boxed).
    Launch(KernelLaunch),
    Marked(Marked),
    /// Any other: code objects, names, messages, failed calls' devices.
    Record(Box<Record>),
}

/// The program's own marks: steps, NVTX ranges and marks.
enum Marked {
    Step(Step),
    Begin(RangeBegin),
    End(RangeEnd),
    Mark(Mark),
}

/// The records that carry a stack.
enum Stacked {
    Api(ApiCall),
    Allocator(AllocatorEvent),
}

#[derive(Default)]
struct Pending {
    items: Vec<Item>,
    frames: Vec<u64>,
    /// Whole buffers of CUPTI's activity records, kept as they came: taking
    /// one is a pointer push under the lock, where copying its thousands
    /// of records into `items` held the lock long enough for app threads
    /// pushing events to wait on it. Written after `items` (no record in
    /// them is needed before a stack or call of `items`).
    batches: Vec<Vec<Record>>,
    batched: usize,
}

pub struct Sink {
    pending: Mutex<Pending>,
    wake: Condvar,
    dropped: AtomicU64,
    closing: AtomicBool,
    /// Flushes asked for (`flush_and_wait`), and the last the writer has
    /// done: everything pushed before it asked is in the file.
    flushes_asked: AtomicU64,
    flushed: Mutex<u64>,
    flush_done: Condvar,
}

impl Sink {
    pub fn new() -> Sink {
        Sink {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            dropped: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            flushes_asked: AtomicU64::new(0),
            flushed: Mutex::new(0),
            flush_done: Condvar::new(),
        }
    }

    /// Waits (up to `timeout`) until everything pushed so far is written
    /// to the file, so that another process can read it (a test runner's
    /// plugin judging a test). Returns whether it was.
    pub fn flush_and_wait(&self, timeout: Duration) -> bool {
        let n = self.flushes_asked.fetch_add(1, Ordering::SeqCst) + 1;
        self.wake.notify_all();
        let Ok(done) = self.flushed.lock() else {
            return false;
        };
        match self
            .flush_done
            .wait_timeout_while(done, timeout, |d| *d < n)
        {
            Ok((d, _)) => *d >= n,
            Err(_) => false,
        }
    }

    fn mark_flushed(&self, asked: u64) {
        if let Ok(mut d) = self.flushed.lock() {
            *d = (*d).max(asked);
        }
        self.flush_done.notify_all();
    }

    fn flush_waiting(&self, done: u64) -> bool {
        self.flushes_asked.load(Ordering::SeqCst) > done
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn push_api(&self, call: ApiCall, frames: &[u64], truncated: bool) {
        self.push_with_stack(Stacked::Api(call), frames, truncated);
    }

    pub fn push_allocator(&self, event: AllocatorEvent, frames: &[u64], truncated: bool) {
        self.push_with_stack(Stacked::Allocator(event), frames, truncated);
    }

    fn push_with_stack(&self, record: Stacked, frames: &[u64], truncated: bool) {
        let Ok(mut p) = self.pending.lock() else {
            return;
        };
        if let Stacked::Allocator(completed) = &record {
            if merge_free(p.items.last_mut(), completed) {
                return;
            }
        }
        if p.items.len() >= MAX_PENDING {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Bounded by MAX_PENDING items of at most MAX_FRAMES frames.
        let frames_at = p.frames.len() as u32;
        p.frames.extend_from_slice(frames);
        p.items.push(Item::WithStack {
            record,
            frames_at,
            frames_len: frames.len() as u32,
            truncated,
        });
        if p.items.len() == WAKE_AT {
            self.wake.notify_one();
        }
    }

    /// A batch of records with no stack (CUPTI's activity buffers, the
    /// device view's samples), kept whole.
    pub fn push_records(&self, mut records: Vec<Record>) {
        if records.is_empty() {
            return;
        }
        let Ok(mut p) = self.pending.lock() else {
            return;
        };
        let room = MAX_PENDING.saturating_sub(p.items.len() + p.batched);
        let n = records.len();
        if n > room {
            // Only when the writer has stalled for seconds.
            self.dropped.fetch_add((n - room) as u64, Ordering::Relaxed);
            records.truncate(room);
        }
        p.batched += records.len();
        p.batches.push(records);
    }

    /// One record with no stack, in order with the app threads' events
    /// (a PyCode before the stack that uses it, a CallDevice before its
    /// call).
    pub fn push(&self, record: Record) {
        let Ok(mut p) = self.pending.lock() else {
            return;
        };
        if p.items.len() + p.batched >= MAX_PENDING {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        p.items.push(match record {
            Record::KernelLaunch(launch) => Item::Launch(launch),
            Record::Step(s) => Item::Marked(Marked::Step(s)),
            Record::RangeBegin(r) => Item::Marked(Marked::Begin(r)),
            Record::RangeEnd(r) => Item::Marked(Marked::End(r)),
            Record::Mark(m) => Item::Marked(Marked::Mark(m)),
            other => Item::Record(Box::new(other)),
        });
    }

    /// Asks the writer to drain everything and finish the file.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.wake.notify_all();
    }

    fn take(&self, into: &mut Pending, wait: Duration, flushed: u64) -> bool {
        let Ok(mut p) = self.pending.lock() else {
            return true;
        };
        if p.items.is_empty()
            && p.batches.is_empty()
            && !self.closing.load(Ordering::Acquire)
            && !self.flush_waiting(flushed)
        {
            p = match self.wake.wait_timeout(p, wait) {
                Ok((g, _)) => g,
                Err(_) => return true,
            };
        }
        std::mem::swap(&mut *p, into);
        self.closing.load(Ordering::Acquire)
    }
}

/// A framework allocator's free completed right after it was requested, by
/// the same thread for the same block (the allocator does both under its
/// lock when no other stream uses the block): turns the request waiting
/// last in the queue into one `FREE` record. Returns whether it did.
fn merge_free(last: Option<&mut Item>, completed: &AllocatorEvent) -> bool {
    let Some(Item::WithStack {
        record: Stacked::Allocator(requested),
        ..
    }) = last
    else {
        return false;
    };
    let same = completed.action == AllocatorAction::FREE_COMPLETED
        && requested.action == AllocatorAction::FREE_REQUESTED
        && requested.address == completed.address
        && requested.device == completed.device
        && requested.allocator == completed.allocator
        && requested.tid == completed.tid;
    if same {
        requested.action = AllocatorAction::FREE;
    }
    same
}

/// Everything the writer needs from the rest of the collector.
pub trait WriterEnv {
    fn now(&self) -> u64;
    /// Modules added since `after` (by id), if stacks are captured.
    fn new_modules(&self, after_generation: &mut u64, after_id: u32) -> Vec<ModuleInfo>;
    fn cupti_dropped(&self) -> u64;
    /// How many window signals (SIGUSR2) the process has received
    /// (`record --window-signal`).
    fn window_signals(&self) -> u32 {
        0
    }
    /// The recorded window closed: the collector may stop recording.
    fn window_closed(&self) {}
}

/// The writer thread's state: stack interning, the chunk being built, the file.
pub struct Writer {
    file: File,
    enc: ChunkEncoder,
    out: Vec<u8>,
    /// Interned stacks (`hashing.rs`: the std hasher took 4% of a
    /// tensor-heavy run's samples, on the writer thread).
    stacks: HashMap<Vec<u64>, StackId, WordHash>,
    key: Vec<u64>,
    next_stack: u32,
    module_generation: u64,
    last_module: u32,
    chunk_started: Instant,
    last_drops: (u64, u64),
    pub chunks: u64,
    pub records: u64,
    /// First write error, after which the writer stops writing.
    pub failed: Option<String>,
    /// Recording a part of the run: the filter records pass through.
    window: Option<Window>,
    /// What the window let through, waiting to be written.
    routed: Vec<Record>,
}

impl Writer {
    pub fn create(mut file: File) -> std::io::Result<Writer> {
        file.write_all(&file_header())?;
        Ok(Writer {
            file,
            enc: ChunkEncoder::new(0),
            out: Vec::new(),
            stacks: HashMap::default(),
            key: Vec::new(),
            next_stack: 1,
            module_generation: u64::MAX,
            last_module: 0,
            chunk_started: Instant::now(),
            last_drops: (0, 0),
            chunks: 0,
            records: 0,
            failed: None,
            window: None,
            routed: Vec::new(),
        })
    }

    /// Records only the window `plan` (see window.rs).
    pub fn with_window(mut self, plan: WindowPlan, now: u64) -> Writer {
        self.window = Some(Window::new(plan, now));
        self
    }

    /// A record on its way to the file, through the window if there is one.
    fn put(&mut self, env: &dyn WriterEnv, r: Record) {
        let Some(window) = self.window.as_mut() else {
            self.emit(env, &r);
            return;
        };
        let was_closed = window.closed();
        window.route(r, &mut self.routed);
        self.after_window(env, was_closed);
    }

    /// The windows that open and close on the clock or on a signal.
    fn tick_window(&mut self, env: &dyn WriterEnv) {
        let Some(window) = self.window.as_mut() else {
            return;
        };
        let was_closed = window.closed();
        window.tick(env.now(), env.window_signals(), &mut self.routed);
        self.after_window(env, was_closed);
    }

    /// After a record or a tick went through the window: tells the
    /// collector when the window just closed, and writes what it let
    /// through.
    fn after_window(&mut self, env: &dyn WriterEnv, was_closed: bool) {
        if !was_closed && self.window.as_ref().is_some_and(Window::closed) {
            env.window_closed();
        }
        let routed = std::mem::take(&mut self.routed);
        for r in &routed {
            self.emit(env, r);
        }
        self.routed = routed;
        self.routed.clear();
    }

    fn emit(&mut self, env: &dyn WriterEnv, r: &Record) {
        if self.enc.is_empty() {
            self.enc.reset(env.now());
            self.chunk_started = Instant::now();
        }
        self.enc.push(r);
        self.records += 1;
    }

    fn stack_id(&mut self, env: &dyn WriterEnv, frames: &[u64], truncated: bool) -> StackId {
        if frames.is_empty() {
            return StackId(0);
        }
        self.key.clear();
        self.key.extend_from_slice(frames);
        self.key.push(truncated as u64);
        if let Some(id) = self.stacks.get(&self.key) {
            return *id;
        }
        // New stack: make sure the modules it points into are in the trace.
        for m in env.new_modules(&mut self.module_generation, self.last_module) {
            self.last_module = self.last_module.max(m.id);
            self.emit(env, &Record::Module(m));
        }
        let id = StackId(self.next_stack);
        self.next_stack += 1;
        self.stacks.insert(self.key.clone(), id);
        let def = StackDef {
            id,
            frames: frames
                .iter()
                .map(|&v| match python::decode_frame(v) {
                    Some((code, line)) => Frame::Python {
                        code: PyCodeId(code),
                        line,
                    },
                    None => Frame::Native(v),
                })
                .collect(),
            truncated,
        };
        self.emit(env, &Record::Stack(def));
        id
    }

    fn process(&mut self, env: &dyn WriterEnv, batch: &mut Pending) {
        self.process_items(env, batch);
        batch.batched = 0;
        for records in batch.batches.drain(..) {
            for r in records {
                self.put(env, r);
                if self.enc.len() >= CHUNK_BYTES {
                    self.write_chunk();
                }
            }
        }
    }

    fn process_items(&mut self, env: &dyn WriterEnv, batch: &mut Pending) {
        if cfg!(feature = "bench-null-writer") {
            // Benchmarks only (see Cargo.toml): the events' own work left out.
            batch.items.retain(|item| matches!(item, Item::Record(_)));
        }
        for item in batch.items.drain(..) {
            match item {
                Item::Record(r) => self.put(env, *r),
                Item::Launch(launch) => self.put(env, Record::KernelLaunch(launch)),
                Item::Marked(m) => self.put(
                    env,
                    match m {
                        Marked::Step(s) => Record::Step(s),
                        Marked::Begin(r) => Record::RangeBegin(r),
                        Marked::End(r) => Record::RangeEnd(r),
                        Marked::Mark(m) => Record::Mark(m),
                    },
                ),
                Item::WithStack {
                    record,
                    frames_at,
                    frames_len,
                    truncated,
                } => {
                    let (at, len) = (frames_at as usize, frames_len as usize);
                    let frames = &batch.frames[at..at + len];
                    let stack = self.stack_id(env, frames, truncated);
                    let record = match record {
                        Stacked::Api(mut call) => {
                            call.stack = stack;
                            Record::Api(call)
                        }
                        Stacked::Allocator(mut event) => {
                            event.stack = stack;
                            Record::AllocatorEvent(event)
                        }
                    };
                    self.put(env, record);
                }
            }
            if self.enc.len() >= CHUNK_BYTES {
                self.write_chunk();
            }
        }
        batch.frames.clear();
    }

    fn note_drops(&mut self, env: &dyn WriterEnv, sink: &Sink) {
        let now = (env.cupti_dropped(), sink.dropped());
        if now != self.last_drops {
            self.last_drops = now;
            let d = DropCounts {
                time: Nanos(env.now()),
                cupti: now.0,
                collector: now.1,
            };
            self.emit(env, &Record::Dropped(d));
        }
    }

    fn write_chunk(&mut self) {
        if self.enc.is_empty() {
            return;
        }
        self.out.clear();
        self.enc.finish_into(0, true, &mut self.out);
        self.enc.reset(0);
        if self.failed.is_none() {
            match self.file.write_all(&self.out) {
                Ok(()) => self.chunks += 1,
                Err(e) => self.failed = Some(e.to_string()),
            }
        }
    }

    /// Runs until the sink is closed; then writes the end records and the
    /// trailer. `flush_every` bounds how old unwritten data can get.
    pub fn run(mut self, env: &dyn WriterEnv, sink: &Sink, flush_every: Duration) -> Writer {
        let mut batch = Pending::default();
        let mut flushed = 0;
        loop {
            // Read before taking: what was pushed before a flush was asked
            // for is in this take.
            let asked = sink.flushes_asked.load(Ordering::SeqCst);
            let closing = sink.take(&mut batch, flush_every / 2, flushed);
            self.process(env, &mut batch);
            self.tick_window(env);
            self.note_drops(env, sink);
            if asked > flushed {
                self.write_chunk();
                let _ = self.file.flush();
                flushed = asked;
                sink.mark_flushed(asked);
            }
            if closing {
                break;
            }
            if self.chunk_started.elapsed() >= flush_every {
                self.write_chunk();
            }
        }
        // Anything pushed between the last take and close.
        sink.take(&mut batch, Duration::ZERO, u64::MAX);
        self.process(env, &mut batch);
        self.note_drops(env, sink);
        // What this thread cost the machine: its work runs beside the
        // program's threads (on another core, or another hyperthread of
        // the same one), so it belongs in an account of the overhead.
        if let Some(cpu) = thread_cpu_time() {
            let per = cpu.as_nanos() as f64 / self.records.max(1) as f64;
            let text = format!(
                "writer thread: {:.1} ms of CPU for {} records ({per:.0} ns a record: stacks \
                 interned, records encoded, chunks compressed and written)",
                cpu.as_secs_f64() * 1e3,
                self.records
            );
            self.emit(
                env,
                &Record::Message(gmem_prof_traces::record::Message {
                    time: Nanos(env.now()),
                    level: 0,
                    text,
                }),
            );
        }
        self.put(
            env,
            Record::ProcessEnd(ProcessEnd {
                time: Nanos(env.now()),
            }),
        );
        self.write_chunk();
        let trailer = gmem_prof_traces::record::Trailer {
            chunks: self.chunks + 1,
            records: self.records + 1,
        };
        self.emit(env, &Record::Trailer(trailer));
        self.write_chunk();
        let _ = self.file.flush();
        // Nothing is left to wait for.
        sink.mark_flushed(u64::MAX);
        self
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Option<Duration> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid timespec to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (rc == 0).then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmem_prof_traces::read_all;
    use gmem_prof_traces::record::{ApiFunc, Bytes};
    use std::sync::Arc;

    /// What an event costs the program to queue: a new variant as large as
    /// the largest record would double it (see `Item`).
    #[test]
    fn a_queued_item_stays_at_96_bytes() {
        assert!(std::mem::size_of::<Item>() <= 96);
    }

    struct FakeEnv;
    impl WriterEnv for FakeEnv {
        fn now(&self) -> u64 {
            1_000
        }
        fn new_modules(&self, g: &mut u64, after: u32) -> Vec<ModuleInfo> {
            if *g == 1 {
                return vec![];
            }
            *g = 1;
            (after + 1..=after + 1)
                .map(|id| ModuleInfo {
                    id,
                    path: "/lib/x.so".into(),
                    start: 0x1000,
                    end: 0x9000,
                    ..Default::default()
                })
                .collect()
        }
        fn cupti_dropped(&self) -> u64 {
            0
        }
    }

    /// Eight threads push 10,000 events each while the writer runs: every one
    /// must reach the file, in per-thread order, with its stack interned once.
    #[test]
    fn concurrent_pushes_are_all_written() {
        let dir = std::env::temp_dir().join(format!("gmem-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.bin");
        let sink = Arc::new(Sink::new());
        let writer = Writer::create(File::create(&path).unwrap()).unwrap();
        let s2 = sink.clone();
        let w = std::thread::spawn(move || writer.run(&FakeEnv, &s2, Duration::from_millis(20)));
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        let call = ApiCall {
                            tid: t,
                            func: ApiFunc::MEM_ALLOC,
                            bytes: Bytes(i),
                            ..Default::default()
                        };
                        sink.push_api(call, &[0x1000 + u64::from(t), 0x2000], false);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        sink.close();
        let w = w.join().unwrap();
        assert!(w.failed.is_none());
        let data = std::fs::read(&path).unwrap();
        let (chunks, warnings) = read_all(&data).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let recs: Vec<Record> = chunks.into_iter().flat_map(|c| c.records).collect();
        let mut next = [0u64; 8];
        let mut stacks = 0;
        for r in &recs {
            match r {
                Record::Api(a) => {
                    assert_eq!(a.bytes.0, next[a.tid as usize]);
                    next[a.tid as usize] += 1;
                    assert_ne!(a.stack.0, 0);
                }
                Record::Stack(_) => stacks += 1,
                _ => {}
            }
        }
        assert_eq!(next, [10_000; 8]);
        assert_eq!(stacks, 8);
        assert!(matches!(recs.last(), Some(Record::Trailer(_))));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A writer that has fallen behind by `MAX_PENDING` items: the events
    /// after that are dropped, not queued (the program's memory stays
    /// bounded), and counted; the writer then puts the count in the trace,
    /// and writes every event it had.
    #[test]
    fn events_past_the_bound_are_dropped_and_counted() {
        let dir = std::env::temp_dir().join(format!("gmem-sink-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.bin");
        let sink = Sink::new();
        // No writer runs yet: the queue only fills.
        for i in 0..MAX_PENDING as u64 + 5 {
            let call = ApiCall {
                func: ApiFunc::MEM_ALLOC,
                bytes: Bytes(i),
                ..Default::default()
            };
            sink.push_api(call, &[], false);
        }
        sink.push_records(vec![Record::ProcessEnd(ProcessEnd { time: Nanos(1) }); 3]);
        assert_eq!(sink.dropped(), 5 + 3);
        sink.close();
        let writer = Writer::create(File::create(&path).unwrap()).unwrap();
        let w = writer.run(&FakeEnv, &sink, Duration::from_millis(5));
        assert!(w.failed.is_none());
        let (chunks, warnings) = read_all(&std::fs::read(&path).unwrap()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let recs: Vec<Record> = chunks.into_iter().flat_map(|c| c.records).collect();
        let calls = recs.iter().filter(|r| matches!(r, Record::Api(_))).count();
        assert_eq!(calls, MAX_PENDING);
        let drops: Vec<u64> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Dropped(d) => Some(d.collector),
                _ => None,
            })
            .collect();
        assert_eq!(drops, [8]);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Activity buffers pushed whole while app threads push events: every
    /// record of every buffer reaches the file, in the buffer's order, and
    /// single records keep their place before the events pushed after them.
    #[test]
    fn whole_buffers_and_single_records_are_all_written_in_order() {
        let dir = std::env::temp_dir().join(format!("gmem-sink-batches-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.bin");
        let sink = Arc::new(Sink::new());
        let writer = Writer::create(File::create(&path).unwrap()).unwrap();
        let s2 = sink.clone();
        let w = std::thread::spawn(move || writer.run(&FakeEnv, &s2, Duration::from_millis(5)));
        let buffers = {
            let sink = sink.clone();
            std::thread::spawn(move || {
                for b in 0..200u64 {
                    let records = (0..500u64)
                        .map(|i| {
                            Record::Message(gmem_prof_traces::record::Message {
                                time: Nanos(b * 500 + i),
                                level: 0,
                                text: String::new(),
                            })
                        })
                        .collect();
                    sink.push_records(records);
                }
            })
        };
        for i in 0..5_000u64 {
            sink.push(Record::CallDevice(gmem_prof_traces::record::CallDevice {
                time: Nanos(i),
                tid: 1,
                device: 0,
            }));
            sink.push_api(
                ApiCall {
                    tid: 1,
                    bytes: Bytes(i),
                    func: ApiFunc::MEM_ALLOC,
                    ..Default::default()
                },
                &[0x1000],
                false,
            );
        }
        buffers.join().unwrap();
        sink.close();
        assert!(w.join().unwrap().failed.is_none());
        let (chunks, _) = read_all(&std::fs::read(&path).unwrap()).unwrap();
        let recs: Vec<Record> = chunks.into_iter().flat_map(|c| c.records).collect();
        let messages: Vec<u64> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Message(m) if !m.text.starts_with("writer thread:") => Some(m.time.0),
                _ => None,
            })
            .collect();
        assert_eq!(messages, (0..100_000).collect::<Vec<_>>());
        // The writer's own account comes last, once.
        let Some(Record::Message(last)) =
            recs.iter().rev().find(|r| matches!(r, Record::Message(_)))
        else {
            panic!("no message");
        };
        assert!(last.text.starts_with("writer thread:"), "{}", last.text);
        // Each CallDevice comes right before its call (stack definitions
        // may come between).
        let mut expect_call = None;
        let mut calls = 0;
        for r in &recs {
            match r {
                Record::CallDevice(c) => {
                    assert_eq!(expect_call, None);
                    expect_call = Some(c.time.0);
                }
                Record::Api(a) => {
                    assert_eq!(expect_call.take(), Some(a.bytes.0));
                    calls += 1;
                }
                _ => {}
            }
        }
        assert_eq!(calls, 5_000);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A flush asked for while the writer runs returns once what was pushed
    /// before it is in the file, readable by another program then.
    #[test]
    fn a_flush_returns_once_the_records_are_in_the_file() {
        let dir = std::env::temp_dir().join(format!("gmem-sink-flush-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.bin");
        let sink = Arc::new(Sink::new());
        let writer = Writer::create(File::create(&path).unwrap()).unwrap();
        let s2 = sink.clone();
        // A long period: only the flush can make the writer write now.
        let w = std::thread::spawn(move || writer.run(&FakeEnv, &s2, Duration::from_secs(60)));
        for round in 1..=3u64 {
            sink.push(Record::Step(Step {
                time: Nanos(round),
                number: round,
                ..Default::default()
            }));
            assert!(sink.flush_and_wait(Duration::from_secs(10)));
            let (chunks, _) = read_all(&std::fs::read(&path).unwrap()).unwrap();
            let steps = chunks
                .iter()
                .flat_map(|c| &c.records)
                .filter(|r| matches!(r, Record::Step(_)))
                .count();
            assert_eq!(steps as u64, round);
        }
        sink.close();
        assert!(w.join().unwrap().failed.is_none());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A free completed right after its request, by the same thread, is one
    /// `FREE` record; a completion that follows anything else stays apart.
    #[test]
    fn a_free_completed_with_its_request_is_one_record() {
        let sink = Sink::new();
        let event = |action, address, tid| AllocatorEvent {
            action,
            address,
            tid,
            ..Default::default()
        };
        sink.push_allocator(event(AllocatorAction::ALLOC, 0x10, 1), &[0x1000], false);
        sink.push_allocator(event(AllocatorAction::FREE_REQUESTED, 0x10, 1), &[], false);
        sink.push_allocator(event(AllocatorAction::FREE_COMPLETED, 0x10, 1), &[], false);
        // Another block's request, completed later after other events (a
        // block other streams still used), or by another thread.
        sink.push_allocator(event(AllocatorAction::FREE_REQUESTED, 0x20, 1), &[], false);
        sink.push_allocator(event(AllocatorAction::FREE_COMPLETED, 0x20, 2), &[], false);
        sink.push_allocator(event(AllocatorAction::FREE_REQUESTED, 0x30, 1), &[], false);
        sink.push_allocator(event(AllocatorAction::ALLOC, 0x40, 1), &[0x1000], false);
        sink.push_allocator(event(AllocatorAction::FREE_COMPLETED, 0x30, 1), &[], false);
        let p = sink.pending.lock().unwrap();
        let actions: Vec<_> = p
            .items
            .iter()
            .map(|i| match i {
                Item::WithStack {
                    record: Stacked::Allocator(e),
                    ..
                } => (e.action, e.address),
                _ => panic!("only allocator events were pushed"),
            })
            .collect();
        use AllocatorAction as A;
        assert_eq!(
            actions,
            [
                (A::ALLOC, 0x10),
                (A::FREE, 0x10),
                (A::FREE_REQUESTED, 0x20),
                (A::FREE_COMPLETED, 0x20),
                (A::FREE_REQUESTED, 0x30),
                (A::ALLOC, 0x40),
                (A::FREE_COMPLETED, 0x30),
            ]
        );
    }
}
