//! Turning raw sites (a stack id of one process on one device) into the
//! sites a person reads: symbolized frames from the symbol table the trace
//! carries, a label, a category, and one entry per distinct stack across
//! processes and devices. The merge and ranking is a group-by over a small
//! table, done with polars.

use std::collections::BTreeMap;
use std::path::Path;

use gmem_prof_traces::record::{
    AllocatorInfo, DeviceInfo, Frame, ModuleInfo, ProcessInfo, PyCode, StackDef, SymbolInfo,
    AUTOGRAD_NODE_FILE,
};
use gmem_prof_traces::Record;
use polars::prelude::*;

use crate::fast_map::FastMap;
use crate::holding::{SiteClass, SiteStats};
use crate::model::{Category, FrameText};

/// What one process defined: who it is, its strings, stacks,
/// modules and symbols.
#[derive(Default)]
pub struct ProcDefs {
    pub process: Option<ProcessInfo>,
    pub devices: Vec<DeviceInfo>,
    pub strings: FastMap<u32, String>,
    pub stacks: FastMap<u32, StackDef>,
    pub modules: Vec<ModuleInfo>,
    pub symbols: FastMap<u64, SymbolInfo>,
    pub py_codes: FastMap<u32, PyCode>,
    /// Framework allocators and whether the collector saw inside them.
    pub allocators: Vec<AllocatorInfo>,
    pub messages: Vec<(u8, String)>,
    /// Cumulative lost records (CUPTI, collector): the last report holds.
    pub dropped: (u64, u64),
    /// The device's own view (NVML), in file order.
    pub device_memory: Vec<gmem_prof_traces::record::DeviceMemory>,
    /// JAX's and CuPy's own pool figures, in file order.
    pub pool_usage: Vec<gmem_prof_traces::record::PoolUsage>,
    pub unknown_records: u64,
    /// The recorded window, in words, when only a part of the run was
    /// recorded (`record::WindowEdge`).
    pub window: Option<String>,
}

/// A kernel's name as people read it: C++ names demangled, without their
/// parameter lists (the template arguments stay: they tell instances
/// apart). Names that are not mangled C++ stay as they are.
pub fn kernel_name(text: String) -> String {
    if !text.starts_with("_Z") {
        return text;
    }
    let options = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    cpp_demangle::Symbol::new(text.as_bytes())
        .ok()
        .and_then(|s| s.demangle_with_options(&options).ok())
        .unwrap_or(text)
}

/// A C++ class as the collector names it, mangled as types are
/// ("N5torch8autograd9generated14AddmmBackward0E"), demangled
/// ("torch::autograd::generated::AddmmBackward0"); a name that does not
/// demangle stays as it is.
fn class_name(mangled: &str) -> String {
    cpp_demangle::Symbol::new(format!("_ZTS{mangled}").as_bytes())
        .ok()
        .and_then(|s| s.demangle().ok())
        .and_then(|text| text.strip_prefix("typeinfo name for ").map(str::to_string))
        .unwrap_or_else(|| mangled.to_string())
}

/// A stack of PyTorch's autograd engine: the backward pass (the node it
/// evaluated, or the engine's native frames).
pub fn in_backward(frames: &[FrameText]) -> bool {
    frames
        .iter()
        .any(|f| autograd_node(f).is_some() || f.function.starts_with("torch::autograd::Engine::"))
}

/// The autograd node a stack's frame names (`AUTOGRAD_NODE_FILE`): its
/// class, without PyTorch's namespaces ("AddmmBackward0").
pub fn autograd_node(f: &FrameText) -> Option<&str> {
    (f.module == AUTOGRAD_NODE_FILE).then(|| {
        let name = f.function.as_str();
        ["torch::autograd::generated::", "torch::autograd::"]
            .iter()
            .find_map(|ns| name.strip_prefix(ns))
            .unwrap_or(name)
    })
}

impl ProcDefs {
    pub fn add(&mut self, r: Record) {
        match r {
            Record::Process(p) => self.process = Some(p),
            Record::Device(d) if !self.devices.iter().any(|x| x.device == d.device) => {
                self.devices.push(d);
            }
            Record::String(s) => {
                self.strings.insert(s.id.0, kernel_name(s.text));
            }
            Record::Module(m) => self.modules.push(m),
            Record::Stack(s) => {
                self.stacks.insert(s.id.0, s);
            }
            Record::Symbol(s) => {
                self.symbols.insert(s.address, s);
            }
            Record::Message(m) => self.messages.push((m.level, m.text)),
            Record::PyCode(mut c) => {
                if c.file == AUTOGRAD_NODE_FILE {
                    c.function = class_name(&c.function);
                }
                self.py_codes.insert(c.id.0, c);
            }
            Record::Allocator(a) => self.allocators.push(a),
            Record::Dropped(d) => self.dropped = (d.cupti, d.collector),
            Record::DeviceMemory(m) => self.device_memory.push(m),
            Record::PoolUsage(u) => self.pool_usage.push(u),
            Record::Window(w) => self.window = Some(w.what),
            Record::Unknown { .. } => self.unknown_records += 1,
            _ => {}
        }
    }

    fn module_name(&self, id: u32) -> String {
        self.modules
            .iter()
            .find(|m| m.id == id)
            .map(|m| file_name(&m.path))
            .unwrap_or_else(|| format!("module#{id}"))
    }

    fn frame_texts(&self, f: &Frame, out: &mut Vec<FrameText>) {
        match *f {
            Frame::Native(addr) => match self.symbols.get(&addr) {
                Some(sym) if !sym.frames.is_empty() => {
                    let module = self.module_name(sym.module);
                    for fr in &sym.frames {
                        out.push(FrameText {
                            python: false,
                            function: fr.function.clone(),
                            location: if fr.file.is_empty() {
                                String::new()
                            } else {
                                format!("{}:{}", fr.file, fr.line)
                            },
                            module: module.clone(),
                            offset: sym.module_offset,
                            resolved: true,
                        });
                    }
                }
                Some(sym) => out.push(unresolved(self.module_name(sym.module), sym.module_offset)),
                None => {
                    let m = self
                        .modules
                        .iter()
                        .find(|m| m.start <= addr && addr < m.end);
                    out.push(match m {
                        Some(m) => unresolved(file_name(&m.path), addr.wrapping_sub(m.bias)),
                        None => unresolved("?".into(), addr),
                    });
                }
            },
            Frame::Python { code, line } => out.push(match self.py_codes.get(&code.0) {
                // Not Python: the autograd node a thread without Python
                // was evaluating, a frame of PyTorch's own.
                Some(c) if c.file == AUTOGRAD_NODE_FILE => FrameText {
                    function: c.function.clone(),
                    location: String::new(),
                    module: AUTOGRAD_NODE_FILE.into(),
                    offset: 0,
                    resolved: true,
                    python: false,
                },
                Some(c) => FrameText {
                    function: c.function.clone(),
                    location: format!("{}:{line}", c.file),
                    module: file_name(&c.file),
                    offset: 0,
                    resolved: true,
                    python: true,
                },
                None => FrameText {
                    function: "<python>".into(),
                    location: format!("line {line}"),
                    module: String::new(),
                    offset: 0,
                    resolved: true,
                    python: true,
                },
            }),
        }
    }

    /// Whether a native frame of `stack` lies in a module whose file name
    /// is `file` (modules and stacks are defined before the events that use
    /// them, so this holds during the sweep, before symbols are known).
    pub fn stack_passes_through(&self, stack: u32, file: &str) -> bool {
        let Some(s) = self.stacks.get(&stack) else {
            return false;
        };
        let ranges: Vec<(u64, u64)> = self
            .modules
            .iter()
            .filter(|m| Path::new(&m.path).file_name().is_some_and(|f| f == file))
            .map(|m| (m.start, m.end))
            .collect();
        s.frames.iter().any(|f| match *f {
            Frame::Native(pc) => ranges.iter().any(|&(a, b)| a <= pc && pc < b),
            Frame::Python { .. } => false,
        })
    }

    /// Whether a native frame of `stack` lies in a CUDA library's module
    /// (`is_cuda_library_module`); known during the sweep, as
    /// `stack_passes_through`.
    pub fn stack_in_cuda_library(&self, stack: u32) -> bool {
        let Some(s) = self.stacks.get(&stack) else {
            return false;
        };
        let ranges: Vec<(u64, u64)> = self
            .modules
            .iter()
            .filter(|m| is_cuda_library_module(&file_name(&m.path)))
            .map(|m| (m.start, m.end))
            .collect();
        s.frames.iter().any(|f| match *f {
            Frame::Native(pc) => ranges.iter().any(|&(a, b)| a <= pc && pc < b),
            Frame::Python { .. } => false,
        })
    }

    /// Whether the process may run PyTorch with its cudaMallocAsync backend:
    /// the collector found PyTorch's allocator and could not attach to it
    /// (its `Allocator` record). The backend is known for sure by its
    /// stream-ordered allocations made through PyTorch's allocator library,
    /// which the native backend never makes; the setting is not needed
    /// (PyTorch reads it from more than one variable).
    pub fn torch_not_attached(&self) -> bool {
        self.allocators.iter().any(|a| {
            a.allocator == gmem_prof_traces::record::allocator::TORCH_CACHING && !a.attached
        })
    }

    /// The frames of a stack, innermost first, inlined frames expanded.
    /// With Python frames in it, the interpreter's own native frames are
    /// left out: the Python frames stand for them.
    pub fn stack_frames(&self, stack: u32) -> (Vec<FrameText>, bool) {
        let mut out = Vec::new();
        match self.stacks.get(&stack) {
            Some(s) => {
                for f in &s.frames {
                    self.frame_texts(f, &mut out);
                }
                if out.iter().any(|f| f.python) {
                    out.retain(|f| f.python || !is_interpreter(f));
                }
                (out, s.truncated)
            }
            None => (out, false),
        }
    }
}

fn unresolved(module: String, offset: u64) -> FrameText {
    FrameText {
        function: "??".into(),
        location: String::new(),
        module,
        offset,
        resolved: false,
        python: false,
    }
}

/// A native frame of the Python interpreter (`python3.12`, `libpython3.12.so`).
fn is_interpreter(f: &FrameText) -> bool {
    let m = f.module.as_str();
    (m.starts_with("python3") || m.starts_with("libpython3")) && !f.python
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

/// Frames that belong to CUDA itself, not to whoever asked for memory.
fn is_cuda_plumbing(f: &FrameText) -> bool {
    let m = f.module.as_str();
    let func = f.function.as_str();
    m.starts_with("libcuda.so")
        || m.starts_with("libcudart")
        || m.starts_with("libcupti")
        || m.starts_with("libgmem_prof_collector")
        || func.starts_with("cudart::")
        || func.starts_with("__cudart")
        || func.starts_with("libcudart_static_")
        || func.starts_with("cuda") && func[4..].starts_with(|c: char| c.is_ascii_uppercase())
        || func.starts_with("cu") && func[2..].starts_with("Mem")
}

/// Frames of an allocator between the program and CUDA.
fn is_allocator_plumbing(f: &FrameText) -> bool {
    let func = f.function.as_str();
    func.starts_with("c10::")
        || func.starts_with("at::detail::empty")
        || func.starts_with("at::empty")
        || func.starts_with("at::native::empty")
        || func.starts_with("at::_ops::empty")
        || func.contains("cupy_4cuda_6memory")
}

/// Stack markers of caching allocators (PyTorch's native one, CuPy's pool,
/// XLA's BFC), with the allocator's name: memory they hold at exit is
/// cached, not leaked, and the trace sees their segments, not the tensors
/// inside.
const ALLOCATOR_CACHES: [(&str, &str); 5] = [
    ("CUDACachingAllocator::Native", TORCH_CACHE),
    ("DeviceCachingAllocator", TORCH_CACHE),
    // PyTorch's pinned host memory cache (`pin_memory`, `.item()` copies).
    ("CachingHostAllocator", "PyTorch's pinned host memory cache"),
    ("SingleDeviceMemoryPool", CUPY_POOL),
    ("BFCAllocator", BFC),
];

/// Names of caching allocators (`caching_allocator`).
pub const TORCH_CACHE: &str = "PyTorch's caching allocator";
/// Also `FrameworkPool::framework` of its readings.
pub const CUPY_POOL: &str = "CuPy's memory pool";
pub const BFC: &str = "a BFC allocator";
/// XLA's (JAX's) BFC allocator: `BFC` in a module of XLA.
pub const XLA_BFC: &str = "XLA's BFC allocator";

/// The caching allocator a stack allocated for, by name, when it went
/// through one.
pub fn caching_allocator(frames: &[FrameText]) -> Option<&'static str> {
    let (_, name) = ALLOCATOR_CACHES
        .iter()
        .find(|(marker, _)| frames.iter().any(|f| f.function.contains(marker)))?;
    if *name == BFC && frames.iter().any(|f| f.module.contains("xla")) {
        return Some(XLA_BFC);
    }
    Some(name)
}

/// Stack marker of PyTorch's cudaMallocAsync backend: one CUDA allocation
/// per tensor.
pub const PER_TENSOR_ALLOCATOR: &str = "CUDACachingAllocator::CudaMallocAsync";

/// CUDA libraries that allocate device memory of their own for handles,
/// plans, workspaces and communicators, kept until the program destroys
/// them, usually at exit (module file names start so).
const CUDA_LIBRARIES: [&str; 13] = [
    "libcublas",
    "libcudnn",
    "libnccl",
    "libcufft",
    "libcusparse",
    "libcusolver",
    "libcurand",
    "libcutensor",
    "libcudss",
    "libnvinfer",
    "libnvjpeg",
    "libnvshmem",
    "libcufile",
];

/// Functions of a framework that create a CUDA library's handles and their
/// workspaces, kept per thread and stream for the process's life (PyTorch's
/// cuBLAS, cuBLASLt, cuDNN, cuSPARSE and cuSOLVER handle pools).
const LIBRARY_STATE: [&str; 8] = [
    "getCurrentCUDABlasHandle",
    "getCUDABlasLtWorkspace",
    "getNewCUDABlasLtWorkspace",
    "setWorkspaceForHandle",
    "cuda::getNewWorkspace",
    "getCudnnHandle",
    "getCurrentCUDASparseHandle",
    "getCurrentCUDASolverDnHandle",
];

/// The innermost frame of a stack that is a CUDA library's or keeps its
/// state (`is_cuda_library`), named without its parameters: what made a
/// framework's block a library's workspace.
pub fn library_function(frames: &[FrameText]) -> Option<String> {
    let f = frames.iter().find(|f| is_cuda_library(f))?;
    let name = if f.function.is_empty() {
        &f.module
    } else {
        &f.function
    };
    Some(name.split('(').next().unwrap_or(name).to_string())
}

/// Whether a module (its file name) is one of `CUDA_LIBRARIES`.
pub fn is_cuda_library_module(file_name: &str) -> bool {
    CUDA_LIBRARIES.iter().any(|l| file_name.starts_with(l))
}

/// Whether a frame runs inside one of `CUDA_LIBRARIES`, or in a
/// framework's code that keeps their state (`LIBRARY_STATE`).
pub fn is_cuda_library(f: &FrameText) -> bool {
    CUDA_LIBRARIES.iter().any(|l| f.module.starts_with(l))
        || LIBRARY_STATE.iter().any(|m| f.function.contains(m))
}

/// Who holds memory from this stack when nothing frees it. The evidence is
/// the stack: a caching allocator's frames make it the allocator's cache; a
/// CUDA library's frames (the allocation was made inside cuBLAS, cuDNN,
/// NCCL, …) make it the library's, held for the process's life; CUDA
/// graph pools are the graph's. A library that keeps allocating (handles
/// created in a loop and never destroyed) is caught as growth, whatever
/// its category.
pub fn category(class: SiteClass, frames: &[FrameText]) -> Category {
    match class {
        SiteClass::Static => return Category::Runtime,
        SiteClass::GraphPool => return Category::Library,
        SiteClass::Profiler => return Category::Profiler,
        SiteClass::NoCall => return Category::Unknown,
        SiteClass::Call => {}
    }
    if caching_allocator(frames).is_some() {
        Category::AllocatorCache
    } else if frames.iter().any(is_cuda_library) {
        Category::Library
    } else {
        Category::Program
    }
}

/// How frames are told apart into the program's own code and library code
/// (site labels name the innermost frame of the program's own code).
///
/// A Python frame is library code when its file lies in `site-packages`,
/// `dist-packages` or the standard library (`.../lib/python3.X/`), or is
/// frozen (`<frozen ...>`); everything else is the program's. Paths
/// containing one of `user` are the program's even there (a package being
/// developed), and paths containing one of `library` are library code even
/// outside (a vendored framework).
#[derive(Clone, Debug, Default)]
pub struct CodeRules {
    pub user: Vec<String>,
    pub library: Vec<String>,
}

impl CodeRules {
    pub fn is_library_file(&self, file: &str) -> bool {
        if self.user.iter().any(|p| file.contains(p.as_str())) {
            return false;
        }
        if self.library.iter().any(|p| file.contains(p.as_str())) {
            return true;
        }
        file.contains("/site-packages/")
            || file.contains("/dist-packages/")
            || file.starts_with('<')
            || is_standard_library(file)
    }

    /// The innermost Python frame of the program's own code; else the
    /// innermost Python frame; `None` for a stack with no Python frame.
    pub fn user_python_frame<'f>(&self, frames: &'f [FrameText]) -> Option<&'f FrameText> {
        self.user_python_index(frames).map(|i| &frames[i])
    }

    /// Where `user_python_frame` is in `frames`.
    pub fn user_python_index(&self, frames: &[FrameText]) -> Option<usize> {
        let file = |f: &FrameText| {
            f.location
                .rsplit_once(':')
                .map_or(f.location.as_str(), |(file, _)| file)
                .to_string()
        };
        frames
            .iter()
            .position(|f| f.python && !self.is_library_file(&file(f)))
            .or_else(|| frames.iter().position(|f| f.python))
    }
}

/// `/usr/lib/python3.12/threading.py`, not `/home/me/lib/python3/x.py`.
fn is_standard_library(file: &str) -> bool {
    file.split('/').collect::<Vec<_>>().windows(2).any(|w| {
        w[0] == "lib"
            && w[1]
                .strip_prefix("python3.")
                .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
    })
}

/// The frame a person means by "who allocated this": for a stack holding
/// Python frames, the innermost one of the program's own code
/// (`CodeRules`); otherwise the first native frame outside CUDA and the
/// allocators between the program and CUDA.
pub fn label(class: SiteClass, func_name: &str, frames: &[FrameText], rules: &CodeRules) -> String {
    match class {
        SiteClass::Static => return "module globals (__device__ / __managed__ variables)".into(),
        SiteClass::GraphPool => return "CUDA graph memory pool".into(),
        SiteClass::NoCall => return "no allocation call seen".into(),
        _ => {}
    }
    match labelled_frame(frames, rules) {
        Some(Labelled::Frame(i)) => frame_label(&frames[i]),
        Some(Labelled::Operator(op, _)) => op,
        None => format!("{func_name} (no stack)"),
    }
}

/// What a stack's label names.
enum Labelled {
    /// The frame at this index (innermost first).
    Frame(usize),
    /// PyTorch's operator or backward node, named from the frame at this
    /// index (`torch_operator`).
    Operator(String, usize),
}

/// The frame a stack's label names (`label`); `None` for an empty stack.
fn labelled_frame(frames: &[FrameText], rules: &CodeRules) -> Option<Labelled> {
    if let Some(i) = rules.user_python_index(frames) {
        return Some(Labelled::Frame(i));
    }
    if let Some((op, i)) = torch_operator(frames) {
        return Some(Labelled::Operator(op, i));
    }
    if frames.is_empty() {
        return None;
    }
    let Some(first) = frames.iter().position(|f| !is_cuda_plumbing(f)) else {
        return Some(Labelled::Frame(0));
    };
    let user = frames[first..]
        .iter()
        .position(|f| !is_allocator_plumbing(f) && f.resolved)
        .map_or(first, |i| first + i);
    Some(Labelled::Frame(user))
}

/// The frames that called a stack's labelled frame, innermost first, as
/// labels: what tells apart call paths that share a label. Only Python
/// frames when the label is a Python frame (the native frames between
/// them are the interpreter's and its extensions').
fn callers(frames: &[FrameText], rules: &CodeRules) -> Vec<String> {
    let at = match labelled_frame(frames, rules) {
        Some(Labelled::Frame(i)) | Some(Labelled::Operator(_, i)) => i,
        None => return Vec::new(),
    };
    let python = frames[at].python;
    frames[at + 1..]
        .iter()
        .filter(|f| f.python || !python)
        .map(frame_label)
        .collect()
}

/// Gives the sites that share a label within one group (`groups[i]`, the
/// site's category) the callers that tell them apart ("f at x.py:28,
/// called from __init__ at x.py:36"); `frames[i]` are the site's frames.
/// Sites whose callers are all the same (they differ inside the labelled
/// frame, or in native frames between Python ones) are numbered.
pub fn tell_apart(
    labels: &mut [String],
    groups: &[String],
    frames: &[&[FrameText]],
    rules: &CodeRules,
) {
    let mut by_label: BTreeMap<(&str, String), Vec<usize>> = BTreeMap::new();
    for (i, l) in labels.iter().enumerate() {
        by_label
            .entry((groups[i].as_str(), l.clone()))
            .or_default()
            .push(i);
    }
    let mut suffix: Vec<Vec<String>> = vec![Vec::new(); labels.len()];
    for (_, members) in by_label {
        if members.len() < 2 {
            continue;
        }
        let paths: Vec<Vec<String>> = members.iter().map(|&i| callers(frames[i], rules)).collect();
        split_by_callers(&members, &paths, 0, &mut suffix);
    }
    for (i, s) in suffix.into_iter().enumerate() {
        if !s.is_empty() {
            labels[i] = format!("{}, {}", labels[i], s.join(", "));
        }
    }
}

/// Splits `members` (site indices; `paths[k]` the callers of
/// `members[k]`) at the first caller depth from `depth` on where they
/// differ, naming each part's caller, and again inside each part.
fn split_by_callers(
    members: &[usize],
    paths: &[Vec<String>],
    depth: usize,
    suffix: &mut [Vec<String>],
) {
    if members.len() < 2 {
        return;
    }
    let longest = paths.iter().map(Vec::len).max().unwrap_or(0);
    let Some(d) = (depth..longest).find(|&d| paths.iter().any(|p| p.get(d) != paths[0].get(d)))
    else {
        for (n, &i) in members.iter().enumerate() {
            suffix[i].push(format!("call path {} of {}", n + 1, members.len()));
        }
        return;
    };
    let mut parts: BTreeMap<Option<&String>, Vec<usize>> = BTreeMap::new();
    for (k, p) in paths.iter().enumerate() {
        parts.entry(p.get(d)).or_default().push(k);
    }
    for (caller, ks) in parts {
        for &k in &ks {
            suffix[members[k]].push(match caller {
                Some(c) => format!("called from {c}"),
                None => "called from nothing above it".into(),
            });
        }
        let sub_members: Vec<usize> = ks.iter().map(|&k| members[k]).collect();
        let sub_paths: Vec<Vec<String>> = ks.iter().map(|&k| paths[k].clone()).collect();
        split_by_callers(&sub_members, &sub_paths, d + 1, suffix);
    }
}

/// The frames two stacks of one site share, from the outermost inwards:
/// a site keeps only those, so that no figure puts its bytes under a frame
/// that some of them did not pass through.
pub fn common_outer_frames(kept: &mut Vec<FrameText>, other: &[FrameText]) {
    let shared = kept
        .iter()
        .rev()
        .zip(other.iter().rev())
        .take_while(|(a, b)| frame_key(a) == frame_key(b))
        .count();
    kept.drain(..kept.len() - shared);
}

/// What tells frames apart in a call path: a resolved frame by its text
/// (the same line called from two places is one frame), an unresolved one
/// by its address in its module.
fn frame_key(f: &FrameText) -> (&str, &str, &str, u64) {
    (
        &f.function,
        &f.location,
        &f.module,
        if f.resolved { 0 } else { f.offset },
    )
}

/// For a stack inside PyTorch with no Python frame (its autograd threads
/// run none): the backward node or the operator that allocated, which is
/// what a person can find in the model ("AddmmBackward0 (autograd)",
/// "aten::mm").
fn torch_operator(frames: &[FrameText]) -> Option<(String, usize)> {
    if let Some(i) = frames.iter().position(|f| autograd_node(f).is_some()) {
        let node = autograd_node(&frames[i]).unwrap_or_default();
        return Some((format!("{node} (autograd)"), i));
    }
    let in_torch =
        |f: &FrameText| f.module.starts_with("libtorch") || f.module.starts_with("libc10");
    if !frames.iter().any(in_torch) {
        return None;
    }
    let between = |name: &str, start: &str, end: &str| -> Option<String> {
        let rest = &name[name.find(start)? + start.len()..];
        let op = &rest[..rest.find(end)?];
        (!op.is_empty() && op.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .then(|| op.to_string())
    };
    let find = |start: &str, end: &str| {
        frames
            .iter()
            .enumerate()
            .find_map(|(i, f)| Some((between(&f.function, start, end)?, i)))
    };
    let node = find("torch::autograd::generated::", "::apply(");
    let backward = in_backward(frames);
    let op = find("at::_ops::", "::call(");
    match (node, op) {
        (Some((node, i)), _) => Some((format!("{node} (autograd)"), i)),
        (None, Some((op, i))) if backward => Some((format!("aten::{op} (autograd)"), i)),
        (None, Some((op, i))) => Some((format!("aten::{op}"), i)),
        (None, None) => None,
    }
}

pub fn frame_label(f: &FrameText) -> String {
    if !f.resolved {
        return format!("{}+{:#x}", f.module, f.offset);
    }
    let name = short_function(&f.function);
    if f.location.is_empty() {
        format!("{name} ({})", f.module)
    } else {
        let loc = f.location.rsplit('/').next().unwrap_or(&f.location);
        format!("{name} at {loc}")
    }
}

/// A C++ name without its parameter list, for labels.
fn short_function(name: &str) -> &str {
    let mut depth = 0i32;
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && i > 0 && !name[i..].starts_with("(anonymous namespace)") => {
                return &name[..i]
            }
            _ => {}
        }
    }
    name
}

/// One merged site before ranking.
pub struct MergedSite {
    pub label: String,
    pub category: Category,
    /// The caching allocator whose segments these are (`caching_allocator`).
    pub allocator: Option<&'static str>,
    /// `library_entry` of each of its stacks, whole, distinct and sorted
    /// (none that its label names).
    pub via: Vec<String>,
    pub frames: Vec<FrameText>,
    pub truncated: bool,
    pub pids: Vec<u32>,
    pub kinds: u8,
}

/// Groups raw sites by (class, category, call path). Returns the merged
/// sites in a deterministic order and, per raw site, its merged index.
///
/// A stack with Python frames is grouped by its call path from the
/// innermost frame of the program's own code outwards: the native frames
/// under one Python line differ with the operators it runs, and a person
/// asks about the line, but one line reached from two callers is two
/// sites (a helper's bytes belong to whoever called it). Each merged site
/// keeps the frames its stacks share from the outermost inwards, and sites
/// that share a label are told apart by their callers (`tell_apart`).
pub fn merge_sites(
    sites: &[SiteStats],
    defs: &[&ProcDefs],
    rules: &CodeRules,
) -> (Vec<MergedSite>, Vec<usize>) {
    let mut groups: BTreeMap<String, (MergedSite, Vec<usize>)> = BTreeMap::new();
    for (i, s) in sites.iter().enumerate() {
        let d = defs[s.proc as usize];
        let (frames, truncated) = if s.stack != 0 {
            d.stack_frames(s.stack)
        } else {
            (Vec::new(), false)
        };
        let func_name = s.func.name().unwrap_or("allocation");
        let cat = category(s.class, &frames);
        let mut key = format!(
            "{:?}|{cat}|{}",
            s.class,
            if s.stack == 0 { func_name } else { "" }
        );
        key.push_str(&call_path_key(&frames, rules));
        let pid = d.process.as_ref().map_or(0, |p| p.pid);
        // What the stack went through, unless it is the frame the label
        // names (a program's own function).
        let via = crate::model::library_entry(&frames).filter(|entry| {
            let function = entry.split(' ').next().unwrap_or(entry);
            !label(s.class, func_name, &frames, rules).starts_with(function)
        });
        let entry = match groups.entry(key) {
            std::collections::btree_map::Entry::Occupied(e) => {
                let e = e.into_mut();
                common_outer_frames(&mut e.0.frames, &frames);
                e.0.truncated |= truncated;
                e
            }
            std::collections::btree_map::Entry::Vacant(e) => e.insert((
                MergedSite {
                    label: match (cat, caching_allocator(&frames)) {
                        // What the stack names is only the request that
                        // made the allocator take the segment: the
                        // segment holds whatever the allocator puts in it.
                        (Category::AllocatorCache, Some(name)) => format!(
                            "segments of {name} taken for {}",
                            label(s.class, func_name, &frames, rules)
                        ),
                        _ => label(s.class, func_name, &frames, rules),
                    },
                    allocator: caching_allocator(&frames),
                    via: Vec::new(),
                    category: cat,
                    frames,
                    truncated,
                    pids: Vec::new(),
                    kinds: 0,
                },
                Vec::new(),
            )),
        };
        if !entry.0.pids.contains(&pid) {
            entry.0.pids.push(pid);
        }
        entry.0.kinds |= s.kinds;
        if let Some(v) = via {
            if let Err(at) = entry.0.via.binary_search(&v) {
                entry.0.via.insert(at, v);
            }
        }
        entry.1.push(i);
    }
    let mut merged = Vec::with_capacity(groups.len());
    let mut of_raw = vec![0usize; sites.len()];
    for (_, (mut m, members)) in groups {
        m.pids.sort_unstable();
        for i in members {
            of_raw[i] = merged.len();
        }
        merged.push(m);
    }
    let mut labels: Vec<String> = merged.iter().map(|m| m.label.clone()).collect();
    let categories: Vec<String> = merged.iter().map(|m| m.category.to_string()).collect();
    let frames: Vec<&[FrameText]> = merged.iter().map(|m| m.frames.as_slice()).collect();
    tell_apart(&mut labels, &categories, &frames, rules);
    for (m, l) in merged.iter_mut().zip(labels) {
        m.label = l;
    }
    (merged, of_raw)
}

/// What a stack is grouped by: its call path from the frame its label
/// names outwards (`label`: the innermost frame of the program's own
/// Python code, or the first native frame outside CUDA and the allocators
/// between the program and CUDA). The frames inside that one differ with
/// the operators a line runs and the paths CUDA takes, which is not where
/// the memory went. In PyTorch's backward pass (autograd's threads run no
/// Python), the backward node or operator, as the label names it (the
/// native frames under one node differ with the kernels it picks).
pub fn call_path_key(frames: &[FrameText], rules: &CodeRules) -> String {
    let from = match labelled_frame(frames, rules) {
        Some(Labelled::Operator(op, _)) if in_backward(frames) => {
            return format!("\ntorch|{op}");
        }
        Some(Labelled::Frame(i)) | Some(Labelled::Operator(_, i)) => i,
        None => 0,
    };
    let mut key = String::new();
    for f in &frames[from..] {
        let (function, location, module, offset) = frame_key(f);
        key.push_str(&format!("\n{function}|{location}|{module}|{offset}"));
    }
    key
}

/// Per merged site: summed figures, and the rank order.
pub struct Ranked {
    /// Merged indices, best first.
    pub order: Vec<usize>,
    pub columns: BTreeMap<&'static str, Vec<u64>>,
}

/// Sums raw-site figures per merged site and ranks them by bytes live at the
/// peak, then total bytes, then count (polars group-by and sort).
pub fn rank(
    sites: &[SiteStats],
    of_raw: &[usize],
    merged: usize,
    leaked: &[bool],
    cached: &[bool],
) -> PolarsResult<Ranked> {
    let n = sites.len();
    let col = |name: &'static str, f: &dyn Fn(usize, &SiteStats) -> u64| {
        Column::new(
            name.into(),
            sites
                .iter()
                .enumerate()
                .map(|(i, s)| f(i, s))
                .collect::<Vec<u64>>(),
        )
    };
    let df = DataFrame::new(
        n,
        vec![
            Column::new(
                "merged".into(),
                of_raw.iter().map(|&m| m as u64).collect::<Vec<u64>>(),
            ),
            col("count", &|_, s| s.held.count),
            col("total_bytes", &|_, s| s.held.total_bytes),
            col("live_at_peak", &|_, s| s.held.at_peak),
            col("max_live", &|_, s| s.held.max_live),
            col("temporaries", &|_, s| s.held.temporaries),
            col("failed", &|_, s| s.failed),
            col("leaked_bytes", &|i, s| {
                if leaked[i] {
                    s.held.at_exit
                } else {
                    0
                }
            }),
            col("leaked_count", &|i, s| {
                if leaked[i] {
                    s.held.at_exit_count
                } else {
                    0
                }
            }),
            col("cached_at_exit_bytes", &|i, s| {
                if cached[i] {
                    s.held.at_exit
                } else {
                    0
                }
            }),
            col("held_at_exit_bytes", &|_, s| s.held.at_exit),
            col("held_at_exit_count", &|_, s| s.held.at_exit_count),
        ],
    )?;
    let sums = [
        "count",
        "total_bytes",
        "live_at_peak",
        "temporaries",
        "failed",
        "leaked_bytes",
        "leaked_count",
        "cached_at_exit_bytes",
        "held_at_exit_bytes",
        "held_at_exit_count",
    ];
    let mut aggs: Vec<Expr> = sums
        .iter()
        .map(|c| polars::prelude::col(*c).sum())
        .collect();
    // Sites merged across processes peak separately: keep the highest.
    aggs.push(polars::prelude::col("max_live").max());
    let out = df
        .lazy()
        .group_by([polars::prelude::col("merged")])
        .agg(aggs)
        .sort_by_exprs(
            [
                polars::prelude::col("live_at_peak"),
                polars::prelude::col("total_bytes"),
                polars::prelude::col("count"),
                polars::prelude::col("merged"),
            ],
            SortMultipleOptions::default().with_order_descending_multi([true, true, true, false]),
        )
        .collect()?;
    let get = |name: &str| -> PolarsResult<Vec<u64>> {
        Ok(out
            .column(name)?
            .cast(&DataType::UInt64)?
            .u64()?
            .iter()
            .map(|v| v.unwrap_or(0))
            .collect())
    };
    let order: Vec<usize> = get("merged")?.into_iter().map(|m| m as usize).collect();
    debug_assert_eq!(order.len(), merged);
    let mut columns = BTreeMap::new();
    for c in sums.iter().chain(["max_live"].iter()) {
        columns.insert(*c, get(c)?);
    }
    Ok(Ranked { order, columns })
}

#[cfg(test)]
mod kernel_name_tests {
    use super::kernel_name;

    #[test]
    fn kernel_names_are_demangled_without_parameters() {
        // From the UnifiedMemoryStreams sample (cuBLAS's dot kernel).
        assert_eq!(
            kernel_name("_Z10dot_kernelIdLi128ELi0E15cublasDotParamsI30cublasGemvTensorStridedBatchedIKdES1_IdEEEvT2_".into()),
            "dot_kernel<double, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<double const>, cublasGemvTensorStridedBatched<double> > >"
        );
        assert_eq!(
            kernel_name("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_".into()),
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1> >"
        );
        assert_eq!(kernel_name("k_one".into()), "k_one");
        assert_eq!(kernel_name("_Znot a symbol".into()), "_Znot a symbol");
    }
}

#[cfg(test)]
mod autograd_node_tests {
    use super::*;
    use gmem_prof_traces::record::{PyCodeId, StackId};

    /// A stack the collector takes on an autograd thread: one frame, the
    /// node's class; shown and grouped as the node.
    #[test]
    fn an_autograd_node_frame_names_the_node() {
        let mut defs = ProcDefs::default();
        for (id, file, function) in [
            (
                1,
                AUTOGRAD_NODE_FILE,
                "N5torch8autograd9generated14AddmmBackward0E",
            ),
            (2, AUTOGRAD_NODE_FILE, "N5torch8autograd14AccumulateGradE"),
            (3, "/home/me/train.py", "step"),
        ] {
            defs.add(Record::PyCode(PyCode {
                id: PyCodeId(id),
                file: file.into(),
                function: function.into(),
                first_line: 0,
            }));
        }
        for (id, code) in [(1, 1), (2, 2), (3, 3)] {
            defs.add(Record::Stack(StackDef {
                id: StackId(id),
                frames: vec![Frame::Python {
                    code: PyCodeId(code),
                    line: if code == 3 { 12 } else { 0 },
                }],
                truncated: false,
            }));
        }
        let rules = CodeRules {
            user: vec![],
            library: vec![],
        };
        let label_of = |stack| {
            let (frames, _) = defs.stack_frames(stack);
            label(SiteClass::Call, "cuMemAlloc", &frames, &rules)
        };
        let (frames, _) = defs.stack_frames(1);
        assert_eq!(
            frames[0].function,
            "torch::autograd::generated::AddmmBackward0"
        );
        assert!(!frames[0].python);
        assert_eq!(label_of(1), "AddmmBackward0 (autograd)");
        assert_eq!(label_of(2), "AccumulateGrad (autograd)");
        assert_eq!(label_of(3), "step at train.py:12");
        // What the collector could not demangle stays as it came.
        assert_eq!(class_name("N5torch"), "N5torch");
    }

    fn native(function: &str, module: &str) -> FrameText {
        FrameText {
            function: function.into(),
            location: String::new(),
            module: module.into(),
            offset: 0,
            resolved: true,
            python: false,
        }
    }

    /// Two segments allocated under one backward node through different
    /// kernels' paths are one site; another node's is another.
    #[test]
    fn native_stacks_under_one_autograd_node_are_one_site() {
        let rules = CodeRules::default();
        let stack = |kernel: &str, node: &str| {
            vec![
                native("cudaMalloc", "libcudart.so.13"),
                native(kernel, "libtorch_cuda.so"),
                native(
                    &format!("torch::autograd::generated::{node}::apply(std::vector<at::Tensor>&&)"),
                    "libtorch_cpu.so",
                ),
                native("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "libtorch_cpu.so"),
            ]
        };
        let a = call_path_key(&stack("at::native::conv_a", "PowBackward0"), &rules);
        let b = call_path_key(&stack("at::native::conv_b", "PowBackward0"), &rules);
        let c = call_path_key(&stack("at::native::conv_a", "MulBackward0"), &rules);
        assert_eq!(a, b);
        assert_ne!(a, c);
        // In the forward pass seen without Python frames, every frame
        // counts, as outside PyTorch.
        let forward = |caller: &str| {
            vec![
                native(
                    "at::_ops::rand::call(c10::ArrayRef<c10::SymInt>)",
                    "libtorch_cpu.so",
                ),
                native(caller, "libtorch_python.so"),
            ]
        };
        assert_ne!(
            call_path_key(&forward("a"), &rules),
            call_path_key(&forward("b"), &rules)
        );
        let plain = |f: &str| vec![native("cudaMalloc", "libcudart.so.13"), native(f, "app")];
        assert_ne!(
            call_path_key(&plain("a"), &rules),
            call_path_key(&plain("b"), &rules)
        );
    }
}
