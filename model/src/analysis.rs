//! The analysis model: plain structs, what `reports` renders and what the
//! JSON output serializes. No polars types, no wire records.
//!
//! Times are nanoseconds since the first event of the trace (`Timeline.start_ns`
//! is that event's absolute time on CUPTI's clock). Everything is ordered
//! deterministically (by value, then by id), never by hash-map order.

use crate::roles::{Role, RoleBytes, RoleCurve, RolesAtPeak};
use serde::{Deserialize, Serialize};

use crate::reasons::{
    typed_or_worded, BlindSpot, InputWarning, NotProfiled, ProcessMessage, UnprofiledPart,
};

/// Version of this model's JSON form; bumped when a field changes meaning or
/// disappears (adding fields does not bump it).
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Analysis {
    pub schema_version: u32,
    pub input: InputSummary,
    pub timeline: Timeline,
    pub devices: Vec<DeviceReport>,
    pub processes: Vec<ProcessReport>,
    /// Allocation sites, merged across processes and devices by their
    /// symbolized stack, sorted by bytes live at the peak, then total bytes.
    pub sites: Vec<Site>,
    /// Sites whose live bytes keep rising after the warm-up, largest first;
    /// a site whose allocations are tensors of a growing tensor site of the
    /// same process and label (`tensor_growth`) is left out: one line, one
    /// verdict.
    pub growth: Vec<Growth>,
    /// Every failed allocation, in time order.
    pub ooms: Vec<Oom>,
    /// The inside of framework allocators (PyTorch's caching allocator),
    /// per process and device, when the trace saw inside one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frameworks: Vec<FrameworkView>,
    /// Where the tensors of those allocators were allocated, grouped by the
    /// innermost frame of the program's own code; sorted by bytes at the
    /// allocated peak, then total bytes. `FrameworkView`'s and
    /// `tensor_growth`'s site ids index this list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_sites: Vec<TensorSite>,
    /// Tensor sites whose live bytes keep rising after the warm-up (the
    /// leak of a Python program), largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_growth: Vec<Growth>,
    /// JAX's and CuPy's pools as the frameworks count them (read in the
    /// program), per process and device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub framework_pools: Vec<FrameworkPool>,
    /// What to change, each with the evidence for it (`remedies.rs`),
    /// errors first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remedies: Vec<Remedy>,
    /// The steps of each process that marked them (training iterations).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::ProcessSteps>,
    /// The NVTX ranges and marks of each process that made any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<crate::ProcessRanges>,
}

/// A finding turned into the change a user would make (`change`), with
/// the figures from the trace that justify it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Remedy {
    /// A request that reached the program as an error was larger than the
    /// whole device: no setting makes it fit; the work must come in
    /// smaller pieces (or be spread over devices).
    LargerThanDevice {
        pid: u32,
        device: u32,
        requested_bytes: u64,
        device_total_bytes: u64,
        site: String,
    },
    /// PyTorch refused a request because of its memory fraction
    /// (`torch.cuda.set_per_process_memory_fraction`): `needed_fraction`
    /// would have let it through (what was allocated plus the request).
    MemoryFraction {
        pid: u32,
        device: u32,
        fraction: f64,
        limit_bytes: u64,
        requested_bytes: u64,
        /// False: `requested_bytes` is the least the request could have
        /// been (the cudaMallocAsync backend's error), and so is
        /// `needed_fraction`.
        request_seen: bool,
        allocated_bytes: u64,
        device_total_bytes: u64,
        device_free_bytes: u64,
        needed_fraction: f64,
        change: String,
        site: Option<String>,
    },
    /// PyTorch ran out with enough free inside its segments but no block
    /// large enough: expandable segments map pages where they are needed.
    ExpandableSegments {
        pid: u32,
        device: u32,
        requested_bytes: u64,
        free_in_segments: u64,
        largest_free_block: u64,
        change: String,
        site: Option<String>,
    },
    /// A line whose memory keeps growing (`tensors`: tensors inside a
    /// framework's allocator; else CUDA allocations): the rise through the
    /// steady part, the most it held at once, and what it still held when
    /// its process ended (0 when shutdown freed it).
    GrowingLine {
        pid: u32,
        site: String,
        tensors: bool,
        growth_bytes: u64,
        held_most_bytes: u64,
        held_at_end_bytes: u64,
    },
    /// A line whose memory grows step after step, in a process that marked
    /// steps (`ProcessSteps::growth`: judged over the steps after the
    /// warm-up, which replaces the growth over time for that process): what
    /// it kept per step on average, over how many steps.
    GrowingPerStep {
        pid: u32,
        site: String,
        tensors: bool,
        bytes_per_step: u64,
        from_step: u64,
        steps: u64,
    },
    /// Several processes held memory on one device at the same time and
    /// together came close to its memory, or one ran out of a request the
    /// others' memory would have made room for.
    SharedDevice {
        device: u32,
        /// (pid, its peak bytes)
        processes: Vec<(u32, u64)>,
        combined_peak_bytes: u64,
        device_total_bytes: u64,
        ran_out: bool,
        change: String,
    },
    /// The caching allocator kept segments holding no tensor when it took
    /// a new segment for its peak: `torch.cuda.empty_cache()` before that
    /// request would have given them back, and its reserved peak (what
    /// nvidia-smi shows of it) would have been lower by as much.
    EmptyCache {
        pid: u32,
        device: u32,
        reserved_peak_bytes: u64,
        /// Allocated (tensors) once that request was served.
        allocated_bytes: u64,
        /// Segments holding no tensor just before, and their count.
        idle_segment_bytes: u64,
        idle_segments: u64,
        time_ns: u64,
        /// The line whose request took the new segment.
        site: Option<String>,
        change: String,
    },
    /// Tensors of one role (docs/design.md, "Roles") were a large share
    /// of a view's allocated peak: the change that shrinks that role, and
    /// what it would save there by these figures. Parameters stand for
    /// parameters and gradients together (`bytes` is both).
    Role {
        pid: u32,
        device: u32,
        allocated_peak_bytes: u64,
        role: crate::Role,
        bytes: u64,
        share: f64,
        /// Every role's bytes at that peak (parameters are what optimizer
        /// state and a KV cache are measured against).
        roles: crate::RoleBytes,
        /// The largest tensor sites of the role at the peak, with their
        /// bytes.
        sites: Vec<(String, u64)>,
        change: String,
        /// What the change saves at the peak: half the activations for
        /// half the micro-batch, three quarters of 32-bit optimizer state
        /// for an 8-bit optimizer, half of float32 parameters and
        /// gradients in bfloat16, half a 16-bit KV cache in 8 bits, the
        /// largest line's temporaries done in place.
        saving_bytes: u64,
    },
    /// JAX/XLA took this share of the device at start for its own pool,
    /// and the device then ran short: an allocation failed on it, or other
    /// processes used it while the pool was held. (A run where neither
    /// happened gets no remedy: its report states the pool as a fact.)
    JaxPreallocation {
        pids: Vec<u32>,
        device: u32,
        preallocated_bytes: u64,
        device_total_bytes: u64,
        fraction: f64,
        /// Allocations that failed on the device (CUDA's and frameworks').
        failed_allocations: u64,
        /// Other processes seen on the device while JAX's ran: of the run,
        /// or listed by NVML.
        other_processes: u32,
        /// The most JAX's arrays used of it, by JAX's own count, when the
        /// trace has its readings.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arrays_peak_bytes: Option<u64>,
        change: String,
    },
}

impl Analysis {
    /// A site's label by id ("site N" for an id not in the list).
    pub fn site_label(&self, id: u32) -> String {
        self.sites
            .get(id as usize)
            .map_or_else(|| format!("site {id}"), |s| s.label.clone())
    }

    /// Sites that leaked, most leaked bytes first.
    pub fn leaking_sites(&self) -> Vec<&Site> {
        let mut v: Vec<&Site> = self.sites.iter().filter(|s| s.leaked_bytes > 0).collect();
        v.sort_by(|x, y| y.leaked_bytes.cmp(&x.leaked_bytes).then(x.id.cmp(&y.id)));
        v
    }

    /// Every reason a part of the run was not profiled, with its process,
    /// in process order; empty when everything was.
    pub fn not_profiled(&self) -> Vec<UnprofiledPart> {
        self.processes
            .iter()
            .flat_map(|p| p.not_profiled.iter().map(move |r| p.unprofiled(r.clone())))
            .collect()
    }

    /// Processes whose tensors no view shows, with the collector's reason:
    /// PyTorch's caching allocator was found in them but not seen from the
    /// inside, and no view was made another way. A budget on tensors would
    /// read 0 there.
    pub fn tensors_unseen(&self) -> impl Iterator<Item = (&ProcessReport, &str)> {
        self.processes
            .iter()
            .filter(|p| !self.frameworks.iter().any(|v| v.pid == p.pid))
            .filter_map(|p| Some((p, p.allocator_not_attached.as_deref()?)))
    }

    /// `tensors_unseen` as the reasons `check` and `diff` give, one per
    /// process.
    pub fn tensors_unseen_parts(&self) -> Vec<UnprofiledPart> {
        self.tensors_unseen()
            .map(|(p, why)| {
                p.unprofiled(NotProfiled::TensorsUnseen {
                    detail: why.to_string(),
                })
            })
            .collect()
    }

    /// Bytes never freed, over every process.
    pub fn leaked_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.at_exit.leaked_bytes).sum()
    }

    /// Sites of `category` that still held memory when their process
    /// ended, most bytes first.
    pub fn sites_held_at_exit(&self, category: Category) -> Vec<&Site> {
        let mut v: Vec<&Site> = self
            .sites
            .iter()
            .filter(|s| s.category == category && s.held_at_exit_bytes > 0)
            .collect();
        v.sort_by(|x, y| {
            y.held_at_exit_bytes
                .cmp(&x.held_at_exit_bytes)
                .then(x.id.cmp(&y.id))
        });
        v
    }

    /// Bytes CUDA libraries held at exit (handles, workspaces, graph
    /// pools), over every process.
    pub fn library_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.at_exit.library_bytes).sum()
    }

    /// Bytes of module globals at exit, over every process.
    pub fn module_globals_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.at_exit.runtime_bytes).sum()
    }

    /// Bytes a caching allocator still held at exit, over every process.
    pub fn cached_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.at_exit.cached_bytes).sum()
    }

    /// Out-of-memory errors the program saw: failed allocations not
    /// recovered by a retry, with those a framework raised as its own error
    /// (PyTorch's `OutOfMemoryError`) counted once.
    pub fn ooms_reached_program(&self) -> u64 {
        let driver = self
            .ooms
            .iter()
            .filter(|o| o.reached_program() && o.raised_as.is_none())
            .count();
        let framework: usize = self.frameworks.iter().map(|f| f.ooms.len()).sum();
        (driver + framework) as u64
    }

    /// What was live at a device's peak, taken apart as far as the trace
    /// sees, largest first: the sites outside framework allocators seen
    /// from the inside, and inside those, the tensors and the free space of
    /// their segments. The parts add up to the peak.
    pub fn peak_parts(&self, d: &DeviceReport) -> Vec<PeakPart> {
        let mut parts: Vec<PeakPart> = d.peak_sites.iter().cloned().map(PeakPart::Site).collect();
        for f in &d.frameworks_at_peak {
            // The tensors' most while the device stood at its peak; the
            // segments did not change in that time.
            let tensors: u64 = f.tensor_sites.iter().map(|s| s.bytes).sum();
            parts.extend(f.tensor_sites.iter().map(|s| PeakPart::Tensors {
                pid: f.pid,
                site: s.clone(),
            }));
            parts.push(PeakPart::FreeInSegments {
                pid: f.pid,
                allocator: f.allocator.clone(),
                bytes: f.segment_bytes.saturating_sub(tensors),
            });
        }
        parts.sort_by_key(|p| std::cmp::Reverse(p.bytes()));
        parts
    }

    /// A part of a peak as a list names it: the site's label, "tensors at
    /// LABEL (pid N)", or "free inside the segments of ALLOCATOR (pid N):
    /// its cache".
    pub fn peak_part_label(&self, p: &PeakPart) -> String {
        match p {
            PeakPart::Site(s) => self.site_label(s.site),
            PeakPart::Tensors { pid, site } => {
                format!(
                    "tensors at {} (pid {pid})",
                    self.tensor_site_label(site.site)
                )
            }
            PeakPart::FreeInSegments { pid, allocator, .. } => {
                format!("free inside the segments of {allocator} (pid {pid}): its cache")
            }
        }
    }

    /// A tensor site's label by id.
    pub fn tensor_site_label(&self, id: u32) -> String {
        self.tensor_sites
            .get(id as usize)
            .map_or_else(|| format!("tensor site {id}"), |s| s.label.clone())
    }

    /// The label of a tensor site (`tensors`) or a CUDA allocation site:
    /// for figures that are either, such as what steps kept.
    pub fn site_or_tensor_label(&self, id: u32, tensors: bool) -> String {
        if tensors {
            self.tensor_site_label(id)
        } else {
            self.site_label(id)
        }
    }

    /// Every growing site, CUDA allocations and tensors together, largest
    /// first: (growth, label, whether it is a tensor site).
    pub fn growing(&self) -> Vec<(&Growth, String, bool)> {
        let mut v: Vec<(&Growth, String, bool)> = self
            .growth
            .iter()
            .map(|g| (g, self.site_label(g.site), false))
            .chain(
                self.tensor_growth
                    .iter()
                    .map(|g| (g, self.tensor_site_label(g.site), true)),
            )
            .collect();
        v.sort_by(|x, y| {
            y.0.growth_bytes
                .cmp(&x.0.growth_bytes)
                .then(x.2.cmp(&y.2))
                .then(x.0.site.cmp(&y.0.site))
        });
        v
    }
}

/// One part of what was live at a device's peak (`Analysis::peak_parts`).
#[derive(Clone, Debug, PartialEq)]
pub enum PeakPart {
    /// A site's allocations (`site` indexes `Analysis.sites`).
    Site(SiteBytes),
    /// Tensors of a framework allocator seen from the inside, inside its
    /// segments (`site` indexes `Analysis.tensor_sites`).
    Tensors { pid: u32, site: SiteBytes },
    /// What that allocator's segments held free (its cache, and the free
    /// space between tensors).
    FreeInSegments {
        pid: u32,
        allocator: String,
        bytes: u64,
    },
}

impl PeakPart {
    pub fn bytes(&self) -> u64 {
        match self {
            PeakPart::Site(s) | PeakPart::Tensors { site: s, .. } => s.bytes,
            PeakPart::FreeInSegments { bytes, .. } => *bytes,
        }
    }

    /// Allocations (sites) or tensors in it; 0 for free space.
    pub fn count(&self) -> u64 {
        match self {
            PeakPart::Site(s) | PeakPart::Tensors { site: s, .. } => s.count,
            PeakPart::FreeInSegments { .. } => 0,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct InputSummary {
    /// File names as given (no directories), in order.
    pub files: Vec<String>,
    pub bytes: u64,
    pub chunks: u64,
    pub records: u64,
    /// Allocation and free events (device-side records).
    pub memory_events: u64,
    pub api_calls: u64,
    pub kernels: u64,
    /// What was damaged, cut short or lost.
    #[serde(deserialize_with = "typed_or_worded")]
    pub warnings: Vec<InputWarning>,
    /// Records CUPTI or the collector reported as lost while recording.
    pub dropped_records: u64,
    /// Events that arrived later than the reordering window allowed; they
    /// were applied at the time already reached.
    pub late_events: u64,
}

/// The time axis shared by every curve: `buckets` buckets of `bucket_ns`
/// starting at `start_ns`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Timeline {
    pub start_ns: u64,
    pub end_ns: u64,
    pub bucket_ns: u64,
    pub buckets: usize,
}

/// One point of a curve: the highest value during the bucket and the value
/// at its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub max: u64,
    pub last: u64,
}

/// One site's live bytes on a device at the end of each bucket.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SiteCurve {
    pub site: u32,
    pub live: Vec<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KindCurve {
    /// "device", "pinned host", "managed", "array", "static (modules)", …
    pub kind: String,
    pub points: Vec<Point>,
    pub peak: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceReport {
    pub device: u32,
    pub name: String,
    pub total_memory: u64,
    /// Highest live total (all kinds, all processes) and when (first time).
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// Peak of the device's own memory: `peak_bytes` less host memory
    /// (pinned, pageable), which lives in the host's RAM; managed memory
    /// counts in full (CUPTI does not say where its pages are). What
    /// `check --max-peak` judges.
    pub device_memory_peak_bytes: u64,
    pub device_memory_peak_time_ns: u64,
    /// Highest pinned host memory live at once in this device's contexts:
    /// what `check --max-pinned` judges.
    pub pinned_host_peak_bytes: u64,
    /// Live bytes per kind at the peak.
    pub peak_by_kind: Vec<KindBytes>,
    /// What was live at the peak, by site (site ids index `Analysis.sites`),
    /// less the segments of framework allocators seen from the inside:
    /// those are in `frameworks_at_peak`, taken apart into the tensors they
    /// held (a segment's stack is only the request that first took it).
    pub peak_sites: Vec<SiteBytes>,
    /// The segments of each framework allocator seen from the inside
    /// (PyTorch's caching allocator) live at the peak, with what they held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frameworks_at_peak: Vec<FrameworkAtPeak>,
    /// Kernels running on this device at the peak instant (traced `timed`),
    /// in start order.
    pub kernels_at_peak: Vec<KernelRef>,
    /// Traced as launches (`record --kernels launches`, the default): the
    /// last kernel launched on each stream before the peak, in launch order.
    pub kernels_launched_before_peak: Vec<KernelRef>,
    /// The first kernel to start (or be launched) on this device after the
    /// peak.
    pub next_kernel_after_peak: Option<KernelRef>,
    /// Whether kernels were traced in every process on this device.
    pub kernels_traced: bool,
    /// Whether every process on this device traced kernels `timed`: their
    /// runs on the device, not their launches.
    pub kernels_timed: bool,
    /// Live bytes, all kinds together.
    pub live: Vec<Point>,
    pub live_by_kind: Vec<KindCurve>,
    /// Memory allocators hold from the driver: stream-ordered pools' reserved
    /// size plus everything allocated outside pools.
    pub reserved: Vec<Point>,
    pub reserved_peak: u64,
    pub fragmentation: Fragmentation,
    /// With a framework allocator on this device (`Analysis::frameworks`):
    /// what was live at the peak outside its segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_frameworks: Option<OutsideFrameworks>,
    /// What `nvidia-smi` showed for the device, when the collector could
    /// read NVML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_view: Option<DeviceView>,
    /// The largest sites at the peak (at most eight), each with its live
    /// bytes at the end of each bucket: the bands of the report's timeline.
    pub timeline_sites: Vec<SiteCurve>,
    /// Kernels started in each bucket of the run's time axis.
    pub kernels_per_bucket: Vec<u32>,
}

/// A framework allocator's segments at a device's peak, taken apart.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrameworkAtPeak {
    /// "PyTorch caching allocator".
    pub allocator: String,
    pub pid: u32,
    /// Its segments live at the device's peak (driver allocations), and
    /// how many.
    pub segment_bytes: u64,
    pub segments: u64,
    /// The most its tensors held in them while the device stood at that
    /// peak (from the allocation that reached it to the next free on the
    /// device), and when; the rest of the segments was free inside the
    /// allocator (its cache).
    pub tensor_bytes: u64,
    pub tensor_time_ns: u64,
    /// Those tensors by tensor site (ids index `Analysis.tensor_sites`),
    /// largest first.
    pub tensor_sites: Vec<SiteBytes>,
}

/// Device memory live at the peak that no framework allocator accounts
/// for: library workspaces (cuBLAS, cuDNN), CUDA graphs, other allocators,
/// module globals. (The CUDA context itself is not an allocation the trace
/// sees.)
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OutsideFrameworks {
    pub bytes: u64,
    /// By site (ids index `Analysis.sites`), largest first.
    pub sites: Vec<SiteBytes>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KindBytes {
    pub kind: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteBytes {
    pub site: u32,
    pub bytes: u64,
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRef {
    pub name: String,
    pub pid: u32,
    /// Its run on the device when `timed`; else the moment the program
    /// launched it (`start_ns` = `end_ns`).
    pub start_ns: u64,
    pub end_ns: u64,
    pub stream: u32,
    pub timed: bool,
}

/// External fragmentation inside the reserved regions whose sub-allocations
/// the trace sees: F = 1 − largest free extent / total free.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Fragmentation {
    /// Regions that were seen: stream-ordered pools and VMM reservations.
    pub regions: Vec<RegionSummary>,
    /// F at the end of each bucket (per mille, 0..=1000) while any region
    /// held free space; `None` where no region existed.
    pub curve: Vec<Option<u16>>,
    /// Largest free extent at the end of each bucket, bytes.
    pub largest_free: Vec<u64>,
    pub worst: Option<FragmentationAt>,
    /// What the trace cannot see (e.g. PyTorch's caching allocator
    /// sub-allocates inside segments the trace only sees whole).
    #[serde(deserialize_with = "typed_or_worded")]
    pub blind_spots: Vec<BlindSpot>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FragmentationAt {
    pub time_ns: u64,
    pub fragmentation: f64,
    pub free_bytes: u64,
    pub largest_free_bytes: u64,
    /// A framework pool's: of `free_bytes`, those in segments that held no
    /// tensor (cache the allocator gives back before a request fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_in_idle_segments_bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RegionSummary {
    pub kind: RegionKind,
    pub pid: u32,
    pub address: u64,
    pub max_size: u64,
    /// True when the layout is inferred (pools: CUPTI reports their size,
    /// not which address ranges back them).
    pub estimated: bool,
    /// This region's own most fragmented moment (none when it never had
    /// free space): the device's figure is the worst of these.
    pub worst: Option<FragmentationAt>,
    /// Its own F(t), per mille, on the run's time axis (`None` where it
    /// did not exist or was not sampled), and its largest free extent.
    pub curve: Vec<Option<u16>>,
    pub largest_free: Vec<Option<u64>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessReport {
    pub pid: u32,
    /// The devices it allocated on.
    pub devices: Vec<u32>,
    pub ppid: u32,
    pub exe: String,
    pub cmdline: Vec<String>,
    pub hostname: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The collector shut down cleanly (false: killed, crashed, cut short).
    pub clean_exit: bool,
    pub kernels_traced: bool,
    /// Kernels traced as their runs on the device (`record --kernels
    /// timed`), not as launches.
    pub kernels_timed: bool,
    pub stacks_captured: bool,
    pub allocations: u64,
    pub frees: u64,
    pub failed_allocations: u64,
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    pub live: Vec<Point>,
    /// What was still allocated when the process ended, split by what it is.
    pub at_exit: AtExit,
    /// How the trace saw its allocations.
    pub allocator_view: AllocatorView,
    pub dropped_records: u64,
    /// The collector's messages, and whether it ended cleanly.
    #[serde(deserialize_with = "typed_or_worded")]
    pub messages: Vec<ProcessMessage>,
    /// Why this process's record is incomplete, one reason each: the
    /// collector did not profile it (another CUPTI client, CUPTI missing or
    /// of another version, an internal error), records were dropped, or it
    /// was cut short (killed, crashed, or still running when the trace was
    /// written). Empty when it was profiled from start to end. `check`
    /// fails on any of these unless told they are acceptable.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "typed_or_worded"
    )]
    pub not_profiled: Vec<NotProfiled>,
    /// Why PyTorch's caching allocator, found in this process, was not seen
    /// from the inside (the collector's words), when it was not. Its
    /// cudaMallocAsync backend still gets a view, made from CUDA's
    /// allocations (`Analysis::frameworks`); anything else has none, and
    /// budgets on tensors cannot be judged for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator_not_attached: Option<String>,
    /// The most of other processes' memory it had mapped at once (opened
    /// through CUDA IPC): counted in the process that allocated it, not in
    /// this one's figures.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ipc_mapped_peak_bytes: u64,
    /// Only a part of its run was recorded (`record --steps`,
    /// `--capture-range`, `--delay`/`--duration`, `--window-signal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<RecordedWindow>,
}

/// The part of a process's run that was recorded. Its figures are those of
/// a whole recording over the same span: what was live when it opened was
/// written then, with its sites. What was live when it closed is counted as
/// held at the end (`at_exit`), though the process may have freed it later.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordedWindow {
    /// What it is, in words ("steps 3 to 5").
    pub what: String,
    /// When it opened and closed (ns from the trace's start); no close: it
    /// ran to the process's end.
    pub opened_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_ns: Option<u64>,
    /// CUDA memory live when it opened.
    pub live_at_open_bytes: u64,
    /// The tensors live then (a framework allocator seen from the inside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors_at_open_bytes: Option<u64>,
}

impl ProcessReport {
    /// `reason` with this process named.
    pub fn unprofiled(&self, reason: NotProfiled) -> UnprofiledPart {
        UnprofiledPart {
            pid: self.pid,
            program: self.program().to_string(),
            reason,
        }
    }

    /// The executable's file name ("?" when unknown).
    pub fn program(&self) -> &str {
        self.exe
            .rsplit('/')
            .next()
            .filter(|e| !e.is_empty())
            .unwrap_or("?")
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Who holds memory from a site when nothing frees it: memory still live
/// at exit is split by this into its four kinds (docs/design.md), each with its
/// own figure and budget. Serialized as the strings the JSON always had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Category {
    /// The program's own allocations (or a framework's on its behalf):
    /// live at exit, they are leaked.
    #[serde(rename = "program")]
    Program,
    /// Segments of a caching allocator (PyTorch's, CuPy's, XLA's BFC):
    /// free inside it at exit is cached, not leaked.
    #[serde(rename = "allocator cache")]
    AllocatorCache,
    /// Allocated from inside a CUDA library (cuBLAS, cuDNN, NCCL, cuFFT,
    /// …: the stack passes through it) or a CUDA graph's memory pool:
    /// handles, workspaces and pools kept for the process's life.
    #[serde(rename = "library")]
    Library,
    /// Module globals (`__device__` / `__managed__` variables), owned by
    /// the CUDA runtime.
    #[serde(rename = "runtime")]
    Runtime,
    /// CUPTI's or the collector's own memory.
    #[serde(rename = "profiler")]
    Profiler,
    /// Memory seen without the call that allocated it.
    #[serde(rename = "unknown")]
    Unknown,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Program => "program",
            Category::AllocatorCache => "allocator cache",
            Category::Library => "library",
            Category::Runtime => "runtime",
            Category::Profiler => "profiler",
            Category::Unknown => "unknown",
        }
    }

    /// Whether memory of this category still live at exit is a leak.
    pub fn leaks(self) -> bool {
        matches!(self, Category::Program | Category::Unknown)
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Memory still live when a process ended, in the four kinds of docs/design.md
/// (plus the profiler's own).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AtExit {
    /// Allocated by the program and never freed (compute-sanitizer's leaks).
    pub leaked_bytes: u64,
    pub leaked_count: u64,
    /// Held by a caching allocator (PyTorch, CuPy, XLA) at exit: not a leak.
    pub cached_bytes: u64,
    pub cached_count: u64,
    /// Module globals (`__device__` / `__managed__` variables), owned by
    /// the CUDA runtime for the process's lifetime.
    pub runtime_bytes: u64,
    pub runtime_count: u64,
    /// Held by CUDA libraries for the process's life (`Category::Library`:
    /// cuBLAS/cuDNN handles and workspaces, NCCL buffers, graph pools).
    pub library_bytes: u64,
    pub library_count: u64,
    /// Allocations by CUPTI or the collector.
    pub profiler_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Site {
    pub id: u32,
    /// The first frame outside the CUDA driver and runtime, as text.
    pub label: String,
    /// Who holds its memory when nothing frees it (`Category`).
    pub category: Category,
    /// The caching allocator whose segments these are ("PyTorch's caching
    /// allocator", "CuPy's memory pool", "XLA's BFC allocator", …), known
    /// from its frames in the stacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<String>,
    /// What its stacks went through on their way to CUDA, one entry per
    /// distinct path (`library_entry` of each stack, whole): for memory a
    /// library holds, the library's entry point ("cublasCreate_v2
    /// (libcublas.so.13)").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub via: Vec<String>,
    /// The frames its stacks share, innermost first: each stack's from the
    /// frame its label names outwards, and inside that as far as they all
    /// agree.
    pub frames: Vec<FrameText>,
    pub truncated: bool,
    pub pids: Vec<u32>,
    pub kinds: Vec<String>,
    pub count: u64,
    pub total_bytes: u64,
    /// Sum over devices of what this site held at that device's peak.
    pub live_at_peak: u64,
    /// Highest live bytes of this site alone.
    pub max_live: u64,
    pub leaked_bytes: u64,
    pub leaked_count: u64,
    pub cached_at_exit_bytes: u64,
    /// What it still held when its process ended, whatever its category
    /// (leaked, cached, held by a library, module globals).
    pub held_at_exit_bytes: u64,
    pub held_at_exit_count: u64,
    /// Allocations freed before any other allocation of the process.
    pub temporaries: u64,
    pub failed: u64,
}

/// The innermost named native frame outside CUDA itself, as "function
/// (module)": for memory a library holds (cuBLAS's workspace), the
/// library's entry point, e.g. "cublasCreate_v2 (libcublas.so.13)".
pub fn library_entry(frames: &[FrameText]) -> Option<String> {
    let f = frames.iter().find(|f| {
        let m = f.module.as_str();
        f.resolved
            && !f.python
            && f.function != "??"
            // The CUDA runtime linked into the program itself.
            && !f.function.starts_with("libcudart_static")
            && !f
                .function
                .strip_prefix("cuda")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
            && !(m.starts_with("libcuda.")
                || m.starts_with("libcudart")
                || m.starts_with("libcupti"))
            && !m.starts_with("libgmem_prof")
    })?;
    Some(format!(
        "{} ({})",
        without_parameters(&f.function),
        f.module
    ))
}

/// What a site's memory came through (`Site::via`), less the entries its
/// label names already, as one text; `None` when nothing is left.
pub fn library_via(label: &str, via: &[String]) -> Option<String> {
    let left: Vec<&str> = via
        .iter()
        .map(String::as_str)
        .filter(|entry| {
            let function = entry.split(' ').next().unwrap_or(entry);
            !label.starts_with(function)
        })
        .collect();
    (!left.is_empty()).then(|| left.join(", "))
}

/// A demangled C++ function's name without its parameter list:
/// `ns::(anonymous namespace)::f(int)` → `ns::(anonymous namespace)::f`.
pub fn without_parameters(function: &str) -> &str {
    let mut rest = function;
    let mut at = 0;
    while let Some(i) = rest.find('(') {
        let after = &rest[i..];
        if after.starts_with("(anonymous namespace)") {
            let skip = i + "(anonymous namespace)".len();
            at += skip;
            rest = &rest[skip..];
        } else {
            return &function[..at + i];
        }
    }
    function
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameText {
    /// Demangled function name, or "??" when unresolved.
    pub function: String,
    /// file:line, empty when unknown.
    pub location: String,
    /// Module file name; with `offset` when the frame is unresolved.
    pub module: String,
    pub offset: u64,
    pub resolved: bool,
    /// A Python frame (`function` is its qualified name, `location` the
    /// `.py` file and line).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub python: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Growth {
    pub site: u32,
    pub pid: u32,
    /// Live bytes of the site at the end of the warm-up and near the end.
    pub from_bytes: u64,
    pub to_bytes: u64,
    pub growth_bytes: u64,
    /// The site's live bytes at the end of each bucket.
    pub curve: Vec<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Oom {
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub device: u32,
    pub function: String,
    pub requested_bytes: u64,
    /// The CUDA error code (2 = out of memory).
    pub result: u32,
    pub site: u32,
    /// What became of the request (`OomOutcome`).
    pub outcome: OomOutcome,
    pub device_live_bytes: u64,
    pub device_total_bytes: u64,
    /// Largest free extent in the pools/VMM reservations of the device, when
    /// any region is visible.
    pub largest_free_extent: Option<u64>,
    /// What was live on the device at that instant, by site, largest first.
    pub live_by_site: Vec<SiteBytes>,
    /// The error the program saw when a framework turned this failure into
    /// its own (its entry in `FrameworkView::ooms` has the details).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raised_as: Option<String>,
    /// The device as `nvidia-smi` showed it right after the failure (the
    /// collector samples NVML then), when it could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_view: Option<DeviceViewMoment>,
    /// The step of its process it happened in (`ProcessSteps`; one past
    /// the last finished step when it came after it), when the process
    /// marked steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The program's ranges open when it happened, outermost first
    /// (`ProcessRanges::open_at`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<String>,
}

/// What `nvidia-smi` showed for a device (NVML, sampled by the collector at
/// its flush ticks, right after failed allocations and at exit), beside
/// what the trace tracked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceView {
    pub samples: u64,
    /// Used on the device by everyone at the end of each bucket where it
    /// was sampled (`None` before the first sample).
    pub used_curve: Vec<Option<u64>>,
    /// The sample where `nvidia-smi` showed the most used.
    pub highest: DeviceViewMoment,
    /// The last sample (normally taken as a process of the run ended).
    pub last: DeviceViewMoment,
}

vocabulary! {
    /// Why the collector sampled the device's own view (`DeviceViewMoment::reason`).
    pub enum SampleReason {
        /// Its periodic flush.
        FlushTick => "flush tick",
        /// Right after a failed allocation.
        FailedAllocation => "failed allocation",
        /// The process's exit.
        Exit => "exit",
    }
}

/// One sample of the device's own view, taken apart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceViewMoment {
    pub time_ns: u64,
    /// The process whose collector took the sample.
    pub pid: u32,
    /// Why the collector took it.
    pub reason: SampleReason,
    pub total_bytes: u64,
    /// Used on the device (`nvidia-smi`'s Memory-Usage).
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// What the driver keeps for itself, in neither used nor free (0 when
    /// the driver does not say).
    pub driver_reserved_bytes: u64,
    /// Device memory the trace accounts for then (the run's processes):
    /// live allocations, and what stream-ordered pools held beyond them
    /// (`pools_unused_bytes`).
    pub tracked_bytes: u64,
    /// Of `tracked_bytes`, what stream-ordered pools (cudaMallocAsync's,
    /// PyTorch's cudaMallocAsync backend's) held from the driver with no
    /// live allocation in it: their cache. (A caching allocator's segments,
    /// PyTorch's or CuPy's, are allocations the trace sees whole, so their
    /// cache is among the live allocations.)
    pub pools_unused_bytes: u64,
    /// Of `tracked_bytes`, what framework allocators seen from the inside
    /// (PyTorch's caching allocator) held in their segments with no tensor
    /// in it: their cache, which `memory_allocated` leaves out and
    /// nvidia-smi counts as used.
    pub framework_free_bytes: u64,
    /// What NVML charged to the run's processes; `None` when it listed none
    /// of them (in a container NVML may list the host's pids).
    pub run_processes_bytes: Option<u64>,
    /// The run's processes' memory beyond what the trace tracked: their
    /// CUDA contexts (code, stacks, the driver's per-context state) and
    /// what no watched call allocated. `None` as above.
    pub context_and_untracked_bytes: Option<u64>,
    /// What NVML charged to every other process on the device.
    pub other_processes_bytes: u64,
    pub other_processes: u32,
    /// Used, less every process's share: what NVML charges to no process
    /// (the driver's own reservations). `None` as above.
    pub unattributed_bytes: Option<u64>,
}

impl Oom {
    /// The last attempt failed: the program saw the error.
    pub fn reached_program(&self) -> bool {
        self.outcome == OomOutcome::ReachedProgram
    }
}

/// What became of a failed allocation request. Serialized as the strings
/// the JSON always had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OomOutcome {
    /// The same request succeeded on a retry (the allocator freed its
    /// cache and asked again).
    #[serde(rename = "recovered")]
    Recovered,
    /// It failed again on a retry.
    #[serde(rename = "retried")]
    Retried,
    /// The last attempt failed: the program saw the error.
    #[serde(rename = "reached program")]
    ReachedProgram,
}

impl OomOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            OomOutcome::Recovered => "recovered",
            OomOutcome::Retried => "retried",
            OomOutcome::ReachedProgram => "reached program",
        }
    }
}

impl std::fmt::Display for OomOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of a region whose free space is fragmented. Serialized as the
/// strings the JSON always had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RegionKind {
    /// A stream-ordered memory pool (cudaMallocAsync, cudaMallocFromPoolAsync).
    #[serde(rename = "pool")]
    Pool,
    /// A virtual address range reserved with cuMemAddressReserve.
    #[serde(rename = "vmm reservation")]
    VmmReservation,
}

impl RegionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RegionKind::Pool => "pool",
            RegionKind::VmmReservation => "vmm reservation",
        }
    }
}

impl std::fmt::Display for RegionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

vocabulary! {
    /// How the trace saw a process's allocations
    /// (`ProcessReport::allocator_view`).
    pub enum AllocatorView {
        /// Each allocation is the program's own CUDA call.
        Direct => "direct",
        /// PyTorch's default caching allocator: the trace sees its segments,
        /// not the tensors inside them (unless seen from the inside).
        Segments => "segments",
        /// An allocator that calls CUDA per tensor.
        Tensors => "tensors",
    }
}

vocabulary! {
    /// Where a framework allocator's reserved memory is
    /// (`FrameworkView::reserved_in`).
    pub enum ReservedIn {
        /// The caching allocator's segments, with the blocks inside them.
        Segments => "segments",
        /// The cudaMallocAsync backend: a stream-ordered pool whose inside
        /// CUDA does not show, so no segments, pools or fragmentation
        /// figures.
        CudaPool => "CUDA pool",
    }
}

vocabulary! {
    /// What refused a framework allocator's request (`FrameworkOom::limit`).
    pub enum OomLimit {
        /// `set_per_process_memory_fraction`'s share of the device.
        MemoryFraction => "memory fraction",
        /// The device had no more to give.
        DeviceFull => "device full",
        /// The allocator's report of the error was not seen.
        Unknown => "unknown",
    }
}

/// What a framework allocator did inside the memory it holds from the
/// driver, in one process on one device: tensors (blocks) inside segments.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrameworkView {
    /// "PyTorch caching allocator".
    pub allocator: String,
    pub pid: u32,
    pub device: u32,
    /// The allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`).
    pub settings: String,
    /// Where its reserved memory is.
    pub reserved_in: ReservedIn,
    /// Bytes of live tensors (PyTorch's `memory_allocated`): blocks from
    /// their allocation until the program frees them.
    pub allocated: Vec<Point>,
    /// Bytes of the allocator's segments (PyTorch's `memory_reserved`).
    pub reserved: Vec<Point>,
    pub allocated_peak: u64,
    pub allocated_peak_time_ns: u64,
    pub reserved_at_allocated_peak: u64,
    pub reserved_peak: u64,
    pub at_reserved_peak: ReservedPeak,
    /// What was allocated at the allocated peak, by tensor site.
    pub peak_sites: Vec<SiteBytes>,
    pub tensors_allocated: u64,
    pub tensors_freed: u64,
    pub segments_allocated: u64,
    pub segments_freed: u64,
    /// Pages mapped into and unmapped from expandable segments.
    pub pages_mapped: u64,
    pub pages_unmapped: u64,
    pub at_exit: FrameworkAtExit,
    /// Fragmentation inside the segments, per pool.
    pub pools: Vec<PoolFragmentation>,
    /// The worst pool's F at the end of each bucket (per mille), `None`
    /// while no pool held free space.
    pub fragmentation: Vec<Option<u16>>,
    /// The largest free block of any pool at the end of each bucket.
    pub largest_free: Vec<u64>,
    /// The worst pool at its worst moment.
    pub worst_fragmentation: Option<PoolFragmentationAt>,
    pub segments: SegmentCheck,
    /// Each pool as it was when the program took a snapshot of the
    /// allocator (`torch.cuda.memory._snapshot()`): the same figures the
    /// snapshot's blocks give.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<PoolsAt>,
    /// Out-of-memory errors the allocator raised, in time order.
    pub ooms: Vec<FrameworkOom>,
    /// What the figures rest on that the reader should know.
    pub notes: Vec<String>,
    /// The largest tensor sites at the allocated peak (at most eight),
    /// each with its live bytes at each bucket's end: the timeline's bands.
    pub timeline_sites: Vec<SiteCurve>,
    /// Its tensors at the allocated peak by what they are (docs/design.md,
    /// "Roles").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles_at_peak: Option<RolesAtPeak>,
    /// Each role's live bytes at each bucket's end (roles that held
    /// bytes): the stacked timeline by role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline_roles: Vec<RoleCurve>,
}

/// A framework's own memory pool (JAX's, CuPy's) as the framework counts
/// it: how much of what it holds from CUDA its arrays used. CUDA, and the
/// rest of the trace, sees only the pool.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrameworkPool {
    /// "JAX (XLA's BFC allocator)", "CuPy's memory pool".
    pub framework: String,
    pub pid: u32,
    pub device: u32,
    /// Readings in the trace (one whenever the figures changed, at most
    /// every 50 ms, and one as the interpreter exited).
    pub readings: u64,
    /// The most the arrays used: the framework's own peak when it keeps
    /// one (`in_use_peak_exact`, JAX), else the highest reading (CuPy: a
    /// spike between two readings is not seen).
    pub in_use_peak: u64,
    pub in_use_peak_exact: bool,
    pub highest_reading_time_ns: u64,
    /// The most the pool held from CUDA.
    pub pool_peak: u64,
    /// The most the pool may hold, when the framework says.
    pub limit: Option<u64>,
    pub last: PoolReading,
    /// In use and held at the end of each bucket.
    pub in_use: Vec<Point>,
    pub pool: Vec<Point>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolReading {
    pub time_ns: u64,
    pub in_use: u64,
    pub pool: u64,
    /// Read as the interpreter exited (else the program ended otherwise).
    pub at_exit: bool,
}

/// The moment the allocator's segments peaked: a new segment, taken for a
/// request no cached block could hold.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReservedPeak {
    pub time_ns: u64,
    /// Allocated once the request that took the segment was served.
    pub allocated_bytes: u64,
    /// Segments of the default pools that held no tensor just before
    /// (what `torch.cuda.empty_cache()` would have given back then).
    pub idle_segment_bytes: u64,
    pub idle_segments: u64,
    /// The tensor site whose request took the new segment.
    pub site: Option<u32>,
}

/// When the process ended (or the trace did).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FrameworkAtExit {
    /// Tensors still allocated: the program's live objects (model,
    /// optimizer state), not leaks; a Python program's leak is what grows.
    /// CUDA libraries' workspaces are not among them (`library_bytes`).
    pub live_tensor_bytes: u64,
    pub live_tensors: u64,
    /// Blocks the framework's allocator handed to CUDA libraries as their
    /// workspaces (PyTorch's cuBLAS and cuBLASLt workspaces), kept for the
    /// process's life: held by libraries, not the program's tensors. Known
    /// by the tensor's stack (through the library or the framework's code
    /// that keeps its state) or, where tensors carry only Python frames,
    /// by being made on a thread right after the library allocated for
    /// itself there (`LIBRARY_WORKSPACE_NS`), and kept to the end.
    pub library_bytes: u64,
    pub library_tensors: u64,
    /// Segments still held.
    pub reserved_bytes: u64,
    /// Held by the allocator with no tensor in it: its cache.
    pub cached_bytes: u64,
}

/// One pool of the allocator: blocks of one pool never come from another
/// pool's segments, so free space is only usable within its pool.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolFragmentation {
    /// "large blocks, stream 0x0", "small blocks, stream 0x7f..",
    /// "MemPool 1 (large blocks), stream 0x0", "CUDA graph pool 2 (small
    /// blocks), stream 0x5a..".
    pub pool: String,
    pub small: bool,
    pub stream: u64,
    /// PyTorch's id of a private pool as the trace writes it (FORMAT.md: a
    /// CUDA graph's own pool in the low 32 bits, a MemPool in the high 32);
    /// 0 for the default pools.
    pub private_pool: u64,
    pub reserved_peak: u64,
    /// F = 1 − largest free block / free bytes, at the end of each bucket
    /// (per mille).
    pub curve: Vec<Option<u16>>,
    pub largest_free: Vec<u64>,
    pub worst: Option<FragmentationAt>,
}

/// Every pool's free space at one instant.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolsAt {
    pub time_ns: u64,
    pub pools: Vec<PoolExtentAt>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolExtentAt {
    pub pool: String,
    pub reserved_bytes: u64,
    pub free_bytes: u64,
    pub largest_free_bytes: u64,
    pub fragmentation: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolFragmentationAt {
    pub pool: String,
    pub at: FragmentationAt,
}

/// Whether the driver saw each segment the allocator says it holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SegmentCheck {
    /// Segment allocations and expandable-segment maps the allocator
    /// reported.
    pub reported: u64,
    /// Those backed by a driver allocation (or VMM mappings) of the same
    /// address and size in the trace.
    pub matched: u64,
    /// (address, bytes) of the others (at most 16).
    pub unmatched: Vec<(u64, u64)>,
}

/// An out-of-memory error raised by a framework's allocator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrameworkOom {
    pub time_ns: u64,
    pub pid: u32,
    pub device: u32,
    /// The request, rounded as the allocator rounds it; when not
    /// `request_seen`, the least it could have been (the limit less what
    /// was allocated, plus one byte).
    pub requested_bytes: u64,
    /// False for the cudaMallocAsync backend's error against the memory
    /// fraction, raised before any CUDA call: the request is not seen.
    pub request_seen: bool,
    /// Raised by the cudaMallocAsync backend: it has no segments, so
    /// `free_in_segments` and `largest_free_block` are 0.
    pub cuda_malloc_async: bool,
    /// What the allocator tried to obtain from the driver for it.
    pub tried_bytes: Option<u64>,
    /// What refused the request.
    pub limit: OomLimit,
    pub limit_bytes: Option<u64>,
    pub device_free_bytes: u64,
    pub device_total_bytes: u64,
    /// The allocator's figures at that instant.
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub free_in_segments: u64,
    /// The largest free block of the pools the request could come from
    /// (small or large blocks).
    pub largest_free_block: u64,
    /// The tensor site of the request.
    pub site: Option<u32>,
    /// What was allocated then, by tensor site, largest first.
    pub live_by_site: Vec<SiteBytes>,
    /// The step of its process it happened in, as `Oom::step`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The ranges open then, as `Oom::ranges`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<String>,
}

/// Where tensors were allocated: one innermost frame of the program's own
/// code (the full stack of its first allocation is kept).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TensorSite {
    pub id: u32,
    pub label: String,
    pub frames: Vec<FrameText>,
    pub truncated: bool,
    pub pids: Vec<u32>,
    pub count: u64,
    pub total_bytes: u64,
    /// Bytes it held at each view's allocated peak, summed.
    pub at_peak_bytes: u64,
    pub max_live: u64,
    /// Tensors still allocated when their process ended, CUDA libraries'
    /// workspaces left out (`library_at_exit_bytes`).
    pub live_at_exit_bytes: u64,
    pub live_at_exit_count: u64,
    /// Its blocks that were CUDA libraries' workspaces, kept to the end
    /// (`FrameworkAtExit::library_bytes`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub library_at_exit_bytes: u64,
    /// Freed before any other tensor was allocated.
    pub temporaries: u64,
    /// What most of its bytes were (docs/design.md, "Roles").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// All its tensors' bytes by role (a forward's line makes
    /// activations and temporaries alike).
    #[serde(default, skip_serializing_if = "RoleBytes::is_empty")]
    pub roles: RoleBytes,
}

#[cfg(test)]
mod tests {
    use super::without_parameters;

    #[test]
    fn parameters_go_and_anonymous_namespaces_stay() {
        assert_eq!(without_parameters("f(int, char)"), "f");
        assert_eq!(without_parameters("plain"), "plain");
        assert_eq!(
            without_parameters("ns::(anonymous namespace)::mallocAsync(void**, int)"),
            "ns::(anonymous namespace)::mallocAsync"
        );
        assert_eq!(
            without_parameters("(anonymous namespace)::g(int)"),
            "(anonymous namespace)::g"
        );
        assert_eq!(
            without_parameters("a::(anonymous namespace)::b::(anonymous namespace)::c"),
            "a::(anonymous namespace)::b::(anonymous namespace)::c"
        );
    }
}
