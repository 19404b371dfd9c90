//! Each process's steps (`steps.rs` in the sweep) into the model: raw
//! sites to the report's ids (summed where several merged into one), the
//! steady state as the median of the steps after the first, and the step
//! of the process's peak.

use gmem_prof_model::{
    ProcessSteps, SiteKept, SteadyStep, StepFigures, StepSource, StepTensors, STEP_SITES,
};
use gmem_prof_traces::record::step;

use crate::engine::Engine;
use crate::timeline::Axis;

/// (raw site, bytes) rows under the report's ids, summed, the largest
/// change first.
fn kept_by_site(raw: &[(u32, i64)], id: impl Fn(u32) -> Option<u32>) -> Vec<SiteKept> {
    let mut out: Vec<SiteKept> = Vec::new();
    for &(site, bytes) in raw {
        let Some(site) = id(site) else { continue };
        match out.iter_mut().find(|k| k.site == site) {
            Some(k) => k.bytes += bytes,
            None => out.push(SiteKept { site, bytes }),
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
                }),
            })
            .collect();
        let later = steps.figures.get(1..).unwrap_or_default();
        let tensors_seen = steps.tensors.is_some();
        let steady = (later.len() >= 2).then(|| SteadyStep {
            from_step: list.get(1).map_or(2, |s| s.number),
            peak_bytes: median(later.iter().map(|f| f.0).collect()).unwrap_or(0),
            kept_bytes: median(later.iter().map(|f| f.1).collect()).unwrap_or(0),
            allocated_peak: tensors_seen
                .then(|| median(later.iter().map(|f| f.2).collect()))
                .flatten(),
            tensors_kept_bytes: tensors_seen
                .then(|| median(later.iter().map(|f| f.3).collect()))
                .flatten(),
        });
        let peak_step = steps
            .done
            .iter()
            .find(|s| st.peak_time <= s.end)
            .map(|s| s.number);
        let marked_by = match (
            steps.sources & (1 << step::OPTIMIZER) != 0,
            steps.sources & (1 << step::PROGRAM) != 0,
        ) {
            (true, true) => StepSource::Both,
            (true, false) => StepSource::Optimizer,
            _ => StepSource::Program,
        };
        out.push(ProcessSteps {
            pid: st.pid(),
            marked_by,
            count: steps.count,
            steps: list,
            steady,
            peak_step,
        });
    }
    out
}
