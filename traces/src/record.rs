//! The records a trace holds, and their encoding.
//!
//! Every record is framed as `tag: u8, len: varint, body: [u8; len]` (see
//! FORMAT.md). Timestamps inside a body are zigzag varints relative to the
//! chunk's base time, so records stay small and each chunk decodes alone.
//! Tags are never reused or renumbered; a reader skips tags it does not know.
//! New fields may only be appended to the end of a body: a reader ignores
//! bytes it does not understand at the end of a known record.

use std::fmt::{self, Write as _};

use crate::codec::{Dec, Enc, Fields};
use crate::DecodeError;

#[cfg(feature = "serde")]
use serde::Serialize;

/// A timestamp in nanoseconds on CUPTI's clock (CLOCK_REALTIME on Linux).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize), serde(transparent))]
pub struct Nanos(pub u64);

/// A size in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize), serde(transparent))]
pub struct Bytes(pub u64);

/// An interned call stack, scoped to one process stream. 0 means "no stack".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize), serde(transparent))]
pub struct StackId(pub u32);

/// An interned Python code object (`PyCode` record), scoped to one process
/// stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize), serde(transparent))]
pub struct PyCodeId(pub u32);

/// An interned string, scoped to one process stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize), serde(transparent))]
pub struct StringId(pub u32);

/// Record tags. Never reuse or renumber one.
pub mod tag {
    pub const PROCESS: u8 = 1;
    pub const DEVICE: u8 = 2;
    pub const STRING: u8 = 3;
    pub const MODULE: u8 = 4;
    pub const STACK: u8 = 5;
    pub const API: u8 = 6;
    pub const MEMORY: u8 = 7;
    pub const POOL: u8 = 8;
    pub const KERNEL: u8 = 9;
    pub const DROPPED: u8 = 10;
    pub const MESSAGE: u8 = 11;
    pub const PROCESS_END: u8 = 12;
    pub const SYMBOL: u8 = 13;
    pub const TRAILER: u8 = 14;
    pub const PY_CODE: u8 = 15;
    pub const ALLOCATOR_EVENT: u8 = 16;
    pub const ALLOCATOR: u8 = 17;
    pub const DEVICE_MEMORY: u8 = 18;
    pub const CALL_DEVICE: u8 = 19;
    pub const POOL_USAGE: u8 = 20;
    pub const KERNEL_LAUNCH: u8 = 21;
    pub const STEP: u8 = 22;
    pub const RANGE_BEGIN: u8 = 23;
    pub const RANGE_END: u8 = 24;
    pub const MARK: u8 = 25;
    pub const WINDOW: u8 = 26;
}

/// One kind of record's body: written, read and dumped in one place,
/// beside the struct it holds. `record_kinds!` below ties each kind to
/// its `Record` variant and its tag.
pub(crate) trait Kind: Sized {
    /// Appends the body; times relative to the chunk's `base`.
    fn encode(&self, e: &mut Enc, base: u64);
    /// Reads a body; bytes a newer writer appended after the known fields
    /// are left unread.
    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError>;
    /// The record's line in `gmem-prof dump` (after its stream).
    fn dump(&self, l: &mut String) -> fmt::Result;
}

/// The table of record kinds: each `Record` variant, the struct it holds
/// and its tag. From it come the enum, `Record::tag`, the dispatch of
/// encoding, decoding and the dump line, and (derived) the JSON form.
macro_rules! record_kinds {
    ($($variant:ident($ty:ty) = $tag:ident,)+) => {
        /// One decoded record.
        #[derive(Clone, Debug, PartialEq)]
        #[cfg_attr(feature = "serde", derive(Serialize), serde(tag = "type"))]
        pub enum Record {
            $($variant($ty),)+
            /// A record with a tag this reader does not know (written by a
            /// newer writer). Its body was skipped.
            Unknown {
                tag: u8,
                len: u32,
            },
        }

        impl Record {
            /// Every kind of record: its variant's name (FORMAT.md's name
            /// of the record) and its tag, in the table's order.
            pub const KINDS: &'static [(&'static str, u8)] =
                &[$((stringify!($variant), tag::$tag),)+];

            pub fn tag(&self) -> u8 {
                match self {
                    $(Record::$variant(_) => tag::$tag,)+
                    Record::Unknown { tag, .. } => *tag,
                }
            }

            fn encode_body(&self, e: &mut Enc, base: u64) {
                match self {
                    $(Record::$variant(r) => r.encode(e, base),)+
                    Record::Unknown { .. } => {}
                }
            }

            /// Decodes one record body of the given tag.
            #[inline]
            pub fn decode(tag: u8, body: &[u8], base: u64) -> Result<Record, DecodeError> {
                let d = &mut Dec::new(body);
                Ok(match tag {
                    $(tag::$tag => Record::$variant(<$ty as Kind>::decode(d, base)?),)+
                    _ => Record::Unknown {
                        tag,
                        len: body.len() as u32,
                    },
                })
            }

            /// The record's line in `gmem-prof dump`, after its stream: its
            /// kind and fields, as FORMAT.md names them.
            pub fn dump_line(&self, l: &mut String) -> fmt::Result {
                match self {
                    $(Record::$variant(r) => r.dump(l),)+
                    Record::Unknown { tag, len } => write!(l, "unknown tag={tag} len={len}"),
                }
            }
        }
    };
}

record_kinds! {
    Process(ProcessInfo) = PROCESS,
    Device(DeviceInfo) = DEVICE,
    String(StringDef) = STRING,
    Module(ModuleInfo) = MODULE,
    Stack(StackDef) = STACK,
    Api(ApiCall) = API,
    Memory(MemoryEvent) = MEMORY,
    Pool(PoolEvent) = POOL,
    Kernel(KernelEvent) = KERNEL,
    KernelLaunch(KernelLaunch) = KERNEL_LAUNCH,
    Dropped(DropCounts) = DROPPED,
    Message(Message) = MESSAGE,
    ProcessEnd(ProcessEnd) = PROCESS_END,
    Symbol(SymbolInfo) = SYMBOL,
    Trailer(Trailer) = TRAILER,
    PyCode(PyCode) = PY_CODE,
    AllocatorEvent(AllocatorEvent) = ALLOCATOR_EVENT,
    Allocator(AllocatorInfo) = ALLOCATOR,
    DeviceMemory(DeviceMemory) = DEVICE_MEMORY,
    CallDevice(CallDevice) = CALL_DEVICE,
    PoolUsage(PoolUsage) = POOL_USAGE,
    Step(Step) = STEP,
    RangeBegin(RangeBegin) = RANGE_BEGIN,
    RangeEnd(RangeEnd) = RANGE_END,
    Mark(Mark) = MARK,
    Window(WindowEdge) = WINDOW,
}

/// Who the process was. One per process stream, first in the stream.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    /// When the collector started in this process.
    pub start: Nanos,
    pub hostname: String,
    pub exe: String,
    pub cmdline: Vec<String>,
    pub collector_version: String,
    /// `cuptiGetVersion`, e.g. 130001.
    pub cupti_api_version: u32,
    /// The libcupti that was loaded.
    pub cupti_path: String,
    /// NVIDIA kernel driver version (from /proc/driver/nvidia/version), "" if unknown.
    pub driver_version: String,
    /// Whether kernels were traced and native stacks captured.
    pub kernels_traced: bool,
    pub stacks_captured: bool,
    /// Bytes of device memory CUPTI preallocates per context for its own
    /// activity buffers (buffer size × preallocated count; CUPTI may add more
    /// under load). Never seen as allocations: the report shows it apart.
    pub cupti_device_buffer_bytes: Bytes,
    /// Thread ids of the collector's own threads: API calls made on them are
    /// CUPTI's or ours, not the program's.
    pub collector_tids: Vec<u32>,
    /// How kernels were traced, when `kernels_traced`: true, as `Kernel`
    /// records of when each ran on the device (CUPTI's kernel activity);
    /// false, as `KernelLaunch` records of when the program launched each.
    /// Traces written before launches existed have no such field: they
    /// timed every kernel they traced.
    pub kernels_timed: bool,
}

impl Kind for ProcessInfo {
    fn encode(&self, e: &mut Enc, base: u64) {
        let p = self;
        e.var(p.pid.into());
        e.var(p.ppid.into());
        put_time(e, p.start, base);
        e.str(&p.hostname);
        e.str(&p.exe);
        e.var(p.cmdline.len() as u64);
        for a in &p.cmdline {
            e.str(a);
        }
        e.str(&p.collector_version);
        e.var(p.cupti_api_version.into());
        e.str(&p.cupti_path);
        e.str(&p.driver_version);
        e.bool(p.kernels_traced);
        e.bool(p.stacks_captured);
        e.var(p.cupti_device_buffer_bytes.0);
        e.var(p.collector_tids.len() as u64);
        for t in &p.collector_tids {
            e.var((*t).into());
        }
        e.bool(p.kernels_timed);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        decode_process(d, base)
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let p = self;
        write!(
            l,
            "process pid={} ppid={} start={} host={} exe={} cmdline={} collector={} cupti_api={} cupti={} driver={} kernels={} stacks={} cupti_device_buffers={} collector_tids={:?}",
            p.pid, p.ppid, p.start.0, q(&p.hostname), q(&p.exe), q(&p.cmdline.join(" ")),
            p.collector_version, p.cupti_api_version, q(&p.cupti_path), q(&p.driver_version),
            match (p.kernels_traced, p.kernels_timed) {
                (false, _) => "off",
                (true, false) => "launches",
                (true, true) => "timed",
            },
            p.stacks_captured, p.cupti_device_buffer_bytes.0, p.collector_tids
        )
    }
}

/// A GPU the process used (from CUPTI's device record).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct DeviceInfo {
    pub device: u32,
    pub name: String,
    pub total_memory: Bytes,
    pub uuid: [u8; 16],
    pub compute_major: u32,
    pub compute_minor: u32,
    pub multiprocessors: u32,
}

impl Kind for DeviceInfo {
    fn encode(&self, e: &mut Enc, _base: u64) {
        let d = self;
        e.var(d.device.into());
        e.str(&d.name);
        e.var(d.total_memory.0);
        e.bytes(&d.uuid);
        e.var(d.compute_major.into());
        e.var(d.compute_minor.into());
        e.var(d.multiprocessors.into());
    }

    fn decode(d: &mut Dec, _base: u64) -> Result<Self, DecodeError> {
        Ok(DeviceInfo {
            device: d.var32()?,
            name: d.string()?,
            total_memory: Bytes(d.var()?),
            uuid: {
                let b = d.bytes()?;
                let mut u = [0u8; 16];
                let n = b.len().min(16);
                u[..n].copy_from_slice(&b[..n]);
                u
            },
            compute_major: d.var32()?,
            compute_minor: d.var32()?,
            multiprocessors: d.var32()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let d = self;
        write!(
            l,
            "device id={} name={} memory={} cc={}.{} sms={} uuid={}",
            d.device,
            q(&d.name),
            d.total_memory.0,
            d.compute_major,
            d.compute_minor,
            d.multiprocessors,
            d.uuid
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct StringDef {
    pub id: StringId,
    pub text: String,
}

impl Kind for StringDef {
    fn encode(&self, e: &mut Enc, _base: u64) {
        let s = self;
        e.var(s.id.0.into());
        e.str(&s.text);
    }

    fn decode(d: &mut Dec, _base: u64) -> Result<Self, DecodeError> {
        Ok(StringDef {
            id: StringId(d.var32()?),
            text: d.string()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let s = self;
        write!(l, "string id={} text={}", s.id.0, q(&s.text))
    }
}

/// A loaded module (executable or shared library) of the process.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct ModuleInfo {
    pub id: u32,
    pub path: String,
    /// Load bias: runtime address minus the address stated in the ELF file.
    pub bias: u64,
    /// Runtime address range covered by its loadable segments.
    pub start: u64,
    pub end: u64,
    /// GNU build id, empty if none.
    pub build_id: Vec<u8>,
}

impl Kind for ModuleInfo {
    fn encode(&self, e: &mut Enc, _base: u64) {
        let m = self;
        e.var(m.id.into());
        e.str(&m.path);
        e.var(m.bias);
        e.var(m.start);
        e.var(m.end.wrapping_sub(m.start));
        e.bytes(&m.build_id);
    }

    fn decode(d: &mut Dec, _base: u64) -> Result<Self, DecodeError> {
        Ok({
            let id = d.var32()?;
            let path = d.string()?;
            let bias = d.var()?;
            let start = d.var()?;
            let end = start.wrapping_add(d.var()?);
            let build_id = d.bytes()?.to_vec();
            ModuleInfo {
                id,
                path,
                bias,
                start,
                end,
                build_id,
            }
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let m = self;
        write!(
            l,
            "module id={} path={} bias={} range={}-{} build_id={}",
            m.id,
            q(&m.path),
            hex(m.bias),
            hex(m.start),
            hex(m.end),
            m.build_id
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    }
}

/// One frame of a stack. Native frames are return addresses (the innermost is
/// the call site inside the CUDA library); `Python` frames are the
/// interpreter's frames, put where the interpreter's evaluation loop ran them
/// among the native frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub enum Frame {
    Native(u64),
    /// A Python function (its `PyCode` record) and the line it was at.
    Python {
        code: PyCodeId,
        line: u32,
    },
}

/// `PyCode.file` of a frame that is not Python code but stands where one
/// would: the node of PyTorch's autograd graph that a thread without
/// Python was evaluating (its `function` is the node's C++ class, mangled
/// as C++ names types: `N5torch8autograd9generated14AddmmBackward0E`; its
/// line 0).
pub const AUTOGRAD_NODE_FILE: &str = "<autograd>";

/// A Python function whose frames appear in stacks: where it is defined.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct PyCode {
    pub id: PyCodeId,
    /// `co_filename`, as the interpreter has it (usually absolute).
    pub file: String,
    /// `co_qualname` (`Class.method`; `co_name` before Python 3.11).
    pub function: String,
    /// `co_firstlineno`.
    pub first_line: u32,
}

impl Kind for PyCode {
    fn encode(&self, e: &mut Enc, _base: u64) {
        let c = self;
        e.var(c.id.0.into());
        e.str(&c.file);
        e.str(&c.function);
        e.var(c.first_line.into());
    }

    fn decode(d: &mut Dec, _base: u64) -> Result<Self, DecodeError> {
        Ok(PyCode {
            id: PyCodeId(d.var32()?),
            file: d.string()?,
            function: d.string()?,
            first_line: d.var32()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let c = self;
        write!(
            l,
            "pycode id={} function={} file={} first_line={}",
            c.id.0,
            q(&c.function),
            q(&c.file),
            c.first_line
        )
    }
}

/// Framework allocators whose inside the collector sees (`AllocatorEvent`).
pub mod allocator {
    /// PyTorch's CUDA caching allocator (the default `native` backend).
    pub const TORCH_CACHING: u8 = 1;
    /// PyTorch's `cudaMallocAsync` backend: its tensors are CUDA's own
    /// stream-ordered allocations; only its out-of-memory errors against
    /// the memory fraction come as `AllocatorEvent`s.
    pub const TORCH_ASYNC_BACKEND: u8 = 2;

    pub fn name(id: u8) -> &'static str {
        match id {
            TORCH_CACHING => "PyTorch caching allocator",
            TORCH_ASYNC_BACKEND => "PyTorch (cudaMallocAsync backend)",
            _ => "unknown allocator",
        }
    }
}

/// What happened inside a framework allocator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize), serde(transparent))]
pub struct AllocatorAction(pub u8);

impl AllocatorAction {
    /// A block (a tensor's memory) handed out; `bytes` is the size asked for.
    pub const ALLOC: AllocatorAction = AllocatorAction(1);
    /// The program let go of a block (`memory_allocated` drops here).
    pub const FREE_REQUESTED: AllocatorAction = AllocatorAction(2);
    /// The block is back in the cache (after the streams that used it are
    /// done with it); its space is free inside its segment from here.
    pub const FREE_COMPLETED: AllocatorAction = AllocatorAction(3);
    /// A segment obtained from the driver (`cudaMalloc`).
    pub const SEGMENT_ALLOC: AllocatorAction = AllocatorAction(4);
    /// A segment given back to the driver (`empty_cache`, or freeing the
    /// cache to retry after an out-of-memory).
    pub const SEGMENT_FREE: AllocatorAction = AllocatorAction(5);
    /// Pages mapped into an expandable segment.
    pub const SEGMENT_MAP: AllocatorAction = AllocatorAction(6);
    /// Pages unmapped from an expandable segment.
    pub const SEGMENT_UNMAP: AllocatorAction = AllocatorAction(7);
    /// The allocator raised an out-of-memory error: `bytes` is the request
    /// (rounded as the allocator rounds it), `device_free` what the driver
    /// said was free.
    pub const OOM: AllocatorAction = AllocatorAction(8);
    /// The allocator's report of that error (its OOM observers): `bytes` is
    /// what it tried to obtain from the driver, `limit` what it may hold
    /// (the memory fraction's bytes when one is set, else the device's
    /// total), `device_free` as in `OOM`.
    pub const OOM_REPORT: AllocatorAction = AllocatorAction(9);
    /// The program took a snapshot of the allocator
    /// (`torch.cuda.memory._snapshot()`): the state at this instant is the
    /// one the snapshot shows.
    pub const SNAPSHOT: AllocatorAction = AllocatorAction(10);
    /// `FREE_REQUESTED` and `FREE_COMPLETED` at once: the block went back
    /// to the cache in the same call that let go of it (no other stream
    /// was using it), the common case. One record instead of two saves a
    /// third of a training step's allocator events.
    pub const FREE: AllocatorAction = AllocatorAction(11);

    const NAMES: &'static [(AllocatorAction, &'static str)] = &[
        (Self::ALLOC, "alloc"),
        (Self::FREE_REQUESTED, "free_requested"),
        (Self::FREE_COMPLETED, "free_completed"),
        (Self::SEGMENT_ALLOC, "segment_alloc"),
        (Self::SEGMENT_FREE, "segment_free"),
        (Self::SEGMENT_MAP, "segment_map"),
        (Self::SEGMENT_UNMAP, "segment_unmap"),
        (Self::OOM, "oom"),
        (Self::OOM_REPORT, "oom_report"),
        (Self::SNAPSHOT, "snapshot"),
        (Self::FREE, "free"),
    ];

    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(a, _)| *a == self)
            .map_or("unknown", |(_, n)| n)
    }

    /// Whether an event of this action carries `device_free` and `limit`
    /// (an out-of-memory error, or the allocator's report of one).
    pub fn has_oom_fields(self) -> bool {
        self == Self::OOM || self == Self::OOM_REPORT
    }
}

/// One event inside a framework allocator, seen on the thread that caused
/// it (PyTorch calls the collector's trace tracker with its allocator lock
/// held). Addresses are device addresses, as in `Memory` records: segments
/// match the driver allocations (or VMM mappings) that back them.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct AllocatorEvent {
    pub time: Nanos,
    /// `allocator::*`.
    pub allocator: u8,
    pub action: AllocatorAction,
    pub device: u32,
    pub address: u64,
    pub bytes: Bytes,
    /// The CUDA stream the block or segment belongs to.
    pub stream: u64,
    /// Private memory pool: a CUDA graph's own in the low 32 bits, a
    /// `torch.cuda.MemPool` in the high 32 (FORMAT.md); 0 = the default pools.
    pub pool: u64,
    pub tid: u32,
    /// Allocations, segment allocations and maps, and OOMs carry the stack;
    /// frees carry 0.
    pub stack: StackId,
    /// `OOM` and `OOM_REPORT` only: free device memory the driver reported.
    pub device_free: u64,
    /// `OOM_REPORT` only: bytes the allocator may hold.
    pub limit: u64,
}

impl Kind for AllocatorEvent {
    fn encode(&self, e: &mut Enc, base: u64) {
        let a = self;
        put_time(e, a.time, base);
        e.u8(a.allocator);
        e.u8(a.action.0);
        e.var(a.device.into());
        e.var(a.address);
        e.var(a.bytes.0);
        e.var(a.stream);
        e.var(a.pool);
        e.var(a.tid.into());
        e.var(a.stack.0.into());
        if a.action.has_oom_fields() {
            e.var(a.device_free);
            e.var(a.limit);
        }
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        decode_allocator_event(d, base)
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let a = self;
        let _ = write!(
            l,
            "allocator_event t={} allocator={} {} dev={} addr={} bytes={} stream={} pool={} tid={} stack={}",
            a.time.0, a.allocator, a.action.name(), a.device, hex(a.address), a.bytes.0,
            hex(a.stream), a.pool, a.tid, a.stack.0
        );
        if a.action.has_oom_fields() {
            let _ = write!(l, " device_free={} limit={}", a.device_free, a.limit);
        }
        Ok(())
    }
}

/// A framework allocator in the process, and whether the collector sees
/// inside it.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct AllocatorInfo {
    pub time: Nanos,
    /// `allocator::*`.
    pub allocator: u8,
    /// The library that holds it (e.g. `.../torch/lib/libc10_cuda.so`).
    pub library: String,
    /// Its settings as the program set them (`PYTORCH_CUDA_ALLOC_CONF`).
    pub settings: String,
    /// Whether its events are recorded from here on.
    pub attached: bool,
    /// Why not, or what was attached.
    pub detail: String,
}

impl Kind for AllocatorInfo {
    fn encode(&self, e: &mut Enc, base: u64) {
        let a = self;
        put_time(e, a.time, base);
        e.u8(a.allocator);
        e.str(&a.library);
        e.str(&a.settings);
        e.bool(a.attached);
        e.str(&a.detail);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(AllocatorInfo {
            time: get_time(d, base)?,
            allocator: d.u8()?,
            library: d.string()?,
            settings: d.string()?,
            attached: d.bool()?,
            detail: d.string()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let a = self;
        write!(
            l,
            "allocator t={} allocator={} attached={} library={} settings={} detail={}",
            a.time.0,
            a.allocator,
            a.attached,
            q(&a.library),
            q(&a.settings),
            q(&a.detail)
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct StackDef {
    pub id: StackId,
    /// Innermost first.
    pub frames: Vec<Frame>,
    /// True when unwinding stopped early (depth limit or unknown code).
    pub truncated: bool,
}

impl Kind for StackDef {
    fn encode(&self, e: &mut Enc, _base: u64) {
        let s = self;
        e.var(s.id.0.into());
        e.bool(s.truncated);
        e.var(s.frames.len() as u64);
        // Native frames are delta-coded against the previous native
        // frame: return addresses of one stack cluster in few modules.
        let mut prev = 0u64;
        for f in &s.frames {
            match *f {
                Frame::Native(a) => {
                    e.u8(0);
                    e.ivar(a.wrapping_sub(prev) as i64);
                    prev = a;
                }
                Frame::Python { code, line } => {
                    e.u8(1);
                    e.var(code.0.into());
                    e.var(line.into());
                }
            }
        }
    }

    fn decode(d: &mut Dec, _base: u64) -> Result<Self, DecodeError> {
        Ok({
            let id = StackId(d.var32()?);
            let truncated = d.bool()?;
            let n = d.count(2)?;
            let mut frames = Vec::with_capacity(n);
            let mut prev = 0u64;
            for _ in 0..n {
                frames.push(match d.u8()? {
                    0 => {
                        prev = prev.wrapping_add(d.ivar()? as u64);
                        Frame::Native(prev)
                    }
                    1 => Frame::Python {
                        code: PyCodeId(d.var32()?),
                        line: d.var32()?,
                    },
                    k => return Err(DecodeError::BadValue("frame kind", k.into())),
                });
            }
            StackDef {
                id,
                frames,
                truncated,
            }
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let s = self;
        let frames: Vec<String> = s
            .frames
            .iter()
            .map(|f| match f {
                Frame::Native(a) => hex(*a),
                Frame::Python { code, line } => format!("py:{}:{line}", code.0),
            })
            .collect();
        write!(
            l,
            "stack id={} truncated={} frames=[{}]",
            s.id.0,
            s.truncated,
            frames.join(" ")
        )
    }
}

/// The CUDA driver API functions the collector watches, numbered for the
/// trace (stable; CUPTI's callback ids are not part of the format).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize), serde(transparent))]
pub struct ApiFunc(pub u16);

impl ApiFunc {
    pub const MEM_ALLOC: ApiFunc = ApiFunc(1);
    pub const MEM_ALLOC_PITCH: ApiFunc = ApiFunc(2);
    pub const MEM_ALLOC_MANAGED: ApiFunc = ApiFunc(3);
    pub const MEM_ALLOC_HOST: ApiFunc = ApiFunc(4);
    pub const MEM_HOST_ALLOC: ApiFunc = ApiFunc(5);
    pub const MEM_ALLOC_ASYNC: ApiFunc = ApiFunc(6);
    pub const MEM_ALLOC_FROM_POOL_ASYNC: ApiFunc = ApiFunc(7);
    pub const ARRAY_CREATE: ApiFunc = ApiFunc(8);
    pub const ARRAY_3D_CREATE: ApiFunc = ApiFunc(9);
    pub const MIPMAPPED_ARRAY_CREATE: ApiFunc = ApiFunc(10);
    pub const MEM_CREATE: ApiFunc = ApiFunc(11);
    pub const MEM_MAP: ApiFunc = ApiFunc(12);
    pub const MEM_ADDRESS_RESERVE: ApiFunc = ApiFunc(13);
    pub const MEM_HOST_REGISTER: ApiFunc = ApiFunc(14);
    pub const GRAPH_ADD_MEM_ALLOC_NODE: ApiFunc = ApiFunc(15);
    pub const MEM_FREE: ApiFunc = ApiFunc(20);
    pub const MEM_FREE_HOST: ApiFunc = ApiFunc(21);
    pub const MEM_FREE_ASYNC: ApiFunc = ApiFunc(22);
    pub const ARRAY_DESTROY: ApiFunc = ApiFunc(23);
    pub const MIPMAPPED_ARRAY_DESTROY: ApiFunc = ApiFunc(24);
    pub const MEM_RELEASE: ApiFunc = ApiFunc(25);
    pub const MEM_UNMAP: ApiFunc = ApiFunc(26);
    pub const MEM_ADDRESS_FREE: ApiFunc = ApiFunc(27);
    pub const MEM_HOST_UNREGISTER: ApiFunc = ApiFunc(28);
    pub const GRAPH_ADD_MEM_FREE_NODE: ApiFunc = ApiFunc(29);
    pub const MEM_POOL_CREATE: ApiFunc = ApiFunc(30);
    pub const MEM_POOL_DESTROY: ApiFunc = ApiFunc(31);
    pub const MEM_POOL_TRIM_TO: ApiFunc = ApiFunc(32);
    /// Maps memory another process allocated and shared (CUDA IPC): not an
    /// allocation of this process.
    pub const IPC_OPEN_MEM_HANDLE: ApiFunc = ApiFunc(40);
    pub const IPC_CLOSE_MEM_HANDLE: ApiFunc = ApiFunc(41);
    /// A copy from host memory to the device (`cuMemcpyHtoD*`, its
    /// stream-ordered forms): `address` the destination, `handle` the
    /// source, `bytes` its size. The evidence that a tensor holds data
    /// the program moved to the device (an input).
    pub const MEMCPY_HTOD: ApiFunc = ApiFunc(50);
    /// A copy between addresses of unified addressing (`cuMemcpy`,
    /// `cuMemcpyAsync`, what the CUDA runtime's `cudaMemcpy*` calls with
    /// most kinds): the same fields; the direction is where the two
    /// addresses lie.
    pub const MEMCPY: ApiFunc = ApiFunc(51);

    const NAMES: &'static [(ApiFunc, &'static str)] = &[
        (Self::MEM_ALLOC, "cuMemAlloc"),
        (Self::MEM_ALLOC_PITCH, "cuMemAllocPitch"),
        (Self::MEM_ALLOC_MANAGED, "cuMemAllocManaged"),
        (Self::MEM_ALLOC_HOST, "cuMemAllocHost"),
        (Self::MEM_HOST_ALLOC, "cuMemHostAlloc"),
        (Self::MEM_ALLOC_ASYNC, "cuMemAllocAsync"),
        (Self::MEM_ALLOC_FROM_POOL_ASYNC, "cuMemAllocFromPoolAsync"),
        (Self::ARRAY_CREATE, "cuArrayCreate"),
        (Self::ARRAY_3D_CREATE, "cuArray3DCreate"),
        (Self::MIPMAPPED_ARRAY_CREATE, "cuMipmappedArrayCreate"),
        (Self::MEM_CREATE, "cuMemCreate"),
        (Self::MEM_MAP, "cuMemMap"),
        (Self::MEM_ADDRESS_RESERVE, "cuMemAddressReserve"),
        (Self::MEM_HOST_REGISTER, "cuMemHostRegister"),
        (Self::GRAPH_ADD_MEM_ALLOC_NODE, "cuGraphAddMemAllocNode"),
        (Self::MEM_FREE, "cuMemFree"),
        (Self::MEM_FREE_HOST, "cuMemFreeHost"),
        (Self::MEM_FREE_ASYNC, "cuMemFreeAsync"),
        (Self::ARRAY_DESTROY, "cuArrayDestroy"),
        (Self::MIPMAPPED_ARRAY_DESTROY, "cuMipmappedArrayDestroy"),
        (Self::MEM_RELEASE, "cuMemRelease"),
        (Self::MEM_UNMAP, "cuMemUnmap"),
        (Self::MEM_ADDRESS_FREE, "cuMemAddressFree"),
        (Self::MEM_HOST_UNREGISTER, "cuMemHostUnregister"),
        (Self::GRAPH_ADD_MEM_FREE_NODE, "cuGraphAddMemFreeNode"),
        (Self::MEM_POOL_CREATE, "cuMemPoolCreate"),
        (Self::MEM_POOL_DESTROY, "cuMemPoolDestroy"),
        (Self::MEM_POOL_TRIM_TO, "cuMemPoolTrimTo"),
        (Self::IPC_OPEN_MEM_HANDLE, "cuIpcOpenMemHandle"),
        (Self::IPC_CLOSE_MEM_HANDLE, "cuIpcCloseMemHandle"),
        (Self::MEMCPY_HTOD, "cuMemcpyHtoD"),
        (Self::MEMCPY, "cuMemcpy"),
    ];

    pub fn name(self) -> Option<&'static str> {
        Self::NAMES
            .iter()
            .find(|(f, _)| *f == self)
            .map(|(_, n)| *n)
    }

    /// Calls that obtain memory or address space (their stack is the
    /// allocation site); the others give it back, manage pools or copy.
    #[inline]
    pub fn allocates(self) -> bool {
        (1..20).contains(&self.0)
    }

    /// Copies (`MEMCPY_HTOD`, `MEMCPY`).
    #[inline]
    pub fn copies(self) -> bool {
        (50..60).contains(&self.0)
    }
}

/// One call of a watched driver API function, seen on the calling thread when
/// it returned. Failed allocations exist only here (CUPTI's activity API has
/// no record for them).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct ApiCall {
    pub time: Nanos,
    /// Time spent inside the call.
    pub duration: Nanos,
    pub tid: u32,
    pub func: ApiFunc,
    /// CUPTI's callback id (diagnostics only).
    pub cbid: u32,
    pub correlation: u32,
    /// CUresult the call returned (0 = success, 2 = out of memory).
    pub result: u32,
    /// Requested bytes (allocations, reservations, maps, trims).
    pub bytes: Bytes,
    /// The address returned (allocations) or passed in (frees, maps); a
    /// copy's destination.
    pub address: u64,
    /// Pool handle for pool calls, allocation handle for VMM calls, a
    /// copy's source; 0 otherwise.
    pub handle: u64,
    pub stream: u64,
    pub stack: StackId,
    /// Made on one of the collector's own threads.
    pub internal: bool,
}

impl Kind for ApiCall {
    fn encode(&self, e: &mut Enc, base: u64) {
        let a = self;
        put_time(e, a.time, base);
        e.var(a.duration.0);
        e.var(a.tid.into());
        e.var(a.func.0.into());
        e.var(a.cbid.into());
        e.var(a.correlation.into());
        e.var(a.result.into());
        e.var(a.bytes.0);
        e.var(a.address);
        e.var(a.handle);
        e.var(a.stream);
        e.var(a.stack.0.into());
        e.bool(a.internal);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        decode_api(d, base)
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let a = self;
        write!(
            l,
            "api t={} dur={} tid={} {} corr={} result={} bytes={} addr={} handle={} stream={} stack={}{}",
            a.time.0, a.duration.0, a.tid,
            a.func.name().map(str::to_string).unwrap_or_else(|| format!("func{}", a.func.0)),
            a.correlation, a.result, a.bytes.0, hex(a.address), hex(a.handle), hex(a.stream),
            a.stack.0, if a.internal { " internal" } else { "" }
        )
    }
}

/// CUPTI memory activity kinds, as CUPTI numbers them.
pub mod memory_kind {
    pub const UNKNOWN: u8 = 0;
    pub const PAGEABLE: u8 = 1;
    pub const PINNED: u8 = 2;
    pub const DEVICE: u8 = 3;
    pub const ARRAY: u8 = 4;
    pub const MANAGED: u8 = 5;
    pub const DEVICE_STATIC: u8 = 6;
    pub const MANAGED_STATIC: u8 = 7;

    pub fn name(kind: u8) -> &'static str {
        match kind {
            PAGEABLE => "pageable",
            PINNED => "pinned",
            DEVICE => "device",
            ARRAY => "array",
            MANAGED => "managed",
            DEVICE_STATIC => "device_static",
            MANAGED_STATIC => "managed_static",
            _ => "unknown",
        }
    }
}

/// A device-side memory allocation or release (CUPTI MEMORY2 activity).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct MemoryEvent {
    pub time: Nanos,
    /// true = allocation, false = release.
    pub alloc: bool,
    pub kind: u8,
    pub address: u64,
    pub bytes: Bytes,
    pub device: u32,
    /// 0xFFFF_FFFF for VMM mappings (no context).
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub pc: u64,
    pub is_async: bool,
    /// CUPTI_ACTIVITY_MEMORY_POOL_TYPE_*: 0 invalid/none, 1 local, 2 imported.
    pub pool_type: u8,
    pub pool_address: u64,
    pub pool_release_threshold: u64,
    /// Pool size (local pools) at this moment.
    pub pool_size: u64,
    pub pool_utilized: u64,
}

impl Kind for MemoryEvent {
    fn encode(&self, e: &mut Enc, base: u64) {
        let m = self;
        put_time(e, m.time, base);
        e.bool(m.alloc);
        e.u8(m.kind);
        e.var(m.address);
        e.var(m.bytes.0);
        e.var(m.device.into());
        e.var(m.context.into());
        e.var(m.stream.into());
        e.var(m.correlation.into());
        e.var(m.pc);
        e.bool(m.is_async);
        e.u8(m.pool_type);
        if m.pool_type != 0 {
            e.var(m.pool_address);
            e.var(m.pool_release_threshold);
            e.var(m.pool_size);
            e.var(m.pool_utilized);
        }
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        decode_memory(d, base)
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let m = self;
        let _ = write!(
            l,
            "memory t={} {} kind={} addr={} bytes={} dev={} ctx={} stream={} corr={} pc={}{}",
            m.time.0,
            if m.alloc { "alloc" } else { "free" },
            memory_kind::name(m.kind),
            hex(m.address),
            m.bytes.0,
            m.device,
            m.context,
            m.stream,
            m.correlation,
            hex(m.pc),
            if m.is_async { " async" } else { "" }
        );
        if m.pool_type != 0 {
            let _ = write!(
                l,
                " pool_type={} pool={} pool_size={} pool_utilized={} release_threshold={}",
                m.pool_type,
                hex(m.pool_address),
                m.pool_size,
                m.pool_utilized,
                m.pool_release_threshold
            );
        }
        Ok(())
    }
}

/// A memory pool operation (CUPTI MEMORY_POOL activity).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct PoolEvent {
    pub time: Nanos,
    /// 1 created, 2 destroyed, 3 trimmed (CUPTI's numbering).
    pub op: u8,
    pub pool_type: u8,
    pub address: u64,
    /// Reserved size of the pool after the operation.
    pub size: Bytes,
    pub release_threshold: u64,
    pub min_bytes_to_keep: u64,
    pub utilized: Bytes,
    pub device: u32,
    pub correlation: u32,
}

impl Kind for PoolEvent {
    fn encode(&self, e: &mut Enc, base: u64) {
        let p = self;
        put_time(e, p.time, base);
        e.u8(p.op);
        e.u8(p.pool_type);
        e.var(p.address);
        e.var(p.size.0);
        e.var(p.release_threshold);
        e.var(p.min_bytes_to_keep);
        e.var(p.utilized.0);
        e.var(p.device.into());
        e.var(p.correlation.into());
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        decode_pool(d, base)
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let p = self;
        write!(
            l,
            "pool t={} op={} type={} addr={} size={} utilized={} release_threshold={} min_keep={} dev={} corr={}",
            p.time.0,
            match p.op { 1 => "created", 2 => "destroyed", 3 => "trimmed", _ => "unknown" },
            p.pool_type, hex(p.address), p.size.0, p.utilized.0, p.release_threshold,
            p.min_bytes_to_keep, p.device, p.correlation
        )
    }
}

/// One kernel execution on the device.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct KernelEvent {
    pub start: Nanos,
    pub end: Nanos,
    pub name: StringId,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub static_shared: u32,
    pub dynamic_shared: u32,
    pub registers: u32,
}

impl Kind for KernelEvent {
    fn encode(&self, e: &mut Enc, base: u64) {
        let k = self;
        put_time(e, k.start, base);
        e.var(k.end.0.wrapping_sub(k.start.0));
        e.var(k.name.0.into());
        e.var(k.device.into());
        e.var(k.context.into());
        e.var(k.stream.into());
        e.var(k.correlation.into());
        for v in k.grid.iter().chain(&k.block) {
            e.var((*v).into());
        }
        e.var(k.static_shared.into());
        e.var(k.dynamic_shared.into());
        e.var(k.registers.into());
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        decode_kernel(d, base)
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let k = self;
        write!(
            l,
            "kernel start={} end={} name={} dev={} ctx={} stream={} corr={} grid={:?} block={:?} smem={}+{} regs={}",
            k.start.0, k.end.0, k.name.0, k.device, k.context, k.stream, k.correlation, k.grid,
            k.block, k.static_shared, k.dynamic_shared, k.registers
        )
    }
}

/// One kernel launch, seen on the launching thread when the program made it
/// (`record --kernels launches`): the kernel runs on the device later, for
/// a time this record does not know.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct KernelLaunch {
    pub time: Nanos,
    pub tid: u32,
    pub name: StringId,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared: u32,
}

impl Kind for KernelLaunch {
    fn encode(&self, e: &mut Enc, base: u64) {
        let k = self;
        put_time(e, k.time, base);
        e.var(k.tid.into());
        e.var(k.name.0.into());
        e.var(k.device.into());
        e.var(k.context.into());
        e.var(k.stream.into());
        e.var(k.correlation.into());
        for v in k.grid.iter().chain(&k.block) {
            e.var((*v).into());
        }
        e.var(k.dynamic_shared.into());
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        decode_kernel_launch(d, base)
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let k = self;
        write!(
            l,
            "kernel_launch t={} tid={} name={} dev={} ctx={} stream={} corr={} grid={:?} block={:?} smem={}",
            k.time.0, k.tid, k.name.0, k.device, k.context, k.stream, k.correlation, k.grid,
            k.block, k.dynamic_shared
        )
    }
}

/// The device's own view of its memory (NVML, as `nvidia-smi` shows it),
/// sampled by the collector of one process.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct DeviceMemory {
    pub time: Nanos,
    /// The CUDA device number in the sampling process.
    pub device: u32,
    /// Why it was sampled: `device_memory::*`.
    pub reason: u8,
    pub total: Bytes,
    /// Used on the device by everyone (`nvidia-smi`'s Memory-Usage): every
    /// process's memory and what the driver keeps for itself.
    pub used: Bytes,
    pub free: Bytes,
    /// What the driver keeps for itself, counted in neither `used` nor
    /// `free` (NVML 11.6+; 0 from older drivers, whose `used` includes it).
    pub reserved: Bytes,
    /// The processes NVML lists on the device with what it charges each
    /// (their CUDA contexts, allocations and library state); pids as NVML
    /// sees them (the host's, in a container).
    pub processes: Vec<ProcessMemory>,
}

impl Kind for DeviceMemory {
    fn encode(&self, e: &mut Enc, base: u64) {
        let m = self;
        put_time(e, m.time, base);
        e.var(m.device.into());
        e.u8(m.reason);
        e.var(m.total.0);
        e.var(m.used.0);
        e.var(m.free.0);
        e.var(m.reserved.0);
        e.var(m.processes.len() as u64);
        for p in &m.processes {
            e.var(p.pid.into());
            e.var(p.used.0);
        }
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(DeviceMemory {
            time: get_time(d, base)?,
            device: d.var32()?,
            reason: d.u8()?,
            total: Bytes(d.var()?),
            used: Bytes(d.var()?),
            free: Bytes(d.var()?),
            reserved: Bytes(d.var()?),
            processes: {
                let n = d.var()?;
                let mut v = Vec::new();
                for _ in 0..n {
                    v.push(ProcessMemory {
                        pid: d.var32()?,
                        used: Bytes(d.var()?),
                    });
                }
                v
            },
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let m = self;
        write!(
            l,
            "device_memory t={} dev={} reason={} total={} used={} free={} reserved={} processes={}",
            m.time.0,
            m.device,
            m.reason,
            m.total.0,
            m.used.0,
            m.free.0,
            m.reserved.0,
            m.processes
                .iter()
                .map(|p| format!("{}:{}", p.pid, p.used.0))
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

/// One process's memory on a device, as NVML charges it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct ProcessMemory {
    pub pid: u32,
    /// `u64::MAX` when NVML could not say.
    pub used: Bytes,
}

/// The device of the calling thread's current context when a watched
/// allocation call failed: written just before that call's `Api` record
/// (which does not say), at the call's start, so that the failure is
/// charged to its device in a process that uses several.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct CallDevice {
    pub time: Nanos,
    pub tid: u32,
    pub device: u32,
}

impl Kind for CallDevice {
    fn encode(&self, e: &mut Enc, base: u64) {
        let c = self;
        put_time(e, c.time, base);
        e.var(c.tid.into());
        e.var(c.device.into());
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(CallDevice {
            time: get_time(d, base)?,
            tid: d.var32()?,
            device: d.var32()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let c = self;
        write!(
            l,
            "call_device t={} tid={} dev={}",
            c.time.0, c.tid, c.device
        )
    }
}

/// How much of a framework's own memory pool was in use, as the framework
/// itself reports it (JAX's `memory_stats()`, CuPy's pool): the inside of a
/// pool whose sub-allocations CUDA never sees. Sampled in the program by the
/// Python bootstrap `record` puts on the path (`collector/python/`).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct PoolUsage {
    pub time: Nanos,
    /// The CUDA device number in the sampling process.
    pub device: u32,
    /// `pool_usage::JAX`, `pool_usage::CUPY`.
    pub framework: u8,
    /// `pool_usage::SAMPLED` or `pool_usage::EXIT`.
    pub reason: u8,
    /// Bytes of the framework's arrays in the pool.
    pub in_use: Bytes,
    /// The most ever in use, as the framework counts it (`u64::MAX`: the
    /// framework does not keep it).
    pub peak_in_use: Bytes,
    /// What the pool holds from CUDA.
    pub pool: Bytes,
    /// The most the pool may hold (`u64::MAX`: no limit known).
    pub limit: Bytes,
}

impl Kind for PoolUsage {
    fn encode(&self, e: &mut Enc, base: u64) {
        let u = self;
        put_time(e, u.time, base);
        e.var(u.device.into());
        e.u8(u.framework);
        e.u8(u.reason);
        e.var(u.in_use.0);
        e.var(u.peak_in_use.0);
        e.var(u.pool.0);
        e.var(u.limit.0);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(PoolUsage {
            time: get_time(d, base)?,
            device: d.var32()?,
            framework: d.u8()?,
            reason: d.u8()?,
            in_use: Bytes(d.var()?),
            peak_in_use: Bytes(d.var()?),
            pool: Bytes(d.var()?),
            limit: Bytes(d.var()?),
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let u = self;
        write!(
            l,
            "pool_usage t={} dev={} framework={} reason={} in_use={} peak_in_use={} pool={} limit={}",
            u.time.0, u.device, u.framework, u.reason, u.in_use.0, u.peak_in_use.0, u.pool.0, u.limit.0
        )
    }
}

/// `PoolUsage`'s codes.
pub mod pool_usage {
    /// JAX's (XLA's BFC allocator) `Device.memory_stats()`.
    pub const JAX: u8 = 1;
    /// CuPy's default memory pool (`used_bytes`, `total_bytes`).
    pub const CUPY: u8 = 2;
    /// Read at an interval while the program ran.
    pub const SAMPLED: u8 = 0;
    /// Read as the program's interpreter was exiting.
    pub const EXIT: u8 = 1;
    /// "not known".
    pub const UNKNOWN: u64 = u64::MAX;
}

/// Why a `DeviceMemory` was sampled.
pub mod device_memory {
    /// The collector's periodic flush.
    pub const TICK: u8 = 0;
    /// An allocation failed (right after it returned).
    pub const FAILED_ALLOCATION: u8 = 1;
    /// The process is ending (what it still holds is in `process_used`).
    pub const EXIT: u8 = 2;
}

/// Cumulative counts of records lost so far. The last one in a stream wins.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct DropCounts {
    pub time: Nanos,
    /// Activity records CUPTI reported as dropped.
    pub cupti: u64,
    /// Records the collector dropped because its writer could not keep up.
    pub collector: u64,
}

impl Kind for DropCounts {
    fn encode(&self, e: &mut Enc, base: u64) {
        let d = self;
        put_time(e, d.time, base);
        e.var(d.cupti);
        e.var(d.collector);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(DropCounts {
            time: get_time(d, base)?,
            cupti: d.var()?,
            collector: d.var()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let d = self;
        write!(
            l,
            "dropped t={} cupti={} collector={}",
            d.time.0, d.cupti, d.collector
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct Message {
    pub time: Nanos,
    /// 0 info, 1 warning, 2 error.
    pub level: u8,
    pub text: String,
}

impl Kind for Message {
    fn encode(&self, e: &mut Enc, base: u64) {
        let m = self;
        put_time(e, m.time, base);
        e.u8(m.level);
        e.str(&m.text);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(Message {
            time: get_time(d, base)?,
            level: d.u8()?,
            text: d.string()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let m = self;
        write!(
            l,
            "message t={} {} {}",
            m.time.0,
            match m.level {
                0 => "info",
                1 => "warning",
                _ => "error",
            },
            q(&m.text)
        )
    }
}

/// The program finished a step (a training iteration): PyTorch's
/// optimizer stepped, or the program said so (`gmem_prof.step()`, or the C
/// call `gmem_prof_step`). Step `number` (1, 2, …, counted in the
/// process) is what happened since the step before it ended, or since the
/// process started.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct Step {
    pub time: Nanos,
    pub tid: u32,
    pub number: u64,
    /// `step::OPTIMIZER`, `step::PROGRAM`.
    pub source: u8,
}

impl Kind for Step {
    fn encode(&self, e: &mut Enc, base: u64) {
        put_time(e, self.time, base);
        e.var(self.tid.into());
        e.var(self.number);
        e.u8(self.source);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(Step {
            time: get_time(d, base)?,
            tid: d.var32()?,
            number: d.var()?,
            source: d.u8()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let s = self;
        write!(
            l,
            "step t={} tid={} number={} source={}",
            s.time.0, s.tid, s.number, s.source
        )
    }
}

/// `Step`'s sources.
pub mod step {
    /// PyTorch's optimizer stepped (its global post-step hook, which the
    /// Python bootstrap of `record` registers).
    pub const OPTIMIZER: u8 = 1;
    /// The program called `gmem_prof.step()` or `gmem_prof_step`.
    pub const PROGRAM: u8 = 2;
}

/// A range of the program's own began (NVTX: `nvtxRangePush*`,
/// `nvtxRangeStart*` and their domain forms; `torch.cuda.nvtx`, the `nvtx`
/// Python package). `id` (1, 2, … in the process) is what its
/// `RangeEnd` names. `domain` and `name` are `String` ids; domain 0 is
/// NVTX's default domain (no domain).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct RangeBegin {
    pub time: Nanos,
    pub tid: u32,
    pub id: u64,
    pub domain: StringId,
    pub name: StringId,
    /// `range::PUSHED` (nested on its thread: `depth` ranges of its
    /// domain were open on the thread when it was pushed) or
    /// `range::STARTED` (may end on another thread; `depth` 0).
    pub kind: u8,
    pub depth: u32,
}

impl Kind for RangeBegin {
    fn encode(&self, e: &mut Enc, base: u64) {
        put_time(e, self.time, base);
        e.var(self.tid.into());
        e.var(self.id);
        e.var(self.domain.0.into());
        e.var(self.name.0.into());
        e.u8(self.kind);
        e.var(self.depth.into());
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(RangeBegin {
            time: get_time(d, base)?,
            tid: d.var32()?,
            id: d.var()?,
            domain: StringId(d.var32()?),
            name: StringId(d.var32()?),
            kind: d.u8()?,
            depth: d.var32()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let r = self;
        write!(
            l,
            "range_begin t={} tid={} id={} domain={} name={} kind={} depth={}",
            r.time.0, r.tid, r.id, r.domain.0, r.name.0, r.kind, r.depth
        )
    }
}

/// `RangeBegin`'s kinds.
pub mod range {
    /// `nvtxRangePush*`: ended by the same thread's pop, innermost first.
    pub const PUSHED: u8 = 1;
    /// `nvtxRangeStart*`: ended by `nvtxRangeEnd` with its id, from any
    /// thread.
    pub const STARTED: u8 = 2;
}

/// The range `id` ended (`nvtxRangePop`, `nvtxRangeEnd`), on thread `tid`.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct RangeEnd {
    pub time: Nanos,
    pub tid: u32,
    pub id: u64,
}

impl Kind for RangeEnd {
    fn encode(&self, e: &mut Enc, base: u64) {
        put_time(e, self.time, base);
        e.var(self.tid.into());
        e.var(self.id);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(RangeEnd {
            time: get_time(d, base)?,
            tid: d.var32()?,
            id: d.var()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let r = self;
        write!(l, "range_end t={} tid={} id={}", r.time.0, r.tid, r.id)
    }
}

/// An instant the program marked (NVTX: `nvtxMark*`, `nvtxDomainMarkEx`).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct Mark {
    pub time: Nanos,
    pub tid: u32,
    pub domain: StringId,
    pub name: StringId,
}

impl Kind for Mark {
    fn encode(&self, e: &mut Enc, base: u64) {
        put_time(e, self.time, base);
        e.var(self.tid.into());
        e.var(self.domain.0.into());
        e.var(self.name.0.into());
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(Mark {
            time: get_time(d, base)?,
            tid: d.var32()?,
            domain: StringId(d.var32()?),
            name: StringId(d.var32()?),
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let m = self;
        write!(
            l,
            "mark t={} tid={} domain={} name={}",
            m.time.0, m.tid, m.domain.0, m.name.0
        )
    }
}

/// The recorded window opened or closed (`record --steps`,
/// `--capture-range`, `--delay`, `--duration`, `--window-signal`): the
/// process ran before and after, unrecorded. When it opens, what was live
/// then (allocations, tensors, segments, open ranges, each with its stack)
/// has just been written, timed one nanosecond before it, so the trace
/// holds exactly what the window began with; after it closes, nothing of
/// later is written (the process's end is timed at the close).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct WindowEdge {
    pub time: Nanos,
    /// true: the window opened here; false: it closed.
    pub open: bool,
    /// What the window is, in words ("steps 3 to 5", "the first NVTX range
    /// \"train\"").
    pub what: String,
}

impl Kind for WindowEdge {
    fn encode(&self, e: &mut Enc, base: u64) {
        put_time(e, self.time, base);
        e.u8(u8::from(self.open));
        e.str(&self.what);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        Ok(WindowEdge {
            time: get_time(d, base)?,
            open: d.u8()? != 0,
            what: d.string()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let w = self;
        let edge = if w.open { "opened" } else { "closed" };
        write!(l, "window t={} {edge} {}", w.time.0, q(&w.what))
    }
}

/// The collector shut down cleanly in this process.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct ProcessEnd {
    pub time: Nanos,
}

impl Kind for ProcessEnd {
    fn encode(&self, e: &mut Enc, base: u64) {
        let p = self;
        put_time(e, p.time, base);
    }

    fn decode(d: &mut Dec, base: u64) -> Result<Self, DecodeError> {
        decode_process_end(d, base)
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let p = self;
        write!(l, "process_end t={}", p.time.0)
    }
}

/// Source location of one frame (one entry per inlined function, innermost
/// first), resolved on the recording machine.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct SymbolInfo {
    pub address: u64,
    pub module: u32,
    /// Offset of the address in the module's ELF address space.
    pub module_offset: u64,
    pub frames: Vec<SymbolFrame>,
}

impl Kind for SymbolInfo {
    fn encode(&self, e: &mut Enc, _base: u64) {
        let s = self;
        e.var(s.address);
        e.var(s.module.into());
        e.var(s.module_offset);
        e.var(s.frames.len() as u64);
        for f in &s.frames {
            e.str(&f.function);
            e.str(&f.file);
            e.var(f.line.into());
            e.var(f.column.into());
        }
    }

    fn decode(d: &mut Dec, _base: u64) -> Result<Self, DecodeError> {
        Ok({
            let address = d.var()?;
            let module = d.var32()?;
            let module_offset = d.var()?;
            let n = d.count(4)?;
            let mut frames = Vec::with_capacity(n);
            for _ in 0..n {
                frames.push(SymbolFrame {
                    function: d.string()?,
                    file: d.string()?,
                    line: d.var32()?,
                    column: d.var32()?,
                });
            }
            SymbolInfo {
                address,
                module,
                module_offset,
                frames,
            }
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let s = self;
        let frames: Vec<String> = s
            .frames
            .iter()
            .map(|f| format!("{} {}:{}", q(&f.function), q(&f.file), f.line))
            .collect();
        write!(
            l,
            "symbol addr={} module={} offset={} frames=[{}]",
            hex(s.address),
            s.module,
            hex(s.module_offset),
            frames.join(", ")
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct SymbolFrame {
    pub function: String,
    pub file: String,
    pub line: u32,
    pub column: u32,
}

/// Last record of a complete trace.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct Trailer {
    pub chunks: u64,
    pub records: u64,
}

impl Kind for Trailer {
    fn encode(&self, e: &mut Enc, _base: u64) {
        let t = self;
        e.var(t.chunks);
        e.var(t.records);
    }

    fn decode(d: &mut Dec, _base: u64) -> Result<Self, DecodeError> {
        Ok(Trailer {
            chunks: d.var()?,
            records: d.var()?,
        })
    }

    fn dump(&self, l: &mut String) -> fmt::Result {
        let t = self;
        write!(l, "trailer chunks={} records={}", t.chunks, t.records)
    }
}

fn put_time(e: &mut Enc, t: Nanos, base: u64) {
    e.ivar(t.0.wrapping_sub(base) as i64);
}

// The frequent records, each decodable on its own so that a reader that
// wants only these (the analyzer's sweep) skips building a `Record`.

/// Decodes the body of an `API` record.
#[inline(always)]
pub(crate) fn decode_api(d: &mut impl Fields, base: u64) -> Result<ApiCall, DecodeError> {
    Ok(ApiCall {
        time: get_time(d, base)?,
        duration: Nanos(d.var()?),
        tid: d.var32()?,
        func: ApiFunc(u16::try_from(d.var()?).map_err(|_| DecodeError::OutOfRange)?),
        cbid: d.var32()?,
        correlation: d.var32()?,
        result: d.var32()?,
        bytes: Bytes(d.var()?),
        address: d.var()?,
        handle: d.var()?,
        stream: d.var()?,
        stack: StackId(d.var32()?),
        internal: d.bool()?,
    })
}

/// Decodes the body of a `MEMORY` record.
#[inline(always)]
pub(crate) fn decode_memory(d: &mut impl Fields, base: u64) -> Result<MemoryEvent, DecodeError> {
    let mut m = MemoryEvent {
        time: get_time(d, base)?,
        alloc: d.bool()?,
        kind: d.u8()?,
        address: d.var()?,
        bytes: Bytes(d.var()?),
        device: d.var32()?,
        context: d.var32()?,
        stream: d.var32()?,
        correlation: d.var32()?,
        pc: d.var()?,
        is_async: d.bool()?,
        pool_type: d.u8()?,
        ..Default::default()
    };
    if m.pool_type != 0 {
        m.pool_address = d.var()?;
        m.pool_release_threshold = d.var()?;
        m.pool_size = d.var()?;
        m.pool_utilized = d.var()?;
    }
    Ok(m)
}

/// Decodes the body of a `POOL` record.
#[inline(always)]
pub(crate) fn decode_pool(d: &mut impl Fields, base: u64) -> Result<PoolEvent, DecodeError> {
    Ok(PoolEvent {
        time: get_time(d, base)?,
        op: d.u8()?,
        pool_type: d.u8()?,
        address: d.var()?,
        size: Bytes(d.var()?),
        release_threshold: d.var()?,
        min_bytes_to_keep: d.var()?,
        utilized: Bytes(d.var()?),
        device: d.var32()?,
        correlation: d.var32()?,
    })
}

/// The leading fields of a `KERNEL` record: when and where it ran.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelSpan {
    pub start: Nanos,
    pub end: Nanos,
    pub name: StringId,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
}

/// Decodes only the leading fields of a `KERNEL` body (`KernelSpan`) and
/// leaves the rest unread: most of a kernel record is launch geometry, which
/// a reader of memory events has no use for.
#[inline(always)]
pub(crate) fn decode_kernel_span(
    d: &mut impl Fields,
    base: u64,
) -> Result<KernelSpan, DecodeError> {
    let start = get_time(d, base)?;
    Ok(KernelSpan {
        start,
        end: Nanos(start.0.wrapping_add(d.var()?)),
        name: StringId(d.var32()?),
        device: d.var32()?,
        context: d.var32()?,
        stream: d.var32()?,
    })
}

/// Decodes the body of a `KERNEL` record.
#[inline]
pub(crate) fn decode_kernel(d: &mut Dec, base: u64) -> Result<KernelEvent, DecodeError> {
    let KernelSpan {
        start,
        end,
        name,
        device,
        context,
        stream,
    } = decode_kernel_span(d, base)?;
    let correlation = d.var32()?;
    let mut dims = [0u32; 6];
    for v in &mut dims {
        *v = d.var32()?;
    }
    Ok(KernelEvent {
        start,
        end,
        name,
        device,
        context,
        stream,
        correlation,
        grid: [dims[0], dims[1], dims[2]],
        block: [dims[3], dims[4], dims[5]],
        static_shared: d.var32()?,
        dynamic_shared: d.var32()?,
        registers: d.var32()?,
    })
}

/// Decodes the body of a `PROCESS` record.
fn decode_process(d: &mut Dec, base: u64) -> Result<ProcessInfo, DecodeError> {
    let mut p = ProcessInfo {
        pid: d.var32()?,
        ppid: d.var32()?,
        start: get_time(d, base)?,
        hostname: d.string()?,
        exe: d.string()?,
        cmdline: {
            let n = d.count(1)?;
            (0..n).map(|_| d.string()).collect::<Result<_, _>>()?
        },
        collector_version: d.string()?,
        cupti_api_version: d.var32()?,
        cupti_path: d.string()?,
        driver_version: d.string()?,
        kernels_traced: d.bool()?,
        stacks_captured: d.bool()?,
        cupti_device_buffer_bytes: Bytes(d.var()?),
        collector_tids: {
            let n = d.count(1)?;
            (0..n).map(|_| d.var32()).collect::<Result<_, _>>()?
        },
        kernels_timed: false,
    };
    // Appended later: absent in older traces, which timed every kernel
    // they traced.
    p.kernels_timed = if d.is_empty() {
        p.kernels_traced
    } else {
        d.bool()?
    };
    Ok(p)
}

/// Decodes the body of a `KERNEL_LAUNCH` record.
#[inline]
pub(crate) fn decode_kernel_launch(
    d: &mut impl Fields,
    base: u64,
) -> Result<KernelLaunch, DecodeError> {
    let mut k = KernelLaunch {
        time: get_time(d, base)?,
        tid: d.var32()?,
        name: StringId(d.var32()?),
        device: d.var32()?,
        context: d.var32()?,
        stream: d.var32()?,
        correlation: d.var32()?,
        ..Default::default()
    };
    for v in k.grid.iter_mut().chain(k.block.iter_mut()) {
        *v = d.var32()?;
    }
    k.dynamic_shared = d.var32()?;
    Ok(k)
}

/// Decodes the body of an `ALLOCATOR_EVENT` record.
#[inline]
pub(crate) fn decode_allocator_event(
    d: &mut impl Fields,
    base: u64,
) -> Result<AllocatorEvent, DecodeError> {
    let mut a = AllocatorEvent {
        time: get_time(d, base)?,
        allocator: d.u8()?,
        action: AllocatorAction(d.u8()?),
        device: d.var32()?,
        address: d.var()?,
        bytes: Bytes(d.var()?),
        stream: d.var()?,
        pool: d.var()?,
        tid: d.var32()?,
        stack: StackId(d.var32()?),
        ..Default::default()
    };
    if a.action.has_oom_fields() {
        a.device_free = d.var()?;
        a.limit = d.var()?;
    }
    Ok(a)
}

/// Decodes the body of a `PROCESS_END` record.
#[inline]
pub(crate) fn decode_process_end(
    d: &mut impl Fields,
    base: u64,
) -> Result<ProcessEnd, DecodeError> {
    Ok(ProcessEnd {
        time: get_time(d, base)?,
    })
}

#[inline(always)]
fn get_time(d: &mut impl Fields, base: u64) -> Result<Nanos, DecodeError> {
    Ok(Nanos(base.wrapping_add(d.ivar()? as u64)))
}

impl Record {
    /// Appends the framed record (tag, length, body) to `out`.
    /// `body` is scratch space reused between calls.
    pub fn encode(&self, out: &mut Enc, body: &mut Enc, base: u64) {
        body.buf.clear();
        self.encode_body(body, base);
        out.u8(self.tag());
        out.bytes(&body.buf);
    }
}

/// An address or offset in the dump: hexadecimal.
fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// Quotes a string for the dump so control characters and spaces in names
/// cannot break the one-record-per-line format.
fn q(s: &str) -> String {
    format!("{s:?}")
}
