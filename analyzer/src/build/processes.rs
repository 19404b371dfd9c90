//! Each process's report: what it held at exit by kind of holder, how its
//! allocations were seen (driver calls, segments, tensors), its messages,
//! and why it was not wholly profiled when it was not.

use crate::engine::{Engine, ProcState};
use crate::holding::SiteStats;
use crate::model::*;
use crate::{sites, timeline};

pub(super) fn process_reports(
    engine: &mut Engine,
    axis: Option<&timeline::Axis>,
    categories: &[Category],
    buckets: usize,
) -> Vec<ProcessReport> {
    let start = axis.map_or(0, |a| a.start);
    let mut out = Vec::new();
    let raw_sites = &engine.sites;
    for (si, st) in engine.procs.iter_mut().enumerate() {
        let (at_exit, devices, cache_sites) = held_at_exit(raw_sites, si, categories);
        let per_tensor = || {
            st.defs.symbols.values().any(|sym| {
                sym.frames
                    .iter()
                    .any(|f| f.function.contains(sites::PER_TENSOR_ALLOCATOR))
            })
        };
        let view = if cache_sites {
            AllocatorView::Segments
        } else if per_tensor() {
            AllocatorView::Tensors
        } else {
            AllocatorView::Direct
        };
        let p = st.defs.process.clone().unwrap_or_default();
        let live = match axis {
            Some(a) => st.curve.finish(a, buckets),
            None => Vec::new(),
        };
        let (messages, not_profiled, dropped_records) = messages(st);
        out.push(ProcessReport {
            devices,
            pid: p.pid,
            ppid: p.ppid,
            exe: p.exe.clone(),
            cmdline: p.cmdline.clone(),
            hostname: p.hostname.clone(),
            start_ns: st.first_time.unwrap_or(start).saturating_sub(start),
            end_ns: st.ended.unwrap_or(st.last_time).saturating_sub(start),
            clean_exit: st.ended.is_some(),
            kernels_traced: p.kernels_traced,
            kernels_timed: p.kernels_traced && p.kernels_timed,
            stacks_captured: p.stacks_captured,
            allocations: st.allocations,
            frees: st.frees,
            failed_allocations: st.failed_calls,
            peak_bytes: st.peak,
            peak_time_ns: st.peak_time.saturating_sub(start),
            live,
            at_exit,
            allocator_view: view,
            dropped_records,
            messages,
            not_profiled,
            allocator_not_attached: st
                .defs
                .allocators
                .iter()
                .find(|a| {
                    a.allocator == gmem_prof_traces::record::allocator::TORCH_CACHING && !a.attached
                })
                .map(|a| a.detail.clone()),
            ipc_mapped_peak_bytes: st.ipc_mapped_peak,
            window: st.window.map(|w| RecordedWindow {
                what: st.defs.window.clone().unwrap_or_default(),
                opened_ns: w.opened.saturating_sub(start),
                closed_ns: w.closed.map(|c| c.saturating_sub(start)),
                live_at_open_bytes: w.live,
                tensors_at_open_bytes: w.tensors_live,
            }),
        });
    }
    out
}

/// What process `proc`'s sites held at its exit, by kind of holder; the
/// devices it allocated on, in order; whether a caching allocator's
/// segments are among its sites.
fn held_at_exit(
    sites: &[SiteStats],
    proc: usize,
    categories: &[Category],
) -> (AtExit, Vec<u32>, bool) {
    let mut at_exit = AtExit::default();
    let mut cache_sites = false;
    let mut devices: Vec<u32> = Vec::new();
    for (i, s) in sites.iter().enumerate() {
        if s.proc as usize != proc {
            continue;
        }
        if s.held.count > 0 && !devices.contains(&s.device) {
            devices.push(s.device);
        }
        match categories.get(i).copied().unwrap_or(Category::Unknown) {
            Category::AllocatorCache => {
                cache_sites = true;
                at_exit.cached_bytes += s.held.at_exit;
                at_exit.cached_count += s.held.at_exit_count;
            }
            Category::Runtime => {
                at_exit.runtime_bytes += s.held.at_exit;
                at_exit.runtime_count += s.held.at_exit_count;
            }
            Category::Library => {
                at_exit.library_bytes += s.held.at_exit;
                at_exit.library_count += s.held.at_exit_count;
            }
            Category::Profiler => at_exit.profiler_bytes += s.held.at_exit,
            Category::Program | Category::Unknown => {
                at_exit.leaked_bytes += s.held.at_exit;
                at_exit.leaked_count += s.held.at_exit_count;
            }
        }
    }
    devices.sort_unstable();
    (at_exit, devices, cache_sites)
}

/// The process's messages; why it was not wholly profiled (empty when it
/// was); the records it dropped.
fn messages(st: &ProcState) -> (Vec<ProcessMessage>, Vec<NotProfiled>, u64) {
    let mut messages: Vec<ProcessMessage> = st
        .defs
        .messages
        .iter()
        .map(|(level, text)| ProcessMessage::Collector {
            level: MessageLevel::of_record(*level),
            text: text.clone(),
        })
        .collect();
    if st.ended.is_none() {
        messages.push(ProcessMessage::NotEndedCleanly);
    }
    let dropped_records = st.defs.dropped.0 + st.defs.dropped.1;
    let mut not_profiled: Vec<NotProfiled> = st
        .defs
        .messages
        .iter()
        .filter(|(level, _)| MessageLevel::of_record(*level) == MessageLevel::Error)
        .map(|(_, text)| NotProfiled::CollectorError {
            message: text.clone(),
        })
        .collect();
    if dropped_records > 0 {
        not_profiled.push(NotProfiled::RecordsDropped {
            records: dropped_records,
        });
    }
    if st.ended.is_none() {
        not_profiled.push(NotProfiled::CutShort);
    }
    (messages, not_profiled, dropped_records)
}
