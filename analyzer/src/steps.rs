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
    /// What each site that changed in this step holds above (or below)
    /// its bytes at the start.
    change: FastMap<u32, i64>,
    /// The step stands at its highest since its start: the sites' changes
    /// are taken down at the first fall from it (`peak_by_site`).
    at_peak: bool,
    peak_by_site: Vec<(u32, i64)>,
}

/// What one kind of memory did in one step.
pub struct StepRaw {
    pub peak: u64,
    pub peak_time: u64,
    pub kept: i64,
    /// (raw site, bytes kept), the largest change first, `STEP_SITES` at
    /// most.
    pub kept_by_site: Vec<(u32, i64)>,
    /// (raw site, bytes above its start) at the step's highest, the
    /// largest first, `STEP_SITES` at most: who took what the step rose
    /// to, even when it gave it all back. Empty when the step never rose
    /// above its start (and for a process's first step, whose start
    /// precedes its tracker).
    pub peak_by_site: Vec<(u32, i64)>,
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
            ..Default::default()
        }
    }

    /// A tracker starting now with `live` bytes live (a range's instance).
    pub fn starting(live: u64, t: u64) -> Self {
        Tracker {
            live,
            start_live: live,
            peak: live,
            peak_time: t,
            ..Default::default()
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
        // One event changes one site: by what the kind's total changed.
        let by = live as i64 - self.live as i64;
        if by < 0 && self.at_peak {
            self.settle_peak();
        }
        *self.change.entry(site).or_default() += by;
        self.live = live;
        if live > self.peak {
            self.peak = live;
            self.peak_time = t;
            self.at_peak = true;
        }
    }

    /// Takes down the sites' changes at the peak, left now: a step sets a
    /// new highest a few times (each rise of its work), so this runs a few
    /// times per step, not per event.
    fn settle_peak(&mut self) {
        self.at_peak = false;
        self.peak_by_site.clear();
        self.peak_by_site.extend(
            self.change
                .iter()
                .filter(|(_, &b)| b > 0)
                .map(|(&s, &b)| (s, b)),
        );
        self.peak_by_site
            .sort_unstable_by_key(|&(site, b)| (std::cmp::Reverse(b), site));
        self.peak_by_site.truncate(STEP_SITES);
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
        if self.at_peak {
            self.settle_peak();
        }
        self.change.clear();
        let raw = StepRaw {
            peak: self.peak,
            peak_time: self.peak_time,
            kept: self.live as i64 - self.start_live as i64,
            kept_by_site,
            peak_by_site: std::mem::take(&mut self.peak_by_site),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Sites' bytes by id, as the sweep keeps them.
    fn live_of(sites: &[(u32, u64)]) -> impl Fn(u32) -> u64 + '_ {
        |s| sites.iter().find(|x| x.0 == s).map_or(0, |x| x.1)
    }

    #[test]
    fn the_peak_names_who_held_it_though_it_was_given_back() {
        let mut t = Tracker::starting(100, 0);
        // Site 1 takes 4, site 2 takes 8 (the highest: 112), site 2 gives
        // its 8 back, site 3 takes 2 and keeps it, site 1 keeps its 4.
        t.changed(1, 0, 104, 1);
        t.changed(2, 0, 112, 2);
        t.changed(2, 8, 104, 3);
        t.changed(3, 0, 106, 4);
        let raw = t.end_step(live_of(&[(1, 4), (2, 0), (3, 2)]));
        assert_eq!((raw.peak, raw.peak_time, raw.kept), (112, 2, 6));
        assert_eq!(raw.peak_by_site, vec![(2, 8), (1, 4)]);
        assert_eq!(raw.kept_by_site, vec![(1, 4), (3, 2)]);
        // The next step starts where this one ended: rising again to a
        // new highest names that rise's sites only.
        t.changed(3, 2, 107, 5);
        t.changed(3, 3, 106, 6);
        let raw = t.end_step(live_of(&[(1, 4), (3, 2)]));
        assert_eq!(raw.peak_by_site, vec![(3, 1)]);
        assert_eq!(raw.kept, 0);
        // A step that never rises above its start names no one.
        t.changed(1, 4, 102, 7);
        let raw = t.end_step(live_of(&[(1, 0), (3, 2)]));
        assert!(raw.peak_by_site.is_empty());
    }
}
