//! CUPTI activity buffers: CUPTI asks us for empty buffers and hands them back
//! full; we translate each record into a trace record and return the buffer.
//!
//! Runs on CUPTI's worker thread or on whichever thread called
//! cuptiActivityFlushAll (our flush thread, or the exiting thread), never on
//! an app thread in the middle of a CUDA call.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::mem::offset_of;
use std::sync::Mutex;

use cudarc::cupti::sys as cs;
use gmem_prof_traces::record::{
    Bytes, DeviceInfo, KernelEvent, MemoryEvent, Nanos, PoolEvent, StringDef, StringId,
};
use gmem_prof_traces::Record;

use crate::cupti::{field, KIND_CONCURRENT_KERNEL, KIND_DEVICE, KIND_MEMORY2, KIND_MEMORY_POOL};
use crate::session::{no_unwind, Collector};

/// Size of each activity buffer handed to CUPTI.
pub const BUFFER_BYTES: usize = 4 << 20;
const BUFFER_ALIGN: usize = 8;
/// Empty buffers kept for reuse.
const SPARE_BUFFERS: usize = 8;

static SPARES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn layout() -> std::alloc::Layout {
    // BUFFER_BYTES and BUFFER_ALIGN are valid constants.
    std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("valid layout")
}

pub unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    no_unwind((), || {
        let spare = SPARES.lock().ok().and_then(|mut s| s.pop());
        let p = match spare {
            Some(p) => p as *mut u8,
            // SAFETY: non-zero-sized layout.
            None => unsafe { std::alloc::alloc(layout()) },
        };
        // SAFETY: CUPTI passes valid out pointers. A NULL buffer tells CUPTI
        // to drop records (counted by CUPTI), which is what we want if
        // memory is exhausted.
        unsafe {
            *buffer = p;
            *size = if p.is_null() { 0 } else { BUFFER_BYTES };
            *max_records = 0;
        }
    });
}

pub unsafe extern "C" fn buffer_completed(
    _ctx: *mut c_void,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    no_unwind((), || {
        if buffer.is_null() {
            return;
        }
        if let Some(c) = crate::session::get() {
            // SAFETY: CUPTI hands back a buffer we gave it, with `valid` bytes
            // of records.
            unsafe { c.take_activity(buffer, valid) };
        }
        let mut spares = SPARES.lock().ok();
        match spares.as_mut() {
            Some(s) if s.len() < SPARE_BUFFERS => s.push(buffer as usize),
            // SAFETY: allocated in buffer_requested with the same layout.
            _ => unsafe { std::alloc::dealloc(buffer, layout()) },
        }
    });
}

/// Interns kernel names so each is written once per process.
#[derive(Default)]
pub struct Names {
    ids: HashMap<String, StringId>,
}

impl Names {
    pub fn intern(&mut self, name: &str, out: &mut Vec<Record>) -> StringId {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = StringId(self.ids.len() as u32 + 1);
        self.ids.insert(name.to_string(), id);
        out.push(Record::String(StringDef {
            id,
            text: name.to_string(),
        }));
        id
    }
}

/// # Safety
/// `p` must be NULL or a NUL-terminated string.
unsafe fn c_str<'a>(p: *const c_char) -> std::borrow::Cow<'a, str> {
    if p.is_null() {
        "".into()
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { CStr::from_ptr(p) }.to_string_lossy()
    }
}

impl Collector {
    /// # Safety
    /// As for `buffer_completed`.
    unsafe fn take_activity(&self, buffer: *mut u8, valid: usize) {
        let mut out = Vec::new();
        let mut devices = Vec::new();
        let Ok(mut names) = self.kernel_names.lock() else {
            return;
        };
        // SAFETY: the buffer is CUPTI's completed buffer; each record pointer
        // it yields points to a whole record of the kind it states, laid out
        // as cudarc's bindings for CUPTI 13.0 say (MEMORY2 = Memory4, kernel
        // = Kernel10, device = Device5, pool = MemoryPool2).
        unsafe {
            self.cupti
                .for_each_record(buffer, valid, |r, kind| match kind {
                    KIND_MEMORY2 => out.push(Record::Memory(memory_record(r))),
                    KIND_MEMORY_POOL => out.push(Record::Pool(pool_record(r))),
                    KIND_CONCURRENT_KERNEL => {
                        let k = kernel_record(r, &mut names, &mut out);
                        out.push(Record::Kernel(k));
                    }
                    KIND_DEVICE => {
                        let d = device_record(r);
                        devices.push((d.device, d.uuid));
                        out.push(Record::Device(d));
                    }
                    _ => {}
                });
        }
        drop(names);
        self.note_cupti_drops();
        self.sink.push_records(out);
        for (device, uuid) in devices {
            self.device_seen(device, uuid);
        }
    }
}

/// # Safety
/// `r` points to a CUpti_ActivityMemory4.
unsafe fn memory_record(r: *const u8) -> MemoryEvent {
    type M = cs::CUpti_ActivityMemory4;
    type P = cs::CUpti_ActivityMemory4__bindgen_ty_1;
    let pool = offset_of!(M, memoryPoolConfig);
    // SAFETY: offsets inside the record; all read as integers.
    unsafe {
        MemoryEvent {
            time: Nanos(field(r, offset_of!(M, timestamp))),
            alloc: field::<u32>(r, offset_of!(M, memoryOperationType)) == 1,
            kind: field::<u32>(r, offset_of!(M, memoryKind)) as u8,
            address: field(r, offset_of!(M, address)),
            bytes: Bytes(field(r, offset_of!(M, bytes))),
            device: field(r, offset_of!(M, deviceId)),
            context: field(r, offset_of!(M, contextId)),
            stream: field(r, offset_of!(M, streamId)),
            correlation: field(r, offset_of!(M, correlationId)),
            pc: field(r, offset_of!(M, PC)),
            is_async: field::<u32>(r, offset_of!(M, isAsync)) != 0,
            pool_type: field::<u32>(r, pool + offset_of!(P, memoryPoolType)) as u8,
            pool_address: field(r, pool + offset_of!(P, address)),
            pool_release_threshold: field(r, pool + offset_of!(P, releaseThreshold)),
            pool_size: field(r, pool + offset_of!(P, pool)),
            pool_utilized: field(r, pool + offset_of!(P, utilizedSize)),
        }
    }
}

/// # Safety
/// `r` points to a CUpti_ActivityMemoryPool2.
unsafe fn pool_record(r: *const u8) -> PoolEvent {
    type M = cs::CUpti_ActivityMemoryPool2;
    // SAFETY: offsets inside the record; all read as integers.
    unsafe {
        PoolEvent {
            time: Nanos(field(r, offset_of!(M, timestamp))),
            op: field::<u32>(r, offset_of!(M, memoryPoolOperationType)) as u8,
            pool_type: field::<u32>(r, offset_of!(M, memoryPoolType)) as u8,
            address: field(r, offset_of!(M, address)),
            size: Bytes(field(r, offset_of!(M, size))),
            release_threshold: field(r, offset_of!(M, releaseThreshold)),
            min_bytes_to_keep: field::<usize>(r, offset_of!(M, minBytesToKeep)) as u64,
            utilized: Bytes(field(r, offset_of!(M, utilizedSize))),
            device: field(r, offset_of!(M, deviceId)),
            correlation: field(r, offset_of!(M, correlationId)),
        }
    }
}

/// # Safety
/// `r` points to a CUpti_ActivityKernel10 (or a later version sharing its
/// leading fields).
unsafe fn kernel_record(r: *const u8, names: &mut Names, out: &mut Vec<Record>) -> KernelEvent {
    type K = cs::CUpti_ActivityKernel10;
    // SAFETY: offsets inside the record; the name pointer is CUPTI's
    // NUL-terminated string, valid while the buffer is being processed.
    unsafe {
        let name = c_str(field::<*const c_char>(r, offset_of!(K, name)));
        let dim = |o: usize| field::<i32>(r, o).max(0) as u32;
        KernelEvent {
            start: Nanos(field(r, offset_of!(K, start))),
            end: Nanos(field(r, offset_of!(K, end))),
            name: names.intern(&name, out),
            device: field(r, offset_of!(K, deviceId)),
            context: field(r, offset_of!(K, contextId)),
            stream: field(r, offset_of!(K, streamId)),
            correlation: field(r, offset_of!(K, correlationId)),
            grid: [
                dim(offset_of!(K, gridX)),
                dim(offset_of!(K, gridY)),
                dim(offset_of!(K, gridZ)),
            ],
            block: [
                dim(offset_of!(K, blockX)),
                dim(offset_of!(K, blockY)),
                dim(offset_of!(K, blockZ)),
            ],
            static_shared: dim(offset_of!(K, staticSharedMemory)),
            dynamic_shared: dim(offset_of!(K, dynamicSharedMemory)),
            registers: u32::from(field::<u16>(r, offset_of!(K, registersPerThread))),
        }
    }
}

/// # Safety
/// `r` points to a CUpti_ActivityDevice5.
unsafe fn device_record(r: *const u8) -> DeviceInfo {
    type D = cs::CUpti_ActivityDevice5;
    // SAFETY: offsets inside the record; the name pointer is CUPTI's string.
    unsafe {
        DeviceInfo {
            device: field(r, offset_of!(D, id)),
            name: c_str(field::<*const c_char>(r, offset_of!(D, name))).into_owned(),
            total_memory: Bytes(field(r, offset_of!(D, globalMemorySize))),
            uuid: field::<[u8; 16]>(r, offset_of!(D, uuid)),
            compute_major: field(r, offset_of!(D, computeCapabilityMajor)),
            compute_minor: field(r, offset_of!(D, computeCapabilityMinor)),
            multiprocessors: field(r, offset_of!(D, numMultiprocessors)),
        }
    }
}
