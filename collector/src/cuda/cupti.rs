//! Raw FFI to libcupti: the one module of the collector that calls CUPTI.
//!
//! We load libcupti ourselves (dlopen of one chosen path) and resolve the few
//! functions we use, instead of going through cudarc's loader: cudarc tries
//! several library names (which could load a second, different copy) and
//! panics when a library or symbol is missing, and a panic has no place in
//! someone else's process. Record layouts come per CUPTI release from
//! `layouts`; cudarc gives the callback parameters' layouts (bindgen on
//! CUPTI 13.0's headers; the same in every release, `layouts` checks).
//!
//! CUPTI's enums are C enums; Rust enums must never hold an undeclared value,
//! so every enum-typed value crossing this boundary is read as a `u32`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;

/// CUPTI's status codes we act on.
pub const CUPTI_SUCCESS: u32 = 0;
pub const CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: u32 = 39;

pub const DOMAIN_DRIVER_API: u32 = 1;
pub const DOMAIN_RESOURCE: u32 = 3;
pub const SITE_ENTER: u32 = 0;
pub const SITE_EXIT: u32 = 1;
pub const CBID_RESOURCE_CONTEXT_DESTROY_STARTING: u32 = 2;
pub const CBID_RESOURCE_STREAM_DESTROY_STARTING: u32 = 4;
pub const CBID_RESOURCE_MODULE_UNLOAD_STARTING: u32 = 7;

pub const KIND_DEVICE: u32 = 8;
pub const KIND_CONCURRENT_KERNEL: u32 = 10;
pub const KIND_MEMORY2: u32 = 49;
pub const KIND_MEMORY_POOL: u32 = 50;

pub const ATTR_DEVICE_BUFFER_SIZE: u32 = 0;
pub const ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE: u32 = 6;

pub const FLUSH_FORCED: u32 = 1;

pub type Subscriber = *mut c_void;

/// Why `Cupti::subscribe` failed.
pub struct SubscribeError {
    pub code: u32,
    pub text: String,
    /// The client holding CUPTI, as CUPTI names it (`cuptiSubscribe_v2`).
    pub holder: Option<String>,
}
pub type ApiCallback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);
pub type BufferRequested = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
pub type BufferCompleted = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);

// Signatures of the CUPTI functions we call (cupti_*.h, CUDA 13.0), with
// C enums as u32.
type GetVersion = unsafe extern "C" fn(*mut u32) -> u32;
type GetResultString = unsafe extern "C" fn(u32, *mut *const c_char) -> u32;
type Subscribe = unsafe extern "C" fn(*mut Subscriber, Option<ApiCallback>, *mut c_void) -> u32;
type SubscribeV2 =
    unsafe extern "C" fn(*mut Subscriber, Option<ApiCallback>, *mut c_void, *mut u8) -> u32;
type EnableCallback = unsafe extern "C" fn(u32, Subscriber, u32, u32) -> u32;
type ActivityEnable = unsafe extern "C" fn(u32) -> u32;
type RegisterCallbacks =
    unsafe extern "C" fn(Option<BufferRequested>, Option<BufferCompleted>) -> u32;
type GetNextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut c_void) -> u32;
type FlushAll = unsafe extern "C" fn(u32) -> u32;
type GetNumDropped = unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> u32;
type GetAttribute = unsafe extern "C" fn(u32, *mut usize, *mut c_void) -> u32;
type GetTimestamp = unsafe extern "C" fn(*mut u64) -> u32;
type GetDeviceId = unsafe extern "C" fn(*mut c_void, *mut u32) -> u32;
type GetStreamIdEx = unsafe extern "C" fn(*mut c_void, *mut c_void, u8, *mut u32) -> u32;

/// The functions we call, resolved from one loaded libcupti.
pub struct Cupti {
    pub path: String,
    get_version: GetVersion,
    get_result_string: GetResultString,
    subscribe: Subscribe,
    /// `cuptiSubscribe_v2` (CUDA 13 and later), optional.
    subscribe_v2: Option<SubscribeV2>,
    enable_callback: EnableCallback,
    activity_enable: ActivityEnable,
    activity_register_callbacks: RegisterCallbacks,
    activity_get_next_record: GetNextRecord,
    activity_flush_all: FlushAll,
    activity_get_num_dropped: GetNumDropped,
    activity_get_attribute: GetAttribute,
    get_timestamp: GetTimestamp,
    /// `cuptiGetDeviceId`, optional: only failed allocations ask it.
    get_device_id: Option<GetDeviceId>,
    /// `cuptiGetStreamIdEx`, optional: kernel launches name their stream
    /// with it (0 when it is missing).
    get_stream_id: Option<GetStreamIdEx>,
}

/// The loaded library's handle is kept open for the life of the process.
// SAFETY: the struct holds only function pointers into a library that is
// never unloaded, and CUPTI's functions are documented as thread-safe.
unsafe impl Send for Cupti {}
// SAFETY: as above.
unsafe impl Sync for Cupti {}

impl Cupti {
    /// Loads libcupti from `path` (RTLD_GLOBAL, so a framework that links
    /// libcupti.so.13 later gets this same copy by soname) and resolves our
    /// functions. Errors name what was missing.
    pub fn load(path: &str) -> Result<Cupti, String> {
        let cpath = CString::new(path).map_err(|_| format!("bad libcupti path {path:?}"))?;
        // SAFETY: dlopen with a valid NUL-terminated path; the handle is leaked
        // on purpose (the library stays loaded for the process's life).
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(format!("cannot load {path}: {}", dlerror()));
        }
        // A function the collector can do without: None when missing.
        macro_rules! optional_sym {
            ($name:literal, $ty:ty) => {{
                let n = concat!($name, "\0");
                // SAFETY: handle is a live dlopen handle and n is NUL-terminated.
                let p = unsafe { libc::dlsym(handle, n.as_ptr().cast()) };
                // SAFETY: the symbol is CUPTI's function of that name, whose C
                // signature the field's type mirrors (cupti_*.h, CUDA 13.0).
                (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
            }};
        }
        macro_rules! sym {
            ($name:literal, $ty:ty) => {
                match optional_sym!($name, $ty) {
                    Some(f) => f,
                    None => return Err(format!("{path} has no symbol {}", $name)),
                }
            };
        }
        Ok(Cupti {
            path: path.to_string(),
            get_version: sym!("cuptiGetVersion", GetVersion),
            get_result_string: sym!("cuptiGetResultString", GetResultString),
            subscribe: sym!("cuptiSubscribe", Subscribe),
            subscribe_v2: optional_sym!("cuptiSubscribe_v2", SubscribeV2),
            enable_callback: sym!("cuptiEnableCallback", EnableCallback),
            activity_enable: sym!("cuptiActivityEnable", ActivityEnable),
            activity_register_callbacks: sym!("cuptiActivityRegisterCallbacks", RegisterCallbacks),
            activity_get_next_record: sym!("cuptiActivityGetNextRecord", GetNextRecord),
            activity_flush_all: sym!("cuptiActivityFlushAll", FlushAll),
            activity_get_num_dropped: sym!("cuptiActivityGetNumDroppedRecords", GetNumDropped),
            activity_get_attribute: sym!("cuptiActivityGetAttribute", GetAttribute),
            get_timestamp: sym!("cuptiGetTimestamp", GetTimestamp),
            get_device_id: optional_sym!("cuptiGetDeviceId", GetDeviceId),
            get_stream_id: optional_sym!("cuptiGetStreamIdEx", GetStreamIdEx),
        })
    }

    pub fn version(&self) -> Result<u32, String> {
        let mut v = 0u32;
        // SAFETY: v is a valid out pointer.
        self.check(unsafe { (self.get_version)(&mut v) }, "cuptiGetVersion")?;
        Ok(v)
    }

    pub fn result_string(&self, code: u32) -> String {
        let mut s: *const c_char = ptr::null();
        // SAFETY: s is a valid out pointer; CUPTI returns a static string.
        let rc = unsafe { (self.get_result_string)(code, &mut s) };
        if rc != CUPTI_SUCCESS || s.is_null() {
            return format!("CUPTI error {code}");
        }
        // SAFETY: non-null, NUL-terminated static string from CUPTI.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    fn check(&self, rc: u32, what: &str) -> Result<(), String> {
        if rc == CUPTI_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what} failed: {} ({rc})", self.result_string(rc)))
        }
    }

    /// Subscribes `callback`. With `cuptiSubscribe_v2` and its parameters'
    /// layout (`v2`: the release has it), names gmem-prof and, with `share`
    /// where the release has the field, asks to share CUPTI with other
    /// subscribers.
    /// `Err` carries CUPTI's code, so the caller can recognise "another
    /// client holds the subscriber slot", its text, and the name CUPTI gave
    /// of that client, when it gave one.
    pub fn subscribe(
        &self,
        callback: ApiCallback,
        v2: Option<&crate::cuda::layouts::SubscribeLayout>,
        share: bool,
    ) -> Result<Subscriber, SubscribeError> {
        let mut sub: Subscriber = ptr::null_mut();
        let (rc, holder) = match (self.subscribe_v2, v2) {
            (Some(f), Some(l)) => {
                // CUpti_SubscriberParams, laid out as the release's header
                // says (8-aligned: it starts with a size_t).
                let mut params = [0u64; 16];
                let mut holder = [0u8; 256];
                let name = c"gmem-prof";
                let size = l.size.min(std::mem::size_of_val(&params));
                let base = params.as_mut_ptr().cast::<u8>();
                // SAFETY: every offset written lies inside `params` (the
                // header's layout, smaller than it), and the pointers
                // written outlive the call.
                unsafe {
                    ptr::write_unaligned(base.cast::<usize>(), size);
                    ptr::write_unaligned(base.add(l.subscriber_name).cast(), name.as_ptr());
                    ptr::write_unaligned(
                        base.add(l.old_subscriber_name).cast(),
                        holder.as_mut_ptr(),
                    );
                    ptr::write_unaligned(base.add(l.old_subscriber_size).cast(), holder.len());
                    if let Some(at) = l.allow_multiple_subscribers {
                        *base.add(at) = u8::from(share);
                    }
                }
                // SAFETY: sub is a valid out pointer; callback lives forever;
                // params is a CUpti_SubscriberParams of `size` bytes.
                let rc = unsafe { f(&mut sub, Some(callback), ptr::null_mut(), base) };
                let end = holder.iter().position(|&b| b == 0).unwrap_or(0);
                let holder = String::from_utf8_lossy(&holder[..end]).trim().to_string();
                (rc, (!holder.is_empty()).then_some(holder))
            }
            // SAFETY: sub is a valid out pointer; callback is an extern "C"
            // fn with CUpti_CallbackFunc's signature and lives forever.
            _ => (
                unsafe { (self.subscribe)(&mut sub, Some(callback), ptr::null_mut()) },
                None,
            ),
        };
        if rc == CUPTI_SUCCESS {
            Ok(sub)
        } else {
            Err(SubscribeError {
                code: rc,
                text: self.result_string(rc),
                holder,
            })
        }
    }

    pub fn enable_callback(&self, sub: Subscriber, domain: u32, cbid: u32) -> Result<(), String> {
        self.set_callback(sub, domain, cbid, true)
    }

    /// Turns one callback on or off.
    pub fn set_callback(
        &self,
        sub: Subscriber,
        domain: u32,
        cbid: u32,
        on: bool,
    ) -> Result<(), String> {
        // SAFETY: sub came from a successful subscribe.
        let rc = unsafe { (self.enable_callback)(u32::from(on), sub, domain, cbid) };
        self.check(rc, "cuptiEnableCallback")
    }

    pub fn activity_enable(&self, kind: u32) -> Result<(), String> {
        // SAFETY: plain value argument.
        self.check(
            unsafe { (self.activity_enable)(kind) },
            "cuptiActivityEnable",
        )
    }

    pub fn register_buffers(
        &self,
        req: BufferRequested,
        done: BufferCompleted,
    ) -> Result<(), String> {
        // SAFETY: both are extern "C" fns with CUPTI's buffer callback signatures.
        let rc = unsafe { (self.activity_register_callbacks)(Some(req), Some(done)) };
        self.check(rc, "cuptiActivityRegisterCallbacks")
    }

    pub fn flush_all(&self, flags: u32) -> u32 {
        // SAFETY: plain value argument.
        unsafe { (self.activity_flush_all)(flags) }
    }

    /// Records CUPTI dropped since the last call (CUPTI resets the count).
    pub fn dropped_records(&self) -> u64 {
        let mut n = 0usize;
        // SAFETY: NULL context + stream 0 asks for the global count; n is a
        // valid out pointer.
        let rc = unsafe { (self.activity_get_num_dropped)(ptr::null_mut(), 0, &mut n) };
        if rc == CUPTI_SUCCESS {
            n as u64
        } else {
            0
        }
    }

    pub fn attribute_usize(&self, attr: u32) -> Option<usize> {
        let mut v = 0usize;
        let mut size = std::mem::size_of::<usize>();
        // SAFETY: value points to a usize and size says so.
        let rc = unsafe {
            (self.activity_get_attribute)(attr, &mut size, (&mut v as *mut usize).cast())
        };
        (rc == CUPTI_SUCCESS).then_some(v)
    }

    #[inline]
    pub fn timestamp(&self) -> u64 {
        let mut t = 0u64;
        // SAFETY: t is a valid out pointer.
        unsafe { (self.get_timestamp)(&mut t) };
        t
    }

    /// The device of a CUDA context (`None` when CUPTI cannot say).
    pub fn device_of(&self, context: *mut c_void) -> Option<u32> {
        let f = self.get_device_id?;
        if context.is_null() {
            return None;
        }
        let mut id = 0u32;
        // SAFETY: a context CUPTI handed to a callback, and an out pointer.
        (unsafe { f(context, &mut id) } == 0).then_some(id)
    }

    /// CUPTI's id of a stream (the `streamId` of its activity records), for
    /// a stream handle a launch callback passed; `per_thread` for the
    /// `_ptsz` entry points, whose default stream is the thread's own.
    pub fn stream_id(&self, context: *mut c_void, stream: *mut c_void, per_thread: bool) -> u32 {
        let Some(f) = self.get_stream_id else {
            return 0;
        };
        if context.is_null() {
            return 0;
        }
        let mut id = 0u32;
        // SAFETY: a context and stream handle CUPTI handed to a callback
        // (the call's own), and an out pointer.
        if unsafe { f(context, stream, per_thread as u8, &mut id) } == 0 {
            id
        } else {
            0
        }
    }

    /// Calls `f` with each record of a completed activity buffer, as a pointer
    /// to the record and its kind.
    ///
    /// # Safety
    /// `buffer`/`valid` must be a buffer CUPTI handed to our completion callback.
    pub unsafe fn for_each_record(
        &self,
        buffer: *mut u8,
        valid: usize,
        mut f: impl FnMut(*const u8, u32),
    ) {
        let mut rec: *mut c_void = ptr::null_mut();
        loop {
            // SAFETY: the caller guarantees the buffer; rec is CUPTI's cursor.
            let rc = unsafe { (self.activity_get_next_record)(buffer, valid, &mut rec) };
            if rc != CUPTI_SUCCESS || rec.is_null() {
                break;
            }
            // SAFETY: every activity record starts with its u32 kind.
            let kind = unsafe { ptr::read_unaligned(rec as *const u32) };
            f(rec as *const u8, kind);
        }
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated thread-local string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The CUDA version the driver in this process supports (12040 for
/// 12.4), from `cuDriverGetVersion`, which needs no initialization;
/// `None` when the driver does not answer. libcuda is loaded: it is what
/// loaded the collector.
pub fn driver_cuda_version() -> Option<u32> {
    // SAFETY: a NUL-terminated symbol name looked up in the process's
    // global scope.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"cuDriverGetVersion".as_ptr()) };
    if f.is_null() {
        return None;
    }
    // SAFETY: the driver's cuDriverGetVersion is `CUresult (int *)`.
    let f: unsafe extern "C" fn(*mut i32) -> i32 = unsafe { std::mem::transmute(f) };
    let mut v = 0i32;
    // SAFETY: v is a valid out pointer.
    (unsafe { f(&mut v) } == 0 && v > 0).then_some(v as u32)
}

/// Is a library with this soname already loaded in the process?
pub fn loaded_path_of(soname: &str) -> Option<String> {
    let c = CString::new(soname).ok()?;
    // SAFETY: RTLD_NOLOAD only looks the library up; a handle found this way
    // holds a reference we keep (the library stays loaded anyway).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    let mut map: *mut libc::c_void = ptr::null_mut();
    // SAFETY: RTLD_DI_LINKMAP writes a struct link_map* to map.
    let rc = unsafe {
        libc::dlinfo(
            h,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *mut c_void).cast(),
        )
    };
    if rc != 0 || map.is_null() {
        return Some(soname.to_string());
    }
    // SAFETY: struct link_map { ElfW(Addr) l_addr; char *l_name; ... }.
    let name = unsafe { *(map as *const *const c_char).add(1) };
    if name.is_null() {
        return Some(soname.to_string());
    }
    // SAFETY: l_name is a NUL-terminated string owned by the loader.
    Some(
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Reads a field of a C struct at `base + offset`, unaligned.
///
/// # Safety
/// `base + offset .. + size_of::<T>()` must lie inside a live record, and
/// every bit pattern must be a valid T (use integer types only).
#[inline]
pub unsafe fn field<T: Copy>(base: *const u8, offset: usize) -> T {
    // SAFETY: guaranteed by the caller.
    unsafe { ptr::read_unaligned(base.add(offset) as *const T) }
}
