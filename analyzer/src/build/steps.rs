//! Each process's steps (`steps.rs` in the sweep) into the model: raw
//! sites to the report's ids (summed where several merged into one), the
//! steady state as the median of the steps after the first, and the step
//! of the process's peak.

use gmem_prof_model::{
    ProcessSteps, SiteKept, SteadyStep, StepFigures, StepGrowth, StepSource, StepTensors,
    STEP_SITES, WARM_UP,
};
use gmem_prof_traces::record::step;

use crate::engine::Engine;
use crate::steps::Measured;
use crate::timeline::Axis;

/// Adds `bytes` to `site`'s row of `rows` (a new row when it has none).
fn add_kept(rows: &mut Vec<SiteKept>, site: u32, bytes: i64) {
    match rows.iter_mut().find(|k| k.site == site) {
        Some(k) => k.bytes += bytes,
        None => rows.push(SiteKept { site, bytes }),
    }
}

/// (raw site, bytes) rows under the report's ids, summed, the largest
/// change first.
pub(super) fn kept_by_site(raw: &[(u32, i64)], id: impl Fn(u32) -> Option<u32>) -> Vec<SiteKept> {
    let mut out: Vec<SiteKept> = Vec::new();
    for &(site, bytes) in raw {
        if let Some(site) = id(site) {
            add_kept(&mut out, site, bytes);
        }
    }
    out.retain(|k| k.bytes != 0);
    out.sort_by_key(|k| (std::cmp::Reverse(k.bytes.abs()), k.site));
    out.truncate(STEP_SITES);
    out
}

fn median<T: Ord + Copy>(mut v: Vec<T>) -> Option<T> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// The steps of every process that marked any; `site_id` and `tensor_ids`
/// give the report's id of a raw site and (per process) raw tensor site.
pub fn process_steps(
    engine: &Engine,
    axis: &Axis,
    site_id: impl Fn(u32) -> u32,
    tensor_ids: &[Vec<u32>],
) -> Vec<ProcessSteps> {
    let rel = |t: u64| t.saturating_sub(axis.start);
    let mut out = Vec::new();
    for (proc, st) in engine.procs.iter().enumerate() {
        let Some(steps) = st.steps.as_deref() else {
            continue;
        };
        let tensor_id = |raw: u32| tensor_ids.get(proc)?.get(raw as usize).copied();
        let roles_of = |number: u64| {
            let fw = st.framework.as_deref()?;
            let (_, at) = fw.step_roles.finished.iter().find(|(n, _)| *n == number)?;
            Some(at.roles_known())
        };
        let list: Vec<StepFigures> = steps
            .done
            .iter()
            .map(|s| StepFigures {
                number: s.number,
                start_ns: rel(s.start),
                end_ns: rel(s.end),
                peak_bytes: s.driver.peak,
                peak_time_ns: rel(s.driver.peak_time),
                kept_bytes: s.driver.kept,
                kept_by_site: kept_by_site(&s.driver.kept_by_site, |r| Some(site_id(r))),
                tensors: s.tensors.as_ref().map(|t| StepTensors {
                    allocated_peak: t.peak,
                    kept_bytes: t.kept,
                    kept_by_site: kept_by_site(&t.kept_by_site, tensor_id),
                    roles_at_peak: roles_of(s.number),
                }),
            })
            .collect();
        let later = steps.measured.get(1..).unwrap_or_default();
        let tensors_seen = steps.tensors.is_some();
        let steady = (later.len() >= 2).then(|| SteadyStep {
            from_step: list.get(1).map_or(2, |s| s.number),
            peak_bytes: median(later.iter().map(|m| m.peak).collect()).unwrap_or(0),
            kept_bytes: median(later.iter().map(|m| m.kept).collect()).unwrap_or(0),
            allocated_peak: tensors_seen
                .then(|| median(later.iter().map(|m| m.tensors_peak).collect()))
                .flatten(),
            tensors_kept_bytes: tensors_seen
                .then(|| median(later.iter().map(|m| m.tensors_kept).collect()))
                .flatten(),
        });
        let peak_step = steps
            .done
            .iter()
            .find(|s| st.peak_time <= s.end)
            .map(|s| s.number);
        let by_range = steps.sources & (1 << crate::steps::RANGE_SOURCE) != 0;
        let marked_by = match (
            steps.sources & (1 << step::OPTIMIZER) != 0,
            steps.sources & (1 << step::PROGRAM) != 0,
        ) {
            _ if by_range => StepSource::Range,
            (true, true) => StepSource::Both,
            (true, false) => StepSource::Optimizer,
            _ => StepSource::Program,
        };
        let growth = step_growth(&list, &steps.measured, tensors_seen);
        out.push(ProcessSteps {
            pid: st.pid(),
            marked_by,
            range: by_range
                .then_some(engine.step_range.as_ref())
                .flatten()
                .map(|(domain, name)| match domain {
                    Some(d) => format!("{d}:{name}"),
                    None => name.clone(),
                }),
            count: steps.count,
            steps: list,
            steady,
            peak_step,
            growth,
        });
    }
    out
}

/// The step of process `pid` that moment `time_ns` fell in: the first step
/// ending at or after it, or one past the last when it came after every
/// listed step (the step under way, such as one an error cut short).
pub fn step_of(steps: &[ProcessSteps], pid: u32, time_ns: u64) -> Option<u64> {
    let p = steps.iter().find(|p| p.pid == pid)?;
    match p.steps.iter().find(|s| s.end_ns >= time_ns) {
        Some(s) => Some(s.number),
        // Steps beyond the listed ones have no times kept.
        None if p.count as usize == p.steps.len() => p.steps.last().map(|s| s.number + 1),
        None => None,
    }
}

/// What the steps after the warm-up kept on average (`StepGrowth`); None
/// with fewer than 2 of them. `measured` holds every step measured;
/// `listed` the steps kept one by one.
fn step_growth(listed: &[StepFigures], measured: &[Measured], tensors: bool) -> Option<StepGrowth> {
    let warm_up = ((measured.len() as f64 * WARM_UP).round() as usize).max(1);
    let judged = measured.get(warm_up..).filter(|j| j.len() >= 2)?;
    let kept: i64 = judged
        .iter()
        .map(|m| if tensors { m.tensors_kept } else { m.kept })
        .sum();
    let listed = listed.get(warm_up..).unwrap_or_default();
    let mut sums: Vec<SiteKept> = Vec::new();
    for s in listed {
        let rows = match (&s.tensors, tensors) {
            (Some(t), true) => &t.kept_by_site,
            _ => &s.kept_by_site,
        };
        for k in rows {
            add_kept(&mut sums, k.site, k.bytes);
        }
    }
    let n = listed.len().max(1) as i64;
    let mut sites: Vec<SiteKept> = sums
        .into_iter()
        .map(|k| SiteKept {
            site: k.site,
            bytes: k.bytes / n,
        })
        .filter(|k| k.bytes > 0)
        .collect();
    sites.sort_by_key(|k| (std::cmp::Reverse(k.bytes), k.site));
    sites.truncate(5);
    Some(StepGrowth {
        from_step: warm_up as u64 + 1,
        steps: judged.len() as u64,
        bytes_per_step: kept / judged.len() as i64,
        tensors,
        sites,
    })
}
