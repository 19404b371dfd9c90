//! CUPTI activity buffers: CUPTI asks us for empty buffers and hands them back
//! full; we translate each record into a trace record and return the buffer.
//!
//! Runs on CUPTI's worker thread or on whichever thread called
//! cuptiActivityFlushAll (our flush thread, or the exiting thread), never on
//! an app thread in the middle of a CUDA call.

use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use gmem_prof_traces::record::{Bytes, DeviceInfo, KernelEvent, MemoryEvent, Nanos, PoolEvent};
use gmem_prof_traces::Record;

use crate::cuda::cupti::{
    field, KIND_CONCURRENT_KERNEL, KIND_DEVICE, KIND_MEMORY2, KIND_MEMORY_POOL,
};
use crate::cuda::layouts::{DeviceLayout, KernelLayout, MemoryLayout, PoolLayout};
use crate::cuda::names::Names;
use crate::state::{no_unwind, Collector};

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
        if let Some(c) = crate::state::get() {
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
        let Ok(mut names) = self.names.lock() else {
            return;
        };
        // Only a CUPTI whose release is known is ever enabled.
        let Some(l) = self.layout else {
            return;
        };
        // SAFETY: the buffer is CUPTI's completed buffer; each record pointer
        // it yields points to a whole record of the kind it states, laid out
        // as the loaded release's headers say (`layouts`).
        unsafe {
            self.cupti
                .for_each_record(buffer, valid, |r, kind| match kind {
                    KIND_MEMORY2 => out.push(Record::Memory(memory_record(r, &l.memory))),
                    KIND_MEMORY_POOL => out.push(Record::Pool(pool_record(r, &l.pool))),
                    KIND_CONCURRENT_KERNEL => {
                        let k = kernel_record(r, &l.kernel, &mut names, &mut out);
                        out.push(Record::Kernel(k));
                    }
                    KIND_DEVICE => {
                        let d = device_record(r, &l.device);
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
/// `r` points to a whole memory record laid out as `l` says.
unsafe fn memory_record(r: *const u8, l: &MemoryLayout) -> MemoryEvent {
    // SAFETY: offsets inside the record (layouts.rs checks each against
    // the record's size in every release); all read as integers.
    unsafe {
        MemoryEvent {
            time: Nanos(field(r, l.timestamp)),
            alloc: field::<u32>(r, l.memory_operation_type) == 1,
            kind: field::<u32>(r, l.memory_kind) as u8,
            address: field(r, l.address),
            bytes: Bytes(field(r, l.bytes)),
            device: field(r, l.device_id),
            context: field(r, l.context_id),
            stream: field(r, l.stream_id),
            correlation: field(r, l.correlation_id),
            pc: field(r, l.pc),
            is_async: field::<u32>(r, l.is_async) != 0,
            pool_type: field::<u32>(r, l.pool_memory_pool_type) as u8,
            pool_address: field(r, l.pool_address),
            pool_release_threshold: field(r, l.pool_release_threshold),
            pool_size: field(r, l.pool_size),
            pool_utilized: field(r, l.pool_utilized_size),
        }
    }
}

/// # Safety
/// `r` points to a whole memory pool record laid out as `l` says.
unsafe fn pool_record(r: *const u8, l: &PoolLayout) -> PoolEvent {
    // SAFETY: offsets inside the record; all read as integers.
    unsafe {
        PoolEvent {
            time: Nanos(field(r, l.timestamp)),
            op: field::<u32>(r, l.memory_pool_operation_type) as u8,
            pool_type: field::<u32>(r, l.memory_pool_type) as u8,
            address: field(r, l.address),
            size: Bytes(field(r, l.size_field)),
            release_threshold: field(r, l.release_threshold),
            min_bytes_to_keep: field::<usize>(r, l.min_bytes_to_keep) as u64,
            utilized: Bytes(field(r, l.utilized_size)),
            device: field(r, l.device_id),
            correlation: field(r, l.correlation_id),
        }
    }
}

/// # Safety
/// `r` points to a whole kernel record laid out as `l` says.
unsafe fn kernel_record(
    r: *const u8,
    l: &KernelLayout,
    names: &mut Names,
    out: &mut Vec<Record>,
) -> KernelEvent {
    // SAFETY: offsets inside the record; the name pointer is CUPTI's
    // NUL-terminated string, valid while the buffer is being processed.
    unsafe {
        let name = c_str(field::<*const c_char>(r, l.name));
        let dim = |o: usize| field::<i32>(r, o).max(0) as u32;
        KernelEvent {
            start: Nanos(field(r, l.start)),
            end: Nanos(field(r, l.end)),
            name: names.intern(&name, out),
            device: field(r, l.device_id),
            context: field(r, l.context_id),
            stream: field(r, l.stream_id),
            correlation: field(r, l.correlation_id),
            grid: [dim(l.grid_x), dim(l.grid_y), dim(l.grid_z)],
            block: [dim(l.block_x), dim(l.block_y), dim(l.block_z)],
            static_shared: dim(l.static_shared_memory),
            dynamic_shared: dim(l.dynamic_shared_memory),
            registers: u32::from(field::<u16>(r, l.registers_per_thread)),
        }
    }
}

/// # Safety
/// `r` points to a whole device record laid out as `l` says.
unsafe fn device_record(r: *const u8, l: &DeviceLayout) -> DeviceInfo {
    // SAFETY: offsets inside the record; the name pointer is CUPTI's string.
    unsafe {
        DeviceInfo {
            device: field(r, l.id),
            name: c_str(field::<*const c_char>(r, l.name)).into_owned(),
            total_memory: Bytes(field(r, l.global_memory_size)),
            uuid: field::<[u8; 16]>(r, l.uuid),
            compute_major: field(r, l.compute_capability_major),
            compute_minor: field(r, l.compute_capability_minor),
            multiprocessors: field(r, l.num_multiprocessors),
        }
    }
}
