//! The growth rule: which buckets of a process's run are judged, and
//! whether a site's live bytes keep rising through them. One rule for CUDA
//! allocation sites (`build`) and tensor sites (`framework_view`); its
//! thresholds are the model's (`GROWTH_MIN_BYTES`, `WARM_UP`,
//! `JUDGED_UNTIL`), stated in docs/design.md.

use crate::holding::Holding;
use crate::{engine, timeline};
use crate::{GROWTH_MIN_BYTES, JUDGED_UNTIL, WARM_UP};

/// The buckets of the time axis over which a process's growth is judged.
///
/// Growth is judged over the time a process spent allocating: the buckets
/// of the time axis in which it allocated (CUDA allocations of its own
/// and, inside a framework allocator, tensors; module globals, which CUDA
/// registers as it loads modules, left out). Of those, the first
/// `WARM_UP` are its warm-up (models built, caches and workspaces filled,
/// the first step) and the last `1 − JUDGED_UNTIL` are left out too; the
/// buckets from the warm-up's end to there are judged. Stretches in which
/// the process allocated nothing (imports, libraries loading, kernels
/// compiling, waiting for data, the interpreter's shutdown) count for
/// nothing, and neither does the number of allocations, which thousands of
/// registrations at start-up could use up. Empty for a process that
/// allocated nothing.
pub fn judged_buckets(
    st: &mut engine::ProcState,
    axis: &timeline::Axis,
    buckets: usize,
) -> Vec<usize> {
    let mut active = vec![false; buckets];
    let mut mark = |curve: &mut timeline::Curve| {
        let mut before = 0;
        for (i, p) in curve.finish(axis, buckets).iter().enumerate() {
            if p.last > before {
                active[i] = true;
            }
            before = p.last;
        }
    };
    mark(&mut st.own_allocation_curve);
    if let Some(fw) = st.framework.as_deref_mut() {
        mark(&mut fw.allocation_curve);
    }
    let active: Vec<usize> = (0..buckets).filter(|&i| active[i]).collect();
    let Some(last) = active.len().checked_sub(1) else {
        return Vec::new();
    };
    let at = |share: f64| ((last as f64 * share).round() as usize).min(last);
    active[at(WARM_UP)..=at(JUDGED_UNTIL)].to_vec()
}

/// Whether a site grows: its live bytes keep rising through the judged
/// part of its process's run (`judged_window`, as buckets of the time
/// axis) and are still held when the run ends.
///
/// The judged part is cut in four quarters; the *floor* of each is the
/// least the site held in it. The site's bytes rise when the floors and
/// the level at the end of the judged part never fall, rise at least three
/// times of four, and end at least `GROWTH_MIN_BYTES` higher. A sawtooth
/// does not rise (its floors stay down), nor does a warm-up followed by a
/// flat run. A process that lived fewer than `MIN_JUDGED_BUCKETS` buckets
/// of the time axis is not judged (too few points to see a rise).
///
/// A rising site grows when at least half of the rise is still held when
/// its process ends (`held_at_end`: killed, failed, or exited without
/// freeing), or when it is one allocation among the loop's others (`share`:
/// the site's allocations, the process's: at most half) and its bytes also
/// rise through its life (`rises_through_its_life`): a Python program's
/// objects are freed when the interpreter shuts down, after the run. A
/// site that makes most of the allocations, rises, and is freed before the
/// end filled memory and released it: a peak, not growth. So did sites that
/// filled memory during a set-up phase, held it flat while the work ran
/// and freed it at the end (NVIDIA's UnifiedMemoryStreams: a third of the
/// allocations each, flat in time after the set-up).
///
/// Returns (bytes at the start of the judged part, bytes at its end, the
/// site's curve) for a growing site.
pub fn judge_growth(
    curve: &[u64],
    held_at_end: u64,
    judged: &[usize],
    share: (u64, u64),
) -> Option<(u64, u64)> {
    let (from, to) = steady_rise(curve, judged)?;
    let held = held_at_end >= from + (to - from) / 2;
    let among_others = share.0 * 2 <= share.1 && rises_through_its_life(curve);
    (held || among_others).then_some((from, to))
}

/// The raw sites of one site in one process, gathered to be judged as
/// one (`judge_growth`): their curves summed bucket by bucket.
#[derive(Default)]
pub struct GrowthCandidate {
    pub curve: Vec<u64>,
    pub held_at_end: u64,
    pub count: u64,
    /// An upper bound of the most it held (the raw sites' own most,
    /// summed): below `GROWTH_MIN_BYTES` it cannot have grown by as much.
    pub max_live: u64,
}

impl GrowthCandidate {
    pub fn add(&mut self, held: &mut Holding, axis: &timeline::Axis, buckets: usize) {
        let points = held.curve.finish(axis, buckets);
        if self.curve.len() < points.len() {
            self.curve.resize(points.len(), 0);
        }
        for (c, p) in self.curve.iter_mut().zip(&points) {
            *c += p.last;
        }
        self.held_at_end += held.at_exit;
        self.count += held.count;
        self.max_live += held.max_live;
    }

    /// (start, end) of its rise when it grows (`judge_growth`) over the
    /// `judged` buckets, its process having made `allocations` in all.
    pub fn judge(&self, judged: &[usize], allocations: u64) -> Option<(u64, u64)> {
        if self.max_live < GROWTH_MIN_BYTES {
            return None;
        }
        judge_growth(
            &self.curve,
            self.held_at_end,
            judged,
            (self.count, allocations),
        )
    }
}

/// Buckets a judged part must hold at least: fewer are too few points to
/// see a rise in.
pub const MIN_JUDGED_BUCKETS: usize = 8;

/// Whether a site's live bytes over time (`curve`, one value per bucket)
/// rise steadily through its life, as `steady_rise` judges a part of a
/// run: from its first allocation to the last moment it held its most
/// (after which it was only freed: the shutdown).
fn rises_through_its_life(curve: &[u64]) -> bool {
    let first = curve.iter().position(|&v| v > 0);
    let most = curve.iter().copied().max().unwrap_or(0);
    let last = curve.iter().rposition(|&v| v == most && v > 0);
    match (first, last) {
        (Some(a), Some(b)) => steady_rise(curve, &(a..=b).collect::<Vec<_>>()).is_some(),
        _ => false,
    }
}

/// The rise of a curve of live bytes (one value per bucket) over the
/// `judged` buckets (in order), as (start, end), when it rises as
/// `judge_growth` says: the judged buckets are cut in four quarters of as
/// many buckets each, and a quarter's floor is the least the curve held
/// from its first bucket to its last (idle buckets between included).
pub fn steady_rise(curve: &[u64], judged: &[usize]) -> Option<(u64, u64)> {
    if judged.len() < MIN_JUDGED_BUCKETS || judged.iter().any(|&b| b >= curve.len()) {
        return None;
    }
    let n = judged.len() - 1;
    let at = |q: usize| judged[n * q / 4];
    let mut levels: Vec<u64> = (0..4)
        .map(|q| curve[at(q)..=at(q + 1)].iter().copied().min().unwrap_or(0))
        .collect();
    levels.push(curve[judged[n]]);
    let rising = levels.windows(2).all(|w| w[1] >= w[0])
        && levels.windows(2).filter(|w| w[1] > w[0]).count() >= 3;
    let (from, to) = (levels[0], levels[4]);
    (rising && to >= from + GROWTH_MIN_BYTES).then_some((from, to))
}
