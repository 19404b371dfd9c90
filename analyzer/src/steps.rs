//! The sweep's part of the program's steps (`Step` records): per process,
//! from its first step on, the live bytes each site held when the step
//! began (only sites that changed in it are looked at), the step's highest
//! live bytes, and at each step's end what each site kept. Kept for the
//! process's CUDA allocations and, seen from the inside, for a framework
//! allocator's tensors alike (`Tracker`); `build/steps.rs` turns them into
//! the model.

use gmem_prof_model::STEP_SITES;

use crate::fast_map::FastMap;

/// Steps whose figures are kept for the steady state and the growth per
/// step (32 bytes each): memory stays bounded whatever a trace holds; a
/// run of more steps (a day at ten steps a second) is judged on its first
/// ones.
pub const STEPS_MEASURED: usize = 1_000_000;

/// The source of steps that instances of an NVTX range end
/// (`--step-range`), beside the trace's own (`record::step`).
pub const RANGE_SOURCE: u8 = 3;

/// One kind of memory (CUDA allocations, or tensors) through the steps.
#[derive(Default)]
pub struct Tracker {
    /// Live bytes now (the process's, or its tensors').
    pub live: u64,
    start_live: u64,
    peak: u64,
    peak_time: u64,
    /// The live bytes of each site that changed in this step, when the step
    /// began.
    at_start: FastMap<u32, u64>,
}

/// What one kind of memory did in one step.
pub struct StepRaw {
    pub peak: u64,
    pub peak_time: u64,
    pub kept: i64,
    /// (raw site, bytes kept), the largest change first, `STEP_SITES` at
    /// most.
    pub kept_by_site: Vec<(u32, i64)>,
}

impl Tracker {
    /// A tracker whose first step began with nothing live and has reached
    /// `peak` at `peak_time`; `holding` are the sites holding memory now,
    /// each with its live bytes (all kept by the first step).
    pub fn first(live: u64, peak: u64, peak_time: u64, holding: impl Iterator<Item = u32>) -> Self {
        Tracker {
            live,
            start_live: 0,
            peak,
            peak_time,
            at_start: holding.map(|site| (site, 0)).collect(),
        }
    }

    /// A tracker starting now with `live` bytes live (a range's instance).
    pub fn starting(live: u64, t: u64) -> Self {
        Tracker {
            live,
            start_live: live,
            peak: live,
            peak_time: t,
            at_start: FastMap::default(),
        }
    }

    /// The live bytes its step began with.
    pub fn start_live(&self) -> u64 {
        self.start_live
    }

    /// A site's live bytes changed from `before`; the kind's live bytes are
    /// now `live`.
    #[inline]
    pub fn changed(&mut self, site: u32, before: u64, live: u64, t: u64) {
        self.at_start.entry(site).or_insert(before);
        self.live = live;
        if live > self.peak {
            self.peak = live;
            self.peak_time = t;
        }
    }

    /// Ends the step: what it kept, by site (`site_live` gives a site's
    /// live bytes now). The next step starts from here.
    pub fn end_step(&mut self, site_live: impl Fn(u32) -> u64) -> StepRaw {
        let mut kept_by_site: Vec<(u32, i64)> = self
            .at_start
            .drain()
            .map(|(site, start)| (site, site_live(site) as i64 - start as i64))
            .filter(|&(_, kept)| kept != 0)
            .collect();
        kept_by_site.sort_unstable_by_key(|&(site, kept)| (std::cmp::Reverse(kept.abs()), site));
        kept_by_site.truncate(STEP_SITES);
        let raw = StepRaw {
            peak: self.peak,
            peak_time: self.peak_time,
            kept: self.live as i64 - self.start_live as i64,
            kept_by_site,
        };
        self.start_live = self.live;
        self.peak = self.live;
        raw
    }
}

/// One step's figures, kept for every step measured (`STEPS_MEASURED`)
/// for the steady state's medians and the growth per step.
#[derive(Clone, Copy)]
pub struct Measured {
    pub peak: u64,
    pub kept: i64,
    /// The tensors' allocated peak and kept bytes (0 when none are seen).
    pub tensors_peak: u64,
    pub tensors_kept: i64,
}

/// One finished step of a process.
pub struct FinishedStep {
    pub number: u64,
    pub start: u64,
    pub end: u64,
    pub driver: StepRaw,
    pub tensors: Option<StepRaw>,
}

/// A process's steps: its trackers and the steps it finished.
pub struct ProcSteps {
    pub driver: Tracker,
    pub tensors: Option<Tracker>,
    pub start: u64,
    pub done: Vec<FinishedStep>,
    /// Steps finished, including those beyond `STEPS_KEPT`.
    pub count: u64,
    /// Each step's figures (the first `STEPS_MEASURED`).
    pub measured: Vec<Measured>,
    /// The sources that marked steps (bit `1 << source`).
    pub sources: u8,
}

impl ProcSteps {
    /// Steps whose first begins at `start` with these trackers.
    pub fn new(driver: Tracker, tensors: Option<Tracker>, start: u64) -> Self {
        ProcSteps {
            driver,
            tensors,
            start,
            done: Vec::new(),
            count: 0,
            measured: Vec::new(),
            sources: 0,
        }
    }
}
