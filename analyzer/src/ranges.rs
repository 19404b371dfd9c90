//! The sweep's part of the program's ranges (`RangeBegin`/`RangeEnd`
//! records, NVTX): per process, each open instance tracks, as a step does
//! (`steps::Tracker`), the live bytes it began with, its highest, and what
//! each site kept by its end; each range name sums its instances.
//! `build/ranges.rs` turns them into the model.

use gmem_prof_model::{RANGES_KEPT, RANGE_NAMES};

use crate::fast_map::FastMap;
use crate::steps::{StepRaw, Tracker};

/// Instances measured at once per process; those begun while as many are
/// open are counted, not measured (a program that pushes without popping).
const OPEN_MEASURED: usize = 64;
/// Instances' kept bytes kept per name, for the median.
const KEPT_SAMPLES: usize = 100_000;

/// An instance under way.
pub struct Open {
    pub id: u64,
    pub name: Option<u32>,
    /// Its end is a step's (`--step-range`).
    pub is_step: bool,
    pub start: u64,
    pub driver: Tracker,
    pub tensors: Option<Tracker>,
}

/// One kind of memory over a name's instances.
#[derive(Default)]
pub struct Summed {
    pub peak: u64,
    pub peak_time: u64,
    pub rise: u64,
    pub kept: i64,
    pub kept_samples: Vec<i64>,
    pub kept_by_site: FastMap<u32, i64>,
    /// The sites at the peak of the instance that rose most (`StepRaw::
    /// peak_by_site`).
    pub rise_by_site: Vec<(u32, i64)>,
}

impl Summed {
    fn add(&mut self, start_live: u64, raw: &StepRaw) {
        if raw.peak > self.peak {
            self.peak = raw.peak;
            self.peak_time = raw.peak_time;
        }
        let rise = raw.peak.saturating_sub(start_live);
        if rise > self.rise || self.rise_by_site.is_empty() {
            self.rise_by_site.clone_from(&raw.peak_by_site);
        }
        self.rise = self.rise.max(rise);
        self.kept += raw.kept;
        if self.kept_samples.len() < KEPT_SAMPLES {
            self.kept_samples.push(raw.kept);
        }
        for &(site, bytes) in &raw.kept_by_site {
            *self.kept_by_site.entry(site).or_default() += bytes;
        }
    }
}

/// A range name (a domain's string and a name's, ids of the process).
pub struct Named {
    pub domain: u32,
    pub name: u32,
    pub instances: u64,
    pub total_ns: u64,
    pub driver: Summed,
    pub tensors: Option<Summed>,
}

/// An instance kept for the timeline and Perfetto.
pub struct Instance {
    pub name: Option<u32>,
    pub tid: u32,
    pub depth: u32,
    pub start: u64,
    pub end: Option<u64>,
    pub kept: i64,
}

/// A process's ranges.
#[derive(Default)]
pub struct ProcRanges {
    pub open: Vec<Open>,
    pub names: Vec<Named>,
    index: FastMap<(u32, u32), u32>,
    pub instances: Vec<Instance>,
    /// Where each open instance is in `instances` (when kept).
    kept_at: FastMap<u64, usize>,
    pub other_instances: u64,
    /// Instances begun while `OPEN_MEASURED` were open.
    pub unmeasured: u64,
    pub marks: Vec<(u64, u32, u32, u32)>,
    pub mark_count: u64,
}

impl ProcRanges {
    /// A range began; `live` and `tensors_live` are what is live now.
    pub fn begin(
        &mut self,
        t: u64,
        b: &crate::input::RangeBeginEv,
        live: u64,
        tensors_live: Option<u64>,
        is_step: bool,
    ) {
        let name = match self.index.get(&(b.domain, b.name)) {
            Some(&i) => Some(i),
            None if self.names.len() < RANGE_NAMES => {
                let i = self.names.len() as u32;
                self.index.insert((b.domain, b.name), i);
                self.names.push(Named {
                    domain: b.domain,
                    name: b.name,
                    instances: 0,
                    total_ns: 0,
                    driver: Summed::default(),
                    tensors: None,
                });
                Some(i)
            }
            None => None,
        };
        if name.is_none() {
            self.other_instances += 1;
        }
        if self.instances.len() < RANGES_KEPT {
            self.kept_at.insert(b.id, self.instances.len());
            self.instances.push(Instance {
                name,
                tid: b.tid,
                depth: b.depth,
                start: t,
                end: None,
                kept: 0,
            });
        }
        if self.open.len() >= OPEN_MEASURED {
            self.unmeasured += 1;
            return;
        }
        self.open.push(Open {
            id: b.id,
            name,
            is_step,
            start: t,
            driver: Tracker::starting(live, t),
            tensors: tensors_live.map(|l| Tracker::starting(l, t)),
        });
    }

    /// A range ended: its figures join its name's. `site_live` and
    /// `tensor_site_live` give a site's live bytes now. Returns whether it
    /// ended a step.
    pub fn end(
        &mut self,
        t: u64,
        id: u64,
        site_live: impl Fn(u32) -> u64,
        tensor_site_live: impl Fn(u32) -> u64,
    ) -> bool {
        let kept_at = self.kept_at.remove(&id);
        if let Some(at) = kept_at {
            self.instances[at].end = Some(t);
        }
        let Some(i) = self.open.iter().rposition(|o| o.id == id) else {
            return false;
        };
        let mut o = self.open.remove(i);
        let start_live = o.driver.start_live();
        let driver = o.driver.end_step(&site_live);
        if let Some(at) = kept_at {
            self.instances[at].kept = driver.kept;
        }
        let Some(n) = o.name.and_then(|n| self.names.get_mut(n as usize)) else {
            return o.is_step;
        };
        n.instances += 1;
        n.total_ns += t.saturating_sub(o.start);
        n.driver.add(start_live, &driver);
        if let Some(tracker) = o.tensors.as_mut() {
            let start = tracker.start_live();
            let raw = tracker.end_step(&tensor_site_live);
            n.tensors
                .get_or_insert_with(Summed::default)
                .add(start, &raw);
        }
        o.is_step
    }

    /// A site's live bytes changed (CUDA allocations): every open instance
    /// sees it.
    #[inline]
    pub fn driver_changed(&mut self, site: u32, before: u64, live: u64, t: u64) {
        for o in &mut self.open {
            o.driver.changed(site, before, live, t);
        }
    }

    /// A tensor site's live bytes changed from `before` by `bytes`
    /// (allocated when `alloc`).
    #[inline]
    pub fn tensors_changed(&mut self, site: u32, before: u64, bytes: u64, alloc: bool, t: u64) {
        for o in &mut self.open {
            // An instance begun before the process's first tensor began
            // with none.
            let tr = o
                .tensors
                .get_or_insert_with(|| Tracker::starting(0, o.start));
            let live = if alloc {
                tr.live + bytes
            } else {
                tr.live.saturating_sub(bytes)
            };
            tr.changed(site, before, live, t);
        }
    }
}
