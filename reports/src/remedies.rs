//! The analysis's remedies in words: what to change, then why, with the
//! figures from the trace.

use gmem_prof_model::{Analysis, Remedy, Role, RoleBytes};

use crate::format::bytes;

/// One remedy: the change to make, and the evidence for it.
pub struct Advice {
    pub change: String,
    pub because: String,
}

fn percent(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

#[expect(
    clippy::too_many_lines,
    reason = "one remedy after another, each with its evidence: a list read top to bottom"
)]
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
            request_seen,
            allocated_bytes,
            device_total_bytes,
            device_free_bytes,
            needed_fraction,
            change,
            site,
        } => Advice {
            change: format!(
                "raise PyTorch's memory fraction to {needed_fraction:.2}{}: {change}",
                if *request_seen { "" } else { " at least" }
            ),
            because: format!(
                "pid {pid} ran out on device {device} against its memory fraction {fraction:.2} ({} of {}), asking for {}{} with {} allocated, while the device had {} free",
                bytes(*limit_bytes),
                bytes(*device_total_bytes),
                crate::words::request_words(*request_seen, *requested_bytes),
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
        Remedy::GrowingPerStep {
            pid,
            site,
            tensors,
            bytes_per_step,
            from_step,
            steps,
        } => Advice {
            change: if *tensors {
                format!("stop {site} from keeping tensors every step (a list or dict that keeps them, a loss kept with its graph: keep `.item()` or `.detach()` instead)")
            } else {
                format!("free what {site} allocates every step once it is done with it")
            },
            because: format!(
                "in pid {pid} it kept {} per step on average over steps {from_step} to {} (after the warm-up), {} in all",
                bytes(*bytes_per_step),
                from_step + steps - 1,
                bytes(bytes_per_step.saturating_mul(*steps))
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
        Remedy::EmptyCache {
            pid,
            device,
            reserved_peak_bytes,
            allocated_bytes,
            idle_segment_bytes,
            idle_segments,
            time_ns,
            site,
            change,
        } => Advice {
            change: format!("give cached memory back before the peak: {change}"),
            because: format!(
                "at {} pid {pid}'s caching allocator took a new segment{} on device {device} while {} segment{} holding no tensor ({}) stayed cached: it reserved {} for {} of tensors; empty_cache() there would have returned those {} and lowered the peak nvidia-smi shows by as much",
                crate::format::time(*time_ns),
                site.as_ref().map_or_else(String::new, |s| format!(" for {s}")),
                idle_segments,
                if *idle_segments == 1 { "" } else { "s" },
                bytes(*idle_segment_bytes),
                bytes(*reserved_peak_bytes),
                bytes(*allocated_bytes),
                bytes(*idle_segment_bytes),
            ),
        },
        Remedy::Role {
            pid,
            device,
            allocated_peak_bytes,
            role,
            bytes: b,
            share,
            roles,
            sites,
            change,
            saving_bytes,
        } => Advice {
            change: format!("{}: {change}", role_change_head(*role)),
            because: format!(
                "{} were {} ({}) of pid {pid}'s {} allocated peak on device {device}{}; {}",
                if *role == Role::Parameter {
                    "parameters and gradients"
                } else {
                    role.as_str()
                },
                bytes(*b),
                percent(*share),
                bytes(*allocated_peak_bytes),
                if sites.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", the largest from {}",
                        sites
                            .iter()
                            .map(|(s, b)| format!("{s} ({})", bytes(*b)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
                role_saving(*role, *b, roles, *saving_bytes)
            ),
        },
        Remedy::JaxPreallocation {
            pids,
            device,
            preallocated_bytes,
            device_total_bytes,
            fraction,
            failed_allocations,
            other_processes,
            arrays_peak_bytes,
            change,
        } => {
            let short = match (failed_allocations, other_processes) {
                (0, n) => format!("{n} other process{} used the device meanwhile", plural_es(*n)),
                (f, 0) => format!("{f} allocation{} failed on it", if *f == 1 { "" } else { "s" }),
                (f, n) => format!(
                    "{f} allocation{} failed on it and {n} other process{} used it meanwhile",
                    if *f == 1 { "" } else { "s" },
                    plural_es(*n)
                ),
            };
            Advice {
                change: format!("stop JAX from taking most of the GPU at start: {change}"),
                because: format!(
                    "XLA's allocator took {} ({} of {}) on device {device} for its own pool as pid{} {} started, {}, and {short}",
                    bytes(*preallocated_bytes),
                    percent(*fraction),
                    bytes(*device_total_bytes),
                    if pids.len() == 1 { "" } else { "s" },
                    pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "),
                    match arrays_peak_bytes {
                        Some(b) => format!("while JAX's arrays used at most {} of it (JAX's own count)", bytes(*b)),
                        None => "whatever JAX's arrays needed".into(),
                    }
                ),
            }
        }
    }
}

fn plural_es(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "es"
    }
}

/// Every remedy of the analysis in words, in its order.
pub fn all(a: &Analysis) -> Vec<Advice> {
    a.remedies.iter().map(advice).collect()
}

/// What a role remedy changes, in a few words.
fn role_change_head(role: Role) -> &'static str {
    match role {
        Role::OptimizerState => "keep less optimizer state",
        Role::Activation => "keep fewer activations",
        Role::Parameter => "keep parameters and gradients in less memory",
        Role::KvCache => "keep a smaller KV cache",
        _ => "make fewer temporaries at the peak",
    }
}

/// What a role remedy would save, computed from the peak's figures.
fn role_saving(role: Role, b: u64, roles: &RoleBytes, saving: u64) -> String {
    let params = roles.get(Role::Parameter);
    match role {
        Role::OptimizerState => {
            let per = if params > 0 {
                format!(
                    "{:.1} bytes of state per byte of parameters (Adam keeps two tensors per parameter, SGD with momentum one); ",
                    b as f64 / params as f64
                )
            } else {
                String::new()
            };
            format!(
                "{per}sharded across 2 ranks each keeps {} (saves {}), across 8 {} (saves {}); an 8-bit optimizer keeps a quarter of 32-bit state (saves {})",
                bytes(b / 2),
                bytes(b - b / 2),
                bytes(b / 8),
                bytes(b - b / 8),
                bytes(saving)
            )
        }
        Role::Activation => format!(
            "half the micro-batch keeps half of them (saves {}); checkpointing keeps only each checkpointed block's inputs, and autocast to bfloat16 halves float32 activations",
            bytes(saving)
        ),
        Role::Parameter => format!(
            "bfloat16 halves float32 parameters and gradients (saves {}); FSDP across N ranks keeps 1/N of both",
            bytes(saving)
        ),
        Role::KvCache => format!(
            "it was {} the parameters' {}; an 8-bit cache halves a 16-bit one (saves {})",
            if params > 0 {
                format!("{:.1}×", b as f64 / params as f64)
            } else {
                "beside".to_string()
            },
            bytes(params),
            bytes(saving)
        ),
        _ => format!("the largest line's temporaries were {} of them", bytes(saving)),
    }
}
