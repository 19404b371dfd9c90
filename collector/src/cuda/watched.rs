//! The driver calls the collector watches, in one table: each call's
//! callback id, the function it stands for in the trace (`ApiFunc`), and how
//! its parameters are read at exit. Adding a call is one entry here.

use std::ffi::c_void;

use cudarc::cupti::sys::{self as cs, CUpti_driver_api_trace_cbid as Cb};
use gmem_prof_traces::record::ApiFunc;

/// What a call's parameters tell: requested bytes, the address returned or
/// passed, a handle (stream-ordered pool, VMM handle, array), the stream.
#[derive(Default, Debug, PartialEq)]
pub struct Params {
    pub bytes: u64,
    pub address: u64,
    pub handle: u64,
    pub stream: u64,
}

/// Reads a call's parameters at its exit; `ok`: the call succeeded, so its
/// output parameters were written.
///
/// # Safety
/// `p` must point to the parameter struct CUPTI documents for the entry's
/// callback id.
pub type ReadParams = unsafe fn(p: *const c_void, ok: bool) -> Params;

/// One watched driver call.
pub struct Watched {
    pub cbid: Cb,
    pub func: ApiFunc,
    pub read: ReadParams,
}

/// Reads an output parameter if the call succeeded.
///
/// # Safety
/// `p` must be NULL or point to a readable T.
unsafe fn out<T: Copy + Into<u64>>(p: *const T, ok: bool) -> u64 {
    if ok && !p.is_null() {
        // SAFETY: non-null, and the caller guarantees it is readable.
        unsafe { std::ptr::read_unaligned(p) }.into()
    } else {
        0
    }
}

fn ptr_u64(v: *mut c_void) -> u64 {
    v as u64
}

/// The table: each entry's callback ids (several when they share a
/// parameter struct, as a call and its per-thread-stream variant do), the
/// function, the parameter struct's type, and what to make of it (`q`, the
/// struct copied out; `ok`, whether the call succeeded).
macro_rules! watched {
    ($( $($cbid:ident)|+ => $func:ident, $params:ident, |$q:ident, $ok:ident| $body:block )*) => {
        &[ $( $(
            Watched {
                cbid: Cb::$cbid,
                func: ApiFunc::$func,
                read: {
                    unsafe fn read(p: *const c_void, $ok: bool) -> Params {
                        let _ = $ok;
                        // SAFETY: `p` points to this call's parameter struct
                        // (ReadParams' contract), copied out unaligned.
                        let $q = unsafe { std::ptr::read_unaligned(p as *const cs::$params) };
                        #[allow(unused_unsafe)]
                        // SAFETY: the pointers the entry follows (`out`, a
                        // graph node's parameters) are the call's own, valid
                        // at exit when the call succeeded.
                        let params = unsafe { $body };
                        params
                    }
                    read
                },
            },
        )+ )* ]
    };
}

/// The driver calls whose callbacks the collector enables, with the
/// function each stands for and its parameters.
pub const WATCHED: &[Watched] = watched! {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2
        => MEM_ALLOC, cuMemAlloc_v2_params, |q, ok| {
            Params {
                bytes: q.bytesize as u64,
                address: out(q.dptr, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2
        => MEM_ALLOC_PITCH, cuMemAllocPitch_v2_params, |q, ok| {
            let pitch = out(q.pPitch as *const usize as *const u64, ok);
            let bytes = if pitch > 0 {
                pitch * q.Height as u64
            } else {
                (q.WidthInBytes * q.Height) as u64
            };
            Params {
                bytes,
                address: out(q.dptr, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged
        => MEM_ALLOC_MANAGED, cuMemAllocManaged_params, |q, ok| {
            Params {
                bytes: q.bytesize as u64,
                address: out(q.dptr, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2
        => MEM_ALLOC_HOST, cuMemAllocHost_v2_params, |q, ok| {
            Params {
                bytes: q.bytesize as u64,
                address: out(q.pp as *const u64, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc
        => MEM_HOST_ALLOC, cuMemHostAlloc_params, |q, ok| {
            Params {
                bytes: q.bytesize as u64,
                address: out(q.pp as *const u64, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync | CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz
        => MEM_ALLOC_ASYNC, cuMemAllocAsync_params, |q, ok| {
            Params {
                bytes: q.bytesize as u64,
                address: out(q.dptr, ok),
                stream: q.hStream as u64,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync | CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz
        => MEM_ALLOC_FROM_POOL_ASYNC, cuMemAllocFromPoolAsync_params, |q, ok| {
            Params {
                bytes: q.bytesize as u64,
                address: out(q.dptr, ok),
                handle: q.pool as u64,
                stream: q.hStream as u64,
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2
        => ARRAY_CREATE, cuArrayCreate_v2_params, |q, ok| {
            Params {
                handle: out(q.pHandle as *const u64, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2
        => ARRAY_3D_CREATE, cuArray3DCreate_v2_params, |q, ok| {
            Params {
                handle: out(q.pHandle as *const u64, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayCreate
        => MIPMAPPED_ARRAY_CREATE, cuMipmappedArrayCreate_params, |q, ok| {
            Params {
                handle: out(q.pHandle as *const u64, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate
        => MEM_CREATE, cuMemCreate_params, |q, ok| {
            Params {
                bytes: q.size as u64,
                handle: out(q.handle, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemMap
        => MEM_MAP, cuMemMap_params, |q, ok| {
            Params {
                bytes: q.size as u64,
                address: q.ptr,
                handle: q.handle,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve
        => MEM_ADDRESS_RESERVE, cuMemAddressReserve_params, |q, ok| {
            Params {
                bytes: q.size as u64,
                address: out(q.ptr, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2
        => MEM_HOST_REGISTER, cuMemHostRegister_v2_params, |q, ok| {
            Params {
                bytes: q.bytesize as u64,
                address: ptr_u64(q.p),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode
        => GRAPH_ADD_MEM_ALLOC_NODE, cuGraphAddMemAllocNode_params, |q, ok| {
            if q.nodeParams.is_null() {
                Params::default()
            } else {
                let np = std::ptr::read_unaligned(q.nodeParams);
                Params {
                    bytes: np.bytesize as u64,
                    address: if ok { np.dptr } else { 0 },
                    ..Default::default()
                }
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2
        => MEM_FREE, cuMemFree_v2_params, |q, ok| {
            Params {
                address: q.dptr,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost
        => MEM_FREE_HOST, cuMemFreeHost_params, |q, ok| {
            Params {
                address: ptr_u64(q.p),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync | CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz
        => MEM_FREE_ASYNC, cuMemFreeAsync_params, |q, ok| {
            Params {
                address: q.dptr,
                stream: q.hStream as u64,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy
        => ARRAY_DESTROY, cuArrayDestroy_params, |q, ok| {
            Params {
                handle: q.hArray as u64,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayDestroy
        => MIPMAPPED_ARRAY_DESTROY, cuMipmappedArrayDestroy_params, |q, ok| {
            Params {
                handle: q.hMipmappedArray as u64,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease
        => MEM_RELEASE, cuMemRelease_params, |q, ok| {
            Params {
                handle: q.handle,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemUnmap
        => MEM_UNMAP, cuMemUnmap_params, |q, ok| {
            Params {
                bytes: q.size as u64,
                address: q.ptr,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree
        => MEM_ADDRESS_FREE, cuMemAddressFree_params, |q, ok| {
            Params {
                bytes: q.size as u64,
                address: q.ptr,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister
        => MEM_HOST_UNREGISTER, cuMemHostUnregister_params, |q, ok| {
            Params {
                address: ptr_u64(q.p),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemFreeNode
        => GRAPH_ADD_MEM_FREE_NODE, cuGraphAddMemFreeNode_params, |q, ok| {
            Params {
                address: q.dptr,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate
        => MEM_POOL_CREATE, cuMemPoolCreate_params, |q, ok| {
            Params {
                handle: out(q.pool as *const u64, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy
        => MEM_POOL_DESTROY, cuMemPoolDestroy_params, |q, ok| {
            Params {
                handle: q.pool as u64,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo
        => MEM_POOL_TRIM_TO, cuMemPoolTrimTo_params, |q, ok| {
            Params {
                bytes: q.minBytesToKeep as u64,
                handle: q.pool as u64,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle | CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle_v2
        => IPC_OPEN_MEM_HANDLE, cuIpcOpenMemHandle_v2_params, |q, ok| {
            // v1 and v2 share their leading field, the output pointer.
            Params {
                address: out(q.pdptr, ok),
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle
        => IPC_CLOSE_MEM_HANDLE, cuIpcCloseMemHandle_params, |q, ok| {
            Params {
                address: q.dptr,
                ..Default::default()
            }
        }
    // Copies: where data moved to the device lands tells an input tensor.
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2 | CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds
        => MEMCPY_HTOD, cuMemcpyHtoD_v2_params, |q, ok| {
            Params {
                bytes: q.ByteCount as u64,
                address: q.dstDevice,
                handle: q.srcHost as u64,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2 | CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz
        => MEMCPY_HTOD, cuMemcpyHtoDAsync_v2_params, |q, ok| {
            Params {
                bytes: q.ByteCount as u64,
                address: q.dstDevice,
                handle: q.srcHost as u64,
                stream: q.hStream as u64,
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy | CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds
        => MEMCPY, cuMemcpy_params, |q, ok| {
            Params {
                bytes: q.ByteCount as u64,
                address: q.dst,
                handle: q.src,
                ..Default::default()
            }
        }
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync | CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz
        => MEMCPY, cuMemcpyAsync_params, |q, ok| {
            Params {
                bytes: q.ByteCount as u64,
                address: q.dst,
                handle: q.src,
                stream: q.hStream as u64,
            }
        }
};

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(cbid: Cb) -> &'static Watched {
        WATCHED.iter().find(|w| w.cbid == cbid).unwrap()
    }

    #[test]
    fn each_call_reads_its_own_parameters() {
        // A pitched allocation: the driver's pitch times the rows, and the
        // address only when the call succeeded.
        let mut dptr: u64 = 0x7000_0000;
        let mut pitch: usize = 512;
        let q = cs::cuMemAllocPitch_v2_params {
            dptr: &mut dptr,
            pPitch: &mut pitch,
            WidthInBytes: 500,
            Height: 3,
            ElementSizeBytes: 4,
        };
        let read = entry(Cb::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2).read;
        let p = (&raw const q).cast();
        // SAFETY: p points to the struct of this cbid, its pointers to locals.
        let (done, failed) = unsafe { (read(p, true), read(p, false)) };
        assert_eq!((done.bytes, done.address), (1536, 0x7000_0000));
        assert_eq!((failed.bytes, failed.address), (1500, 0));
        // A call and its per-thread-stream variant read the same struct.
        let q = cs::cuMemFreeAsync_params {
            dptr: 0x1234,
            hStream: std::ptr::without_provenance_mut(0x99),
        };
        for cbid in [
            Cb::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
            Cb::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
        ] {
            let w = entry(cbid);
            assert_eq!(w.func, ApiFunc::MEM_FREE_ASYNC);
            // SAFETY: as above.
            let p = unsafe { (w.read)((&raw const q).cast(), true) };
            let want = Params {
                address: 0x1234,
                stream: 0x99,
                ..Default::default()
            };
            assert_eq!(p, want);
        }
    }

    #[test]
    fn copies_read_destination_source_and_size() {
        let host = [0u8; 16];
        let q = cs::cuMemcpyHtoDAsync_v2_params {
            dstDevice: 0x7000_0000,
            srcHost: host.as_ptr().cast(),
            ByteCount: 16,
            hStream: std::ptr::without_provenance_mut(0x99),
        };
        let w = entry(Cb::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz);
        assert_eq!(w.func, ApiFunc::MEMCPY_HTOD);
        // SAFETY: p points to the struct of this cbid.
        let p = unsafe { (w.read)((&raw const q).cast(), true) };
        let want = Params {
            bytes: 16,
            address: 0x7000_0000,
            handle: host.as_ptr() as u64,
            stream: 0x99,
        };
        assert_eq!(p, want);
        let q = cs::cuMemcpy_params {
            dst: 0x7000_0000,
            src: 0x5000,
            ByteCount: 8,
        };
        let w = entry(Cb::CUPTI_DRIVER_TRACE_CBID_cuMemcpy);
        assert_eq!(w.func, ApiFunc::MEMCPY);
        // SAFETY: as above.
        let p = unsafe { (w.read)((&raw const q).cast(), true) };
        assert_eq!((p.bytes, p.address, p.handle), (8, 0x7000_0000, 0x5000));
    }

    #[test]
    fn every_call_is_watched_once() {
        let mut cbids: Vec<u32> = WATCHED.iter().map(|w| w.cbid as u32).collect();
        cbids.sort_unstable();
        cbids.dedup();
        assert_eq!(cbids.len(), WATCHED.len());
    }
}
