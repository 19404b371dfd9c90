//! Findings turned into the change a user would make, each only when its
//! evidence is in the trace, with the figures that justify it
//! (`model::Remedy`; the reports crate puts them in words).
//!
//! - an out-of-memory error for more than the whole device → smaller
//!   pieces of work, or more devices;
//! - an out-of-memory error against PyTorch's memory fraction, the
//!   tensors and the request above it → the fraction that would have let
//!   the request through;
//! - an out-of-memory error with enough free in the allocator's segments
//!   but no block large enough → expandable segments;
//! - a line that keeps more memory step after step → that line, what it
//!   holds at the end;
//! - segments holding no tensor kept while the allocator took a new one
//!   for its reserved peak → `torch.cuda.empty_cache()` before that line;
//! - a role most of the allocated peak (docs/design.md, "Roles") →
//!   sharding or an 8-bit optimizer for optimizer state, checkpointing or a
//!   smaller micro-batch for activations, bfloat16 or FSDP for parameters
//!   and gradients, a shorter or 8-bit KV cache, the line whose
//!   temporaries set the peak;
//! - JAX/XLA preallocating most of the device → its environment variables;
//! - several processes on one device that came close to its memory, or
//!   one ran out of what the others held → a share per process.

use crate::model::{Analysis, OomLimit, Remedy, Role};

/// Several processes on a device are a finding when together they came
/// this close to its memory.
const SHARED_DEVICE_SHARE: f64 = 0.5;
/// A preallocation this large a share of the device is named as such.
const PREALLOCATION_SHARE: f64 = 0.4;
/// Idle segments at the reserved peak are worth an `empty_cache()` when
/// they are this share of it, and at least `IDLE_BYTES`.
const IDLE_SHARE: f64 = 0.25;
const IDLE_BYTES: u64 = 64 << 20;

/// Every remedy the analysis has evidence for, the errors' first.
pub fn remedies(a: &Analysis) -> Vec<Remedy> {
    let mut out = Vec::new();
    larger_than_device(a, &mut out);
    memory_fraction(a, &mut out);
    expandable_segments(a, &mut out);
    growing_lines(a, &mut out);
    empty_cache(a, &mut out);
    roles(a, &mut out);
    jax_preallocation(a, &mut out);
    shared_devices(a, &mut out);
    out
}

fn tensor_site(a: &Analysis, site: Option<u32>) -> Option<String> {
    site.map(|s| a.tensor_site_label(s))
}

/// A request that reached the program as an error and was larger than the
/// whole device: no setting makes it fit (one remedy per process and
/// device, the largest request).
fn larger_than_device(a: &Analysis, out: &mut Vec<Remedy>) {
    let mut largest: std::collections::BTreeMap<(u32, u32), (u64, u64, String)> =
        Default::default();
    let driver = a
        .ooms
        .iter()
        .filter(|o| o.reached_program() && o.device_total_bytes > 0)
        .map(|o| {
            (
                o.pid,
                o.device,
                o.requested_bytes,
                o.device_total_bytes,
                a.site_label(o.site),
            )
        });
    let framework = a.frameworks.iter().flat_map(|v| v.ooms.iter()).map(|o| {
        (
            o.pid,
            o.device,
            o.requested_bytes,
            o.device_total_bytes,
            tensor_site(a, o.site).unwrap_or_else(|| "an unknown site".into()),
        )
    });
    for (pid, device, requested, total, site) in driver.chain(framework) {
        if total == 0 || requested <= total {
            continue;
        }
        let e = largest
            .entry((pid, device))
            .or_insert((0, total, String::new()));
        if requested > e.0 {
            *e = (requested, total, site);
        }
    }
    for ((pid, device), (requested_bytes, device_total_bytes, site)) in largest {
        out.push(Remedy::LargerThanDevice {
            pid,
            device,
            requested_bytes,
            device_total_bytes,
            site,
        });
    }
}

fn memory_fraction(a: &Analysis, out: &mut Vec<Remedy>) {
    for v in &a.frameworks {
        // One remedy per process and device: the largest request refused.
        // Only where the tensors and the request were more than the limit:
        // under it, what was refused was a new segment beside free space
        // cut into pieces (the expandable-segments remedy), and a larger
        // fraction would only have hidden that.
        let Some((o, limit)) = v
            .ooms
            .iter()
            .filter(|o| o.limit == OomLimit::MemoryFraction && o.device_total_bytes > 0)
            .filter_map(|o| Some((o, o.limit_bytes?)))
            .filter(|(o, limit)| o.allocated_bytes.saturating_add(o.requested_bytes) > *limit)
            .max_by_key(|(o, _)| o.requested_bytes)
        else {
            continue;
        };
        let total = o.device_total_bytes as f64;
        let needed = o.allocated_bytes.saturating_add(o.requested_bytes);
        // Rounded up to the hundredth, as people write fractions.
        let needed_fraction = ((needed as f64 / total) * 100.0).ceil() / 100.0;
        out.push(Remedy::MemoryFraction {
            pid: o.pid,
            device: o.device,
            fraction: limit as f64 / total,
            limit_bytes: limit,
            requested_bytes: o.requested_bytes,
            request_seen: o.request_seen,
            allocated_bytes: o.allocated_bytes,
            device_total_bytes: o.device_total_bytes,
            device_free_bytes: o.device_free_bytes,
            needed_fraction,
            change: format!(
                "torch.cuda.set_per_process_memory_fraction({needed_fraction:.2}){}",
                if o.request_seen { "" } else { " or more" }
            ),
            site: tensor_site(a, o.site),
        });
    }
}

fn expandable_segments(a: &Analysis, out: &mut Vec<Remedy>) {
    for v in &a.frameworks {
        let Some(o) = v
            .ooms
            .iter()
            .filter(|o| {
                o.free_in_segments >= o.requested_bytes && o.largest_free_block < o.requested_bytes
            })
            .max_by_key(|o| o.free_in_segments)
        else {
            continue;
        };
        out.push(Remedy::ExpandableSegments {
            pid: o.pid,
            device: o.device,
            requested_bytes: o.requested_bytes,
            free_in_segments: o.free_in_segments,
            largest_free_block: o.largest_free_block,
            change: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".into(),
            site: tensor_site(a, o.site),
        });
    }
}

fn growing_lines(a: &Analysis, out: &mut Vec<Remedy>) {
    // Where a process marked steps, what its steps kept after the warm-up
    // is the evidence: a rise over time there is as likely its set-up
    // (gradients made once, a cache filled) as a leak.
    let mut judged_by_steps = Vec::new();
    for p in &a.steps {
        let Some(g) = &p.growth else { continue };
        judged_by_steps.push(p.pid);
        for k in &g.sites {
            let per_step = k.bytes.max(0) as u64;
            if per_step.saturating_mul(g.steps) < gmem_prof_model::GROWTH_MIN_BYTES {
                continue;
            }
            out.push(Remedy::GrowingPerStep {
                pid: p.pid,
                site: a.site_or_tensor_label(k.site, g.tensors),
                tensors: g.tensors,
                bytes_per_step: per_step,
                from_step: g.from_step,
                steps: g.steps,
            });
        }
    }
    for g in a
        .tensor_growth
        .iter()
        .filter(|g| !judged_by_steps.contains(&g.pid))
    {
        let Some(s) = a.tensor_sites.get(g.site as usize) else {
            continue;
        };
        out.push(Remedy::GrowingLine {
            pid: g.pid,
            site: s.label.clone(),
            tensors: true,
            growth_bytes: g.growth_bytes,
            held_most_bytes: s.max_live,
            held_at_end_bytes: s.live_at_exit_bytes,
        });
    }
    for g in a
        .growth
        .iter()
        .filter(|g| !judged_by_steps.contains(&g.pid))
    {
        let Some(s) = a.sites.get(g.site as usize) else {
            continue;
        };
        out.push(Remedy::GrowingLine {
            pid: g.pid,
            site: s.label.clone(),
            tensors: false,
            growth_bytes: g.growth_bytes,
            held_most_bytes: s.max_live,
            held_at_end_bytes: s.leaked_bytes.max(s.held_at_exit_bytes),
        });
    }
}

/// At the caching allocator's reserved peak, segments that held no tensor
/// (cached from an earlier phase) sat beside the new segment.
fn empty_cache(a: &Analysis, out: &mut Vec<Remedy>) {
    for v in &a.frameworks {
        let p = &v.at_reserved_peak;
        let idle = p.idle_segment_bytes;
        if idle < IDLE_BYTES || (idle as f64) < IDLE_SHARE * v.reserved_peak as f64 {
            continue;
        }
        let site = tensor_site(a, p.site);
        out.push(Remedy::EmptyCache {
            pid: v.pid,
            device: v.device,
            reserved_peak_bytes: v.reserved_peak,
            allocated_bytes: p.allocated_bytes,
            idle_segment_bytes: idle,
            idle_segments: p.idle_segments,
            time_ns: p.time_ns,
            change: match &site {
                Some(s) => format!("torch.cuda.empty_cache() before {s}"),
                None => "torch.cuda.empty_cache() between the program's phases".into(),
            },
            site,
        });
    }
}

/// A role is worth a remedy from this share of a view's allocated peak
/// (parameters with gradients from `WEIGHTS_SHARE`).
const ROLE_SHARE: f64 = 0.25;
const WEIGHTS_SHARE: f64 = 0.5;
/// Less than this is not worth changing code for.
const ROLE_MIN_BYTES: u64 = 1 << 20;

/// The roles that take most of a view's allocated peak, each with the
/// change that shrinks it and what that saves (`Remedy::Role`). Roles
/// come from the trace's evidence, so each remedy has its own: a
/// backward pass for activations, an optimizer's step for its state.
fn roles(a: &Analysis, out: &mut Vec<Remedy>) {
    for v in &a.frameworks {
        let Some(at) = &v.roles_at_peak else {
            continue;
        };
        if v.allocated_peak == 0 {
            continue;
        }
        let r = at.roles;
        let weights = r.get(Role::Parameter) + r.get(Role::Gradient);
        let candidates = [
            (
                Role::OptimizerState,
                r.get(Role::OptimizerState),
                ROLE_SHARE,
            ),
            (Role::Activation, r.get(Role::Activation), ROLE_SHARE),
            (Role::Parameter, weights, WEIGHTS_SHARE),
            (Role::KvCache, r.get(Role::KvCache), ROLE_SHARE),
            (Role::Temporary, r.get(Role::Temporary), ROLE_SHARE),
        ];
        for (role, bytes, threshold) in candidates {
            let share = bytes as f64 / v.allocated_peak as f64;
            // Temporaries are told apart from what is kept only by the
            // phases (without them, only a tensor freed at once is one:
            // the peak's own request, which no change shrinks).
            if bytes < ROLE_MIN_BYTES
                || share < threshold
                || (role == Role::Temporary && !at.by_phases)
            {
                continue;
            }
            // The lines at the peak that made this role: a quarter or more
            // of their bytes (a forward's line makes activations and
            // temporaries alike, in shares that vary with the iteration).
            let sites: Vec<(String, u64)> = v
                .peak_sites
                .iter()
                .filter(|s| {
                    let Some(t) = a.tensor_sites.get(s.site as usize) else {
                        return false;
                    };
                    let mine = match role {
                        Role::Parameter => {
                            t.roles.get(Role::Parameter) + t.roles.get(Role::Gradient)
                        }
                        _ => t.roles.get(role),
                    };
                    mine > 0 && mine >= t.roles.total() / 4
                })
                .take(3)
                .map(|s| (a.tensor_site_label(s.site), s.bytes))
                .collect();
            let (change, saving_bytes) = match role {
                Role::OptimizerState => (
                    "shard the optimizer state across ranks (torch.distributed.optim.ZeroRedundancyOptimizer, or FSDP), or an 8-bit optimizer (bitsandbytes' AdamW8bit)".to_string(),
                    bytes / 4 * 3,
                ),
                Role::Activation => (
                    "torch.utils.checkpoint.checkpoint around the model's largest blocks, a smaller micro-batch, or the forward pass under torch.autocast(\"cuda\", dtype=torch.bfloat16)".to_string(),
                    bytes / 2,
                ),
                Role::Parameter => (
                    "bfloat16 parameters and gradients, or FSDP across ranks".to_string(),
                    bytes / 2,
                ),
                Role::KvCache => (
                    "a shorter maximum length or fewer sequences at once, or an 8-bit KV cache".to_string(),
                    bytes / 2,
                ),
                _ => match sites.first() {
                    Some((line, b)) => (format!("compute {line} in chunks or in place"), *b),
                    None => continue,
                },
            };
            out.push(Remedy::Role {
                pid: v.pid,
                device: v.device,
                allocated_peak_bytes: v.allocated_peak,
                role,
                bytes,
                share,
                roles: r,
                sites,
                change,
                saving_bytes,
            });
        }
    }
}

/// XLA's BFC allocator takes most of the device at start (75% by default)
/// and sub-allocates inside: nvidia-smi shows it all as used. That is
/// something to change only where the device ran short: an allocation
/// failed on it, or another process used it while the pool was held.
fn jax_preallocation(a: &Analysis, out: &mut Vec<Remedy>) {
    for d in &a.devices {
        if d.total_memory == 0 {
            continue;
        }
        let failed_allocations = a.ooms.iter().filter(|o| o.device == d.device).count() as u64
            + a.frameworks
                .iter()
                .filter(|v| v.device == d.device)
                .map(|v| v.ooms.len() as u64)
                .sum::<u64>();
        for s in &a.sites {
            // The most the site held at once: the pool (its regions, when
            // XLA maps it in pieces, or with small allocations beside it).
            let largest = s.max_live;
            let share = largest as f64 / d.total_memory as f64;
            if share < PREALLOCATION_SHARE || s.allocator.as_deref() != Some(crate::sites::XLA_BFC)
            {
                continue;
            }
            // JAX's own figures, when read: the pool exactly, and what its
            // arrays used of it.
            let jax = a
                .framework_pools
                .iter()
                .filter(|p| p.device == d.device && s.pids.contains(&p.pid))
                .find(|p| p.framework.starts_with("JAX"));
            let largest = jax.map_or(largest, |p| p.pool_peak);
            let share = largest as f64 / d.total_memory as f64;
            let arrays_peak_bytes = jax.map(|p| p.in_use_peak);
            let jax_processes: Vec<_> = a
                .processes
                .iter()
                .filter(|p| s.pids.contains(&p.pid))
                .collect();
            let others_of_run = a
                .processes
                .iter()
                .filter(|p| !s.pids.contains(&p.pid) && p.devices.contains(&d.device))
                .filter(|p| {
                    jax_processes
                        .iter()
                        .any(|j| p.start_ns < j.end_ns && j.start_ns < p.end_ns)
                })
                .count() as u32;
            let others_in_device_view = d
                .device_view
                .as_ref()
                .map_or(0, |v| v.highest.other_processes.max(v.last.other_processes));
            let other_processes = others_of_run + others_in_device_view;
            if failed_allocations == 0 && other_processes == 0 {
                continue;
            }
            out.push(Remedy::JaxPreallocation {
                pids: s.pids.clone(),
                device: d.device,
                preallocated_bytes: largest,
                device_total_bytes: d.total_memory,
                fraction: share,
                failed_allocations,
                other_processes,
                arrays_peak_bytes,
                change: "XLA_PYTHON_CLIENT_PREALLOCATE=false (or XLA_PYTHON_CLIENT_MEM_FRACTION=…)"
                    .into(),
            });
        }
    }
}

/// Several processes of the run held memory on one device at the same
/// time, and together came close to its memory, or one of them ran out of
/// a request that the others' memory would have made room for.
fn shared_devices(a: &Analysis, out: &mut Vec<Remedy>) {
    for d in &a.devices {
        let on_device: Vec<_> = a
            .processes
            .iter()
            .filter(|p| p.devices.contains(&d.device) && p.peak_bytes > 0)
            .collect();
        let sharing: Vec<_> = on_device
            .iter()
            .copied()
            .filter(|p| {
                on_device
                    .iter()
                    .any(|q| q.pid != p.pid && q.start_ns < p.end_ns && p.start_ns < q.end_ns)
            })
            .collect();
        if sharing.len() < 2 || d.total_memory == 0 {
            continue;
        }
        let others_peak = |pid: u32| -> u64 {
            sharing
                .iter()
                .filter(|p| p.pid != pid)
                .map(|p| p.peak_bytes)
                .sum()
        };
        let ran_out = a.ooms.iter().any(|o| {
            o.device == d.device && o.reached_program() && o.requested_bytes <= others_peak(o.pid)
        });
        let close = d.peak_bytes as f64 >= SHARED_DEVICE_SHARE * d.total_memory as f64;
        if !(ran_out || close) {
            continue;
        }
        let share = (0.95 / sharing.len() as f64 * 100.0).floor() / 100.0;
        out.push(Remedy::SharedDevice {
            device: d.device,
            processes: sharing.iter().map(|p| (p.pid, p.peak_bytes)).collect(),
            combined_peak_bytes: d.peak_bytes,
            device_total_bytes: d.total_memory,
            ran_out,
            change: format!(
                "torch.cuda.set_per_process_memory_fraction({share:.2}) in each of the {} processes, or a GPU each (CUDA_VISIBLE_DEVICES)",
                sharing.len()
            ),
        });
    }
}
