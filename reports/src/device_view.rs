//! The device's own view in words: what `nvidia-smi` showed, taken apart
//! into what the trace tracked and what it did not.

use gmem_prof_model::DeviceViewMoment;

use crate::format::{bytes, time};

/// "nvidia-smi showed 6.00 GiB used of 80.0 GiB: …", one sentence.
pub fn sentence(m: &DeviceViewMoment) -> String {
    let head = format!(
        "nvidia-smi showed {} used of {} ({} free) at {} ({}, pid {})",
        bytes(m.used_bytes),
        bytes(m.total_bytes),
        bytes(m.free_bytes),
        time(m.time_ns),
        m.reason,
        m.pid
    );
    let others = if m.other_processes == 0 {
        "no other process".to_string()
    } else {
        format!(
            "{} used by {} other process{}",
            bytes(m.other_processes_bytes),
            m.other_processes,
            if m.other_processes == 1 { "" } else { "es" }
        )
    };
    let reserved = if m.driver_reserved_bytes > 0 {
        format!(
            "; the driver keeps another {} for itself, counted as neither used nor free",
            bytes(m.driver_reserved_bytes)
        )
    } else {
        String::new()
    };
    let allocations = m.tracked_bytes - m.pools_unused_bytes;
    let mut tracked = format!("{} in allocations the trace tracked", bytes(allocations));
    if m.framework_free_bytes > 0 {
        tracked.push_str(&format!(
            " ({} of it free inside the framework allocators' segments: their cache)",
            bytes(m.framework_free_bytes)
        ));
    }
    if m.pools_unused_bytes > 0 {
        tracked.push_str(&format!(
            ", {} held by memory pools with no allocation in it",
            bytes(m.pools_unused_bytes)
        ));
    }
    match (m.context_and_untracked_bytes, m.unattributed_bytes) {
        (Some(context), Some(unattributed)) => format!(
            "{head}: {tracked}, {} in this run's CUDA contexts and other memory no watched call \
             allocated, {others}, {} charged to no process{reserved}",
            bytes(context),
            bytes(unattributed)
        ),
        _ => format!(
            "{head}: {tracked}, {others}; NVML did not list this run's processes (in a \
             container it may list the host's pids), so their CUDA contexts cannot be told \
             apart{reserved}"
        ),
    }
}
