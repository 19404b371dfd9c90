//! The terminal summary: the plain questions answered in a few lines.

use std::io::{self, Write};

use gmem_prof_model::{Analysis, Category, DeviceReport, OomOutcome, Site};

use crate::format::{bytes, percent, time};
use crate::reasons::{input_warning, unprofiled_part};
use crate::words::{alike_details, peak_lines, site_path, TOP};

/// The sites' labels, each with what tells it apart from the others of
/// the same label among them (`alike_details`).
fn told_apart(a: &Analysis, sites: &[&Site]) -> Vec<String> {
    let ids: Vec<u32> = sites.iter().map(|s| s.id).collect();
    sites
        .iter()
        .zip(alike_details(a, &ids))
        .map(|(s, d)| match d {
            Some(d) => format!("{}, {d}", s.label),
            None => s.label.clone(),
        })
        .collect()
}

/// What must be read first: a run not wholly profiled, the reason it ran
/// out of memory, and what to change.
pub(crate) fn headline(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    // First: a run not wholly profiled shows less than it used.
    let missing = a.not_profiled();
    if !missing.is_empty() {
        writeln!(
            w,
            "NOT PROFILED: part of this run is missing from the trace, so every figure below is short of what it used:"
        )?;
        for m in missing.iter().map(unprofiled_part) {
            writeln!(w, "  {m}")?;
        }
        writeln!(w)?;
    }
    if let Some(why) = crate::framework::why_out_of_memory(a) {
        writeln!(w, "RAN OUT OF MEMORY: {why}")?;
        writeln!(w)?;
    }
    let advice = crate::remedies::all(a);
    if !advice.is_empty() {
        writeln!(w, "WHAT TO CHANGE (from the evidence below):")?;
        for (i, r) in advice.iter().enumerate() {
            writeln!(w, "  {}. {}", i + 1, r.change)?;
            writeln!(w, "     because {}", r.because)?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// Processes, devices, events and duration, in one line.
pub(crate) fn overview(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    let events = a.input.memory_events + a.input.api_calls + a.input.kernels;
    writeln!(
        w,
        "{} process{}, {} device{}, {} events over {}",
        a.processes.len(),
        if a.processes.len() == 1 { "" } else { "es" },
        a.devices.len(),
        if a.devices.len() == 1 { "" } else { "s" },
        events,
        time(a.timeline.end_ns)
    )?;
    for line in a
        .processes
        .iter()
        .filter_map(crate::format::recorded_window)
    {
        writeln!(w, "{line}")?;
    }
    Ok(())
}

/// Each device: its peak and what was live then, kernels, fragmentation.
pub(crate) fn devices(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for d in &a.devices {
        device_peak(a, d, w)?;
        frameworks_at_peak(a, d, w)?;
        peak_sites(a, d, w)?;
        outside_frameworks(a, d, w)?;
        kernels_at_peak(d, w)?;
        worst_fragmentation(d, w)?;
    }
    Ok(())
}

/// A device's heading: its peak by kind, what allocators reserved, what
/// its pools held, and what the device itself showed.
fn device_peak(a: &Analysis, d: &DeviceReport, w: &mut dyn Write) -> io::Result<()> {
    let kinds: Vec<String> = d
        .peak_by_kind
        .iter()
        .map(|k| format!("{} {}", k.kind, bytes(k.bytes)))
        .collect();
    writeln!(
        w,
        "\ndevice {} ({}{}): peak {} live at {} ({})",
        d.device,
        d.name,
        if d.total_memory > 0 {
            format!(", {}", bytes(d.total_memory))
        } else {
            String::new()
        },
        bytes(d.peak_bytes),
        time(d.peak_time_ns),
        kinds.join(", ")
    )?;
    if d.reserved_peak > d.peak_bytes {
        writeln!(
            w,
            "  reserved by allocators at most {}",
            bytes(d.reserved_peak)
        )?;
    }
    for line in crate::pools::on_device(a, d.device) {
        writeln!(w, "  inside it: {line}")?;
    }
    if let Some(v) = &d.device_view {
        writeln!(
            w,
            "  at its highest, {}",
            crate::device_view::sentence(&v.highest)
        )?;
        if v.last != v.highest {
            writeln!(w, "  last, {}", crate::device_view::sentence(&v.last))?;
        }
    }
    Ok(())
}

/// The allocators seen from the inside at a device's peak: their
/// segments, the tensors in them by site, and the free part.
fn frameworks_at_peak(a: &Analysis, d: &DeviceReport, w: &mut dyn Write) -> io::Result<()> {
    for f in &d.frameworks_at_peak {
        writeln!(
            w,
            "  {:>6} {:>10} in {}:",
            percent(f.segment_bytes, d.peak_bytes),
            bytes(f.segment_bytes),
            crate::framework::at_device_peak_words(f)
        )?;
        let free = f.segment_bytes.saturating_sub(f.tensor_bytes);
        let shown = &f.tensor_sites[..f.tensor_sites.len().min(TOP)];
        for s in shown {
            writeln!(
                w,
                "    {:>6} {:>10} in {:>5} × {}",
                percent(s.bytes, d.peak_bytes),
                bytes(s.bytes),
                s.count,
                a.tensor_site_label(s.site)
            )?;
        }
        if f.tensor_sites.len() > TOP {
            let rest: u64 = f.tensor_sites[TOP..].iter().map(|s| s.bytes).sum();
            writeln!(
                w,
                "    {:>6} {:>10} in tensors of {} more sites",
                percent(rest, d.peak_bytes),
                bytes(rest),
                f.tensor_sites.len() - TOP
            )?;
        }
        if free > 0 {
            writeln!(
                w,
                "    {:>6} {:>10} free in the segments (the allocator's cache)",
                percent(free, d.peak_bytes),
                bytes(free)
            )?;
        }
    }
    Ok(())
}

/// The sites live at a device's peak (outside the allocators taken
/// apart above, when there are any).
fn peak_sites(a: &Analysis, d: &DeviceReport, w: &mut dyn Write) -> io::Result<()> {
    if d.frameworks_at_peak.is_empty() {
        peak_lines(
            w,
            "",
            &d.peak_sites,
            d.peak_bytes,
            |s| a.site_label(s),
            |ids| alike_details(a, ids),
        )?;
    } else if !d.peak_sites.is_empty() {
        let outside: u64 = d.peak_sites.iter().map(|s| s.bytes).sum();
        writeln!(
            w,
            "  {:>6} {:>10} outside the framework allocators:",
            percent(outside, d.peak_bytes),
            bytes(outside)
        )?;
        peak_lines(
            w,
            "  ",
            &d.peak_sites,
            d.peak_bytes,
            |s| a.site_label(s),
            |ids| ids.iter().map(|&id| site_path(a, id)).collect(),
        )?;
    }
    Ok(())
}

/// What lay outside the framework allocators at a device's peak, where
/// the peak list above did not already say it.
fn outside_frameworks(a: &Analysis, d: &DeviceReport, w: &mut dyn Write) -> io::Result<()> {
    // Where the peak list already is what lies outside (the
    // allocators' segments were taken apart above), it is not said twice.
    if let Some(o) = d
        .outside_frameworks
        .as_ref()
        .filter(|_| d.frameworks_at_peak.is_empty())
    {
        let top: Vec<String> = o
            .sites
            .iter()
            .take(3)
            .map(|s| {
                let via = a
                    .sites
                    .get(s.site as usize)
                    .and_then(|site| crate::format::library_via("", &site.via))
                    .map_or_else(String::new, |v| format!(" via {v}"));
                format!("{} {}{via}", bytes(s.bytes), a.site_label(s.site))
            })
            .collect();
        writeln!(
            w,
            "  outside the framework allocators at the peak: {}{}",
            bytes(o.bytes),
            if top.is_empty() {
                String::new()
            } else {
                format!(" ({})", top.join("; "))
            }
        )?;
    }
    Ok(())
}

/// The kernel running at a device's peak, or launched around it.
fn kernels_at_peak(d: &DeviceReport, w: &mut dyn Write) -> io::Result<()> {
    let running = d.kernels_at_peak.first();
    let launched = d.kernels_launched_before_peak.last();
    let next = d.next_kernel_after_peak.as_ref();
    match (running, launched, next) {
        (Some(k), _, _) => writeln!(w, "  kernel running at the peak: {}", k.name)?,
        (None, Some(before), after) => writeln!(
            w,
            "  kernels launched around the peak: {} before, {} after",
            before.name,
            after.map_or("none", |k| k.name.as_str())
        )?,
        (None, None, Some(k)) if !k.timed => {
            writeln!(w, "  first kernel launched after the peak: {}", k.name)?
        }
        (None, None, Some(k)) => writeln!(w, "  next kernel after the peak: {}", k.name)?,
        (None, None, None) if !d.kernels_traced => {
            writeln!(w, "  kernels were not traced (recorded with --kernels off)")?
        }
        _ => {}
    }
    Ok(())
}

/// A device's worst fragmentation over the run.
fn worst_fragmentation(d: &DeviceReport, w: &mut dyn Write) -> io::Result<()> {
    if let Some(f) = &d.fragmentation.worst {
        let estimated = d.fragmentation.regions.iter().any(|r| r.estimated);
        writeln!(
            w,
            "  worst fragmentation {:.2} at {}: {} free, largest free block {}{}",
            f.fragmentation,
            time(f.time_ns),
            bytes(f.free_bytes),
            bytes(f.largest_free_bytes),
            if estimated {
                " (pool layout estimated)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

/// Memory mapped from other processes, and the inside of the framework
/// allocators and pools.
pub(crate) fn inside_allocators(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for line in a.processes.iter().filter_map(crate::format::ipc_mapped) {
        writeln!(w, "\n{line}")?;
    }
    crate::framework::summary(a, w)?;
    crate::pools::summary(a, w)?;
    Ok(())
}

/// What was still held when the processes ended: leaks, and what is not
/// a leak (caches, libraries, module globals).
pub(crate) fn held_at_exit(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    let leaked = a.leaked_bytes();
    let leaked_n: u64 = a.processes.iter().map(|p| p.at_exit.leaked_count).sum();
    let cached = a.cached_bytes();
    writeln!(w)?;
    if leaked == 0 {
        writeln!(w, "leaks: none")?;
    } else {
        writeln!(
            w,
            "leaks: {} in {} allocations never freed",
            bytes(leaked),
            leaked_n
        )?;
        let sites = a.leaking_sites();
        let sites = &sites[..sites.len().min(TOP)];
        for (s, label) in sites.iter().zip(told_apart(a, sites)) {
            writeln!(
                w,
                "  {:>10} in {:>5} × {label}",
                bytes(s.leaked_bytes),
                s.leaked_count,
            )?;
        }
    }
    if cached > 0 {
        writeln!(
            w,
            "cached at exit: {} held by a caching allocator (PyTorch, CuPy, XLA): not a leak",
            bytes(cached)
        )?;
    }
    let library = a.library_bytes();
    if library > 0 {
        writeln!(
            w,
            "held by libraries at exit: {} (CUDA library handles, workspaces, graph pools, kept for the process's life): not a leak",
            bytes(library)
        )?;
        let sites = a.sites_held_at_exit(Category::Library);
        let sites = &sites[..sites.len().min(TOP)];
        for (s, label) in sites.iter().zip(told_apart(a, sites)) {
            writeln!(
                w,
                "  {:>10} in {:>5} × {label}",
                bytes(s.held_at_exit_bytes),
                s.held_at_exit_count,
            )?;
        }
    }
    let globals = a.module_globals_bytes();
    if globals > 0 {
        writeln!(
            w,
            "module globals at exit: {} (__device__ / __managed__ variables)",
            bytes(globals)
        )?;
    }
    for p in a.processes.iter().filter(|p| !p.clean_exit) {
        writeln!(
            w,
            "process {} did not exit cleanly: what it held is counted as live when the trace ends",
            p.pid
        )?;
    }
    Ok(())
}

/// Sites that keep growing after the warm-up; per step, for processes that
/// mark steps.
pub(crate) fn growth(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for line in a.steps.iter().filter_map(crate::format::step_growth) {
        writeln!(w, "{line}")?;
    }
    let growing = a.growing();
    if growing.is_empty() {
        writeln!(w, "growth: no site keeps growing after the warm-up")?;
    } else {
        writeln!(w, "growth after the warm-up:")?;
        for (g, label, tensors) in growing.iter().take(TOP) {
            writeln!(
                w,
                "  +{:>9} ({} → {}) pid {}: {}{label}",
                bytes(g.growth_bytes),
                bytes(g.from_bytes),
                bytes(g.to_bytes),
                g.pid,
                if *tensors { "tensors at " } else { "" }
            )?;
        }
    }
    Ok(())
}

/// The errors the allocators raised and the failed allocations.
pub(crate) fn out_of_memory(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    let raised: usize = a.frameworks.iter().map(|v| v.ooms.len()).sum();
    if raised > 0 {
        writeln!(
            w,
            "out of memory: {raised} error(s) raised by PyTorch's allocator (above)"
        )?;
    }
    if a.ooms.is_empty() {
        if raised == 0 {
            writeln!(w, "out of memory: never")?;
        }
    } else {
        let count = |o: OomOutcome| a.ooms.iter().filter(|x| x.outcome == o).count();
        writeln!(
            w,
            "out of memory: {} failed allocations ({} reached the program, {} recovered by the allocator, {} retried)",
            a.ooms.len(),
            count(OomOutcome::ReachedProgram),
            count(OomOutcome::Recovered),
            count(OomOutcome::Retried)
        )?;
        for o in a.ooms.iter().take(TOP) {
            writeln!(
                w,
                "  {}{} {} of {} at {} (pid {}{}, {} live on device {}): {}",
                o.outcome,
                o.raised_as
                    .as_ref()
                    .map_or_else(String::new, |r| format!(" (as {r})")),
                o.function,
                bytes(o.requested_bytes),
                time(o.time_ns),
                o.pid,
                crate::words::in_step_and_ranges(o.step, &o.ranges),
                bytes(o.device_live_bytes),
                o.device,
                a.site_label(o.site)
            )?;
            if let Some(m) = &o.device_view {
                writeln!(w, "    right after, {}", crate::device_view::sentence(m))?;
            }
        }
    }
    Ok(())
}

/// The input's warnings (damage, lost records, late events).
pub(crate) fn warnings(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for warning in a.input.warnings.iter().map(input_warning) {
        writeln!(w, "warning: {warning}")?;
    }
    Ok(())
}
