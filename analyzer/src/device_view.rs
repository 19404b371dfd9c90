//! The device's own view (what `nvidia-smi` shows, from NVML samples the
//! collector took) set beside what the trace tracked: each sample taken
//! apart into tracked allocations, what memory pools held beyond them,
//! the run's processes' other memory
//! (CUDA contexts, library state no watched call allocated), other
//! processes, and what NVML charges to no process.

use std::collections::{BTreeSet, HashMap};

use gmem_prof_traces::record::{device_memory, DeviceMemory};

use crate::engine::Engine;
use crate::model::{DeviceView, DeviceViewMoment, SampleReason};
use crate::timeline::Axis;

/// One sample with what the trace tracked then.
struct Sample<'a> {
    pid: u32,
    m: &'a DeviceMemory,
    tracked: u64,
    pools_unused: u64,
    framework_free: u64,
}

/// Every sample of the run, gathered once.
pub struct Samples<'a> {
    /// By device, in time order.
    by_device: HashMap<u32, Vec<Sample<'a>>>,
    /// Pids of the run's processes.
    run: BTreeSet<u32>,
    start: u64,
}

impl<'a> Samples<'a> {
    pub fn new(engine: &'a Engine, start: u64) -> Samples<'a> {
        let tracked: HashMap<(u32, u64, u32), (u64, u64, u64)> = engine
            .device_views
            .iter()
            .map(|t| {
                (
                    (t.proc, t.time, t.device),
                    (t.tracked, t.pools_unused, t.framework_free),
                )
            })
            .collect();
        let mut by_device: HashMap<u32, Vec<Sample>> = HashMap::new();
        for (i, st) in engine.procs.iter().enumerate() {
            for m in &st.defs.device_memory {
                let (tracked, pools_unused, framework_free) = tracked
                    .get(&(i as u32, m.time.0, m.device))
                    .copied()
                    .unwrap_or((0, 0, 0));
                by_device.entry(m.device).or_default().push(Sample {
                    pid: st.pid(),
                    m,
                    tracked,
                    pools_unused,
                    framework_free,
                });
            }
        }
        for list in by_device.values_mut() {
            list.sort_by_key(|s| (s.m.time.0, s.pid));
        }
        let run = engine
            .procs
            .iter()
            .filter_map(|s| s.defs.process.as_ref().map(|p| p.pid))
            .collect();
        Samples {
            by_device,
            run,
            start,
        }
    }

    fn moment(&self, s: &Sample) -> DeviceViewMoment {
        let m = s.m;
        let known = |b: u64| (b != u64::MAX).then_some(b);
        let ours: Vec<u64> = m
            .processes
            .iter()
            .filter(|p| self.run.contains(&p.pid))
            .filter_map(|p| known(p.used.0))
            .collect();
        let others: Vec<u64> = m
            .processes
            .iter()
            .filter(|p| !self.run.contains(&p.pid))
            .map(|p| known(p.used.0).unwrap_or(0))
            .collect();
        let other_bytes: u64 = others.iter().sum();
        let run_bytes = (!ours.is_empty()).then(|| ours.iter().sum::<u64>());
        let tracked = s.tracked + s.pools_unused;
        DeviceViewMoment {
            time_ns: m.time.0.saturating_sub(self.start),
            pid: s.pid,
            reason: match m.reason {
                device_memory::FAILED_ALLOCATION => SampleReason::FailedAllocation,
                device_memory::EXIT => SampleReason::Exit,
                _ => SampleReason::FlushTick,
            },
            total_bytes: m.total.0,
            used_bytes: m.used.0,
            free_bytes: m.free.0,
            driver_reserved_bytes: m.reserved.0,
            tracked_bytes: tracked,
            pools_unused_bytes: s.pools_unused,
            framework_free_bytes: s.framework_free,
            run_processes_bytes: run_bytes,
            context_and_untracked_bytes: run_bytes.map(|r| r.saturating_sub(tracked)),
            other_processes_bytes: other_bytes,
            other_processes: others.len() as u32,
            unattributed_bytes: run_bytes.map(|r| m.used.0.saturating_sub(r + other_bytes)),
        }
    }

    /// The view of `device`, when the trace has samples of it.
    pub fn view(
        &self,
        engine: &Engine,
        device: u32,
        axis: &Axis,
        buckets: usize,
    ) -> Option<DeviceView> {
        let all = self.by_device.get(&device)?;
        let highest = all
            .iter()
            .max_by_key(|s| (s.m.used.0, std::cmp::Reverse(s.m.time.0)))?;
        let last = all.last()?;
        let used_curve = engine
            .devices
            .get(device)
            .map(|d| d.device_view_used.clone().finish(axis, buckets))
            .unwrap_or_default();
        Some(DeviceView {
            samples: all.len() as u64,
            used_curve,
            highest: self.moment(highest),
            last: self.moment(last),
        })
    }

    /// The sample a process's collector took right after an allocation
    /// failed on `device` at `time` (the first failed-allocation sample at
    /// or after it, within a second).
    pub fn after_failure(&self, pid: u32, device: u32, time: u64) -> Option<DeviceViewMoment> {
        self.by_device
            .get(&device)?
            .iter()
            .find(|s| {
                s.pid == pid
                    && s.m.reason == device_memory::FAILED_ALLOCATION
                    && s.m.time.0 >= time
                    && s.m.time.0 - time < 1_000_000_000
            })
            .map(|s| self.moment(s))
    }
}
