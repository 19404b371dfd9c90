//! A PyTorch memory snapshot pickle of one process of a trace, for
//! PyTorch's own viewers: the analyzer's event rows handed to
//! `gmem_prof_torch_snapshot::write::History` (which says how events map
//! to the snapshot's history and state), with the sites' frames.

use std::io::Write;

use gmem_prof_analyzer::events::{EventKind, EventRow, SiteIds};
use gmem_prof_model::{Analysis, Category, FrameText};
use gmem_prof_torch_snapshot::write::{Action, Event, History, SnapFrame, Written};
use gmem_prof_traces::record::memory_kind;

/// Stack ids of tensor sites start here; below are device sites.
const TENSOR_STACKS: u32 = 1 << 31;

pub struct TorchSnapshotEvents<'a> {
    analysis: &'a Analysis,
    sites: &'a SiteIds,
    pid: u32,
    history: History,
    /// The allocator's out-of-memory errors (not event rows), latest
    /// first, each put into the history in its place.
    ooms: Vec<Event>,
}

impl<'a> TorchSnapshotEvents<'a> {
    /// Gathers the events of process `pid`.
    pub fn new(analysis: &'a Analysis, sites: &'a SiteIds, pid: u32) -> Self {
        let mut ooms: Vec<Event> = analysis
            .frameworks
            .iter()
            .filter(|f| f.pid == pid)
            .flat_map(|f| &f.ooms)
            .map(|o| Event {
                time_ns: o.time_ns,
                device: o.device,
                action: Action::TensorOom,
                address: 0,
                bytes: o.requested_bytes,
                stream: 0,
                stack: o.site.map_or(0, |s| TENSOR_STACKS + s + 1),
                device_free: o.device_free_bytes,
                segment: false,
            })
            .collect();
        ooms.sort_by_key(|e| std::cmp::Reverse(e.time_ns));
        TorchSnapshotEvents {
            analysis,
            sites,
            pid,
            history: History::default(),
            ooms,
        }
    }

    /// The allocator's errors up to time `t`, into the history.
    fn ooms_until(&mut self, t: u64) {
        while self.ooms.last().is_some_and(|o| o.time_ns <= t) {
            if let Some(o) = self.ooms.pop() {
                self.history.event(o);
            }
        }
    }

    pub fn rows(&mut self, rows: &[EventRow]) {
        let pid = self.pid;
        for r in rows.iter().filter(|r| r.pid == pid) {
            self.ooms_until(r.time_ns);
            let action = match r.what {
                EventKind::Alloc if r.kind == memory_kind::DEVICE => Action::DriverAlloc,
                EventKind::Free if r.kind == memory_kind::DEVICE => Action::DriverFree,
                EventKind::TensorAlloc => Action::TensorAlloc,
                EventKind::TensorFree => Action::TensorFree,
                EventKind::Failed => Action::DriverFailed,
                _ => continue,
            };
            let stack = match r.what {
                EventKind::TensorAlloc | EventKind::TensorFree => r
                    .tensor_site
                    .and_then(|t| self.sites.tensor(t))
                    .map_or(0, |s| TENSOR_STACKS + s + 1),
                _ => r.site.and_then(|s| self.sites.get(s)).map_or(0, |s| s + 1),
            };
            self.history.event(Event {
                time_ns: r.time_ns,
                device: r.device,
                action,
                address: r.address,
                // Tensors: the size PyTorch's history gives (the request),
                // not the block's.
                bytes: r.requested.unwrap_or(r.bytes),
                stream: 0,
                stack,
                device_free: 0,
                segment: r
                    .site
                    .and_then(|s| self.sites.get(s))
                    .and_then(|s| self.analysis.sites.get(s as usize))
                    .is_some_and(|s| s.category == Category::AllocatorCache),
            });
        }
    }

    /// Writes the snapshot pickle.
    pub fn finish<W: Write>(mut self, out: W) -> std::io::Result<(W, Written)> {
        self.ooms_until(u64::MAX);
        let a = self.analysis;
        let frames = |stack: u32| -> Vec<SnapFrame> {
            let frames = if stack > TENSOR_STACKS {
                a.tensor_sites
                    .get((stack - TENSOR_STACKS - 1) as usize)
                    .map(|s| &s.frames)
            } else {
                a.sites.get((stack - 1) as usize).map(|s| &s.frames)
            };
            frames.map_or_else(Vec::new, |f| f.iter().map(snap_frame).collect())
        };
        self.history.write(out, &frames)
    }
}

/// A frame as snapshots spell it: file, line and function.
fn snap_frame(f: &FrameText) -> SnapFrame {
    let (file, line) = match f.location.rsplit_once(':') {
        Some((file, line)) if line.parse::<u32>().is_ok() => {
            (file.to_string(), line.parse().unwrap_or(0))
        }
        _ if f.location.is_empty() => (f.module.clone(), 0),
        _ => (f.location.clone(), 0),
    };
    SnapFrame {
        filename: file,
        line,
        name: f.function.clone(),
    }
}
