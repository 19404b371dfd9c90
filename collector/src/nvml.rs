//! The device's own view of its memory, as `nvidia-smi` shows it: used and
//! free memory of each GPU and what each process on it uses, read through
//! NVML (libnvidia-ml, which the driver installs; loaded at run time).
//!
//! NVML needs no CUDA context, so the flush thread can read it while the
//! program runs; the collector samples at its flush ticks, right after a
//! failed allocation, and at exit. A device is looked up by the UUID CUPTI
//! reported for it, so CUDA's numbering (and `CUDA_VISIBLE_DEVICES`) needs
//! no translation. Without NVML (no library, a MIG instance it cannot
//! name) the trace simply has no device view, and says why once.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::{Mutex, OnceLock};

use gmem_prof_traces::record::{Bytes, DeviceMemory, Nanos, ProcessMemory};

/// Where the driver installs NVML.
const LIBRARY: &str = "libnvidia-ml.so.1";
const SUCCESS: c_int = 0;
/// Processes listed per device at most (more are counted by NVML's total).
const MAX_PROCESSES: usize = 256;

type Device = *mut c_void;
type Init = unsafe extern "C" fn() -> c_int;
type ByUuid = unsafe extern "C" fn(*const c_char, *mut Device) -> c_int;
type MemoryInfo = unsafe extern "C" fn(Device, *mut Memory) -> c_int;
type MemoryInfoV2 = unsafe extern "C" fn(Device, *mut MemoryV2) -> c_int;
type Processes = unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int;

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2_t`: `used` leaves out what the driver reserves for
/// itself, as nvidia-smi shows it.
#[repr(C)]
#[derive(Default)]
struct MemoryV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2`: the struct's size and version 2.
const MEMORY_V2: c_uint = std::mem::size_of::<MemoryV2>() as c_uint | (2 << 24);

/// `nvmlProcessInfo_t` (v2, what `..._v3` and `..._v2` take).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// The device view as the collector keeps it: NVML once opened (on the
/// flush thread: loading a library from a program's thread inside a CUDA
/// call could wait on a loader lock another thread holds while it waits on
/// CUDA), and the devices CUPTI reported, which each sample covers.
#[derive(Default)]
pub struct DeviceView {
    /// `Some(None)` once opening failed (said once) or was not asked for.
    nvml: OnceLock<Option<Nvml>>,
    /// (CUDA number, UUID) of each device CUPTI reported.
    seen: Mutex<Vec<(u32, [u8; 16])>>,
}

impl DeviceView {
    /// Opens NVML the first time (`path`: a library instead of the
    /// driver's); `None` leaves the view off for good. Err: why it could not
    /// be opened, on the call that tried.
    pub fn open(&self, path: Option<Option<&str>>) -> Result<(), String> {
        let mut failed = None;
        self.nvml
            .get_or_init(|| Nvml::open(path?).map_err(|e| failed = Some(e)).ok());
        failed.map_or(Ok(()), Err)
    }

    /// A device CUPTI reported: sampled from now on.
    pub fn device_seen(&self, device: u32, uuid: [u8; 16]) {
        if let Ok(mut seen) = self.seen.lock() {
            if !seen.iter().any(|(d, _)| *d == device) {
                seen.push((device, uuid));
            }
        }
    }

    /// The view of every device seen (`reason`: `device_memory::*`), at
    /// `now()`, once NVML is open; with what NVML would not tell, to report.
    pub fn sample(&self, now: impl Fn() -> u64, reason: u8) -> (Vec<DeviceMemory>, Vec<String>) {
        let Some(Some(n)) = self.nvml.get() else {
            return (Vec::new(), Vec::new());
        };
        let seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let errors = seen
            .into_iter()
            .filter_map(|(device, uuid)| n.add_device(device, uuid).err())
            .collect();
        (n.sample(now(), reason), errors)
    }
}

/// A device the collector knows: its CUDA number and NVML handle (none
/// when NVML could not name it).
struct Known {
    device: u32,
    handle: Option<usize>,
}

pub struct Nvml {
    by_uuid: ByUuid,
    memory_info: MemoryInfo,
    memory_info_v2: Option<MemoryInfoV2>,
    processes: Option<Processes>,
    devices: Mutex<Vec<Known>>,
}

// SAFETY: function pointers into a library that stays loaded, and NVML
// device handles, which NVML documents as usable from any thread.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

impl Nvml {
    /// Loads NVML (`path`, else the driver's) and initializes it.
    pub fn open(path: Option<&str>) -> Result<Nvml, String> {
        let path = path.unwrap_or(LIBRARY);
        let cpath = CString::new(path).map_err(|_| format!("bad NVML path {path:?}"))?;
        // SAFETY: dlopen with a valid path; the handle is kept for the
        // process's life (never closed).
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("cannot load {path}"));
        }
        let sym = |name: &str| {
            let n = CString::new(name).unwrap_or_default();
            // SAFETY: a live handle and a NUL-terminated name.
            let p = unsafe { libc::dlsym(handle, n.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        let need = |name: &str| sym(name).ok_or_else(|| format!("{path} has no {name}"));
        // SAFETY: each symbol is NVML's function of that name, whose C
        // signature the type mirrors (nvml.h).
        let (init, by_uuid, memory_info, memory_info_v2, processes) = unsafe {
            (
                std::mem::transmute::<*mut c_void, Init>(need("nvmlInit_v2")?),
                std::mem::transmute::<*mut c_void, ByUuid>(need("nvmlDeviceGetHandleByUUID")?),
                std::mem::transmute::<*mut c_void, MemoryInfo>(need("nvmlDeviceGetMemoryInfo")?),
                sym("nvmlDeviceGetMemoryInfo_v2")
                    .map(|p| std::mem::transmute::<*mut c_void, MemoryInfoV2>(p)),
                sym("nvmlDeviceGetComputeRunningProcesses_v3")
                    .or_else(|| sym("nvmlDeviceGetComputeRunningProcesses_v2"))
                    .map(|p| std::mem::transmute::<*mut c_void, Processes>(p)),
            )
        };
        // SAFETY: nvmlInit_v2 takes no arguments; it may be called more
        // than once (NVML counts them).
        let rc = unsafe { init() };
        if rc != SUCCESS {
            return Err(format!("nvmlInit_v2 failed with NVML error {rc}"));
        }
        Ok(Nvml {
            by_uuid,
            memory_info,
            memory_info_v2,
            processes,
            devices: Mutex::new(Vec::new()),
        })
    }

    /// A device CUPTI reported (nothing when already known); returns an
    /// error, once, when NVML cannot name it.
    pub fn add_device(&self, device: u32, uuid: [u8; 16]) -> Result<(), String> {
        let Ok(mut devices) = self.devices.lock() else {
            return Ok(());
        };
        if devices.iter().any(|k| k.device == device) {
            return Ok(());
        }
        let text = uuid_text(&uuid);
        let c = CString::new(text.clone()).unwrap_or_default();
        let mut handle: Device = std::ptr::null_mut();
        // SAFETY: a NUL-terminated UUID string and a valid out pointer.
        let rc = unsafe { (self.by_uuid)(c.as_ptr(), &mut handle) };
        let found = (rc == SUCCESS && !handle.is_null()).then_some(handle as usize);
        devices.push(Known {
            device,
            handle: found,
        });
        match found {
            Some(_) => Ok(()),
            None => Err(format!(
                "NVML does not know device {device} ({text}, error {rc}): no device view for it"
            )),
        }
    }

    /// The view of every known device now.
    pub fn sample(&self, time: u64, reason: u8) -> Vec<DeviceMemory> {
        let handles: Vec<(u32, usize)> = match self.devices.lock() {
            Ok(d) => d
                .iter()
                .filter_map(|k| k.handle.map(|h| (k.device, h)))
                .collect(),
            Err(_) => return Vec::new(),
        };
        handles
            .into_iter()
            .filter_map(|(device, handle)| self.one(handle as Device, device, time, reason))
            .collect()
    }

    fn one(&self, h: Device, device: u32, time: u64, reason: u8) -> Option<DeviceMemory> {
        let mut m = MemoryV2 {
            version: MEMORY_V2,
            ..Default::default()
        };
        // SAFETY: a handle NVML gave us and valid out pointers.
        let v2 = self
            .memory_info_v2
            .is_some_and(|f| unsafe { f(h, &mut m) } == SUCCESS);
        if !v2 {
            let mut v1 = Memory::default();
            // SAFETY: as above.
            if unsafe { (self.memory_info)(h, &mut v1) } != SUCCESS {
                return None;
            }
            m = MemoryV2 {
                version: 0,
                total: v1.total,
                reserved: 0,
                free: v1.free,
                used: v1.used,
            };
        }
        let mut processes = Vec::new();
        if let Some(list) = self.processes {
            let mut infos = [ProcessInfo::default(); MAX_PROCESSES];
            let mut count = MAX_PROCESSES as c_uint;
            // SAFETY: `count` entries of room; NVML writes at most that many.
            if unsafe { list(h, &mut count, infos.as_mut_ptr()) } == SUCCESS {
                processes = infos[..(count as usize).min(MAX_PROCESSES)]
                    .iter()
                    .map(|p| ProcessMemory {
                        pid: p.pid,
                        used: Bytes(p.used_gpu_memory),
                    })
                    .collect();
            }
        }
        Some(DeviceMemory {
            time: Nanos(time),
            device,
            reason,
            total: Bytes(m.total),
            used: Bytes(m.used),
            free: Bytes(m.free),
            reserved: Bytes(m.reserved),
            processes,
        })
    }
}

/// NVML's text form of a GPU's UUID: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
fn uuid_text(u: &[u8; 16]) -> String {
    let hex =
        |r: std::ops::Range<usize>| u[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_in_nvidia_smi_form() {
        let u = [
            0x5f, 0x2e, 0x1a, 0x07, 0x9b, 0x3c, 0x4d, 0x11, 0x82, 0x00, 0xab, 0xcd, 0xef, 0x01,
            0x23, 0x45,
        ];
        assert_eq!(uuid_text(&u), "GPU-5f2e1a07-9b3c-4d11-8200-abcdef012345");
    }

    #[test]
    fn no_library_is_an_error_not_a_crash() {
        let e = Nvml::open(Some("/nonexistent/libnvidia-ml.so.1"))
            .err()
            .unwrap();
        assert!(e.contains("cannot load"), "{e}");
    }
}
