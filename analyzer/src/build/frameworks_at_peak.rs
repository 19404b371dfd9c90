//! A device's peak with the allocators seen from the inside taken apart:
//! their segments leave the peak's site list and are given with what they
//! held then (`DeviceReport::frameworks_at_peak`).

use crate::engine::{self, Engine, KINDS};
use crate::model::*;

use super::sites::SiteTable;

/// `at_device_peak`: (process, device, what its allocator held at
/// the device's peak), from `framework_view::views`.
pub(super) fn take_apart(
    engine: &Engine,
    sites: &SiteTable,
    devices: &mut [DeviceReport],
    at_device_peak: &[(usize, u32, FrameworkAtPeak)],
) {
    for report in devices {
        let device = report.device;
        let views: Vec<&(usize, u32, FrameworkAtPeak)> =
            at_device_peak.iter().filter(|v| v.1 == device).collect();
        if views.is_empty() {
            continue;
        }
        let raw_rows = engine
            .devices
            .get(device)
            .map(|d| d.peak_sites.clone())
            .unwrap_or_default();
        // A view's segments: its process's driver allocations that the
        // allocator made for itself, in device memory.
        let segment_of = |raw: u32| {
            let s = &engine.sites[raw as usize];
            let device_memory =
                (0..KINDS as u8).all(|k| s.kinds & (1 << k) == 0 || !engine::is_host_kind(k));
            (sites.categories[raw as usize] == Category::AllocatorCache
                && !s.framework_tensors
                && device_memory)
                .then_some(s.proc as usize)
                .filter(|st| views.iter().any(|v| v.0 == *st))
        };
        let mut rest: Vec<(u32, u64, u64)> = Vec::new();
        let mut taken: Vec<(usize, u64, u64)> = Vec::new();
        for &(raw, bytes, count) in &raw_rows {
            match segment_of(raw) {
                Some(proc) => taken.push((proc, bytes, count)),
                None => rest.push((raw, bytes, count)),
            }
        }
        for (proc, _, at_peak) in views {
            let mine = taken.iter().filter(|t| t.0 == *proc);
            let (bytes, count) = mine.fold((0, 0), |a, t| (a.0 + t.1, a.1 + t.2));
            if bytes == 0 {
                continue;
            }
            let mut at_peak = at_peak.clone();
            at_peak.segment_bytes = bytes;
            at_peak.segments = count;
            report.frameworks_at_peak.push(at_peak);
        }
        if !report.frameworks_at_peak.is_empty() {
            report.peak_sites = sites.by_site(&rest);
        }
    }
}
