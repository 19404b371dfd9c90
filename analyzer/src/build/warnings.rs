//! The input's warnings that only the finished sweep can give: records
//! lost while recording, events applied late, damaged sizes, frees with no
//! allocation, records of a newer format.

use crate::engine::{self, Engine};
use crate::input;
use crate::model::*;

pub(super) fn add_sweep_warnings(summary: &mut InputSummary, engine: &Engine) {
    if summary.dropped_records > 0 {
        summary.warnings.push(format!(
            "{} records were lost while recording (CUPTI or the collector could not keep up): \
             figures may be incomplete",
            summary.dropped_records
        ));
    }
    if summary.late_events > 0 {
        summary.warnings.push(format!(
            "{} events arrived more than {} s out of order and were applied late",
            summary.late_events,
            input::WINDOW_NS / 1_000_000_000
        ));
    }
    if engine.impossible_sizes > 0 {
        summary.warnings.push(format!(
            "left out {} event(s) claiming {} bytes (1 PiB) or more: the trace is damaged \
             or was written by a faulty collector",
            engine.impossible_sizes,
            engine::EVENT_BYTES_LIMIT
        ));
    }
    let unmatched: u64 = engine.procs.iter().map(|s| s.unmatched_frees).sum();
    if unmatched > 0 {
        summary.warnings.push(format!(
            "{unmatched} frees had no matching allocation in the trace (allocated before recording \
             started, or their allocation record was lost)"
        ));
    }
    let unknown: u64 = engine.procs.iter().map(|s| s.defs.unknown_records).sum();
    if unknown > 0 {
        summary.warnings.push(format!(
            "{unknown} records of a newer format version were skipped: use a newer gmem-prof to see them"
        ));
    }
}
