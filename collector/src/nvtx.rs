//! The program's NVTX ranges and marks, as NVTX's tool (its "injection
//! library"). NVTX3 is header only: each copy compiled into a program
//! (the program's own, PyTorch's `torch.cuda.nvtx`, the `nvtx` Python
//! package) loads the library `NVTX_INJECTION64_PATH` names on its first
//! call and calls its `InitializeInjectionNvtx2` with a function that
//! hands out the copy's tables of function pointers; the tool fills in the
//! slots it implements, and the copy calls them from then on (the others
//! stay no-ops). `record` points that variable at the collector itself, so
//! the same loaded library serves CUDA and every NVTX copy.
//!
//! What is recorded: pushed and started ranges (`RangeBegin`, `RangeEnd`)
//! and marks (`Mark`), in NVTX's default domain and in named ones, with
//! names given as text, as wide text or as registered strings. Categories,
//! colours and payloads are not kept. Each event costs one record and a
//! name lookup (names are written once, as `String` records), no CUDA call.
//! Calls made before the collector started (NVTX may come before CUDA) or
//! while it is paused are not recorded; a push before start keeps its place
//! on the thread's stack, so the pops after it still match.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use gmem_prof_traces::record::{range, Mark, Nanos, RangeBegin, RangeEnd, StringId};
use gmem_prof_traces::{env, Record};

use crate::cuda::callbacks::current_tid;
use crate::state;

/// The ids NVTX's headers give the export tables and modules
/// (`nvtxDetail/nvtxTypes.h`).
const ETID_CALLBACKS: u32 = 1;
const MODULE_CORE: u32 = 1;
const MODULE_CORE2: u32 = 5;

/// Slots of the CORE module's table.
mod core {
    pub const MARK_EX: usize = 1;
    pub const MARK_A: usize = 2;
    pub const MARK_W: usize = 3;
    pub const RANGE_START_EX: usize = 4;
    pub const RANGE_START_A: usize = 5;
    pub const RANGE_START_W: usize = 6;
    pub const RANGE_END: usize = 7;
    pub const RANGE_PUSH_EX: usize = 8;
    pub const RANGE_PUSH_A: usize = 9;
    pub const RANGE_PUSH_W: usize = 10;
    pub const RANGE_POP: usize = 11;
}

/// Slots of the CORE2 module's table (domains).
mod core2 {
    pub const MARK_EX: usize = 1;
    pub const RANGE_START_EX: usize = 2;
    pub const RANGE_END: usize = 3;
    pub const RANGE_PUSH_EX: usize = 4;
    pub const RANGE_POP: usize = 5;
    pub const REGISTER_STRING_A: usize = 10;
    pub const REGISTER_STRING_W: usize = 11;
    pub const CREATE_A: usize = 12;
    pub const CREATE_W: usize = 13;
}

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct ExportCallbacks {
    struct_size: usize,
    get_module_function_table: Option<
        unsafe extern "C" fn(module: u32, table: *mut *mut *mut Fn, size: *mut u32) -> c_int,
    >,
}

/// One slot: NVTX's `NvtxFunctionPointer`, cast to each function's type.
type Fn = *const c_void;
type GetExportTable = unsafe extern "C" fn(id: u32) -> *const c_void;

/// `nvtxEventAttributes_v2` up to its message: the fields read here.
#[repr(C)]
struct Attributes {
    _version: u16,
    size: u16,
    _category: u32,
    _color_type: i32,
    _color: u32,
    _payload_type: i32,
    _reserved0: i32,
    _payload: u64,
    message_type: i32,
    message: *const c_void,
}

const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;

/// A domain or a registered string: what its NVTX handle points at (made
/// here, never freed: programs make a few of each).
struct Named {
    text: String,
}

/// Ranges begun in this process, for the next one's id.
static RANGES: AtomicU64 = AtomicU64::new(0);

/// A range pushed on this thread and not yet popped.
struct Pushed {
    /// The domain's handle (0: the default domain).
    domain: usize,
    id: u64,
    recorded: bool,
}

thread_local! {
    static PUSHED: RefCell<Vec<Pushed>> = const { RefCell::new(Vec::new()) };
}

/// Called by each NVTX copy in the process on its first call, with that
/// copy's export tables. Returns 1 when the tool attached, 0 (NVTX then
/// stays a no-op in that copy) when gmem-prof is disabled in this process,
/// NVTX recording is off (`GMEM_PROF_NVTX=0`), or the tables are not as
/// expected.
#[no_mangle]
pub extern "C" fn InitializeInjectionNvtx2(get: Option<GetExportTable>) -> c_int {
    state::no_unwind(0, || {
        if crate::config::flag(env::DISABLE, false) || !crate::config::flag(env::NVTX, true) {
            return 0;
        }
        // SAFETY: NVTX's loader passes its own export-table function, and
        // the tables it returns live as long as the program.
        unsafe { attach(get) as c_int }
    })
}

/// Fills our functions into one NVTX copy's tables.
unsafe fn attach(get: Option<GetExportTable>) -> bool {
    let Some(get) = get else { return false };
    let callbacks = get(ETID_CALLBACKS).cast::<ExportCallbacks>();
    if callbacks.is_null() || (*callbacks).struct_size < std::mem::size_of::<ExportCallbacks>() {
        return false;
    }
    let Some(table_of) = (*callbacks).get_module_function_table else {
        return false;
    };
    let core: &[(usize, Fn)] = &[
        (core::MARK_EX, mark_ex as Fn),
        (core::MARK_A, mark_a as Fn),
        (core::MARK_W, mark_w as Fn),
        (core::RANGE_START_EX, range_start_ex as Fn),
        (core::RANGE_START_A, range_start_a as Fn),
        (core::RANGE_START_W, range_start_w as Fn),
        (core::RANGE_END, range_end as Fn),
        (core::RANGE_PUSH_EX, range_push_ex as Fn),
        (core::RANGE_PUSH_A, range_push_a as Fn),
        (core::RANGE_PUSH_W, range_push_w as Fn),
        (core::RANGE_POP, range_pop as Fn),
    ];
    let core2: &[(usize, Fn)] = &[
        (core2::MARK_EX, domain_mark_ex as Fn),
        (core2::RANGE_START_EX, domain_range_start_ex as Fn),
        (core2::RANGE_END, domain_range_end as Fn),
        (core2::RANGE_PUSH_EX, domain_range_push_ex as Fn),
        (core2::RANGE_POP, domain_range_pop as Fn),
        (core2::REGISTER_STRING_A, register_string_a as Fn),
        (core2::REGISTER_STRING_W, register_string_w as Fn),
        (core2::CREATE_A, domain_create_a as Fn),
        (core2::CREATE_W, domain_create_w as Fn),
    ];
    fill(table_of, MODULE_CORE, core) && fill(table_of, MODULE_CORE2, core2)
}

/// Writes `slots` into one module's table: each entry of the table points
/// at the copy's function pointer for that slot.
unsafe fn fill(
    table_of: unsafe extern "C" fn(u32, *mut *mut *mut Fn, *mut u32) -> c_int,
    module: u32,
    slots: &[(usize, Fn)],
) -> bool {
    let (mut table, mut size) = (std::ptr::null_mut(), 0u32);
    if table_of(module, &mut table, &mut size) == 0 || table.is_null() {
        return false;
    }
    for &(slot, f) in slots {
        // `size` is the last valid slot (slot 0 is unused).
        if slot <= size as usize {
            let entry = *table.add(slot);
            if !entry.is_null() {
                *entry = f;
            }
        }
    }
    true
}

/// Text of a NUL-terminated string, lossily; borrowed (no allocation)
/// when it is UTF-8. Valid while the program's string is.
unsafe fn text_a<'a>(s: *const c_char) -> Cow<'a, str> {
    if s.is_null() {
        return Cow::Borrowed("");
    }
    CStr::from_ptr(s).to_string_lossy()
}

/// Text of a NUL-terminated wide string (UTF-32 on Linux).
unsafe fn text_w<'a>(s: *const libc::wchar_t) -> Cow<'a, str> {
    if s.is_null() {
        return Cow::Borrowed("");
    }
    let mut out = String::new();
    let mut p = s;
    // Bounded: a name is not a book.
    while *p != 0 && out.len() < 4096 {
        out.push(char::from_u32(*p as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
        p = p.add(1);
    }
    Cow::Owned(out)
}

/// The message of an event's attributes.
unsafe fn text_of<'a>(a: *const Attributes) -> Cow<'a, str> {
    if a.is_null() || ((*a).size as usize) < std::mem::size_of::<Attributes>() {
        return Cow::Borrowed("");
    }
    let m = (*a).message;
    match (*a).message_type {
        MESSAGE_ASCII => text_a(m.cast()),
        MESSAGE_UNICODE => text_w(m.cast()),
        MESSAGE_REGISTERED if !m.is_null() => Cow::Borrowed(&(*m.cast::<Named>()).text),
        _ => Cow::Borrowed(""),
    }
}

/// A domain handle's name.
unsafe fn domain_name(domain: usize) -> &'static str {
    &(*(domain as *const Named)).text
}

/// A new handle for a domain or a registered string.
fn named(text: Cow<str>) -> *const c_void {
    let text = text.into_owned();
    Box::into_raw(Box::new(Named { text })).cast()
}

/// Writes `make(domain id, name id)` with the names' `String` records
/// before it, if the collector records now. Returns whether it did.
fn record<'a>(
    domain: usize,
    name: impl FnOnce() -> Cow<'a, str>,
    make: impl FnOnce(StringId, StringId) -> Record,
) -> bool {
    state::guarded(false, || {
        let Some(c) = state::get() else { return false };
        if !c.recording() {
            return false;
        }
        let mut defs = Vec::new();
        let (domain_id, name_id) = {
            let Ok(mut names) = c.names.lock() else {
                return false;
            };
            let d = if domain == 0 {
                StringId(0)
            } else {
                // SAFETY: domain handles are ours (`named`).
                let text = unsafe { domain_name(domain) };
                names.intern(text, &mut defs)
            };
            (d, names.intern(&name(), &mut defs))
        };
        for d in defs {
            c.sink.push(d);
        }
        c.sink.push(make(domain_id, name_id));
        true
    })
}

fn now() -> Nanos {
    Nanos(state::get().map_or(0, |c| c.clock.now()))
}

fn mark<'a>(domain: usize, name: impl FnOnce() -> Cow<'a, str>) {
    record(domain, name, |domain, name| {
        Record::Mark(Mark {
            time: now(),
            tid: current_tid(),
            domain,
            name,
        })
    });
}

/// Begins a range; `depth` for a pushed one.
fn begin<'a>(
    domain: usize,
    kind: u8,
    depth: u32,
    name: impl FnOnce() -> Cow<'a, str>,
) -> (u64, bool) {
    let id = RANGES.fetch_add(1, Ordering::Relaxed) + 1;
    let recorded = record(domain, name, begin_record(id, current_tid(), kind, depth));
    (id, recorded)
}

/// The `RangeBegin` of range `id`, begun now on thread `tid`, once its
/// domain's and name's strings have ids.
fn begin_record(
    id: u64,
    tid: u32,
    kind: u8,
    depth: u32,
) -> impl FnOnce(StringId, StringId) -> Record {
    move |domain, name| {
        Record::RangeBegin(RangeBegin {
            time: now(),
            tid,
            id,
            domain,
            name,
            kind,
            depth,
        })
    }
}

fn end(id: u64) {
    state::guarded((), || {
        let Some(c) = state::get() else { return };
        if c.recording() {
            c.sink.push(Record::RangeEnd(RangeEnd {
                time: now(),
                tid: current_tid(),
                id,
            }));
        }
    });
}

/// Pushes a range on this thread; returns its depth in its domain (0 for
/// the outermost), as NVTX's push returns.
fn push<'a>(domain: usize, name: impl FnOnce() -> Cow<'a, str>) -> c_int {
    state::no_unwind(-1, || {
        let Ok(depth) =
            PUSHED.try_with(|p| p.borrow().iter().filter(|r| r.domain == domain).count())
        else {
            return -1;
        };
        let (id, recorded) = begin(domain, range::PUSHED, depth as u32, name);
        let _ = PUSHED.try_with(|p| {
            p.borrow_mut().push(Pushed {
                domain,
                id,
                recorded,
            })
        });
        depth as c_int
    })
}

/// Pops this thread's innermost range of `domain`; returns its depth, or
/// -1 when none was open.
fn pop(domain: usize) -> c_int {
    state::no_unwind(-1, || {
        let popped = PUSHED.try_with(|p| {
            let mut p = p.borrow_mut();
            let at = p.iter().rposition(|r| r.domain == domain)?;
            let depth = p[..at].iter().filter(|r| r.domain == domain).count();
            Some((p.remove(at), depth))
        });
        let Ok(Some((r, depth))) = popped else {
            return -1;
        };
        if r.recorded {
            end(r.id);
        }
        depth as c_int
    })
}

fn start<'a>(domain: usize, name: impl FnOnce() -> Cow<'a, str>) -> u64 {
    state::no_unwind(0, || begin(domain, range::STARTED, 0, name).0)
}

fn end_started(id: u64) {
    state::no_unwind((), || end(id));
}

/// Domains named by the program's own calls (`program_range_begin`): one
/// handle per name, kept for the process's life (there are few).
static DOMAINS: std::sync::Mutex<Vec<(String, usize)>> = std::sync::Mutex::new(Vec::new());

/// The handle of the domain named `name` ("" is NVTX's default domain).
fn domain_named(name: &str) -> Option<usize> {
    if name.is_empty() {
        return Some(0);
    }
    let mut domains = DOMAINS.lock().ok()?;
    if let Some(&(_, handle)) = domains.iter().find(|(n, _)| n == name) {
        return Some(handle);
    }
    let handle = named(Cow::Borrowed(name)) as usize;
    domains.push((name.to_string(), handle));
    Some(handle)
}

/// A range the program began through the collector's own call
/// (`gmem_prof_range_begin`: `gmem_prof.range()`, the bootstrap's PyTorch
/// phases, the pytest plugin's tests), recorded as a started NVTX range: it
/// may end on any thread. Begun before the collector started (the
/// program's first CUDA call starts it: the pytest test that first touches
/// CUDA), it waits in `PENDING` and is recorded as begun when recording
/// starts — nothing was allocated before. Returns its id, 0 when not
/// recorded.
pub fn program_range_begin(domain: &str, name: &str) -> u64 {
    state::no_unwind(0, || {
        let Some(domain) = domain_named(domain) else {
            return 0;
        };
        match begin(domain, range::STARTED, 0, || Cow::Borrowed(name)) {
            (id, true) => id,
            (id, false) if state::get().is_none() => match PENDING.lock() {
                Ok(mut p) if p.len() < PENDING_MAX => {
                    p.push((id, domain, name.to_string(), current_tid()));
                    id
                }
                _ => 0,
            },
            _ => 0,
        }
    })
}

/// Ends a range `program_range_begin` began (0: one not recorded).
pub fn program_range_end(id: u64) {
    if id == 0 {
        return;
    }
    let waiting = state::no_unwind(false, || {
        let Ok(mut p) = PENDING.lock() else {
            return false;
        };
        let before = p.len();
        p.retain(|r| r.0 != id);
        p.len() != before
    });
    if !waiting {
        end_started(id);
    }
}

/// Program ranges begun before the collector started: (id, domain, name,
/// thread), at most `PENDING_MAX` (a program begins few before its first
/// CUDA call; one that never makes one keeps none for long).
static PENDING: std::sync::Mutex<Vec<(u64, usize, String, u32)>> =
    std::sync::Mutex::new(Vec::new());
const PENDING_MAX: usize = 64;

/// Recording has started: the program's ranges begun before it begin now.
pub fn begin_pending() {
    let pending = match PENDING.lock() {
        Ok(mut p) => std::mem::take(&mut *p),
        Err(_) => return,
    };
    for (id, domain, name, tid) in pending {
        record(
            domain,
            || Cow::Owned(name),
            begin_record(id, tid, range::STARTED, 0),
        );
    }
}

// The functions NVTX calls. Their pointers come from the program: NVTX's
// contract is that strings are NUL-terminated and attributes valid.

unsafe extern "C" fn mark_ex(a: *const Attributes) {
    mark(0, || text_of(a));
}
unsafe extern "C" fn mark_a(s: *const c_char) {
    mark(0, || text_a(s));
}
unsafe extern "C" fn mark_w(s: *const libc::wchar_t) {
    mark(0, || text_w(s));
}
unsafe extern "C" fn range_start_ex(a: *const Attributes) -> u64 {
    start(0, || text_of(a))
}
unsafe extern "C" fn range_start_a(s: *const c_char) -> u64 {
    start(0, || text_a(s))
}
unsafe extern "C" fn range_start_w(s: *const libc::wchar_t) -> u64 {
    start(0, || text_w(s))
}
unsafe extern "C" fn range_end(id: u64) {
    end_started(id);
}
unsafe extern "C" fn range_push_ex(a: *const Attributes) -> c_int {
    push(0, || text_of(a))
}
unsafe extern "C" fn range_push_a(s: *const c_char) -> c_int {
    push(0, || text_a(s))
}
unsafe extern "C" fn range_push_w(s: *const libc::wchar_t) -> c_int {
    push(0, || text_w(s))
}
unsafe extern "C" fn range_pop() -> c_int {
    pop(0)
}
unsafe extern "C" fn domain_mark_ex(d: *const c_void, a: *const Attributes) {
    mark(d as usize, || text_of(a));
}
unsafe extern "C" fn domain_range_start_ex(d: *const c_void, a: *const Attributes) -> u64 {
    start(d as usize, || text_of(a))
}
unsafe extern "C" fn domain_range_end(_d: *const c_void, id: u64) {
    end_started(id);
}
unsafe extern "C" fn domain_range_push_ex(d: *const c_void, a: *const Attributes) -> c_int {
    push(d as usize, || text_of(a))
}
unsafe extern "C" fn domain_range_pop(d: *const c_void) -> c_int {
    pop(d as usize)
}
unsafe extern "C" fn register_string_a(_d: *const c_void, s: *const c_char) -> *const c_void {
    state::no_unwind(std::ptr::null(), || named(text_a(s)))
}
unsafe extern "C" fn register_string_w(
    _d: *const c_void,
    s: *const libc::wchar_t,
) -> *const c_void {
    state::no_unwind(std::ptr::null(), || named(text_w(s)))
}
unsafe extern "C" fn domain_create_a(s: *const c_char) -> *const c_void {
    state::no_unwind(std::ptr::null(), || named(text_a(s)))
}
unsafe extern "C" fn domain_create_w(s: *const libc::wchar_t) -> *const c_void {
    state::no_unwind(std::ptr::null(), || named(text_w(s)))
}
