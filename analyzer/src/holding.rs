//! What a site allocated and holds over time: the bookkeeping the sweep
//! keeps per CUDA allocation site (`SiteStats`) and per tensor site
//! (`framework::TensorSiteStats`), and the breakdown of what is held now by
//! site (a peak's, a failed request's).

use gmem_prof_traces::record::ApiFunc;

use crate::timeline::{Axis, Curve};

/// Why memory has no ordinary allocation call behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SiteClass {
    /// An allocation call of the program (its stack is the site).
    Call,
    /// `__device__`/`__managed__` globals of loaded modules.
    Static,
    /// The backing of CUDA graph memory nodes.
    GraphPool,
    /// No allocation call was seen for it.
    NoCall,
    /// Allocated by CUPTI or the collector on their own threads.
    Profiler,
}

/// What one site allocated and holds, over time: the bookkeeping that
/// CUDA allocation sites (`SiteStats`) and tensor sites
/// (`framework::TensorSiteStats`) share.
#[derive(Clone, Debug, Default)]
pub struct Holding {
    pub count: u64,
    pub total_bytes: u64,
    pub live: u64,
    pub live_count: u64,
    pub max_live: u64,
    /// Freed before the process allocated anything else (memray's
    /// meaning).
    pub temporaries: u64,
    /// What it held at its device's peak.
    pub at_peak: u64,
    pub at_peak_count: u64,
    /// What it still held when its process ended (or the trace did).
    pub at_exit: u64,
    pub at_exit_count: u64,
    pub curve: Curve,
}

impl Holding {
    /// One allocation of `bytes`, at the current bucket of `axis`.
    #[inline]
    pub fn alloc(&mut self, bytes: u64, axis: &Axis) {
        self.count += 1;
        self.total_bytes += bytes;
        self.live += bytes;
        self.live_count += 1;
        self.max_live = self.max_live.max(self.live);
        self.curve.set(axis, self.live);
    }

    /// One of its allocations, of `bytes`, freed.
    #[inline]
    pub fn release(&mut self, bytes: u64, axis: &Axis) {
        self.live = self.live.saturating_sub(bytes);
        self.live_count = self.live_count.saturating_sub(1);
        self.curve.set(axis, self.live);
    }
}

/// Figures of one raw site: one stack of one process on one device.
#[derive(Clone, Debug)]
pub struct SiteStats {
    pub proc: u32,
    pub stack: u32,
    pub device: u32,
    pub class: SiteClass,
    pub func: ApiFunc,
    pub kinds: u8,
    pub failed: u64,
    pub held: Holding,
    /// Its allocations are a framework allocator's tensors too (PyTorch's
    /// cudaMallocAsync backend), counted in its view.
    pub framework_tensors: bool,
}

/// A site's figures that say what it holds now: driver sites
/// (`SiteStats`), tensor sites in `framework`.
pub trait HoldsMemory {
    /// (live bytes, live allocations).
    fn held(&self) -> (u64, u64);
}

impl HoldsMemory for SiteStats {
    fn held(&self) -> (u64, u64) {
        (self.held.live, self.held.live_count)
    }
}

/// (site, bytes, count) of each of `ids` that holds memory now: what a
/// peak's or a failed request's breakdown by site is made of.
pub fn sites_holding<'a, S: HoldsMemory>(
    ids: &'a [u32],
    sites: &'a [S],
) -> impl Iterator<Item = (u32, u64, u64)> + 'a {
    ids.iter()
        .map(|&i| {
            let (bytes, count) = sites[i as usize].held();
            (i, bytes, count)
        })
        .filter(|&(_, bytes, _)| bytes > 0)
}
