//! PyTorch's `cudaMallocAsync` backend: the out-of-memory errors it raises
//! against the memory fraction.
//!
//! With this backend every tensor is a CUDA stream-ordered allocation, which
//! the rest of the collector records. But a tensor the memory fraction
//! (`torch.cuda.set_per_process_memory_fraction`) does not allow is refused
//! before CUDA is asked for it, and the backend has no OOM observer: the one
//! CUDA call on that path is `cudaMemGetInfo`, made by the backend's
//! `mallocAsync` (in its `.cold` part, where the compiler moved the error)
//! for the error's message. So the collector watches `cuMemGetInfo_v2`, and
//! when the calling thread's stack runs through `mallocAsync` records the
//! error (`AllocatorEvent` OOM and its report, allocator
//! `TORCH_ASYNC_BACKEND`) with the thread's stack, the device's free memory
//! and the fraction's bytes, read from the backend's `pytorch_memory_limits`
//! (a `std::vector<size_t>`, one per device). The request's size is not
//! seen: the report gives the least it could have been.
//!
//! The same path is taken when CUDA itself refused the allocation (the
//! device full); the failed `cuMemAllocAsync` is then in the trace just
//! before, and the analyzer joins the two as for the native allocator.

use gmem_prof_traces::record::{allocator, AllocatorAction, AllocatorEvent, Bytes, Nanos};

use crate::config::MAX_STACK_DEPTH;
use crate::cuda::callbacks::{current_tid, OFF_CONTEXT, OFF_PARAMS, OFF_RETURN, OFF_SITE};
use crate::cuda::cupti::{field, SITE_EXIT};
use crate::state::{Collector, EventStack};

/// `cuMemGetInfo_v2`'s callback id (CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2).
pub const MEM_GET_INFO_CBID: u32 =
    cudarc::cupti::sys::CUpti_driver_api_trace_cbid_enum::CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2
        as u32;

/// `cuMemGetInfo_v2`'s parameters.
#[repr(C)]
struct MemGetInfoParams {
    free: *const u64,
    total: *const u64,
}

impl Collector {
    /// A `cuMemGetInfo_v2` call, at entry or exit.
    ///
    /// # Safety
    /// `data` must be the CUpti_CallbackData CUPTI passed for it.
    pub unsafe fn on_mem_get_info(&self, data: *const u8) {
        // SAFETY: fields of the CUpti_CallbackData, at their bindgen offsets.
        let (site, params, result, context) = unsafe {
            (
                field::<u32>(data, OFF_SITE),
                field::<*const MemGetInfoParams>(data, OFF_PARAMS),
                field::<*const u32>(data, OFF_RETURN),
                field::<*mut std::ffi::c_void>(data, OFF_CONTEXT),
            )
        };
        if site != SITE_EXIT || params.is_null() {
            return;
        }
        let Some(stacks) = &self.stacks else { return };
        if self.torch.async_backend.get().is_none() && !self.torch.waiting() {
            return;
        }
        let mut native = [0u64; MAX_STACK_DEPTH];
        let (n, _) = stacks.capture(&mut native);
        let native = &native[..n];
        if self.torch.async_backend.get().is_none() {
            // A tensor refused before the backend made any allocation the
            // collector could learn it from.
            self.torch.poll(self, Some(native));
        }
        let Some(backend) = self.torch.async_backend.get() else {
            return;
        };
        if !native.iter().any(|pc| backend.refusing(*pc)) {
            return;
        }
        // SAFETY: the call's CUresult and its two output pointers, read
        // only when it succeeded.
        let (free, total) = unsafe {
            let ok = !result.is_null() && *result == 0;
            let p = &*params;
            if ok && !p.free.is_null() && !p.total.is_null() {
                (*p.free, *p.total)
            } else {
                (0, 0)
            }
        };
        let device = self.cupti.device_of(context).unwrap_or(0);
        let limit = match backend.limit(device) {
            Some(l) if l != u64::MAX => l,
            _ => total,
        };
        let time = self.clock.now();
        for action in [AllocatorAction::OOM, AllocatorAction::OOM_REPORT] {
            let event = AllocatorEvent {
                time: Nanos(time),
                allocator: allocator::TORCH_ASYNC_BACKEND,
                action,
                device,
                address: 0,
                bytes: Bytes(0),
                stream: 0,
                pool: 0,
                tid: current_tid(),
                stack: Default::default(),
                device_free: free,
                limit,
            };
            self.push_allocator_event(
                event,
                if action == AllocatorAction::OOM {
                    EventStack::Framework
                } else {
                    EventStack::None
                },
                None,
            );
        }
        self.sample_devices(gmem_prof_traces::record::device_memory::FAILED_ALLOCATION);
    }
}
