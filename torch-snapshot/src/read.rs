//! A PyTorch memory snapshot turned into a gmem-prof trace: the records the
//! collector writes for a PyTorch process whose caching allocator it saw
//! from the inside, made from what the snapshot holds.
//!
//! What a snapshot holds (`torch.cuda.memory._snapshot()`): the allocator's
//! segments and blocks when it was taken, with the frames that allocated
//! each block, and per device the allocation history PyTorch kept
//! (`_record_memory_history`): a ring of its last `max_entries` events —
//! allocs, frees, segments obtained from and given back to CUDA, OOMs —
//! each with its time and frames. Mapped into the trace:
//!
//! - each history event is an `AllocatorEvent` of the same action;
//! - a segment obtained or given back is also the driver's view of it: an
//!   API call (`cuMemAlloc`/`cuMemFree`, `cuMemMap`/`cuMemUnmap` for
//!   expandable segments) and its `Memory` record, as CUPTI reports them;
//! - what was live before the history's first event (the ring dropped its
//!   start, or the history was turned on late) is found by undoing the
//!   history from the final state backwards, and written as allocated one
//!   nanosecond before that first event, with the frames the snapshot
//!   gives it (its block's, or its free's);
//! - Python frames become Python frames; C++ frames (`stacks="all"`) become
//!   native frames already symbolized, whose addresses are only numbers
//!   standing for the frames (one "module" holds them all);
//! - the process ends where the history does: what the report calls live
//!   "at exit" is what was live when the snapshot was taken.
//!
//! Not in a snapshot, so not in the trace: kernels, memory outside
//! PyTorch's allocator (the CUDA context, NCCL, other libraries), the pid,
//! the host and the GPU's name.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use gmem_prof_traces::record::{
    allocator, memory_kind, AllocatorAction, AllocatorEvent, AllocatorInfo, ApiCall, ApiFunc,
    Bytes, DeviceInfo, Frame, MemoryEvent, Message, ModuleInfo, Nanos, ProcessEnd, ProcessInfo,
    PyCode, PyCodeId, StackDef, StackId, SymbolFrame, SymbolInfo,
};
use gmem_prof_traces::{Record, TraceWriter};

use crate::pickle::{self, Pickle, Val};

/// Why a file could not be read as a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("not a readable pickle: {0}")]
    Pickle(#[from] pickle::PickleError),
    #[error("not a PyTorch memory snapshot: {0}")]
    Shape(String),
    #[error("cannot write the trace: {0}")]
    Io(#[from] std::io::Error),
}

/// What the conversion found, for the user to be told.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Converted {
    pub devices: Vec<u32>,
    pub segments: usize,
    pub history_events: usize,
    /// Blocks and their bytes live before the history's first event.
    pub blocks_before: usize,
    pub bytes_before: u64,
    /// History events of actions this reader does not know (skipped).
    pub unknown_actions: usize,
}

/// Where the native frames' stand-in addresses start; each module has
/// 2^32 of them.
const NATIVE_BASE: u64 = 0x5e00_0000_0000;
/// The module of C++ frames named by their source file (PyTorch's own
/// symbolization), not by a library. Named as PyTorch's libraries are:
/// the analysis reads a backward node or operator from frames of those.
const SOURCE_MODULE: &str = "libtorch (C++ frames symbolized by PyTorch)";
/// Frames of PyTorch's stack capture itself, not of the program (its
/// memory_viz leaves them out too).
const CAPTURE_FRAMES: [&str; 3] = [
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
];
/// The frame that stands for the caching allocator's call in the stack of
/// each segment's driver call.
const SEGMENT_FUNCTION: &str =
    "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block";
const SEGMENT_FILE: &str = "(every segment of the snapshot was obtained here)";
/// A stand-in pid: the snapshot does not say.
const PID: u32 = 0;

/// Reads the snapshot pickle `data` (from the file `name`) and writes it
/// as a trace to `out`.
pub fn to_trace<W: Write>(data: &[u8], name: &str, out: W) -> Result<Converted, SnapshotError> {
    let p = pickle::read(data)?;
    let root = p
        .root
        .ok_or_else(|| SnapshotError::Shape("the pickle is empty".into()))?;
    let snap = Snapshot::new(&p, root)?;
    let mut conv = Conversion::new(&p, name);
    conv.write(&snap, TraceWriter::new(out)?)
}

/// One segment of the final state.
struct Segment {
    device: u32,
    address: u64,
    size: u64,
    stream: u64,
    pool: u64,
    expandable: bool,
    frames: Option<Val>,
}

/// One live block of the final state.
#[derive(Clone, Copy)]
struct Block {
    size: u64,
    stream: u64,
    frames: Option<Val>,
}

/// One history event, as the snapshot gives it.
#[derive(Clone, Copy)]
struct Event {
    action: AllocatorAction,
    address: u64,
    size: u64,
    stream: u64,
    time_us: Option<u64>,
    frames: Option<Val>,
    device_free: u64,
    known: bool,
}

/// The snapshot's facts, typed.
struct Snapshot {
    segments: Vec<Segment>,
    /// Per device: its live blocks at the end, by address.
    blocks: BTreeMap<u32, BTreeMap<u64, Block>>,
    /// Per device: its history.
    history: Vec<Vec<Event>>,
    settings: String,
}

fn shape(what: impl Into<String>) -> SnapshotError {
    SnapshotError::Shape(what.into())
}

fn uint(v: Option<Val>) -> u64 {
    match v {
        Some(Val::Int(i)) => i as u64,
        Some(Val::Bool(b)) => u64::from(b),
        _ => 0,
    }
}

impl Snapshot {
    fn new(p: &Pickle, root: Val) -> Result<Snapshot, SnapshotError> {
        // Old snapshots (`_snapshot()` before history) are a list of segments.
        let (segments, traces) = if p.list(root).is_some() {
            (root, None)
        } else if p.dict(root).is_some() {
            let s = p
                .get(root, "segments")
                .ok_or_else(|| shape("it has no \"segments\""))?;
            (s, p.get(root, "device_traces"))
        } else {
            return Err(shape("its top is neither a dict nor a list"));
        };
        let segs = p
            .list(segments)
            .ok_or_else(|| shape("\"segments\" is not a list"))?;
        let mut snap = Snapshot {
            segments: Vec::new(),
            blocks: BTreeMap::new(),
            history: Vec::new(),
            settings: settings(p, root),
        };
        for &s in segs {
            snap.add_segment(p, s)?;
        }
        if let Some(t) = traces {
            let devices = p
                .list(t)
                .ok_or_else(|| shape("\"device_traces\" is not a list"))?;
            for &d in devices {
                let events = p
                    .list(d)
                    .ok_or_else(|| shape("a device's trace is not a list"))?;
                let events = events
                    .iter()
                    .map(|&e| event(p, e))
                    .collect::<Result<Vec<_>, _>>()?;
                snap.history.push(events);
            }
        }
        // By device and address: `segment_at` searches them.
        snap.segments
            .sort_unstable_by_key(|s| (s.device, s.address));
        Ok(snap)
    }

    /// The final segment holding `address` on `device`, if any.
    fn segment_at(&self, device: u32, address: u64) -> Option<&Segment> {
        let after = self
            .segments
            .partition_point(|s| (s.device, s.address) <= (device, address));
        after
            .checked_sub(1)
            .map(|i| &self.segments[i])
            .filter(|s| s.device == device && address < s.address + s.size)
    }

    fn add_segment(&mut self, p: &Pickle, s: Val) -> Result<(), SnapshotError> {
        if p.dict(s).is_none() {
            return Err(shape("a segment is not a dict"));
        }
        let u = |k: &str| uint(p.get(s, k));
        let pool = p
            .get(s, "segment_pool_id")
            .and_then(|v| p.list(v))
            .map_or(0, |ids| {
                let id = |i: usize| ids.get(i).map_or(0, |&v| uint(Some(v)) & 0xffff_ffff);
                id(0) | (id(1) << 32)
            });
        let seg = Segment {
            device: u("device") as u32,
            address: u("address"),
            size: u("total_size"),
            stream: u("stream"),
            pool,
            expandable: u("is_expandable") != 0,
            frames: p.get(s, "frames"),
        };
        let blocks = p
            .get(s, "blocks")
            .and_then(|b| p.list(b))
            .ok_or_else(|| shape("a segment has no list of blocks"))?;
        let live = self.blocks.entry(seg.device).or_default();
        let mut address = seg.address;
        for &b in blocks {
            let size = uint(p.get(b, "size"));
            let state = p.get(b, "state").and_then(|v| p.str(v)).unwrap_or("");
            if state == "active_allocated" || state == "active_pending_free" {
                live.insert(
                    address,
                    Block {
                        size,
                        stream: seg.stream,
                        frames: p.get(b, "frames"),
                    },
                );
            }
            address += size;
        }
        self.segments.push(seg);
        Ok(())
    }
}

/// `allocator_settings` as PYTORCH_CUDA_ALLOC_CONF would spell them.
fn settings(p: &Pickle, root: Val) -> String {
    let Some(d) = p.get(root, "allocator_settings").and_then(|s| p.dict(s)) else {
        return String::new();
    };
    d.iter()
        .filter_map(|&(k, v)| {
            let value = match v {
                Val::Int(i) => i.to_string(),
                Val::Float(f) => f.to_string(),
                Val::Bool(b) => b.to_string(),
                _ => p.str(v)?.to_string(),
            };
            Some(format!("{}:{value}", p.str(k)?))
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn event(p: &Pickle, e: Val) -> Result<Event, SnapshotError> {
    if p.dict(e).is_none() {
        return Err(shape("a history event is not a dict"));
    }
    let action = p.get(e, "action").and_then(|a| p.str(a)).unwrap_or("");
    let known = [
        ("alloc", AllocatorAction::ALLOC),
        ("free_requested", AllocatorAction::FREE_REQUESTED),
        ("free_completed", AllocatorAction::FREE_COMPLETED),
        ("segment_alloc", AllocatorAction::SEGMENT_ALLOC),
        ("segment_free", AllocatorAction::SEGMENT_FREE),
        ("segment_map", AllocatorAction::SEGMENT_MAP),
        ("segment_unmap", AllocatorAction::SEGMENT_UNMAP),
        ("oom", AllocatorAction::OOM),
        ("snapshot", AllocatorAction::SNAPSHOT),
    ]
    .iter()
    .find(|(n, _)| *n == action)
    .map(|(_, a)| *a);
    let time_us = match p.get(e, "time_us") {
        Some(Val::Int(t)) if t >= 0 => Some(t as u64),
        _ => None,
    };
    Ok(Event {
        action: known.unwrap_or_default(),
        address: uint(p.get(e, "addr")),
        size: uint(p.get(e, "size")),
        stream: uint(p.get(e, "stream")),
        time_us,
        frames: p.get(e, "frames"),
        device_free: uint(p.get(e, "device_free")),
        known: known.is_some(),
    })
}

/// Address intervals (segments, or the mapped parts of expandable ones),
/// undone and redone as history is walked.
#[derive(Default)]
struct Intervals(BTreeMap<u64, u64>);

impl Intervals {
    fn add(&mut self, start: u64, len: u64) {
        self.0.insert(start, start + len);
    }

    /// Removes [start, start + len) from whatever interval holds it.
    fn remove(&mut self, start: u64, len: u64) {
        let end = start + len;
        let Some((&s, &e)) = self.0.range(..=start).next_back() else {
            return;
        };
        if e <= start {
            return;
        }
        self.0.remove(&s);
        if s < start {
            self.0.insert(s, start);
        }
        if end < e {
            self.0.insert(end, e);
        }
    }
}

/// What was live on one device before its history's first event: its
/// blocks and segments, found by undoing the history from the end.
struct Before {
    blocks: BTreeMap<u64, Block>,
    segments: Intervals,
}

fn live_before(snap: &Snapshot, device: u32, history: &[Event]) -> Before {
    let mut blocks = snap.blocks.get(&device).cloned().unwrap_or_default();
    let mut segments = Intervals::default();
    for s in snap.segments.iter().filter(|s| s.device == device) {
        segments.add(s.address, s.size);
    }
    for e in history.iter().rev() {
        match e.action {
            AllocatorAction::ALLOC => {
                blocks.remove(&e.address);
            }
            AllocatorAction::FREE_COMPLETED => {
                blocks.insert(
                    e.address,
                    Block {
                        size: e.size,
                        stream: e.stream,
                        frames: e.frames,
                    },
                );
            }
            AllocatorAction::SEGMENT_ALLOC | AllocatorAction::SEGMENT_MAP => {
                segments.remove(e.address, e.size);
            }
            AllocatorAction::SEGMENT_FREE | AllocatorAction::SEGMENT_UNMAP => {
                segments.add(e.address, e.size);
            }
            _ => {}
        }
    }
    Before { blocks, segments }
}

/// The trace being written: ids given out so far.
struct Conversion<'p> {
    p: &'p Pickle,
    name: String,
    /// By the pickle object of the frame list (the memo shares them).
    stacks: HashMap<u32, StackId>,
    stacks_by_frames: HashMap<Vec<Frame>, StackId>,
    /// Driver calls' stacks, by the segment's frame list.
    segment_stacks: HashMap<Option<u32>, StackId>,
    /// By file, then function: looked up without copying the strings.
    py_codes: HashMap<String, HashMap<String, PyCodeId>>,
    py_code_count: u32,
    /// By file, then function, then line.
    natives: HashMap<String, HashMap<String, HashMap<u32, u64>>>,
    /// Stand-in modules: a library a frame names (`libtorch_cpu.so`),
    /// or `SOURCE_MODULE`; each with the frames given out in it.
    modules: HashMap<String, (u32, u64)>,
    records: Vec<Record>,
    correlation: u32,
}

/// Python's frames by their file: code files and the interpreter's
/// pseudo-files (`<frozen runpy>`, `<string>`).
fn is_python_file(file: &str) -> bool {
    file.ends_with(".py") || (file.starts_with('<') && file.ends_with('>'))
}

impl<'p> Conversion<'p> {
    fn new(p: &'p Pickle, name: &str) -> Self {
        Conversion {
            p,
            name: name.to_string(),
            stacks: HashMap::new(),
            stacks_by_frames: HashMap::new(),
            segment_stacks: HashMap::new(),
            py_codes: HashMap::new(),
            py_code_count: 0,
            natives: HashMap::new(),
            modules: HashMap::new(),
            records: Vec::new(),
            correlation: 0,
        }
    }

    /// The stack of a snapshot frame list (innermost first, as the
    /// snapshot keeps them); 0 for none.
    fn stack(&mut self, frames: Option<Val>) -> StackId {
        let Some(Val::Obj(object)) = frames else {
            return StackId(0);
        };
        if let Some(&id) = self.stacks.get(&object) {
            return id;
        }
        let out = self.frames(frames);
        let id = self.intern(out);
        self.stacks.insert(object, id);
        id
    }

    /// The stack of the driver call that obtained a segment: the
    /// segment's frames under one frame that says whose call it was
    /// (every segment a snapshot names is its caching allocator's: the
    /// analysis tells the allocator's memory by that frame's name).
    fn segment_stack(&mut self, frames: Option<Val>) -> StackId {
        let key = match frames {
            Some(Val::Obj(object)) => Some(object),
            _ => None,
        };
        if let Some(&id) = self.segment_stacks.get(&key) {
            return id;
        }
        let marker = self.native(SEGMENT_FILE, SEGMENT_FUNCTION, 0);
        let mut out = self.frames(frames);
        // A snapshot exported from a trace read from one has it already.
        if out.first() != Some(&Frame::Native(marker)) {
            out.insert(0, Frame::Native(marker));
        }
        let id = self.intern(out);
        self.segment_stacks.insert(key, id);
        id
    }

    fn frames(&mut self, frames: Option<Val>) -> Vec<Frame> {
        let p = self.p;
        let list = frames.and_then(|v| p.list(v)).unwrap_or(&[]);
        let mut out = Vec::with_capacity(list.len());
        for &f in list {
            let text = |k: &str| p.get(f, k).and_then(|v| p.str(v)).unwrap_or("");
            let (file, function) = (text("filename"), text("name"));
            if CAPTURE_FRAMES.iter().any(|c| function.contains(c)) {
                continue;
            }
            let line = uint(p.get(f, "line")) as u32;
            out.push(if is_python_file(file) {
                let code = self.py_code(file, function);
                Frame::Python { code, line }
            } else {
                Frame::Native(self.native(file, function, line))
            });
        }
        out
    }

    /// The id of a stack of these frames, defined on first use.
    fn intern(&mut self, frames: Vec<Frame>) -> StackId {
        if frames.is_empty() {
            return StackId(0);
        }
        if let Some(&id) = self.stacks_by_frames.get(&frames) {
            return id;
        }
        let id = StackId(self.stacks_by_frames.len() as u32 + 1);
        self.records.push(Record::Stack(StackDef {
            id,
            frames: frames.clone(),
            truncated: false,
        }));
        self.stacks_by_frames.insert(frames, id);
        id
    }

    fn py_code(&mut self, file: &str, function: &str) -> PyCodeId {
        if let Some(&id) = self.py_codes.get(file).and_then(|f| f.get(function)) {
            return id;
        }
        self.py_code_count += 1;
        let id = PyCodeId(self.py_code_count);
        self.records.push(Record::PyCode(PyCode {
            id,
            file: file.to_string(),
            function: function.to_string(),
            first_line: 0,
        }));
        self.py_codes
            .entry(file.to_string())
            .or_default()
            .insert(function.to_string(), id);
        id
    }

    /// A C++ frame, symbolized by PyTorch: a stand-in address and its symbol.
    fn native(&mut self, file: &str, function: &str, line: u32) -> u64 {
        let known = self
            .natives
            .get(file)
            .and_then(|f| f.get(function))
            .and_then(|l| l.get(&line));
        if let Some(&a) = known {
            return a;
        }
        // A frame that names a shared library (as gmem-prof's own exports
        // do for unresolved frames) is a frame of that module; PyTorch's
        // frames name their source file.
        let library = file.ends_with(".so") || file.contains(".so.");
        let module_name = if library { file } else { SOURCE_MODULE };
        let next_id = self.modules.len() as u32 + 1;
        let (module, start, index) = match self.modules.get_mut(module_name) {
            Some((id, n)) => {
                *n += 1;
                (*id, NATIVE_BASE + (u64::from(*id) << 32), *n - 1)
            }
            None => {
                let start = NATIVE_BASE + (u64::from(next_id) << 32);
                self.records.push(Record::Module(ModuleInfo {
                    id: next_id,
                    path: module_name.to_string(),
                    start,
                    end: start + (1 << 32),
                    ..Default::default()
                }));
                self.modules.insert(module_name.to_string(), (next_id, 1));
                (next_id, start, 0)
            }
        };
        let address = start + 16 * index;
        self.records.push(Record::Symbol(SymbolInfo {
            address,
            module,
            module_offset: address - start,
            frames: vec![SymbolFrame {
                function: function.to_string(),
                file: if library {
                    String::new()
                } else {
                    file.to_string()
                },
                line,
                column: 0,
            }],
        }));
        self.natives
            .entry(file.to_string())
            .or_default()
            .entry(function.to_string())
            .or_default()
            .insert(line, address);
        address
    }

    fn allocator_event(&mut self, t: u64, device: u32, e: &Event, pool: u64) {
        let stack = if matches!(
            e.action,
            AllocatorAction::FREE
                | AllocatorAction::FREE_REQUESTED
                | AllocatorAction::FREE_COMPLETED
                | AllocatorAction::SEGMENT_FREE
                | AllocatorAction::SEGMENT_UNMAP
        ) {
            StackId(0)
        } else {
            self.stack(e.frames)
        };
        self.records.push(Record::AllocatorEvent(AllocatorEvent {
            time: Nanos(t),
            allocator: allocator::TORCH_CACHING,
            action: e.action,
            device,
            address: e.address,
            bytes: Bytes(e.size),
            stream: e.stream,
            pool,
            tid: PID,
            stack,
            device_free: e.device_free,
            limit: 0,
        }));
    }

    /// The driver's side of a segment event: its API call and its
    /// `Memory` record, as the collector writes them.
    fn driver(&mut self, t: u64, device: u32, e: &Event, stack: StackId) {
        let (func, alloc, vmm) = match e.action {
            AllocatorAction::SEGMENT_ALLOC => (ApiFunc::MEM_ALLOC, true, false),
            AllocatorAction::SEGMENT_FREE => (ApiFunc::MEM_FREE, false, false),
            AllocatorAction::SEGMENT_MAP => (ApiFunc::MEM_MAP, true, true),
            AllocatorAction::SEGMENT_UNMAP => (ApiFunc::MEM_UNMAP, false, true),
            _ => return,
        };
        self.correlation += 1;
        let correlation = self.correlation;
        self.records.push(Record::Api(ApiCall {
            time: Nanos(t),
            tid: PID,
            func,
            correlation,
            bytes: Bytes(e.size),
            address: e.address,
            stack: if alloc { stack } else { StackId(0) },
            ..Default::default()
        }));
        self.records.push(Record::Memory(MemoryEvent {
            time: Nanos(t),
            alloc,
            kind: memory_kind::DEVICE,
            address: e.address,
            bytes: Bytes(e.size),
            device,
            context: if vmm { 0xFFFF_FFFF } else { 1 },
            correlation,
            ..Default::default()
        }));
    }

    /// One history event: the allocator's record, and the driver's for
    /// segments (the driver's call first when memory is obtained, last
    /// when it is given back, as the allocator makes them).
    fn event(&mut self, t: u64, device: u32, e: &Event, pool: u64) {
        if matches!(
            e.action,
            AllocatorAction::SEGMENT_ALLOC | AllocatorAction::SEGMENT_MAP
        ) {
            let stack = self.segment_stack(e.frames);
            self.driver(t, device, e, stack);
            self.allocator_event(t, device, e, pool);
        } else {
            self.allocator_event(t, device, e, pool);
            self.driver(t, device, e, StackId(0));
        }
    }

    fn write<W: Write>(
        &mut self,
        snap: &Snapshot,
        mut w: TraceWriter<W>,
    ) -> Result<Converted, SnapshotError> {
        let mut conv = Converted {
            segments: snap.segments.len(),
            ..Default::default()
        };
        let timeline = Timeline::of(snap);
        let start = timeline.start;
        self.header(snap, start);
        let devices = devices_of(snap);
        for &d in &devices {
            self.before(snap, d, start.saturating_sub(1), &mut conv);
        }
        for &(t, d, i) in &timeline.order {
            let e = snap.history[d as usize][i];
            if !e.known {
                conv.unknown_actions += 1;
                continue;
            }
            conv.history_events += 1;
            let pool = pool_of(snap, d, e.address);
            self.event(t, d, &e, pool);
        }
        self.footer(&conv, &timeline);
        self.records.push(Record::ProcessEnd(ProcessEnd {
            time: Nanos(timeline.end + 1),
        }));
        conv.devices = devices;
        for r in &self.records {
            w.push(r)?;
        }
        w.finish()?;
        Ok(conv)
    }

    /// The process, its devices, the allocator and the stand-in module of
    /// C++ frames.
    fn header(&mut self, snap: &Snapshot, start: u64) {
        self.records.push(Record::Process(ProcessInfo {
            pid: PID,
            start: Nanos(start.saturating_sub(1)),
            exe: self.name.clone(),
            cmdline: vec![format!("PyTorch memory snapshot {}", self.name)],
            collector_version: format!("torch-snapshot reader {}", env!("CARGO_PKG_VERSION")),
            stacks_captured: true,
            ..Default::default()
        }));
        for d in devices_of(snap) {
            self.records.push(Record::Device(DeviceInfo {
                device: d,
                name: "GPU (not named by the snapshot)".into(),
                ..Default::default()
            }));
        }
        self.records.push(Record::Allocator(AllocatorInfo {
            time: Nanos(start.saturating_sub(1)),
            allocator: allocator::TORCH_CACHING,
            library: String::new(),
            settings: snap.settings.clone(),
            attached: true,
            detail: "read from a PyTorch memory snapshot (torch.cuda.memory._snapshot)".into(),
        }));
    }

    /// What was live on `device` before its history began, at `t`.
    fn before(&mut self, snap: &Snapshot, device: u32, t: u64, conv: &mut Converted) {
        let history = snap
            .history
            .get(device as usize)
            .map_or(&[][..], Vec::as_slice);
        let before = live_before(snap, device, history);
        for (&start, &end) in &before.segments.0 {
            let seg = snap.segment_at(device, start);
            let e = Event {
                action: if seg.is_some_and(|s| s.expandable) {
                    AllocatorAction::SEGMENT_MAP
                } else {
                    AllocatorAction::SEGMENT_ALLOC
                },
                address: start,
                size: end - start,
                stream: seg.map_or(0, |s| s.stream),
                time_us: None,
                frames: seg.and_then(|s| s.frames),
                device_free: 0,
                known: true,
            };
            self.event(t, device, &e, seg.map_or(0, |s| s.pool));
        }
        for (&address, b) in &before.blocks {
            conv.blocks_before += 1;
            conv.bytes_before += b.size;
            let e = Event {
                action: AllocatorAction::ALLOC,
                address,
                size: b.size,
                stream: b.stream,
                time_us: None,
                frames: b.frames,
                device_free: 0,
                known: true,
            };
            self.event(t, device, &e, pool_of(snap, device, address));
        }
    }

    /// What the reader says of the snapshot, at its end.
    fn footer(&mut self, conv: &Converted, timeline: &Timeline) {
        let mut say = |level: u8, text: String| {
            self.records.push(Record::Message(Message {
                time: Nanos(timeline.end),
                level,
                text,
            }));
        };
        say(
            0,
            format!(
                "read from the PyTorch memory snapshot {}: {} history events, {} segments when it was taken; \
                 the trace ends where the snapshot was taken (what is live \"at exit\" was live then); \
                 a snapshot holds PyTorch's caching allocator only (no kernels, no memory of the CUDA \
                 context or other libraries)",
                self.name, conv.history_events, conv.segments
            ),
        );
        if conv.blocks_before > 0 {
            say(
                1,
                format!(
                    "the allocation history begins after the program's start (PyTorch keeps its last \
                     max_entries events): {} blocks ({} bytes) were already live; they are shown as \
                     allocated just before its first event",
                    conv.blocks_before, conv.bytes_before
                ),
            );
        }
        if timeline.untimed {
            say(
                1,
                "the history's events carry no times (a snapshot older than PyTorch 2.1): they are \
                 placed one microsecond apart"
                    .into(),
            );
        }
        if conv.unknown_actions > 0 {
            say(
                1,
                format!(
                    "{} history events of actions this reader does not know were skipped",
                    conv.unknown_actions
                ),
            );
        }
    }
}

/// Every device the snapshot has segments or history on.
fn devices_of(snap: &Snapshot) -> Vec<u32> {
    let mut d: Vec<u32> = snap.segments.iter().map(|s| s.device).collect();
    d.extend(
        snap.history
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.is_empty())
            .map(|(i, _)| i as u32),
    );
    d.sort_unstable();
    d.dedup();
    d
}

/// The private pool of the final segment holding `address` (0: the
/// default pools, or a segment since given back).
fn pool_of(snap: &Snapshot, device: u32, address: u64) -> u64 {
    snap.segment_at(device, address).map_or(0, |s| s.pool)
}

/// The history of every device in one order of time, in nanoseconds:
/// PyTorch's microseconds, with events of one microsecond kept in their
/// order a nanosecond apart.
struct Timeline {
    /// (time, device, index in its history).
    order: Vec<(u64, u32, usize)>,
    start: u64,
    end: u64,
    untimed: bool,
}

impl Timeline {
    fn of(snap: &Snapshot) -> Timeline {
        let mut order = Vec::new();
        let mut untimed = false;
        for (d, h) in snap.history.iter().enumerate() {
            let mut last = 0u64;
            for (i, e) in h.iter().enumerate() {
                let t = match e.time_us {
                    Some(us) => us.saturating_mul(1000),
                    None => {
                        untimed = true;
                        (i as u64 + 1) * 1000
                    }
                };
                let t = t.max(last + 1);
                last = t;
                order.push((t, d as u32, i));
            }
        }
        order.sort_unstable();
        let start = order.first().map_or(1_000, |o| o.0);
        let end = order.last().map_or(start, |o| o.0);
        Timeline {
            order,
            start,
            end,
            untimed,
        }
    }
}
