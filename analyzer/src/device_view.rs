//! The device's own view (what `nvidia-smi` shows, from NVML samples the
//! collector took) set beside what the trace tracked: each sample taken
//! apart into tracked allocations, the run's processes' other memory
//! (CUDA contexts, library state no watched call allocated), other
//! processes, and what NVML charges to no process.

use std::collections::{BTreeSet, HashMap};

use gmem_prof_traces::record::{device_memory, DeviceMemory};

use crate::engine::Engine;
use crate::model::{SmiMoment, SmiView};
use crate::timeline::Axis;

/// One sample with what the trace tracked then.
struct Sample<'a> {
    pid: u32,
    m: &'a DeviceMemory,
    tracked: u64,
}

/// Every sample of `device`, by time.
fn samples(engine: &Engine, device: u32) -> Vec<Sample<'_>> {
    let tracked: HashMap<(u32, u64, u32), u64> = engine
        .device_views
        .iter()
        .map(|t| ((t.stream, t.time, t.device), t.tracked))
        .collect();
    let mut out: Vec<Sample> = engine
        .streams
        .iter()
        .enumerate()
        .flat_map(|(i, st)| {
            let tracked = &tracked;
            st.defs
                .device_memory
                .iter()
                .filter(move |m| m.device == device)
                .map(move |m| Sample {
                    pid: st.pid(),
                    m,
                    tracked: tracked
                        .get(&(i as u32, m.time.0, device))
                        .copied()
                        .unwrap_or(0),
                })
        })
        .collect();
    out.sort_by_key(|s| (s.m.time.0, s.pid));
    out
}

/// Pids of the run's processes.
fn run_pids(engine: &Engine) -> BTreeSet<u32> {
    engine
        .streams
        .iter()
        .filter_map(|s| s.defs.process.as_ref().map(|p| p.pid))
        .collect()
}

fn moment(s: &Sample, run: &BTreeSet<u32>, start: u64) -> SmiMoment {
    let m = s.m;
    let known = |b: u64| (b != u64::MAX).then_some(b);
    let ours: Vec<u64> = m
        .processes
        .iter()
        .filter(|p| run.contains(&p.pid))
        .filter_map(|p| known(p.used.0))
        .collect();
    let others: Vec<u64> = m
        .processes
        .iter()
        .filter(|p| !run.contains(&p.pid))
        .map(|p| known(p.used.0).unwrap_or(0))
        .collect();
    let other_bytes: u64 = others.iter().sum();
    let run_bytes = (!ours.is_empty()).then(|| ours.iter().sum::<u64>());
    SmiMoment {
        time_ns: m.time.0.saturating_sub(start),
        pid: s.pid,
        reason: match m.reason {
            device_memory::FAILED_ALLOCATION => "failed allocation",
            device_memory::EXIT => "exit",
            _ => "flush tick",
        },
        total_bytes: m.total.0,
        used_bytes: m.used.0,
        free_bytes: m.free.0,
        driver_reserved_bytes: m.reserved.0,
        tracked_bytes: s.tracked,
        run_processes_bytes: run_bytes,
        context_and_untracked_bytes: run_bytes.map(|r| r.saturating_sub(s.tracked)),
        other_processes_bytes: other_bytes,
        other_processes: others.len() as u32,
        unattributed_bytes: run_bytes.map(|r| m.used.0.saturating_sub(r + other_bytes)),
    }
}

/// The device's own view, when the trace has samples of it.
pub fn view(
    engine: &Engine,
    device: u32,
    axis: &Axis,
    buckets: usize,
    start: u64,
) -> Option<SmiView> {
    let all = samples(engine, device);
    let run = run_pids(engine);
    let highest = all
        .iter()
        .max_by_key(|s| (s.m.used.0, std::cmp::Reverse(s.m.time.0)))?;
    let last = all.last()?;
    let used_curve = engine
        .devices
        .get(device)
        .map(|d| d.smi_used.clone().finish(axis, buckets))
        .unwrap_or_default();
    Some(SmiView {
        samples: all.len() as u64,
        used_curve,
        highest: moment(highest, &run, start),
        last: moment(last, &run, start),
    })
}

/// The sample a process's collector took right after an allocation failed
/// on `device` at `time` (the first failed-allocation sample at or after
/// it, within a second).
pub fn after_failure(
    engine: &Engine,
    pid: u32,
    device: u32,
    time: u64,
    start: u64,
) -> Option<SmiMoment> {
    let run = run_pids(engine);
    samples(engine, device)
        .iter()
        .find(|s| {
            s.pid == pid
                && s.m.reason == device_memory::FAILED_ALLOCATION
                && s.m.time.0 >= time
                && s.m.time.0 - time < 1_000_000_000
        })
        .map(|s| moment(s, &run, start))
}
