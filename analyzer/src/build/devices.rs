//! Each device's report: its peak and what was live then by site and by
//! kind, the kernels at the peak, its live and reserved curves, the
//! fragmentation of its pools and VMM reservations (with what the trace
//! cannot see of it), and the device's own view (NVML) beside it.

use std::collections::BTreeMap;

use crate::engine::{self, Engine, KINDS};
use crate::model::*;
use crate::site_figures::site_curves;
use crate::timeline::Axis;
use crate::{device_view, events};

use super::sites::SiteTable;

/// The report of every device, and the device's own view right after
/// each failed allocation (`Engine::ooms`' order): NVML's samples are
/// gathered once for both.
pub(super) fn device_reports(
    engine: &mut Engine,
    axis: &Axis,
    sites: &SiteTable,
) -> (Vec<DeviceReport>, Vec<Option<DeviceViewMoment>>) {
    let buckets = axis.buckets();
    let device_ids = engine.devices.ids();
    let samples = device_view::Samples::new(engine, axis.start);
    let mut device_views: BTreeMap<u32, DeviceView> = device_ids
        .iter()
        .filter_map(|&d| Some((d, samples.view(engine, d, axis, buckets)?)))
        .collect();
    let oom_views: Vec<Option<DeviceViewMoment>> = engine
        .ooms
        .iter()
        .map(|o| samples.after_failure(engine.procs[o.proc as usize].pid(), o.device, o.time))
        .collect();
    let devices = device_ids
        .into_iter()
        .map(|d| {
            let view = device_views.remove(&d);
            device_report(engine, d, axis, sites, view)
        })
        .collect();
    (devices, oom_views)
}

fn device_report(
    engine: &mut Engine,
    d: u32,
    axis: &Axis,
    sites: &SiteTable,
    device_view: Option<DeviceView>,
) -> DeviceReport {
    let buckets = axis.buckets();
    let start = axis.start;
    let rel = |t: u64| t.saturating_sub(start);
    let info = engine
        .procs
        .iter()
        .flat_map(|s| s.defs.devices.iter())
        .find(|x| x.device == d)
        .cloned();
    let (kernels_traced, kernels_timed) = kernels_seen(engine, d);
    let regions = regions(engine, d, axis);
    let has_framework = engine.procs.iter().any(|s| {
        s.framework
            .as_ref()
            .is_some_and(|f| f.devices.contains_key(&d))
    });
    let blind_spots = blind_spots(engine, d, sites, has_framework, regions.is_empty());
    let timeline_sites = timeline_sites(engine, d, axis, sites);
    let procs = &engine.procs;
    let dev = engine.devices.get_mut(d).expect("device listed");
    // The framework's segments are the driver sites of its allocator
    // ("allocator cache"), and under the cudaMallocAsync backend its
    // tensors are driver sites too; the rest at the peak is outside it.
    let outside_frameworks = has_framework.then(|| {
        let rows: Vec<(u32, u64, u64)> = dev
            .peak_sites
            .iter()
            .copied()
            .filter(|&(raw, _, _)| {
                sites.categories[raw as usize] != Category::AllocatorCache
                    && !engine.sites[raw as usize].framework_tensors
            })
            .collect();
        let sites = sites.by_site(&rows);
        OutsideFrameworks {
            bytes: sites.iter().map(|s| s.bytes).sum(),
            sites,
        }
    });
    let live_by_kind: Vec<KindCurve> = (0..KINDS)
        .filter(|&k| dev.kind_peaks[k] > 0)
        .map(|k| KindCurve {
            kind: events::kind_name(k as u8).to_string(),
            points: dev.kind_curves[k].finish(axis, buckets),
            peak: dev.kind_peaks[k],
        })
        .collect();
    // Timed kernels running at the peak; or, traced as launches, the
    // last launched on each stream before it.
    let kernels_at_peak = |launches: bool| {
        let mut v: Vec<KernelRef> = dev
            .kernels_at_peak
            .iter()
            .filter(|k| k.launch == launches)
            .map(|k| kernel_ref(k, procs, start))
            .collect();
        v.sort_by_key(|k| (k.start_ns, k.pid, k.stream));
        v
    };
    DeviceReport {
        device_view,
        device: d,
        name: info
            .as_ref()
            .map_or_else(|| format!("device {d}"), |i| i.name.clone()),
        total_memory: info.as_ref().map_or(0, |i| i.total_memory.0),
        peak_bytes: dev.peak,
        peak_time_ns: rel(dev.peak_time),
        device_memory_peak_bytes: dev.on_device_peak,
        device_memory_peak_time_ns: rel(dev.on_device_peak_time),
        pinned_host_peak_bytes: dev.kind_peaks
            [usize::from(gmem_prof_traces::record::memory_kind::PINNED)],
        peak_by_kind: (0..KINDS)
            .filter(|&k| dev.peak_by_kind[k] > 0)
            .map(|k| KindBytes {
                kind: events::kind_name(k as u8).to_string(),
                bytes: dev.peak_by_kind[k],
            })
            .collect(),
        peak_sites: sites.by_site(&dev.peak_sites),
        frameworks_at_peak: Vec::new(),
        timeline_sites,
        kernels_per_bucket: dev.kernel_counts.finish(axis, buckets),
        kernels_at_peak: kernels_at_peak(false),
        kernels_launched_before_peak: kernels_at_peak(true),
        next_kernel_after_peak: dev
            .next_kernel
            .as_ref()
            .map(|k| kernel_ref(k, procs, start)),
        kernels_traced,
        kernels_timed,
        live: dev.curve.finish(axis, buckets),
        live_by_kind,
        reserved: dev.reserved_curve.finish(axis, buckets),
        reserved_peak: dev.reserved_peak,
        fragmentation: Fragmentation {
            regions,
            curve: dev.frag.finish(axis, buckets),
            largest_free: dev.largest_free.finish_or_zero(axis, buckets),
            worst: dev.frag_worst.map(fragmentation_at(start)),
            blind_spots,
        },
        outside_frameworks,
    }
}

/// Whether every process that allocated on device `d` traced kernels,
/// and whether each timed them.
fn kernels_seen(engine: &Engine, d: u32) -> (bool, bool) {
    engine
        .procs
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            engine
                .sites
                .iter()
                .any(|x| x.proc as usize == *i && x.device == d)
        })
        .map(|(_, s)| s.defs.process.as_ref())
        .map(|p| p.map_or((false, false), |p| (p.kernels_traced, p.kernels_timed)))
        .fold((true, true), |(all_traced, all_timed), (traced, timed)| {
            (all_traced && traced, all_timed && traced && timed)
        })
}

/// The stream-ordered pools and VMM reservations of device `d`, with
/// their fragmentation over time.
fn regions(engine: &Engine, d: u32, axis: &Axis) -> Vec<RegionSummary> {
    let buckets = axis.buckets();
    let start = axis.start;
    engine
        .regions
        .pools_sorted()
        .into_iter()
        .filter(|p| p.device == d)
        .map(|p| RegionSummary {
            kind: RegionKind::Pool,
            pid: p.pid,
            address: p.address,
            max_size: p.max_size,
            estimated: true,
            worst: p.worst.map(fragmentation_at(start)),
            curve: p.curve.fragmentation.clone().finish(axis, buckets),
            largest_free: p.curve.largest_free.clone().finish(axis, buckets),
        })
        .chain(
            engine
                .regions
                .reservations
                .values()
                .chain(&engine.regions.released)
                .filter(|r| r.device == Some(d))
                .map(|r| RegionSummary {
                    kind: RegionKind::VmmReservation,
                    pid: r.pid,
                    address: r.base,
                    max_size: r.size,
                    estimated: false,
                    worst: r.worst.map(fragmentation_at(start)),
                    curve: r.curve.fragmentation.clone().finish(axis, buckets),
                    largest_free: r.curve.largest_free.clone().finish(axis, buckets),
                }),
        )
        .collect()
}

/// What the trace cannot see of device `d`'s fragmentation, said once.
fn blind_spots(
    engine: &Engine,
    d: u32,
    sites: &SiteTable,
    has_framework: bool,
    no_regions: bool,
) -> Vec<BlindSpot> {
    let has_cache_sites = engine
        .sites
        .iter()
        .enumerate()
        .any(|(i, s)| s.device == d && sites.categories[i] == Category::AllocatorCache);
    let async_backend = engine.procs.iter().any(|s| {
        s.framework.as_ref().is_some_and(|f| {
            f.devices
                .get(&d)
                .is_some_and(|v| v.allocator == crate::input::TORCH_ASYNC)
        })
    });
    let mut blind_spots = Vec::new();
    if async_backend {
        blind_spots.push(BlindSpot::TorchCudaPool);
    } else if has_framework {
        blind_spots.push(BlindSpot::TorchSeenInside);
    } else if has_cache_sites {
        blind_spots.push(BlindSpot::CachingAllocatorUnseen);
    }
    if no_regions && !has_framework {
        blind_spots.push(BlindSpot::NoReservedRegions);
    }
    blind_spots
}

/// The bands of device `d`'s timeline: the largest sites at its peak,
/// each with its live bytes over time.
fn timeline_sites(engine: &mut Engine, d: u32, axis: &Axis, sites: &SiteTable) -> Vec<SiteCurve> {
    let buckets = axis.buckets();
    let peak = engine
        .devices
        .get(d)
        .map(|x| x.peak_sites.clone())
        .unwrap_or_default();
    let raws: Vec<u32> = (0..engine.sites.len() as u32)
        .filter(|&r| engine.sites[r as usize].device == d)
        .collect();
    site_curves(
        &sites.by_site(&peak),
        &raws,
        |raw| sites.id(raw),
        |r| engine.sites[r as usize].held.curve.finish(axis, buckets),
        buckets,
    )
}

fn kernel_ref(k: &engine::KernelSnap, procs: &[engine::ProcState], start: u64) -> KernelRef {
    let st = &procs[k.proc as usize];
    KernelRef {
        name: st
            .defs
            .strings
            .get(&k.name)
            .cloned()
            .unwrap_or_else(|| format!("kernel#{}", k.name)),
        pid: st.pid(),
        start_ns: k.start.saturating_sub(start),
        end_ns: k.end.saturating_sub(start),
        stream: k.cuda_stream,
        timed: !k.launch,
    }
}

/// A region's worst sample (`regions::Worst`) with its time made relative
/// to the trace's start.
fn fragmentation_at(start: u64) -> impl Fn(crate::regions::Worst) -> FragmentationAt {
    move |(time, fragmentation, free_bytes, largest_free_bytes)| FragmentationAt {
        time_ns: time.saturating_sub(start),
        fragmentation,
        free_bytes,
        largest_free_bytes,
        free_in_idle_segments_bytes: None,
    }
}
