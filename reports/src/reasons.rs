//! The one place where the model's reasons are put in words: the input's
//! warnings, a device's fragmentation blind spots, why part of a run was
//! not profiled, what the collector said of a process and a budget that
//! judged nothing. The page, the summary, `check`, `diff` and the CLI's
//! warnings all say them so.

use gmem_prof_model::budgets::UnmatchedBudget;
use gmem_prof_model::{BlindSpot, InputWarning, NotProfiled, ProcessMessage, UnprofiledPart};

/// What `report`, `check` and `diff` say of a process whose PyTorch
/// allocator was found but not looked into.
pub const ALLOCATOR_UNSEEN: &str = "PyTorch's caching allocator was not seen from the inside";

/// A warning about the input, as one sentence.
pub fn input_warning(w: &InputWarning) -> String {
    match w {
        InputWarning::RecordsLost { records } => format!(
            "{records} records were lost while recording (CUPTI or the collector could not keep \
             up): figures may be incomplete"
        ),
        InputWarning::LateEvents { events, window_ns } => format!(
            "{events} events arrived more than {} s out of order and were applied late",
            window_ns / 1_000_000_000
        ),
        InputWarning::ImpossibleSizes {
            events,
            limit_bytes,
        } => format!(
            "left out {events} event(s) claiming {limit_bytes} bytes (1 PiB) or more: the trace \
             is damaged or was written by a faulty collector"
        ),
        InputWarning::UnmatchedFrees { frees } => format!(
            "{frees} frees had no matching allocation in the trace (allocated before recording \
             started, or their allocation record was lost)"
        ),
        InputWarning::NewerRecords { records } => format!(
            "{records} records of a newer format version were skipped: use a newer gmem-prof to \
             see them"
        ),
        InputWarning::NoEvents => "the trace holds no events".into(),
        InputWarning::DamagedFile { file, damage } => format!("{file}: {damage}"),
        InputWarning::DamagedChunk { offset, reason } => {
            format!("skipped the rest of a damaged chunk at byte {offset}: {reason}")
        }
        InputWarning::Worded { text } => text.clone(),
    }
}

/// What a device's fragmentation figure cannot see, as one paragraph.
pub fn blind_spot(b: &BlindSpot) -> &str {
    match b {
        BlindSpot::TorchCudaPool => {
            "PyTorch's cudaMallocAsync backend: its tensors are CUDA's stream-ordered \
             allocations, shown with the framework allocators as its allocated memory, and the \
             pool's size as its reserved memory. CUDA does not say how the free memory inside \
             the pool lies: its fragmentation here is estimated from addresses."
        }
        BlindSpot::TorchSeenInside => {
            "PyTorch's caching allocator was seen from the inside: its tensors and the \
             fragmentation of each of its pools are shown with the framework allocators."
        }
        BlindSpot::CachingAllocatorUnseen => {
            "A caching allocator (PyTorch's default, CuPy's pool or XLA's BFC) sub-allocates \
             inside blocks the trace sees whole: how fragmented those blocks are is not visible. \
             gmem-prof sees inside PyTorch's (2.1 or later) when it can attach to it; the \
             process's messages say why it could not."
        }
        BlindSpot::NoReservedRegions => {
            "No stream-ordered pool or VMM reservation was used on this device: there is no \
             reserved region whose inside the trace sees, so no fragmentation figure."
        }
        BlindSpot::Worded { text } => text,
    }
}

/// Why a process was not wholly profiled, as a clause.
pub fn not_profiled(r: &NotProfiled) -> String {
    match r {
        NotProfiled::CollectorError { message } => {
            format!("the collector did not profile all of it: {message}")
        }
        NotProfiled::RecordsDropped { records } => {
            format!("{records} records were dropped (buffers full): its figures are short of them")
        }
        NotProfiled::CutShort => "it was cut short (killed, crashed, or still running when the \
                                  trace was written): what it did after the collector's last \
                                  flush is missing"
            .into(),
        NotProfiled::TensorsUnseen { detail } => format!(
            "its tensors are not seen, so budgets on them cannot be judged: {ALLOCATOR_UNSEEN}: \
             {detail}"
        ),
        NotProfiled::Worded { text } => text.clone(),
    }
}

/// A part of a run that was not profiled: "pid N (program): why".
pub fn unprofiled_part(p: &UnprofiledPart) -> String {
    format!("pid {} ({}): {}", p.pid, p.program, not_profiled(&p.reason))
}

/// What was said of a process, with its level first.
pub fn process_message(m: &ProcessMessage) -> String {
    match m {
        ProcessMessage::Collector { level, text } => format!("{level}: {text}"),
        ProcessMessage::NotEndedCleanly => "warning: the process did not end cleanly (killed, \
                                            crashed or still running): what it held is shown \
                                            as live when the trace ends"
            .into(),
        ProcessMessage::Worded { text } => text.clone(),
    }
}

/// A budget that judged nothing, as a warning.
pub fn unmatched_budget(u: &UnmatchedBudget) -> String {
    match u {
        UnmatchedBudget::Device(d) => {
            format!("the budget for device {d} checks nothing: the trace has no device {d}")
        }
        UnmatchedBudget::Process(key) => format!(
            "the budget for process {key:?} checks nothing: no process's command line contains it"
        ),
        UnmatchedBudget::Range(name) => format!(
            "the budget for range {name:?} checks nothing: no process finished an NVTX range of that name (is the program recorded with its NVTX ranges, and is the name exact?)"
        ),
    }
}
