//! The framework allocators' part of the model (`FrameworkView`,
//! `TensorSite`, tensor growth) from the sweep's `FrameworkState`s.

use std::collections::BTreeMap;

use gmem_prof_traces::record::allocator;

use crate::engine::Engine;
use crate::framework::{FrameworkOomRaw, PoolKey};
use crate::growth::{judged_buckets, GrowthCandidate};
use crate::holding::SiteClass;
use crate::input::MEMPOOL_BIT;
use crate::input::TORCH_ASYNC;
use crate::model::*;
use crate::site_figures::{site_bytes, site_curves};
use crate::sites::{self, CodeRules, ProcDefs};
use crate::timeline::Axis;

/// What `views` builds.
pub struct Views {
    pub frameworks: Vec<FrameworkView>,
    pub tensor_sites: Vec<TensorSite>,
    pub tensor_growth: Vec<Growth>,
    /// Per (process, device) of a view with segments (not the cudaMallocAsync
    /// backend's): its tensors at the device's peak (`FrameworkAtPeak`
    /// with the segments left for the caller, who knows the driver's side).
    pub at_device_peak: Vec<(usize, u32, FrameworkAtPeak)>,
    /// Per process, per raw tensor site: its id in `tensor_sites`.
    pub site_ids: Vec<Vec<u32>>,
}

/// A tensor site before ranking: its figures summed over the raw sites
/// (one stack of one process on one device) that share its call path
/// (`sites::call_path_key`).
struct Merged {
    label: String,
    frames: Vec<FrameText>,
    truncated: bool,
    pids: Vec<u32>,
    count: u64,
    total_bytes: u64,
    at_peak: u64,
    max_live: u64,
    at_exit: u64,
    at_exit_count: u64,
    /// Of `at_exit`, CUDA libraries' workspaces (`library_at_exit`).
    library_at_exit: (u64, u64),
    temporaries: u64,
    roles: RoleBytes,
}

/// What a raw tensor site held at exit that is a CUDA library's workspace,
/// (bytes, count): its blocks made right after the library allocated for
/// itself on their thread (`TensorSiteStats::library_at_exit`), or all of
/// it when its stack runs through the library or the framework's code
/// that keeps the library's state (PyTorch's cudaMallocAsync backend, and
/// `--tensor-stacks all`, record native frames with tensors).
fn library_at_exit(s: &crate::framework::TensorSiteStats, frames: &[FrameText]) -> (u64, u64) {
    if frames.iter().any(sites::is_cuda_library) {
        (s.held.at_exit, s.held.at_exit_count)
    } else {
        s.library_at_exit
    }
}

/// A private pool as PyTorch numbers it: the pool a CUDA graph made for
/// itself, or a `torch.cuda.MemPool` (also what `graph_pool_handle()`
/// makes for graphs to share), each counted from 1.
fn private_pool_name(id: u32) -> String {
    if id & MEMPOOL_BIT != 0 {
        format!("MemPool {}", id & !MEMPOOL_BIT)
    } else {
        format!("CUDA graph pool {id}")
    }
}

/// The pool id as the trace writes it (FORMAT.md): a graph's pool in the
/// low 32 bits, a MemPool in the high 32.
fn record_pool_id(id: u32) -> u64 {
    if id & MEMPOOL_BIT != 0 {
        u64::from(id & !MEMPOOL_BIT) << 32
    } else {
        u64::from(id)
    }
}

fn pool_name(k: &PoolKey) -> String {
    let size = if k.small {
        "small blocks"
    } else {
        "large blocks"
    };
    if k.private != 0 {
        format!(
            "{} ({size}), stream {:#x}",
            private_pool_name(k.private),
            k.stream
        )
    } else {
        format!("{size}, stream {:#x}", k.stream)
    }
}

/// Builds the views; marks in `driver_ooms` the failures a framework
/// raised as its own error.
pub fn views(
    engine: &mut Engine,
    axis: &Axis,
    buckets: usize,
    rules: &CodeRules,
    driver_ooms: &mut [Oom],
) -> Views {
    let merged = merge_tensor_sites(engine, rules);
    let by_site = |raw: &[(u32, u64, u64)], ids: &[u32]| site_bytes(raw, |i| ids[i as usize]);
    let judged: Vec<Vec<usize>> = engine
        .procs
        .iter_mut()
        .map(|st| judged_buckets(st, axis, buckets))
        .collect();
    let mut frameworks = Vec::new();
    let mut tensor_growth = Vec::new();
    let mut at_device_peak = Vec::new();
    for (si, st) in engine.procs.iter_mut().enumerate() {
        let pid = st.pid();
        let defs: &ProcDefs = &st.defs;
        let Some(fw) = st.framework.as_deref_mut() else {
            continue;
        };
        let library: Vec<bool> = fw
            .sites
            .iter()
            .map(|s| {
                s.stack != 0
                    && defs
                        .stack_frames(s.stack)
                        .0
                        .iter()
                        .any(sites::is_cuda_library)
            })
            .collect();
        fw.workspace_sites(axis, |site| library[site as usize]);
        let proc = Proc {
            pid,
            defs,
            ids: &merged.site_ids[si],
            library: &merged.library_of[si],
            settings: defs
                .allocators
                .iter()
                .find(|a| a.allocator == allocator::TORCH_CACHING)
                .map(|a| a.settings.clone())
                .unwrap_or_default(),
            driver_requests: raised_as_errors(fw, pid, axis.start, driver_ooms),
        };
        let devices: Vec<u32> = fw.devices.keys().copied().collect();
        for device in devices {
            let (view, at_peak) = device_view(fw, device, &proc, axis, &by_site);
            frameworks.push(view);
            if let Some(at_peak) = at_peak {
                at_device_peak.push((si, device, at_peak));
            }
        }
        tensor_growth.extend(growth_of(fw, &proc, &judged[si], axis, buckets));
    }
    tensor_growth.sort_by(|a, b| {
        b.growth_bytes
            .cmp(&a.growth_bytes)
            .then(a.site.cmp(&b.site))
            .then(a.pid.cmp(&b.pid))
    });
    Views {
        frameworks,
        tensor_sites: merged.tensor_sites,
        tensor_growth,
        at_device_peak,
        site_ids: merged.site_ids,
    }
}

/// The tensor sites of every process, merged by call path and ranked.
struct MergedSites {
    tensor_sites: Vec<TensorSite>,
    /// Per process, per raw site: its id in `tensor_sites`.
    site_ids: Vec<Vec<u32>>,
    /// Per process, per raw site: `library_at_exit`.
    library_of: Vec<Vec<(u64, u64)>>,
}

/// Merges the raw tensor sites (one stack of one process on one device)
/// by call path, across processes and devices, and ranks them: bytes at
/// the allocated peak, then total bytes, then count.
fn merge_tensor_sites(engine: &Engine, rules: &CodeRules) -> MergedSites {
    let mut groups: BTreeMap<String, Merged> = BTreeMap::new();
    let mut group_of: Vec<Vec<String>> = Vec::new();
    let mut library_of: Vec<Vec<(u64, u64)>> = Vec::new();
    for st in &engine.procs {
        let Some(fw) = &st.framework else {
            group_of.push(Vec::new());
            library_of.push(Vec::new());
            continue;
        };
        let mut library = Vec::with_capacity(fw.sites.len());
        let pid = st.pid();
        let mut keys = Vec::with_capacity(fw.sites.len());
        for s in &fw.sites {
            let (frames, truncated) = if s.stack != 0 {
                st.defs.stack_frames(s.stack)
            } else {
                (Vec::new(), false)
            };
            let key = sites::call_path_key(&frames, rules);
            let lib = library_at_exit(s, &frames);
            library.push(lib);
            if let Some(m) = groups.get_mut(&key) {
                sites::common_outer_frames(&mut m.frames, &frames);
                m.truncated |= truncated;
            }
            let m = groups.entry(key.clone()).or_insert_with(|| Merged {
                label: if frames.is_empty() {
                    "tensors with no stack".into()
                } else if let Some(library) = sites::library_function(&frames) {
                    format!(
                        "CUDA library workspace ({library}) under {}",
                        sites::label(SiteClass::Call, "tensor", &frames, rules)
                    )
                } else {
                    sites::label(SiteClass::Call, "tensor", &frames, rules)
                },
                frames,
                truncated,
                pids: Vec::new(),
                count: 0,
                total_bytes: 0,
                at_peak: 0,
                max_live: 0,
                at_exit: 0,
                at_exit_count: 0,
                library_at_exit: (0, 0),
                temporaries: 0,
                roles: RoleBytes::default(),
            });
            m.add(pid, s, lib);
            keys.push(key);
        }
        group_of.push(keys);
        library_of.push(library);
    }
    let mut order: Vec<(&String, &Merged)> = groups.iter().collect();
    order.sort_by(|a, b| {
        b.1.at_peak
            .cmp(&a.1.at_peak)
            .then(b.1.total_bytes.cmp(&a.1.total_bytes))
            .then(b.1.count.cmp(&a.1.count))
            .then(a.0.cmp(b.0))
    });
    let mut labels: Vec<String> = order.iter().map(|(_, m)| m.label.clone()).collect();
    let frames: Vec<&[FrameText]> = order.iter().map(|(_, m)| m.frames.as_slice()).collect();
    // Workspaces apart: a line's own tensors are not numbered as call paths
    // because a library also allocated under it.
    let groups: Vec<String> = frames
        .iter()
        .map(|f| sites::library_function(f).unwrap_or_default())
        .collect();
    sites::tell_apart(&mut labels, &groups, &frames, rules);
    let id_of: BTreeMap<&String, u32> = order
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (*k, i as u32))
        .collect();
    let tensor_sites: Vec<TensorSite> = order
        .iter()
        .enumerate()
        .map(|(i, (_, m))| m.site(i as u32, labels[i].clone()))
        .collect();
    let site_ids: Vec<Vec<u32>> = group_of
        .iter()
        .map(|keys| keys.iter().map(|k| id_of[k]).collect())
        .collect();
    MergedSites {
        tensor_sites,
        site_ids,
        library_of,
    }
}

impl Merged {
    /// One raw site of process `pid`, with its library workspaces `lib`.
    fn add(&mut self, pid: u32, s: &crate::framework::TensorSiteStats, lib: (u64, u64)) {
        if !self.pids.contains(&pid) {
            self.pids.push(pid);
        }
        self.count += s.held.count;
        self.total_bytes += s.held.total_bytes;
        self.at_peak += s.held.at_peak;
        self.max_live = self.max_live.max(s.held.max_live);
        self.at_exit += s.held.at_exit;
        self.at_exit_count += s.held.at_exit_count;
        self.library_at_exit.0 += lib.0;
        self.library_at_exit.1 += lib.1;
        self.temporaries += s.held.temporaries;
        self.roles = self.roles.plus(&s.roles);
    }

    fn site(&self, id: u32, label: String) -> TensorSite {
        let mut pids = self.pids.clone();
        pids.sort_unstable();
        TensorSite {
            id,
            label,
            frames: self.frames.clone(),
            truncated: self.truncated,
            pids,
            count: self.count,
            total_bytes: self.total_bytes,
            at_peak_bytes: self.at_peak,
            max_live: self.max_live,
            live_at_exit_bytes: self.at_exit - self.library_at_exit.0,
            live_at_exit_count: self.at_exit_count - self.library_at_exit.1,
            library_at_exit_bytes: self.library_at_exit.0,
            temporaries: self.temporaries,
            // The role most of its bytes had (the first in `Role::ALL`
            // of equals).
            role: self
                .roles
                .iter()
                .fold(None, |best: Option<(Role, u64)>, (r, b)| match best {
                    Some((_, most)) if most >= b => best,
                    _ => Some((r, b)),
                })
                .map(|(r, _)| r),
            roles: self.roles,
        }
    }
}

/// What the views of one process share.
struct Proc<'a> {
    pid: u32,
    defs: &'a ProcDefs,
    /// Its raw tensor sites' final ids.
    ids: &'a [u32],
    /// Its raw tensor sites' `library_at_exit`.
    library: &'a [(u64, u64)],
    /// The allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`).
    settings: String,
    /// Per error the allocator raised: the request of the driver failure
    /// behind it, if one was seen.
    driver_requests: Vec<Option<u64>>,
}

/// The driver failures behind the errors a process's allocator raised:
/// the last one that reached the program on the same device, in the two
/// seconds before; their requests, by error. Marks those failures as
/// raised as PyTorch's error.
fn raised_as_errors(
    fw: &crate::framework::FrameworkState,
    pid: u32,
    start: u64,
    driver_ooms: &mut [Oom],
) -> Vec<Option<u64>> {
    fw.ooms
        .iter()
        .map(|o| {
            let t = o.time.saturating_sub(start);
            let d = driver_ooms.iter_mut().rev().find(|d| {
                d.pid == pid
                    && d.device == o.device
                    && d.reached_program()
                    && d.raised_as.is_none()
                    && d.time_ns <= t
                    && t - d.time_ns <= 2_000_000_000
            })?;
            d.raised_as = Some("PyTorch OutOfMemoryError".into());
            Some(d.requested_bytes)
        })
        .collect()
}

/// The view of one process's allocator on one device, and, for a view
/// with segments (not the cudaMallocAsync backend's), its tensors at the
/// device's peak (the segments are left for the caller, who knows the
/// driver's side).
fn device_view(
    fw: &mut crate::framework::FrameworkState,
    device: u32,
    proc: &Proc,
    axis: &Axis,
    by_site: &BySite,
) -> (FrameworkView, Option<FrameworkAtPeak>) {
    let buckets = axis.buckets();
    let start = axis.start;
    let rel = |t: u64| t.saturating_sub(start);
    let (pid, ids) = (proc.pid, proc.ids);
    let total = proc
        .defs
        .devices
        .iter()
        .find(|d| d.device == device)
        .map_or(0, |d| d.total_memory.0);
    let ooms: Vec<FrameworkOom> = fw
        .ooms
        .iter()
        .zip(&proc.driver_requests)
        .filter(|(o, _)| o.device == device)
        .map(|(o, driver)| framework_oom(o, *driver, pid, total, ids, rel, by_site))
        .collect();
    let dev = fw.devices.get_mut(&device).expect("a device of this view");
    let pools = pools_of(dev, axis);
    let worst_fragmentation = pools
        .iter()
        .filter_map(|p| p.worst.clone().map(|at| (p.pool.clone(), at)))
        .max_by(|a, b| {
            a.1.fragmentation
                .total_cmp(&b.1.fragmentation)
                .then(b.0.cmp(&a.0))
        })
        .map(|(pool, at)| PoolFragmentationAt { pool, at });
    let mut notes: Vec<String> = fw.config.unsupported.clone();
    if !fw.phases.seen && dev.allocations > 0 {
        notes.push(NO_PHASES.into());
    }
    let sum = |pairs: &mut dyn Iterator<Item = (u64, u64)>| {
        pairs.fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let library_at_exit = sum(&mut dev.sites.iter().map(|&i| proc.library[i as usize]));
    let live_at_exit = sum(&mut dev.sites.iter().map(|&i| {
        let held = &fw.sites[i as usize].held;
        (held.at_exit, held.at_exit_count)
    }));
    // The timeline's bands: the largest tensor sites at the allocated
    // peak, each summed over its raw sites here.
    let sites = &mut fw.sites;
    let timeline_sites = site_curves(
        &by_site(&dev.peak_sites, ids),
        &dev.sites,
        |r| ids[r as usize],
        |r| sites[r as usize].held.curve.finish(axis, buckets),
        buckets,
    );
    let allocator = crate::framework::allocator_name(dev.allocator).to_string();
    let at_peak = (dev.allocator != TORCH_ASYNC).then(|| FrameworkAtPeak {
        allocator: allocator.clone(),
        pid,
        segment_bytes: 0,
        segments: 0,
        tensor_bytes: dev.at_device_peak.allocated,
        tensor_time_ns: rel(dev.at_device_peak.time),
        tensor_sites: by_site(&dev.at_device_peak.sites, ids),
    });
    let (roles_at_peak, timeline_roles) = roles_of(dev, fw.phases.seen, axis, buckets);
    let view = FrameworkView {
        timeline_sites,
        roles_at_peak,
        timeline_roles,
        allocator,
        pid,
        device,
        settings: proc.settings.clone(),
        reserved_in: if dev.allocator == TORCH_ASYNC {
            ReservedIn::CudaPool
        } else {
            ReservedIn::Segments
        },
        allocated: dev.allocated_curve.finish(axis, buckets),
        reserved: dev.reserved_curve.finish(axis, buckets),
        allocated_peak: dev.allocated_peak,
        allocated_peak_time_ns: rel(dev.allocated_peak_time),
        reserved_at_allocated_peak: dev.reserved_at_allocated_peak,
        reserved_peak: dev.reserved_peak,
        at_reserved_peak: ReservedPeak {
            time_ns: rel(dev.reserved_peak_time),
            allocated_bytes: dev.allocated_at_reserved_peak,
            idle_segment_bytes: dev.idle_at_reserved_peak.0,
            idle_segments: dev.idle_at_reserved_peak.1,
            site: dev.reserved_peak_site.map(|r| ids[r as usize]),
        },
        peak_sites: by_site(&dev.peak_sites, ids),
        tensors_allocated: dev.allocations,
        tensors_freed: dev.frees,
        segments_allocated: dev.segment_allocs,
        segments_freed: dev.segment_frees,
        pages_mapped: dev.maps,
        pages_unmapped: dev.unmaps,
        at_exit: FrameworkAtExit {
            live_tensor_bytes: live_at_exit.0 - library_at_exit.0,
            live_tensors: live_at_exit.1 - library_at_exit.1,
            library_bytes: library_at_exit.0,
            library_tensors: library_at_exit.1,
            reserved_bytes: dev.reserved,
            cached_bytes: dev.reserved.saturating_sub(dev.allocated),
        },
        pools,
        fragmentation: dev.frag.finish(axis, buckets),
        largest_free: dev.largest_free.finish_or_zero(axis, buckets),
        worst_fragmentation,
        snapshots: snapshots_of(dev, start),
        segments: SegmentCheck {
            reported: dev.segments_seen,
            matched: dev.segments_matched,
            unmatched: dev.unmatched_segments.clone(),
        },
        ooms,
        notes,
    };
    (view, at_peak)
}

/// Each pool of a device's view with its fragmentation over time.
fn pools_of(dev: &mut crate::framework::AllocatorOnDevice, axis: &Axis) -> Vec<PoolFragmentation> {
    let buckets = axis.buckets();
    dev.pools
        .iter_mut()
        .map(|(k, p)| PoolFragmentation {
            pool: pool_name(k),
            small: k.small,
            stream: k.stream,
            private_pool: record_pool_id(k.private),
            reserved_peak: p.reserved_peak,
            curve: p.frag.finish(axis, buckets),
            largest_free: p.largest.finish_or_zero(axis, buckets),
            worst: p.worst.map(|(t, e)| FragmentationAt {
                time_ns: t.saturating_sub(axis.start),
                fragmentation: e.fragmentation(),
                free_bytes: e.free,
                largest_free_bytes: e.largest,
                free_in_idle_segments_bytes: Some(e.idle),
            }),
        })
        .collect()
}

/// The pools at each memory snapshot the program took.
fn snapshots_of(dev: &crate::framework::AllocatorOnDevice, start: u64) -> Vec<PoolsAt> {
    dev.snapshots
        .iter()
        .map(|(t, pools)| PoolsAt {
            time_ns: t.saturating_sub(start),
            pools: pools
                .iter()
                .map(|(k, e)| PoolExtentAt {
                    pool: pool_name(k),
                    reserved_bytes: e.reserved,
                    free_bytes: e.free,
                    largest_free_bytes: e.largest,
                    fragmentation: e.fragmentation(),
                })
                .collect(),
        })
        .collect()
}

/// Growth of a process's tensor sites, judged over the process's judged
/// part (the same as its CUDA sites', so that a line seen by both views
/// gets one figure).
fn growth_of(
    fw: &mut crate::framework::FrameworkState,
    proc: &Proc,
    judged: &[usize],
    axis: &Axis,
    buckets: usize,
) -> Vec<Growth> {
    let mut candidates: BTreeMap<u32, GrowthCandidate> = BTreeMap::new();
    for (i, s) in fw.sites.iter_mut().enumerate() {
        candidates
            .entry(proc.ids[i])
            .or_default()
            .add(&mut s.held, axis, buckets);
    }
    candidates
        .into_iter()
        .filter_map(|(site, c)| {
            let (from, to) = c.judge(judged, fw.allocations)?;
            Some(Growth {
                site,
                pid: proc.pid,
                from_bytes: from,
                to_bytes: to,
                growth_bytes: to - from,
                curve: c.curve,
            })
        })
        .collect()
}

/// Raw (site, bytes, count) rows and the raw-to-final site ids → rows by
/// final site.
type BySite = dyn Fn(&[(u32, u64, u64)], &[u32]) -> Vec<SiteBytes>;

/// One error the allocator raised, as the model gives it. `driver`: the
/// request of the failed CUDA allocation behind it, if one was.
fn framework_oom(
    o: &FrameworkOomRaw,
    driver: Option<u64>,
    pid: u32,
    total: u64,
    ids: &[u32],
    rel: impl Fn(u64) -> u64,
    by_site: &BySite,
) -> FrameworkOom {
    let limit = match o.limit {
        // The cudaMallocAsync backend asked CUDA, which refused.
        _ if o.cuda_malloc_async && driver.is_some() => OomLimit::DeviceFull,
        None => OomLimit::Unknown,
        // The allocator holds to the fraction's bytes when one is set, else
        // to the device's total.
        Some(l) if total > 0 && l < total - total / 1000 => OomLimit::MemoryFraction,
        Some(_) => OomLimit::DeviceFull,
    };
    // The cudaMallocAsync backend refuses a request against the fraction
    // before any CUDA call: only the least it could have been is known.
    let (requested_bytes, request_seen) = match (o.cuda_malloc_async, driver, o.limit) {
        (false, _, _) => (o.requested, true),
        (true, Some(bytes), _) => (bytes, true),
        (true, None, Some(limit)) => (limit.saturating_sub(o.allocated) + 1, false),
        (true, None, None) => (0, false),
    };
    FrameworkOom {
        time_ns: rel(o.time),
        pid,
        device: o.device,
        requested_bytes,
        request_seen,
        cuda_malloc_async: o.cuda_malloc_async,
        tried_bytes: o.tried,
        limit,
        limit_bytes: o.limit,
        device_free_bytes: o.device_free,
        device_total_bytes: total,
        allocated_bytes: o.allocated,
        reserved_bytes: o.reserved,
        free_in_segments: o.free_in_segments,
        // Only a free block of the pool the request goes to could serve it.
        largest_free_block: o.pool_free.map_or(o.largest_free, |p| p.largest),
        site: o.site.map(|s| ids[s as usize]),
        live_by_site: by_site(&o.live_by_site, ids).into_iter().take(10).collect(),
        step: None,
        ranges: Vec::new(),
    }
}

/// A view's note when the trace has no PyTorch phases.
const NO_PHASES: &str = "the trace has no PyTorch phases (gmem-prof's bootstrap marks them in \
    programs that call backward or step a torch.optim optimizer): a tensor whose frames do not \
    say what it is counts as a temporary only when freed before the next tensor was allocated, \
    and as unknown otherwise";

/// A view's tensors by role at its allocated peak, and each role's curve
/// (roles that held bytes).
fn roles_of(
    dev: &mut crate::framework::AllocatorOnDevice,
    by_phases: bool,
    axis: &Axis,
    buckets: usize,
) -> (Option<RolesAtPeak>, Vec<RoleCurve>) {
    let at_peak = (dev.allocated_peak > 0).then(|| RolesAtPeak {
        roles: dev.roles.at_peak.roles_known(),
        cached: dev
            .reserved_at_allocated_peak
            .saturating_sub(dev.allocated_peak),
        by_phases,
    });
    let curves = Role::ALL
        .into_iter()
        .filter_map(|role| {
            let live = dev.roles.curves[role.index()].finish(axis, buckets);
            live.iter().any(|p| p.max > 0).then(|| RoleCurve {
                role,
                live: live.iter().map(|p| p.last).collect(),
            })
        })
        .collect();
    (at_peak, curves)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PyTorch's `MempoolId_t` pairs as the trace packs them (FORMAT.md):
    /// graph pool ids in the low half, MemPool ids in the high half, both
    /// counted from 1, so graph pool 1 and MemPool 1 stay apart.
    #[test]
    fn private_pools_keep_their_kind_through_the_input() {
        let graph = crate::input::private_pool(1);
        let mempool = crate::input::private_pool(1 << 32);
        assert_ne!(graph, mempool);
        assert_eq!(private_pool_name(graph), "CUDA graph pool 1");
        assert_eq!(private_pool_name(mempool), "MemPool 1");
        assert_eq!(record_pool_id(graph), 1);
        assert_eq!(record_pool_id(mempool), 1 << 32);
        assert_eq!(crate::input::private_pool(0), 0);
    }
}
