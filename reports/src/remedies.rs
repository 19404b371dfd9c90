//! The analysis's remedies in words: what to change, then why, with the
//! figures from the trace.

use gmem_prof_analyzer::model::{Analysis, Remedy};

use crate::format::bytes;

/// One remedy: the change to make, and the evidence for it.
pub struct Advice {
    pub change: String,
    pub because: String,
}

fn percent(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

pub fn advice(r: &Remedy) -> Advice {
    match r {
        Remedy::LargerThanDevice {
            pid,
            device,
            requested_bytes,
            device_total_bytes,
            site,
        } => Advice {
            change: format!(
                "ask for less at once at {site}: a smaller batch or chunk, or the work split over several devices"
            ),
            because: format!(
                "pid {pid} asked for {} on device {device}, which has {} in all: no cache or setting makes that fit",
                bytes(*requested_bytes),
                bytes(*device_total_bytes)
            ),
        },
        Remedy::MemoryFraction {
            pid,
            device,
            fraction,
            limit_bytes,
            requested_bytes,
            allocated_bytes,
            device_total_bytes,
            device_free_bytes,
            needed_fraction,
            change,
            site,
        } => Advice {
            change: format!("raise PyTorch's memory fraction to {needed_fraction:.2}: {change}"),
            because: format!(
                "pid {pid} ran out on device {device} against its memory fraction {fraction:.2} ({} of {}), asking for {}{} with {} allocated, while the device had {} free",
                bytes(*limit_bytes),
                bytes(*device_total_bytes),
                bytes(*requested_bytes),
                site.as_ref().map_or_else(String::new, |s| format!(" at {s}")),
                bytes(*allocated_bytes),
                bytes(*device_free_bytes)
            ),
        },
        Remedy::ExpandableSegments {
            pid,
            device,
            requested_bytes,
            free_in_segments,
            largest_free_block,
            change,
            site,
        } => Advice {
            change: format!("let PyTorch's allocator grow its segments in place: {change}"),
            because: format!(
                "pid {pid} ran out on device {device} asking for {}{} while {} were free inside its segments, in pieces no larger than {}: the memory was there but fragmented",
                bytes(*requested_bytes),
                site.as_ref().map_or_else(String::new, |s| format!(" at {s}")),
                bytes(*free_in_segments),
                bytes(*largest_free_block)
            ),
        },
        Remedy::GrowingLine {
            pid,
            site,
            tensors,
            growth_bytes,
            held_most_bytes,
            held_at_end_bytes,
        } => Advice {
            change: if *tensors {
                format!("stop {site} from keeping its tensors alive (a list or dict that keeps them, a loss kept with its graph: keep `.item()` or `.detach()` instead)")
            } else {
                format!("free what {site} allocates once it is done with it")
            },
            because: format!(
                "in pid {pid} its memory rose by {} through the run, up to {} held at once; {}",
                bytes(*growth_bytes),
                bytes(*held_most_bytes),
                if *held_at_end_bytes > 0 {
                    format!("{} still held when the process ended", bytes(*held_at_end_bytes))
                } else {
                    "freed only as the process ended".to_string()
                }
            ),
        },
        Remedy::SharedDevice {
            device,
            processes,
            combined_peak_bytes,
            device_total_bytes,
            ran_out,
            change,
        } => Advice {
            change: format!("give each process a share of device {device}: {change}"),
            because: format!(
                "{} processes held memory on device {device} at once ({}), together up to {} of {}{}",
                processes.len(),
                processes
                    .iter()
                    .map(|(pid, peak)| format!("pid {pid} up to {}", bytes(*peak)))
                    .collect::<Vec<_>>()
                    .join(", "),
                bytes(*combined_peak_bytes),
                bytes(*device_total_bytes),
                if *ran_out {
                    ", and one ran out of a request the others' memory would have held"
                } else {
                    ""
                }
            ),
        },
        Remedy::JaxPreallocation {
            pids,
            device,
            preallocated_bytes,
            device_total_bytes,
            fraction,
            arrays_peak_bytes,
            change,
        } => Advice {
            change: format!("stop JAX from taking most of the GPU at start: {change}"),
            because: format!(
                "XLA's allocator took {} ({} of {}) on device {device} for its own pool as pid{} {} started; nvidia-smi shows all of it as used, {}",
                bytes(*preallocated_bytes),
                percent(*fraction),
                bytes(*device_total_bytes),
                if pids.len() == 1 { "" } else { "s" },
                pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "),
                match arrays_peak_bytes {
                    Some(b) => format!("while JAX's arrays used at most {} of it (JAX's own count)", bytes(*b)),
                    None => "whatever JAX's arrays need".into(),
                }
            ),
        },
    }
}

/// Every remedy of the analysis in words, in its order.
pub fn all(a: &Analysis) -> Vec<Advice> {
    a.remedies.iter().map(advice).collect()
}
