//! The input's warnings that only the finished sweep can give: records
//! lost while recording, events applied late, damaged sizes, frees with no
//! allocation, records of a newer format.

use crate::engine::{self, Engine};
use crate::input;
use crate::model::*;

pub(super) fn add_sweep_warnings(summary: &mut InputSummary, engine: &Engine) {
    if summary.dropped_records > 0 {
        summary.warnings.push(InputWarning::RecordsLost {
            records: summary.dropped_records,
        });
    }
    if summary.late_events > 0 {
        summary.warnings.push(InputWarning::LateEvents {
            events: summary.late_events,
            window_ns: input::WINDOW_NS,
        });
    }
    if engine.impossible_sizes > 0 {
        summary.warnings.push(InputWarning::ImpossibleSizes {
            events: engine.impossible_sizes,
            limit_bytes: engine::EVENT_BYTES_LIMIT,
        });
    }
    let frees: u64 = engine.procs.iter().map(|s| s.unmatched_frees).sum();
    if frees > 0 {
        summary
            .warnings
            .push(InputWarning::UnmatchedFrees { frees });
    }
    let records: u64 = engine.procs.iter().map(|s| s.defs.unknown_records).sum();
    if records > 0 {
        summary
            .warnings
            .push(InputWarning::NewerRecords { records });
    }
}
