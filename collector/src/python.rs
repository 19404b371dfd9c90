//! Python frames: the interpreter's call stack of the calling thread, read
//! from CPython's own structures, so that an allocation made under Python
//! code (PyTorch, CuPy, JAX, ctypes) names the `.py` line that caused it.
//!
//! How, and why so:
//! - No Python API call on the hot path: the collector runs inside CUDA and
//!   allocator callbacks, often without the GIL and sometimes with an
//!   allocator lock held, so it must neither take the GIL nor allocate
//!   Python objects. It reads the thread's frame chain directly, with the
//!   field offsets of each CPython minor version (`Layout`), the way py-spy
//!   reads another process; the one call it makes, `PyCode_Addr2Line`, only
//!   reads a code object's line table, and its answers are cached.
//! - A thread finds its own interpreter state through
//!   `PyGILState_GetThisThreadState`, which works whether or not the thread
//!   holds the GIL right now (PyTorch releases it around many calls); a
//!   thread's frames only change while that thread runs Python, and it is
//!   in our callback, so they hold still while we read them.
//! - Versions: 3.10 to 3.15, default builds. Anything else (another
//!   version, or a free-threaded or `Py_TRACE_REFS` build, whose objects
//!   are laid out differently) leaves stacks native-only, with one warning
//!   in the trace.
//! - Frames are interleaved with native ones where they ran: each native
//!   frame of the evaluation loop (`_PyEval_EvalFrameDefault`) stands for the
//!   Python frames it was executing (one per loop in 3.10; since 3.11 one
//!   loop runs Python-to-Python calls itself, up to an entry frame).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ops::Range;
use std::sync::Mutex;

use gmem_prof_traces::record::{PyCode, PyCodeId};

/// Frames of one thread's Python stack read at most.
pub const MAX_PYTHON_FRAMES: usize = 256;
/// Frames read past a cut walk, links only, to find where its last group
/// ran (`Python::find_cut_groups_entry`).
const CUT_GROUP_SCAN: usize = 16_384;

/// A frame as it goes into a captured stack: bit 63 set (no user-space
/// return address has it), the `PyCode` id in bits 32..63, the line below.
pub const PYTHON_FRAME_TAG: u64 = 1 << 63;

pub fn encode_frame(code: u32, line: u32) -> u64 {
    PYTHON_FRAME_TAG | (u64::from(code & 0x7fff_ffff) << 32) | u64::from(line)
}

/// `(code id, line)` of a tagged frame; `None` for a native address.
pub fn decode_frame(v: u64) -> Option<(u32, u32)> {
    (v & PYTHON_FRAME_TAG != 0).then_some((((v >> 32) & 0x7fff_ffff) as u32, v as u32))
}

/// Where the fields the walk reads sit, for one CPython minor version
/// (offsetof against that version's headers; checked by
/// `tests::layouts_match_the_installed_interpreters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub minor: u32,
    /// How the thread state leads to the innermost frame.
    pub frame_chain: FrameChain,
    /// Frame → the frame that called it.
    pub previous: usize,
    /// Frame → its code object.
    pub code: usize,
    /// Frame → where it is in its code (see `FrameChain`).
    pub instr: usize,
    /// 3.11: `is_entry`; 3.12+: `owner`.
    pub entry: Option<usize>,
    /// Code → first byte of its instructions (3.11+).
    pub code_start: usize,
    pub co_filename: usize,
    /// `co_qualname` (3.11+) else `co_name`.
    pub co_name: usize,
    pub co_firstlineno: usize,
    /// sizeof(PyASCIIObject): compact ASCII text follows it.
    pub ascii_size: usize,
    /// sizeof(PyCompactUnicodeObject): other compact text follows it.
    pub compact_size: usize,
    /// 3.14+: a frame's code is a `_PyStackRef`, a pointer whose low bits
    /// (`Py_TAG_BITS`) tag it; they are cleared before it is read.
    pub code_tag_bits: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameChain {
    /// 3.10: `tstate->frame` is a frame object; `f_lasti` (an int, in code
    /// units) says where it is.
    FrameObject { frame: usize },
    /// 3.11, 3.12: `tstate->cframe->current_frame`, an interpreter frame
    /// whose `prev_instr` points at the last instruction run.
    CFrame { cframe: usize, current: usize },
    /// 3.13+: `tstate->current_frame`; `instr_ptr` points at the
    /// instruction running.
    Direct { current: usize },
}

/// 3.12+: the owner of the shim frame each evaluation loop pushes first
/// (`FRAME_OWNED_BY_CSTACK` in 3.12 and 3.13; `FRAME_OWNED_BY_INTERPRETER`
/// since 3.14, which renumbered the enum and moved the shim to it: 3 all
/// the same).
const ENTRY_FRAME_OWNER: u8 = 3;

/// 3.14: 3.13's chain, with the owner after a new field and a tagged code
/// reference.
const LAYOUT_3_14: Layout = Layout {
    minor: 14,
    frame_chain: FrameChain::Direct { current: 72 },
    previous: 8,
    code: 0,
    instr: 56,
    entry: Some(74),
    code_start: 208,
    co_filename: 112,
    co_name: 128,
    co_firstlineno: 68,
    ascii_size: 40,
    compact_size: 56,
    code_tag_bits: 3,
};

pub const LAYOUTS: [Layout; 6] = [
    Layout {
        minor: 10,
        frame_chain: FrameChain::FrameObject { frame: 24 },
        previous: 24,
        code: 32,
        instr: 96,
        entry: None,
        code_start: 0,
        co_filename: 104,
        co_name: 112,
        co_firstlineno: 40,
        ascii_size: 48,
        compact_size: 72,
        code_tag_bits: 0,
    },
    Layout {
        minor: 11,
        frame_chain: FrameChain::CFrame {
            cframe: 56,
            current: 8,
        },
        previous: 48,
        code: 32,
        instr: 56,
        entry: Some(68),
        code_start: 184,
        co_filename: 112,
        co_name: 128,
        co_firstlineno: 72,
        ascii_size: 48,
        compact_size: 72,
        code_tag_bits: 0,
    },
    Layout {
        minor: 12,
        frame_chain: FrameChain::CFrame {
            cframe: 56,
            current: 0,
        },
        previous: 8,
        code: 0,
        instr: 56,
        entry: Some(70),
        code_start: 192,
        co_filename: 112,
        co_name: 128,
        co_firstlineno: 68,
        ascii_size: 40,
        compact_size: 56,
        code_tag_bits: 0,
    },
    Layout {
        minor: 13,
        frame_chain: FrameChain::Direct { current: 72 },
        previous: 8,
        code: 0,
        instr: 56,
        entry: Some(70),
        code_start: 200,
        co_filename: 112,
        co_name: 128,
        co_firstlineno: 68,
        ascii_size: 40,
        compact_size: 56,
        code_tag_bits: 0,
    },
    LAYOUT_3_14,
    // Laid out as 3.14 (checked against its headers all the same).
    Layout {
        minor: 15,
        ..LAYOUT_3_14
    },
];

/// One Python frame of a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyFrame {
    pub code: u32,
    pub line: u32,
    /// The outermost frame its evaluation loop runs: the next frame belongs
    /// to the next native evaluation-loop frame out.
    pub ends_group: bool,
    /// 3.12+, on a frame that ends its group: the address of the entry
    /// frame its loop pushed first, a local of that loop's native frame
    /// (which `interleave` finds by it). 0 otherwise.
    pub entry: u64,
}

/// dladdr1's flag for "give me the ELF symbol" (dlfcn.h).
const RTLD_DL_SYMENT: c_int = 1;

type GetThreadState = unsafe extern "C" fn() -> *mut c_void;
type Addr2Line = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// The interpreter of this process, as far as the walk needs it.
pub struct Python {
    pub version: (u32, u32),
    layout: Layout,
    thread_state: GetThreadState,
    addr2line: Addr2Line,
    code_type: usize,
    /// Code addresses of `_PyEval_EvalFrameDefault`.
    eval_loop: Range<u64>,
    codes: Mutex<Codes>,
}

/// Code objects seen so far: each gets a `PyCode` id the first time a walk
/// meets it, and its names are copied out then (the trace must not depend
/// on the object living on).
#[derive(Default)]
struct Codes {
    ids: HashMap<CodeKey, u32>,
    /// Lines by (code id, instruction offset).
    lines: HashMap<(u32, i32), u32>,
}

impl Codes {
    /// The id of `key`; the first time, a new one, and its `PyCode` (file,
    /// function, first line from `describe`) given to `define`.
    fn intern(
        &mut self,
        key: CodeKey,
        describe: impl FnOnce() -> (String, String, u32),
        define: &mut impl FnMut(PyCode),
    ) -> u32 {
        if let Some(id) = self.ids.get(&key) {
            return *id;
        }
        let id = self.ids.len() as u32 + 1;
        self.ids.insert(key, id);
        let (file, function, first_line) = describe();
        define(PyCode {
            id: PyCodeId(id),
            file,
            function,
            first_line,
        });
        id
    }
}

/// Per thread: (code object, instruction) → (`PyCode` id, line), direct
/// mapped. A walk of a training loop's stack meets the same few hundred
/// frames again and again.
const LINE_CACHE_BITS: u32 = 12;

#[derive(Clone, Copy, Default)]
struct CachedLine {
    key: CodeKey,
    lasti: i32,
    id: u32,
    line: u32,
}

thread_local! {
    static LINE_CACHE: std::cell::RefCell<Vec<CachedLine>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What identifies a code object across its life: its address alone could
/// be reused by another code object after it is freed.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
struct CodeKey {
    address: usize,
    filename: usize,
    name: usize,
    first_line: i32,
}

/// Why a Python found in the process cannot be read.
#[derive(Debug)]
pub struct Unsupported(pub String);

fn symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks
    // the name up.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// The code range of a function symbol: its address and the symbol's size.
fn function_range(name: &CStr) -> Option<Range<u64>> {
    let addr = symbol(name);
    if addr.is_null() {
        return None;
    }
    let mut info: libc::Dl_info = unsafe_zeroed();
    let mut sym: *const libc::Elf64_Sym = std::ptr::null();
    // SAFETY: dladdr1 fills `info` and points `sym` at the ELF symbol that
    // covers `addr`, which lives as long as the module.
    let ok = unsafe {
        libc::dladdr1(
            addr,
            &mut info,
            (&mut sym as *mut *const libc::Elf64_Sym).cast(),
            RTLD_DL_SYMENT,
        )
    };
    if ok == 0 || sym.is_null() {
        return None;
    }
    // SAFETY: non-null pointer to the symbol table entry (see above).
    let size = unsafe { (*sym).st_size };
    (size > 0).then(|| addr as u64..addr as u64 + size)
}

fn unsafe_zeroed<T>() -> T {
    // SAFETY: only used for plain C structs for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// Whether the interpreter's objects have the default build's header
/// (`ob_refcnt`, then `ob_type`), which every offset of `LAYOUTS` assumes:
/// `PyCode_Type`'s type must be `PyType_Type` at offset 8 and its name
/// "code" just after its size. Free-threaded builds (3.13t and later) and
/// `Py_TRACE_REFS` builds put other fields first; there the walk would read
/// the wrong fields.
fn default_object_layout(code_type: usize) -> bool {
    type_has_default_header(code_type, symbol(c"PyType_Type") as usize, c"code")
}

/// Whether the type object at `ty` is laid out as in a default build: its
/// type at offset 8 is `type_type`, and its name (after a 24-byte
/// `PyVarObject`) is `name`. `ty` must point at a type object of some
/// build (its first 32 bytes readable).
fn type_has_default_header(ty: usize, type_type: usize, name: &CStr) -> bool {
    if type_type == 0 || read_usize(ty + 8) != type_type {
        return false;
    }
    // PyVarObject is 24 bytes in the default build; tp_name follows.
    let tp_name = read_usize(ty + 24);
    // SAFETY: with the header checked above, tp_name is the type's name, a
    // NUL-terminated static string.
    tp_name != 0 && unsafe { CStr::from_ptr(tp_name as *const c_char) } == name
}

/// (major, minor) of the interpreter in this process, if any.
fn interpreter_version() -> Option<(u32, u32)> {
    let v = symbol(c"Py_Version");
    if !v.is_null() {
        // SAFETY: `Py_Version` (3.11+) is a `const unsigned long` holding
        // PY_VERSION_HEX.
        let hex: u64 = unsafe { *(v as *const std::ffi::c_ulong) };
        return Some(((hex >> 24) as u32 & 0xff, (hex >> 16) as u32 & 0xff));
    }
    let f = symbol(c"Py_GetVersion");
    if f.is_null() {
        return None;
    }
    // SAFETY: `Py_GetVersion` takes nothing and returns a static string.
    let text = unsafe {
        let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(f);
        CStr::from_ptr(f()).to_string_lossy().into_owned()
    };
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

impl Python {
    /// The process's interpreter, if it has one: `Ok(None)` when none is
    /// loaded, `Err` when one is but this collector cannot read it.
    pub fn detect() -> Result<Option<Python>, Unsupported> {
        let Some(version) = interpreter_version() else {
            return Ok(None);
        };
        let unsupported = |why: &str| {
            Unsupported(format!(
                "Python {}.{} is in this process but {why}: stacks show native frames only \
                 (this gmem-prof reads default builds of Python 3.10 to 3.15)",
                version.0, version.1
            ))
        };
        let layout = LAYOUTS
            .iter()
            .find(|l| version.0 == 3 && l.minor == version.1)
            .copied()
            .ok_or_else(|| unsupported("its frames are not laid out as in a version we know"))?;
        let thread_state = symbol(c"PyGILState_GetThisThreadState");
        let addr2line = symbol(c"PyCode_Addr2Line");
        let code_type = symbol(c"PyCode_Type");
        let eval_loop = function_range(c"_PyEval_EvalFrameDefault");
        let (false, false, false, Some(eval_loop)) = (
            thread_state.is_null(),
            addr2line.is_null(),
            code_type.is_null(),
            eval_loop,
        ) else {
            return Err(unsupported("some of its symbols could not be found"));
        };
        if !default_object_layout(code_type as usize) {
            return Err(unsupported(
                "its objects are not laid out as in a default build (free-threaded or \
                 Py_TRACE_REFS)",
            ));
        }
        // SAFETY: both symbols are functions with these C signatures in
        // every version we accept.
        let (thread_state, addr2line) = unsafe {
            (
                std::mem::transmute::<*mut c_void, GetThreadState>(thread_state),
                std::mem::transmute::<*mut c_void, Addr2Line>(addr2line),
            )
        };
        Ok(Some(Python {
            version,
            layout,
            thread_state,
            addr2line,
            code_type: code_type as usize,
            eval_loop,
            codes: Mutex::new(Codes::default()),
        }))
    }

    /// A return address inside the evaluation loop.
    #[inline]
    pub fn is_eval_loop(&self, pc: u64) -> bool {
        self.eval_loop.contains(&pc)
    }

    /// The calling thread's Python frames, innermost first (none when the
    /// thread runs no Python). A code object met for the first time is
    /// given to `define` (before any frame that names it is returned).
    /// Returns whether the stack went deeper than `MAX_PYTHON_FRAMES`.
    pub fn walk(&self, out: &mut Vec<PyFrame>, define: impl FnMut(PyCode)) -> bool {
        out.clear();
        // The thread's line cache, borrowed once for the whole walk (a
        // borrow per frame was a visible part of the walk's cost).
        LINE_CACHE.with(|cache| {
            let Ok(mut cache) = cache.try_borrow_mut() else {
                return false;
            };
            if cache.is_empty() {
                cache.resize(1 << LINE_CACHE_BITS, CachedLine::default());
            }
            self.walk_with(&mut cache, out, define)
        })
    }

    fn walk_with(
        &self,
        cache: &mut [CachedLine],
        out: &mut Vec<PyFrame>,
        mut define: impl FnMut(PyCode),
    ) -> bool {
        // SAFETY: PyGILState_GetThisThreadState takes no lock and no GIL;
        // it returns this thread's state or NULL.
        let tstate = unsafe { (self.thread_state)() } as usize;
        if tstate == 0 {
            return false;
        }
        let l = &self.layout;
        let mut frame = match l.frame_chain {
            FrameChain::FrameObject { frame } => read_usize(tstate + frame),
            FrameChain::CFrame { cframe, current } => {
                let cf = read_usize(tstate + cframe);
                if cf == 0 {
                    return false;
                }
                read_usize(cf + current)
            }
            FrameChain::Direct { current } => read_usize(tstate + current),
        };
        while frame != 0 {
            if out.len() == MAX_PYTHON_FRAMES {
                self.find_cut_groups_entry(frame, out);
                return true;
            }
            if !frame.is_multiple_of(8) {
                break;
            }
            let code = read_usize(frame + l.code) & !l.code_tag_bits;
            let owner = l.entry.map(|e| read_u8(frame + e));
            let previous = read_usize(frame + l.previous);
            let shim = l.minor >= 12 && owner == Some(ENTRY_FRAME_OWNER);
            if shim {
                // The loop's own entry frame: the frames after it belong to
                // the next loop out.
                // Only the first after a Python frame: the loops that ran
                // none since (3.15 also keeps a base frame of its own,
                // outside the stack, under the outermost) stand for no
                // group.
                if let Some(last) = out.last_mut().filter(|l| !l.ends_group) {
                    last.ends_group = true;
                    last.entry = frame as u64;
                }
            } else if code != 0 && code.is_multiple_of(8) && read_usize(code + 8) == self.code_type
            {
                let lasti = match l.frame_chain {
                    FrameChain::FrameObject { .. } => read_i32(frame + l.instr),
                    _ => {
                        let instr = read_usize(frame + l.instr);
                        ((instr as isize - (code + l.code_start) as isize) / 2) as i32
                    }
                };
                let Some((id, line)) = self.code_and_line(cache, code, lasti, &mut define) else {
                    return false;
                };
                out.push(PyFrame {
                    code: id,
                    line,
                    // 3.10: each frame has its own loop; 3.11: `is_entry`.
                    ends_group: l.minor == 10 || (l.minor == 11 && owner == Some(1)),
                    entry: 0,
                });
            }
            frame = previous;
        }
        false
    }

    /// A walk cut at `MAX_PYTHON_FRAMES` (deep recursion) stopped inside
    /// its outermost group, before that group's entry frame (3.12+), which
    /// is what places the group among the native frames: read on from
    /// `frame`, owners and links alone, to find it. Without it the group
    /// would follow every native frame, outside `main` and `_start`, in
    /// builds where the evaluation loop has no symbol of its own to place
    /// it by (Debian's 3.14 and 3.15). Bounded: past `CUT_GROUP_SCAN`
    /// frames the group is placed as before.
    #[cold]
    fn find_cut_groups_entry(&self, mut frame: usize, out: &mut [PyFrame]) {
        let l = &self.layout;
        let (Some(owner), Some(last)) = (l.entry, out.last_mut()) else {
            return;
        };
        if l.minor < 12 || last.ends_group {
            return;
        }
        for _ in 0..CUT_GROUP_SCAN {
            if frame == 0 || !frame.is_multiple_of(8) {
                return;
            }
            if read_u8(frame + owner) == ENTRY_FRAME_OWNER {
                last.ends_group = true;
                last.entry = frame as u64;
                return;
            }
            frame = read_usize(frame + l.previous);
        }
    }

    /// The `PyCode` id and line of a frame at `lasti` in `code`: from this
    /// thread's cache when it has them (no lock, no hashing of strings),
    /// else from the process's table (a lock, and `PyCode_Addr2Line`).
    #[inline]
    fn code_and_line(
        &self,
        cache: &mut [CachedLine],
        code: usize,
        lasti: i32,
        define: &mut impl FnMut(PyCode),
    ) -> Option<(u32, u32)> {
        let l = &self.layout;
        let key = CodeKey {
            address: code,
            filename: read_usize(code + l.co_filename),
            name: read_usize(code + l.co_name),
            first_line: read_i32(code + l.co_firstlineno),
        };
        let slot = ((code as u64 ^ (lasti as u64).wrapping_mul(0x9e37_79b9))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            >> (64 - LINE_CACHE_BITS)) as usize;
        let e = &mut cache[slot];
        if e.key == key && e.lasti == lasti {
            return Some((e.id, e.line));
        }
        let mut codes = self.codes.lock().ok()?;
        let id = self.code_id(&mut codes, key, define);
        let line = self.line(&mut codes, id, code, lasti);
        drop(codes);
        *e = CachedLine {
            key,
            lasti,
            id,
            line,
        };
        Some((id, line))
    }

    fn code_id(&self, codes: &mut Codes, key: CodeKey, define: &mut impl FnMut(PyCode)) -> u32 {
        codes.intern(
            key,
            || {
                (
                    self.text(key.filename),
                    self.text(key.name),
                    key.first_line.max(0) as u32,
                )
            },
            define,
        )
    }

    /// The `PyCode` id of a frame that stands among Python's without being
    /// Python code (an autograd node's class, `torch/autograd.rs`): `key` is an
    /// address that names it for the process's life; `file` and
    /// `function` say what it is. Defined through `define` the first time.
    pub fn named_frame_id(
        &self,
        key: usize,
        file: &str,
        function: &str,
        mut define: impl FnMut(PyCode),
    ) -> Option<u32> {
        // No code object has a null file name: these keys are apart.
        let key = CodeKey {
            address: key,
            filename: 0,
            name: 0,
            first_line: -1,
        };
        let mut codes = self.codes.lock().ok()?;
        let describe = || (file.to_string(), function.to_string(), 0);
        Some(codes.intern(key, describe, &mut define))
    }

    fn line(&self, codes: &mut Codes, id: u32, code: usize, lasti: i32) -> u32 {
        if let Some(line) = codes.lines.get(&(id, lasti)) {
            return *line;
        }
        // SAFETY: `code` is a live code object (it is on this thread's
        // stack); PyCode_Addr2Line reads its line table and nothing else.
        let line = unsafe { (self.addr2line)(code as *mut c_void, lasti.saturating_mul(2)) };
        let line = line.max(0) as u32;
        if codes.lines.len() < 1 << 20 {
            codes.lines.insert((id, lasti), line);
        }
        line
    }

    /// The text of a `str` object, if it is a compact one (code objects'
    /// names always are).
    fn text(&self, obj: usize) -> String {
        const LIMIT: usize = 4096;
        if obj == 0 || !obj.is_multiple_of(8) {
            return String::from("?");
        }
        let length = read_usize(obj + 16).min(LIMIT);
        let state = read_u32(obj + 32);
        let compact = state & 0x20 != 0;
        let ascii = state & 0x40 != 0;
        let kind = (state >> 2) & 7;
        if !compact {
            return String::from("?");
        }
        let data = if ascii {
            obj + self.layout.ascii_size
        } else {
            obj + self.layout.compact_size
        };
        let chars: Vec<u32> = (0..length)
            .map(|i| match (ascii, kind) {
                (true, _) | (false, 1) => u32::from(read_u8(data + i)),
                (false, 2) => u32::from(read_u16(data + 2 * i)),
                _ => read_u32(data + 4 * i),
            })
            .collect();
        chars
            .into_iter()
            .map(|c| char::from_u32(c).unwrap_or('\u{fffd}'))
            .collect()
    }
}

// The interpreter's memory, read through its own pointers. They are valid as
// long as the layout is the interpreter's, which `detect` made sure of; the
// reads are unaligned-safe and never write.
fn read_usize(addr: usize) -> usize {
    // SAFETY: see above.
    unsafe { std::ptr::read_unaligned(addr as *const usize) }
}
fn read_i32(addr: usize) -> i32 {
    // SAFETY: see above.
    unsafe { std::ptr::read_unaligned(addr as *const i32) }
}
fn read_u32(addr: usize) -> u32 {
    // SAFETY: see above.
    unsafe { std::ptr::read_unaligned(addr as *const u32) }
}
fn read_u16(addr: usize) -> u16 {
    // SAFETY: see above.
    unsafe { std::ptr::read_unaligned(addr as *const u16) }
}
fn read_u8(addr: usize) -> u8 {
    // SAFETY: see above.
    unsafe { std::ptr::read(addr as *const u8) }
}

/// Puts Python frames among native ones: the native frame that ran the
/// next group of Python frames (innermost first) is replaced by that group;
/// groups the native frames did not reach (the walk was cut short) follow
/// them. `runs(i, entry)` says whether native frame `i` ran the next group,
/// whose entry frame (`PyFrame::entry`, 0 when unknown) is given. Returns
/// the number of values written to `out`.
pub fn interleave(
    native: &[u64],
    runs: impl Fn(usize, u64) -> bool,
    python: &[PyFrame],
    out: &mut [u64],
) -> usize {
    let mut n = 0;
    let mut push = |v: u64, n: &mut usize| {
        if *n < out.len() {
            out[*n] = v;
            *n += 1;
        }
    };
    let mut next = 0;
    // The next group's entry frame, looked up once per group.
    let entry_of = |from: usize| {
        python[from..]
            .iter()
            .find(|f| f.ends_group)
            .map_or(0, |f| f.entry)
    };
    let mut entry = if python.is_empty() { 0 } else { entry_of(0) };
    for (i, &pc) in native.iter().enumerate() {
        if next < python.len() && runs(i, entry) {
            while next < python.len() {
                let f = python[next];
                next += 1;
                push(encode_frame(f.code, f.line), &mut n);
                if f.ends_group {
                    break;
                }
            }
            if next < python.len() {
                entry = entry_of(next);
            }
        } else {
            push(pc, &mut n);
        }
    }
    for f in &python[next..] {
        push(encode_frame(f.code, f.line), &mut n);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(code: u32, line: u32, ends_group: bool) -> PyFrame {
        PyFrame {
            code,
            line,
            ends_group,
            entry: 0,
        }
    }

    #[test]
    fn only_the_default_builds_object_header_passes() {
        let name = c"code";
        let type_type = [0usize; 8];
        let type_type = type_type.as_ptr() as usize;
        // Default build: ob_refcnt, ob_type, ob_size, tp_name.
        let default = [1, type_type, 0, name.as_ptr() as usize];
        assert!(type_has_default_header(
            default.as_ptr() as usize,
            type_type,
            name
        ));
        assert!(!type_has_default_header(
            default.as_ptr() as usize,
            type_type,
            c"int"
        ));
        // Free-threaded (3.13t+): ob_tid, flags and local count, shared
        // count, then ob_type; ob_size and tp_name after.
        let free_threaded = [7, 1 << 32, 0, type_type, 0, name.as_ptr() as usize];
        assert!(!type_has_default_header(
            free_threaded.as_ptr() as usize,
            type_type,
            name
        ));
        // Py_TRACE_REFS: two list pointers first.
        let trace_refs = [0x1000, 0x2000, 1, type_type, 0, name.as_ptr() as usize];
        assert!(!type_has_default_header(
            trace_refs.as_ptr() as usize,
            type_type,
            name
        ));
        // No PyType_Type found.
        assert!(!type_has_default_header(default.as_ptr() as usize, 0, name));
    }

    #[test]
    fn frames_keep_their_code_and_line_through_the_tag() {
        for (code, line) in [(1, 1), (0x7fff_ffff, u32::MAX), (42, 0)] {
            let v = encode_frame(code, line);
            assert_eq!(decode_frame(v), Some((code, line)));
        }
        assert_eq!(decode_frame(0x7fff_1234_5678), None);
    }

    #[test]
    fn each_evaluation_loop_frame_stands_for_its_group() {
        const EVAL: u64 = 0xe000;
        let native = [0x10, 0x20, EVAL, 0x30, EVAL, 0x40];
        // Innermost group: two frames run by the inner loop; then one.
        let python = [py(1, 11, false), py(2, 22, true), py(3, 33, true)];
        let mut out = [0u64; 16];
        let n = interleave(&native, |i, _| native[i] == EVAL, &python, &mut out);
        assert_eq!(
            out[..n],
            [
                0x10,
                0x20,
                encode_frame(1, 11),
                encode_frame(2, 22),
                0x30,
                encode_frame(3, 33),
                0x40
            ]
        );
    }

    #[test]
    fn each_group_goes_where_its_entry_frame_lives_on_the_stack() {
        // Native frames and the stack each owns, from its stack pointer to
        // the next one's; two groups whose loops' entry frames lie in the
        // second and third native frames.
        let native = [0x10, 0x20, 0x30, 0x40];
        let sps = [0x100, 0x200, 0x300, 0x400];
        let mut inner = py(2, 22, true);
        inner.entry = 0x2f0;
        let mut outer = py(3, 33, true);
        outer.entry = 0x308;
        let python = [py(1, 11, false), inner, outer];
        let runs = |i: usize, entry: u64| {
            let end = sps.get(i + 1).copied().unwrap_or(u64::MAX);
            (sps[i]..end).contains(&entry)
        };
        let mut out = [0u64; 16];
        let n = interleave(&native, runs, &python, &mut out);
        assert_eq!(
            out[..n],
            [
                0x10,
                encode_frame(1, 11),
                encode_frame(2, 22),
                encode_frame(3, 33),
                0x40
            ]
        );
    }

    #[test]
    fn python_frames_the_native_walk_did_not_reach_follow_it() {
        let python = [py(1, 1, true), py(2, 2, true)];
        let mut out = [0u64; 16];
        let n = interleave(&[0x10, 0x20], |_, _| false, &python, &mut out);
        assert_eq!(
            out[..n],
            [0x10, 0x20, encode_frame(1, 1), encode_frame(2, 2)]
        );
        // More evaluation-loop frames than groups: the extra ones stay.
        let n = interleave(&[0xe0, 0xe0, 0xe0], |_, _| true, &python, &mut out);
        assert_eq!(out[..n], [encode_frame(1, 1), encode_frame(2, 2), 0xe0]);
        // `out` bounds what is written.
        let mut small = [0u64; 2];
        assert_eq!(interleave(&[1, 2, 3], |_, _| false, &python, &mut small), 2);
    }
}
