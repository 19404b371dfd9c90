//! Assembling the analysis model from a finished sweep: sites merged and
//! ranked, devices, growth, failed allocations, processes, and the framework
//! allocators' views (`framework_view`).

use crate::engine::{self, Engine, KINDS};
use crate::events::{self, SiteIds};
use crate::growth::{judged_buckets, steady_rise, GrowthCandidate};
use crate::holding::SiteClass;
use crate::model::*;
use crate::site_figures::{site_bytes, site_curves};
use crate::{
    device_view, framework_pools, framework_view, input, sites, timeline, AnalyzeError, Options,
};

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

fn kinds_of(mask: u8) -> Vec<String> {
    (0..KINDS)
        .filter(|k| mask & (1 << k) != 0)
        .map(|k| events::kind_name(k as u8).to_string())
        .collect()
}

/// Assembles the model from the finished sweep; also returns the final id
/// of every raw site.
pub fn build(
    mut engine: Engine,
    mut summary: InputSummary,
    opts: &Options,
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    let Some(axis) = engine.axis.clone() else {
        summary.warnings.push("the trace holds no events".into());
        let analysis = Analysis {
            schema_version: SCHEMA_VERSION,
            input: summary,
            timeline: Timeline::default(),
            devices: Vec::new(),
            processes: process_reports(&mut engine, None, &[], 0),
            sites: Vec::new(),
            growth: Vec::new(),
            ooms: Vec::new(),
            frameworks: Vec::new(),
            tensor_sites: Vec::new(),
            tensor_growth: Vec::new(),
            framework_pools: Vec::new(),
            remedies: Vec::new(),
        };
        return Ok((analysis, SiteIds::default()));
    };
    let buckets = axis.buckets();
    let start = axis.start;
    let rel = |t: u64| t.saturating_sub(start);
    let defs: Vec<&sites::StreamDefs> = engine.streams.iter().map(|s| &s.defs).collect();
    let (merged, of_raw) = sites::merge_sites(&engine.sites, &defs, &opts.code);
    let categories: Vec<Category> = of_raw.iter().map(|&m| merged[m].category).collect();
    let leaked: Vec<bool> = categories.iter().map(|c| c.leaks()).collect();
    let cached: Vec<bool> = categories
        .iter()
        .map(|c| *c == Category::AllocatorCache)
        .collect();
    let ranked = sites::rank(&engine.sites, &of_raw, merged.len(), &leaked, &cached)
        .map_err(|e| AnalyzeError::Internal(e.to_string()))?;
    // Final site id = rank position.
    let mut id_of_merged = vec![0u32; merged.len()];
    for (rank, &m) in ranked.order.iter().enumerate() {
        id_of_merged[m] = rank as u32;
    }
    let site_id = |raw: u32| id_of_merged[of_raw[raw as usize]];
    let column = |name: &str, rank: usize| ranked.columns[name][rank];
    let mut site_list: Vec<Site> = Vec::with_capacity(merged.len());
    for (rank, &m) in ranked.order.iter().enumerate() {
        let ms = &merged[m];
        site_list.push(Site {
            id: rank as u32,
            label: ms.label.clone(),
            category: ms.category,
            allocator: ms.allocator.map(str::to_string),
            via: ms.via.clone(),
            frames: ms.frames.clone(),
            truncated: ms.truncated,
            pids: ms.pids.clone(),
            kinds: kinds_of(ms.kinds),
            count: column("count", rank),
            total_bytes: column("total_bytes", rank),
            live_at_peak: column("live_at_peak", rank),
            max_live: column("max_live", rank),
            leaked_bytes: column("leaked_bytes", rank),
            leaked_count: column("leaked_count", rank),
            cached_at_exit_bytes: column("cached_at_exit_bytes", rank),
            held_at_exit_bytes: column("held_at_exit_bytes", rank),
            held_at_exit_count: column("held_at_exit_count", rank),
            temporaries: column("temporaries", rank),
            failed: column("failed", rank),
        });
    }

    let kernel_ref = |k: &engine::KernelSnap, streams: &[engine::StreamState]| {
        let st = &streams[k.stream_of_process as usize];
        KernelRef {
            name: st
                .defs
                .strings
                .get(&k.name)
                .cloned()
                .unwrap_or_else(|| format!("kernel#{}", k.name)),
            pid: st.pid(),
            start_ns: rel(k.start),
            end_ns: rel(k.end),
            stream: k.cuda_stream,
            timed: !k.launch,
        }
    };
    let by_site = |list: &[(u32, u64, u64)]| site_bytes(list, site_id);

    let mut devices = Vec::new();
    let device_ids = engine.devices.ids();
    // The device's own view, per device and right after each failed
    // allocation: its samples gathered once for both.
    let (mut smi_views, oom_views) = {
        let samples = device_view::Samples::new(&engine, start);
        let views: std::collections::BTreeMap<u32, SmiView> = device_ids
            .iter()
            .filter_map(|&d| Some((d, samples.view(&engine, d, &axis, buckets)?)))
            .collect();
        let ooms: Vec<Option<SmiMoment>> = engine
            .ooms
            .iter()
            .map(|o| {
                samples.after_failure(engine.streams[o.stream as usize].pid(), o.device, o.time)
            })
            .collect();
        (views, ooms)
    };
    for d in device_ids {
        let info = engine
            .streams
            .iter()
            .flat_map(|s| s.defs.devices.iter())
            .find(|x| x.device == d)
            .cloned();
        // Whether every process that allocated on this device traced
        // kernels, and whether each timed them.
        let (kernels_traced, kernels_timed) = engine
            .streams
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                engine
                    .sites
                    .iter()
                    .any(|x| x.stream as usize == *i && x.device == d)
            })
            .map(|(_, s)| s.defs.process.as_ref())
            .map(|p| p.map_or((false, false), |p| (p.kernels_traced, p.kernels_timed)))
            .fold((true, true), |(all_traced, all_timed), (traced, timed)| {
                (all_traced && traced, all_timed && traced && timed)
            });
        let has_cache_sites = engine
            .sites
            .iter()
            .enumerate()
            .any(|(i, s)| s.device == d && categories[i] == Category::AllocatorCache);
        let regions: Vec<RegionSummary> = engine
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
                curve: p.curve.fragmentation.clone().finish(&axis, buckets),
                largest_free: p.curve.largest_free.clone().finish(&axis, buckets),
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
                        curve: r.curve.fragmentation.clone().finish(&axis, buckets),
                        largest_free: r.curve.largest_free.clone().finish(&axis, buckets),
                    }),
            )
            .collect();
        let has_framework = engine.streams.iter().any(|s| {
            s.framework
                .as_ref()
                .is_some_and(|f| f.devices.contains_key(&d))
        });
        let async_backend = engine.streams.iter().any(|s| {
            s.framework.as_ref().is_some_and(|f| {
                f.devices
                    .get(&d)
                    .is_some_and(|v| v.allocator == crate::input::TORCH_ASYNC)
            })
        });
        let streams = &engine.streams;
        let smi = smi_views.remove(&d);
        let timeline_sites = {
            let peak = engine
                .devices
                .get(d)
                .map(|x| x.peak_sites.clone())
                .unwrap_or_default();
            let raws: Vec<u32> = (0..engine.sites.len() as u32)
                .filter(|&r| engine.sites[r as usize].device == d)
                .collect();
            site_curves(
                &by_site(&peak),
                &raws,
                site_id,
                |r| engine.sites[r as usize].held.curve.finish(&axis, buckets),
                buckets,
            )
        };
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
                    categories[raw as usize] != Category::AllocatorCache
                        && !engine.sites[raw as usize].framework_tensors
                })
                .collect();
            let sites = by_site(&rows);
            OutsideFrameworks {
                bytes: sites.iter().map(|s| s.bytes).sum(),
                sites,
            }
        });
        let mut blind_spots = Vec::new();
        if async_backend {
            blind_spots.push(
                "PyTorch's cudaMallocAsync backend: its tensors are CUDA's stream-ordered \
                 allocations, shown with the framework allocators as its allocated memory, and the \
                 pool's size as its reserved memory. CUDA does not say how the free memory inside \
                 the pool lies: its fragmentation here is estimated from addresses."
                    .to_string(),
            );
        } else if has_framework {
            blind_spots.push(
                "PyTorch's caching allocator was seen from the inside: its tensors and the \
                 fragmentation of each of its pools are shown with the framework allocators."
                    .to_string(),
            );
        } else if has_cache_sites {
            blind_spots.push(
                "A caching allocator (PyTorch's default, CuPy's pool or XLA's BFC) sub-allocates \
                 inside blocks the trace sees whole: how fragmented those blocks are is not visible. \
                 gmem-prof sees inside PyTorch's (2.1 or later) when it can attach to it; the \
                 process's messages say why it could not."
                    .to_string(),
            );
        }
        if regions.is_empty() && !has_framework {
            blind_spots.push(
                "No stream-ordered pool or VMM reservation was used on this device: there is no \
                 reserved region whose inside the trace sees, so no fragmentation figure."
                    .to_string(),
            );
        }
        let worst = dev.frag_worst.map(fragmentation_at(start));
        let live_by_kind: Vec<KindCurve> = (0..KINDS)
            .filter(|&k| dev.kind_peaks[k] > 0)
            .map(|k| KindCurve {
                kind: events::kind_name(k as u8).to_string(),
                points: dev.kind_curves[k].finish(&axis, buckets),
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
                .map(|k| kernel_ref(k, streams))
                .collect();
            v.sort_by_key(|k| (k.start_ns, k.pid, k.stream));
            v
        };
        devices.push(DeviceReport {
            device_view: smi,
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
            peak_sites: by_site(&dev.peak_sites),
            frameworks_at_peak: Vec::new(),
            timeline_sites,
            kernels_per_bucket: dev.kernel_counts.finish(&axis, buckets),
            kernels_at_peak: kernels_at_peak(false),
            kernels_launched_before_peak: kernels_at_peak(true),
            next_kernel_after_peak: dev.next_kernel.as_ref().map(|k| kernel_ref(k, streams)),
            kernels_traced,
            kernels_timed,
            live: dev.curve.finish(&axis, buckets),
            live_by_kind,
            reserved: dev.reserved_curve.finish(&axis, buckets),
            reserved_peak: dev.reserved_peak,
            fragmentation: Fragmentation {
                regions,
                curve: dev.frag.finish(&axis, buckets),
                largest_free: dev
                    .largest_free
                    .finish(&axis, buckets)
                    .into_iter()
                    .map(|v| v.unwrap_or(0))
                    .collect(),
                worst,
                blind_spots,
            },
            outside_frameworks,
        });
    }

    // Growth: per site of the program and process, judged after the
    // warm-up.
    let judged: Vec<Vec<usize>> = engine
        .streams
        .iter_mut()
        .map(|st| judged_buckets(st, &axis, buckets))
        .collect();
    let framework_pools = framework_pools::pools(&engine, &axis, buckets, start);
    // A caching allocator's segments that keep growing are its cache
    // growing, unless the framework's own count says its arrays grew with
    // them: CuPy's pool, whose in-use readings the trace holds. Its chunks
    // then grow with the lines that needed them.
    let arrays_grew: Vec<bool> = engine
        .streams
        .iter()
        .zip(&judged)
        .map(|(st, judged)| {
            framework_pools
                .iter()
                .filter(|p| p.pid == st.pid() && p.framework == sites::CUPY_POOL)
                .any(|p| {
                    let in_use: Vec<u64> = p.in_use.iter().map(|x| x.last).collect();
                    steady_rise(&in_use, judged).is_some()
                })
        })
        .collect();
    let mut candidates: std::collections::BTreeMap<(u32, u32), GrowthCandidate> =
        Default::default();
    for (i, s) in engine.sites.iter_mut().enumerate() {
        let cupy_chunks =
            merged[of_raw[i]].allocator == Some(sites::CUPY_POOL) && arrays_grew[s.stream as usize];
        if s.class != SiteClass::Call || (categories[i] == Category::AllocatorCache && !cupy_chunks)
        {
            continue;
        }
        candidates
            .entry((site_id(i as u32), s.stream))
            .or_default()
            .add(&mut s.held, &axis, buckets);
    }
    let mut growth = Vec::new();
    for ((site, stream), c) in candidates {
        let st = &engine.streams[stream as usize];
        if let Some((from, to)) = c.judge(&judged[stream as usize], st.allocations) {
            growth.push(Growth {
                site,
                pid: st.pid(),
                from_bytes: from,
                to_bytes: to,
                growth_bytes: to - from,
                curve: c.curve,
            });
        }
    }
    growth.sort_by(|a, b| {
        b.growth_bytes
            .cmp(&a.growth_bytes)
            .then(a.site.cmp(&b.site))
    });

    let device_total = |d: u32| {
        devices
            .iter()
            .find(|x| x.device == d)
            .map_or(0, |x| x.total_memory)
    };
    let mut ooms: Vec<Oom> = engine
        .ooms
        .iter()
        .zip(oom_views)
        .map(|(o, device_view)| {
            let st = &engine.streams[o.stream as usize];
            Oom {
                time_ns: rel(o.time),
                pid: st.pid(),
                tid: o.tid,
                device: o.device,
                function: o.func.name().unwrap_or("?").to_string(),
                requested_bytes: o.bytes,
                result: o.result,
                site: site_id(o.site),
                outcome: o.outcome,
                device_live_bytes: o.device_live,
                device_total_bytes: device_total(o.device),
                largest_free_extent: o.largest_free,
                live_by_site: by_site(&o.live_by_site).into_iter().take(10).collect(),
                raised_as: None,
                device_view,
            }
        })
        .collect();
    let framework_view::Views {
        frameworks,
        tensor_sites,
        tensor_growth,
        at_device_peak,
        site_ids: tensor_site_ids,
    } = framework_view::views(&mut engine, &axis, buckets, &opts.code, &mut ooms);
    // The device peak list without the segments of the allocators seen
    // from the inside, which are given apart with what they held.
    for report in &mut devices {
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
            (categories[raw as usize] == Category::AllocatorCache
                && !s.framework_tensors
                && device_memory)
                .then_some(s.stream as usize)
                .filter(|st| views.iter().any(|v| v.0 == *st))
        };
        let mut rest: Vec<(u32, u64, u64)> = Vec::new();
        let mut taken: Vec<(usize, u64, u64)> = Vec::new();
        for &(raw, bytes, count) in &raw_rows {
            match segment_of(raw) {
                Some(stream) => taken.push((stream, bytes, count)),
                None => rest.push((raw, bytes, count)),
            }
        }
        for (stream, _, at_peak) in views {
            let mine = taken.iter().filter(|t| t.0 == *stream);
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
            report.peak_sites = by_site(&rest);
        }
    }
    // One verdict per line: a CUDA site growing in a process where a
    // tensor site of the same label grows too is that tensor site seen
    // from the driver (PyTorch's cudaMallocAsync backend: each tensor is a
    // CUDA allocation), judged over the same part of the run: said once, as
    // tensors.
    growth.retain(|g| {
        let label = &site_list[g.site as usize].label;
        !tensor_growth
            .iter()
            .any(|t| t.pid == g.pid && tensor_sites[t.site as usize].label == *label)
    });

    let processes = process_reports(&mut engine, Some(&axis), &categories, buckets);
    summary.dropped_records = processes.iter().map(|p| p.dropped_records).sum();
    if summary.dropped_records > 0 {
        summary.warnings.push(format!(
            "{} records were lost while recording (CUPTI or the collector could not keep up): \
             figures may be incomplete",
            summary.dropped_records
        ));
    }
    if summary.late_events > 0 {
        summary.warnings.push(format!(
            "{} events arrived more than {} s out of order and were applied late",
            summary.late_events,
            input::WINDOW_NS / 1_000_000_000
        ));
    }
    if engine.impossible_sizes > 0 {
        summary.warnings.push(format!(
            "left out {} event(s) claiming {} bytes (1 PiB) or more: the trace is damaged \
             or was written by a faulty collector",
            engine.impossible_sizes,
            crate::engine::EVENT_BYTES_LIMIT
        ));
    }
    let unmatched: u64 = engine.streams.iter().map(|s| s.unmatched_frees).sum();
    if unmatched > 0 {
        summary.warnings.push(format!(
            "{unmatched} frees had no matching allocation in the trace (allocated before recording \
             started, or their allocation record was lost)"
        ));
    }
    let unknown: u64 = engine.streams.iter().map(|s| s.defs.unknown_records).sum();
    if unknown > 0 {
        summary.warnings.push(format!(
            "{unknown} records of a newer format version were skipped: use a newer gmem-prof to see them"
        ));
    }
    let site_ids = SiteIds {
        sites: (0..engine.sites.len() as u32).map(site_id).collect(),
        tensors: tensor_site_ids,
    };
    let analysis = Analysis {
        schema_version: SCHEMA_VERSION,
        input: summary,
        timeline: Timeline {
            start_ns: start,
            end_ns: engine.now.saturating_sub(start),
            bucket_ns: axis.width,
            buckets,
        },
        devices,
        processes,
        sites: site_list,
        growth,
        ooms,
        frameworks,
        tensor_sites,
        tensor_growth,
        framework_pools,
        remedies: Vec::new(),
    };
    let mut analysis = analysis;
    analysis.remedies = crate::remedies::remedies(&analysis);
    Ok((analysis, site_ids))
}

fn process_reports(
    engine: &mut Engine,
    axis: Option<&timeline::Axis>,
    categories: &[Category],
    buckets: usize,
) -> Vec<ProcessReport> {
    let start = axis.map_or(0, |a| a.start);
    let mut out = Vec::new();
    for (si, st) in engine.streams.iter_mut().enumerate() {
        let mut at_exit = AtExit::default();
        let mut view = "direct";
        let mut cache_sites = false;
        let mut devices: Vec<u32> = Vec::new();
        for (i, s) in engine.sites.iter().enumerate() {
            if s.stream as usize != si {
                continue;
            }
            if s.held.count > 0 && !devices.contains(&s.device) {
                devices.push(s.device);
            }
            match categories.get(i).copied().unwrap_or(Category::Unknown) {
                Category::AllocatorCache => {
                    cache_sites = true;
                    at_exit.cached_bytes += s.held.at_exit;
                    at_exit.cached_count += s.held.at_exit_count;
                }
                Category::Runtime => {
                    at_exit.runtime_bytes += s.held.at_exit;
                    at_exit.runtime_count += s.held.at_exit_count;
                }
                Category::Library => {
                    at_exit.library_bytes += s.held.at_exit;
                    at_exit.library_count += s.held.at_exit_count;
                }
                Category::Profiler => at_exit.profiler_bytes += s.held.at_exit,
                Category::Program | Category::Unknown => {
                    at_exit.leaked_bytes += s.held.at_exit;
                    at_exit.leaked_count += s.held.at_exit_count;
                }
            }
        }
        let per_tensor = || {
            st.defs.symbols.values().any(|sym| {
                sym.frames
                    .iter()
                    .any(|f| f.function.contains(sites::PER_TENSOR_ALLOCATOR))
            })
        };
        if cache_sites {
            view = "segments";
        } else if per_tensor() {
            view = "tensors";
        }
        let p = st.defs.process.clone().unwrap_or_default();
        let live = match axis {
            Some(a) => st.curve.finish(a, buckets),
            None => Vec::new(),
        };
        let mut messages: Vec<String> = st
            .defs
            .messages
            .iter()
            .map(|(level, text)| {
                let l = match level {
                    0 => "info",
                    1 => "warning",
                    _ => "error",
                };
                format!("{l}: {text}")
            })
            .collect();
        if st.ended.is_none() {
            messages.push(
                "warning: the process did not end cleanly (killed, crashed or still running): \
                 what it held is shown as live when the trace ends"
                    .into(),
            );
        }
        let dropped_records = st.defs.dropped.0 + st.defs.dropped.1;
        let mut not_profiled: Vec<String> = st
            .defs
            .messages
            .iter()
            .filter(|(level, _)| *level >= 2)
            .map(|(_, text)| format!("the collector did not profile all of it: {text}"))
            .collect();
        if dropped_records > 0 {
            not_profiled.push(format!(
                "{dropped_records} records were dropped (buffers full): its figures are short of them"
            ));
        }
        if st.ended.is_none() {
            not_profiled.push(
                "it was cut short (killed, crashed, or still running when the trace was \
                 written): what it did after the collector's last flush is missing"
                    .into(),
            );
        }
        devices.sort_unstable();
        out.push(ProcessReport {
            devices,
            pid: p.pid,
            ppid: p.ppid,
            exe: p.exe.clone(),
            cmdline: p.cmdline.clone(),
            hostname: p.hostname.clone(),
            start_ns: st.first_time.unwrap_or(start).saturating_sub(start),
            end_ns: st.ended.unwrap_or(st.last_time).saturating_sub(start),
            clean_exit: st.ended.is_some(),
            kernels_traced: p.kernels_traced,
            kernels_timed: p.kernels_traced && p.kernels_timed,
            stacks_captured: p.stacks_captured,
            allocations: st.allocations,
            frees: st.frees,
            failed_allocations: st.failed_calls,
            peak_bytes: st.peak,
            peak_time_ns: st.peak_time.saturating_sub(start),
            live,
            at_exit,
            allocator_view: view.into(),
            dropped_records,
            messages,
            not_profiled,
            allocator_not_attached: st
                .defs
                .allocators
                .iter()
                .find(|a| {
                    a.allocator == gmem_prof_traces::record::allocator::TORCH_CACHING && !a.attached
                })
                .map(|a| a.detail.clone()),
            ipc_mapped_peak_bytes: st.ipc_mapped_peak,
        });
    }
    out
}
