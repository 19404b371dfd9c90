//! The program's own ranges (NVTX: pushed or started, from C/C++,
//! `torch.cuda.nvtx` or the `nvtx` Python package): per process and per
//! range name, how high memory went inside its instances, how much it rose
//! above where each instance began, and what each instance kept (bytes live
//! at its end minus at its start) by site; for the process's CUDA
//! allocations and, seen from the inside, a framework allocator's tensors.
//!
//! A range is the process's time between its begin and its end, whatever
//! thread allocated meanwhile: PyTorch's backward pass runs on autograd's
//! threads while the main thread's "backward" range is open.

use serde::{Deserialize, Serialize};

use crate::SiteKept;

/// Range names measured per process (the most seen first); instances of
/// others are counted in `ProcessRanges::other_instances`.
pub const RANGE_NAMES: usize = 1000;
/// Instances kept one by one per process (for the timeline and Perfetto);
/// the figures of each name are over all of them.
pub const RANGES_KEPT: usize = 10_000;
/// Marks kept per process.
pub const MARKS_KEPT: usize = 10_000;

/// One process's ranges.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessRanges {
    pub pid: u32,
    /// Each name's figures, the largest rise first.
    pub ranges: Vec<RangeFigures>,
    /// Instances, in the order they began (the first `RANGES_KEPT`).
    pub instances: Vec<RangeInstance>,
    /// Ranges still open when the process's trace ended (a crash, an error
    /// unwinding past a pop, a pop missing in the program).
    pub unfinished: u64,
    /// Instances of names beyond `RANGE_NAMES`, not measured.
    pub other_instances: u64,
    /// The program's marks (the first `MARKS_KEPT`) and how many there were.
    pub marks: Vec<MarkAt>,
    pub mark_count: u64,
}

impl ProcessRanges {
    /// The ranges open at `time_ns` (of the instances kept), outermost
    /// first: "iteration", "backward (PyTorch)" for a range of a named
    /// domain.
    pub fn open_at(&self, time_ns: u64) -> Vec<String> {
        let mut open: Vec<&RangeInstance> = self
            .instances
            .iter()
            .filter(|i| i.start_ns <= time_ns && i.end_ns.is_none_or(|end| end >= time_ns))
            .collect();
        open.sort_by_key(|i| (i.start_ns, i.depth));
        open.iter()
            .filter_map(|i| self.ranges.get(i.range? as usize))
            .map(|r| match r.domain.as_str() {
                "" => r.name.clone(),
                domain => format!("{} ({domain})", r.name),
            })
            .collect()
    }
}

/// One range name's figures over its finished instances.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RangeFigures {
    pub name: String,
    /// The NVTX domain ("" for the default one).
    pub domain: String,
    pub instances: u64,
    /// Time inside its instances, summed.
    pub total_ns: u64,
    /// The process's CUDA allocations inside it.
    pub driver: RangeMemory,
    /// The same for a framework allocator's tensors (site ids are tensor
    /// sites), when the trace saw them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors: Option<RangeMemory>,
}

/// "NAME" in NVTX's default domain, else "DOMAIN: NAME".
fn full_name(domain: &str, name: &str) -> String {
    if domain.is_empty() {
        name.to_string()
    } else {
        format!("{domain}: {name}")
    }
}

impl RangeFigures {
    /// "forward", or "trainer: epoch" in a domain.
    pub fn full_name(&self) -> String {
        full_name(&self.domain, &self.name)
    }
}

impl MarkAt {
    /// As `RangeFigures::full_name`.
    pub fn full_name(&self) -> String {
        full_name(&self.domain, &self.name)
    }
}

/// Memory inside a range's instances.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RangeMemory {
    /// The highest live bytes inside any instance, and when.
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// The most an instance rose above what was live when it began: what
    /// the range takes at its highest.
    pub rise_bytes: u64,
    /// What the instances kept, summed, and the median instance's.
    pub kept_bytes: i64,
    pub kept_median: i64,
    /// What the instances kept by site, summed, the largest change first
    /// (`STEP_SITES` at most).
    pub kept_by_site: Vec<SiteKept>,
    /// Who took the rise: at the highest of the instance that rose most,
    /// what each site held above its bytes at the instance's start, the
    /// largest first (`STEP_SITES` at most). Named even when the instance
    /// freed it all before it ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rise_by_site: Vec<SiteKept>,
}

/// One instance of a range.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RangeInstance {
    /// Index into `ProcessRanges::ranges` (`None`: a name not measured).
    pub range: Option<u32>,
    pub tid: u32,
    /// Nesting on its thread (pushed ranges; 0 for started ones).
    pub depth: u32,
    pub start_ns: u64,
    /// `None`: still open when the trace ended.
    pub end_ns: Option<u64>,
    /// Live bytes (CUDA allocations) at its end minus at its start.
    pub kept_bytes: i64,
}

/// A mark the program made.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MarkAt {
    pub time_ns: u64,
    pub tid: u32,
    pub name: String,
    pub domain: String,
}
