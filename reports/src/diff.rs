//! Rendering a comparison of two runs (`gmem_prof_model::diff`): the
//! terminal text, a self-contained HTML page with both runs' live curves
//! overlaid, and Markdown for a pull-request comment.

use std::fmt::Write as _;
use std::io::{self, Write};

use gmem_prof_model::diff::{Diff, Presence, RunTotals, SiteDiff, SteadySteps};
use gmem_prof_model::Analysis;

use crate::blocks::frames_details;
use crate::charts;
use maud::{html, Markup};

use crate::format::{bytes, change, signed_bytes};
use crate::html::{document_end, document_head};
use crate::reasons::unprofiled_part;

/// Sites listed in the text and Markdown.
const SITES_SHOWN: usize = 10;

fn opt_bytes(v: Option<u64>) -> String {
    v.map_or_else(|| "–".into(), bytes)
}

fn changed(s: &&SiteDiff) -> bool {
    s.delta_live_at_peak != 0 || s.delta_leaked_bytes != 0 || s.delta_total_bytes != 0
}

pub fn text(d: &Diff, base_name: &str, new_name: &str, w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, "gmem-prof diff: {base_name} → {new_name}")?;
    for (name, t) in [(base_name, &d.base), (new_name, &d.new)] {
        for m in t.not_profiled.iter().map(unprofiled_part) {
            writeln!(w, "NOT PROFILED: {name}: {m}")?;
        }
    }
    for dev in &d.devices {
        writeln!(
            w,
            "device {} ({}): peak {} → {} ({}, {})",
            dev.device,
            dev.name,
            opt_bytes(dev.base_peak_bytes),
            opt_bytes(dev.new_peak_bytes),
            signed_bytes(dev.delta_peak_bytes),
            change(
                dev.base_peak_bytes.unwrap_or(0),
                dev.new_peak_bytes.unwrap_or(0)
            )
        )?;
        for c in dev.peak_changes.iter().take(5) {
            writeln!(
                w,
                "    {:>11} at the peak from {}",
                signed_bytes(c.delta_bytes),
                d.sites[c.site as usize].label
            )?;
        }
    }
    let (b, n) = (&d.base, &d.new);
    writeln!(
        w,
        "leaked at exit: {} → {} ({})",
        bytes(b.leaked_bytes),
        bytes(n.leaked_bytes),
        change(b.leaked_bytes, n.leaked_bytes)
    )?;
    writeln!(
        w,
        "allocated in all: {} in {} allocations → {} in {} allocations",
        bytes(b.total_allocated_bytes),
        b.allocations,
        bytes(n.total_allocated_bytes),
        n.allocations
    )?;
    writeln!(
        w,
        "OOMs reaching the program: {} → {}; growing sites: {} → {}",
        b.ooms_reached_program, n.ooms_reached_program, b.growing_sites, n.growing_sites
    )?;
    if let Some(line) = steps_line(b, n) {
        writeln!(w, "{line}")?;
    }
    if !changed_sites(
        w,
        &d.sites,
        "sites that changed most (live at peak, leaked, allocated in all):",
    )? {
        writeln!(w, "no site changed")?;
    }
    if b.allocated_peak_bytes > 0 || n.allocated_peak_bytes > 0 {
        writeln!(
            w,
            "tensors (inside PyTorch's allocator): peak {} → {}; growing tensor sites: {} → {}",
            bytes(b.allocated_peak_bytes),
            bytes(n.allocated_peak_bytes),
            b.growing_tensor_sites,
            n.growing_tensor_sites
        )?;
        for (role, base, new) in role_rows(b, n) {
            writeln!(
                w,
                "    {role} at that peak: {} → {} ({})",
                bytes(base),
                bytes(new),
                signed_bytes(new as i64 - base as i64)
            )?;
        }
        changed_sites(
            w,
            &d.tensor_sites,
            "tensor sites that changed most (at the allocated peak, live at exit, allocated in all):",
        )?;
    }
    Ok(())
}

/// (role, base, new) for the roles either run held at its tensors' peak,
/// the largest change first; empty when neither run has roles.
fn role_rows(b: &RunTotals, n: &RunTotals) -> Vec<(gmem_prof_model::Role, u64, u64)> {
    let (Some(base), Some(new)) = (
        b.roles_at_peak
            .or(n.roles_at_peak.map(|_| Default::default())),
        n.roles_at_peak
            .or(b.roles_at_peak.map(|_| Default::default())),
    ) else {
        return Vec::new();
    };
    let mut rows: Vec<_> = gmem_prof_model::Role::ALL
        .into_iter()
        .map(|r| (r, base.get(r), new.get(r)))
        .filter(|&(_, x, y)| x > 0 || y > 0)
        .collect();
    rows.sort_by_key(|&(r, x, y)| (std::cmp::Reverse(x.abs_diff(y)), r));
    rows
}

/// The rows comparing the runs' steady-state steps (`SteadySteps`):
/// (what, base, new), figures in words; empty when neither marked steps.
fn steps_rows(b: &RunTotals, n: &RunTotals) -> Vec<(&'static str, String, String)> {
    if b.steps.is_none() && n.steps.is_none() {
        return Vec::new();
    }
    let word = |t: &RunTotals, f: &dyn Fn(&SteadySteps) -> Option<String>| {
        t.steps.as_ref().and_then(f).unwrap_or_else(|| "–".into())
    };
    let row = |what, f: &dyn Fn(&SteadySteps) -> Option<String>| (what, word(b, f), word(n, f));
    vec![
        row("steps", &|s| Some(s.count.to_string())),
        row("steady-state step's peak", &|s| Some(bytes(s.peak_bytes))),
        row("its tensors' allocated peak", &|s| {
            s.allocated_peak.map(bytes)
        }),
        row("kept per step after the warm-up", &|s| {
            s.bytes_per_step.map(signed_bytes)
        }),
    ]
}

/// The steady-state steps in one line; None when neither run marked steps.
fn steps_line(b: &RunTotals, n: &RunTotals) -> Option<String> {
    let rows = steps_rows(b, n);
    (!rows.is_empty()).then(|| {
        let parts: Vec<String> = rows
            .iter()
            .map(|(what, base, new)| format!("{what} {base} → {new}"))
            .collect();
        format!("training steps: {}", parts.join("; "))
    })
}

/// The sites that changed most under `title`; false when none changed.
fn changed_sites(w: &mut dyn Write, sites: &[SiteDiff], title: &str) -> io::Result<bool> {
    let moved: Vec<&SiteDiff> = sites.iter().filter(changed).take(SITES_SHOWN).collect();
    if moved.is_empty() {
        return Ok(false);
    }
    writeln!(w, "{title}")?;
    for s in &moved {
        let tag = match s.presence {
            Presence::Both => String::new(),
            p => format!(" [{p}]"),
        };
        // Sites alike in label (one line through a library's handle and a
        // caching allocator's segments) say how they allocated.
        let alike = moved.iter().filter(|o| o.label == s.label).count() > 1;
        let detail = alike
            .then(|| crate::words::path_words(&s.category, &s.label, &s.via))
            .flatten()
            .map_or_else(String::new, |d| format!(", {d}"));
        writeln!(
            w,
            "  {:>11} {:>11} {:>11}  {}{detail}{tag}",
            signed_bytes(s.delta_live_at_peak),
            signed_bytes(s.delta_leaked_bytes),
            signed_bytes(s.delta_total_bytes),
            s.label
        )?;
    }
    Ok(true)
}

pub fn markdown(d: &Diff, base_name: &str, new_name: &str) -> String {
    let md = crate::format::markdown;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## gmem-prof diff: {} → {}\n",
        md(base_name),
        md(new_name)
    );
    for (name, t) in [(base_name, &d.base), (new_name, &d.new)] {
        for m in t.not_profiled.iter().map(unprofiled_part) {
            let _ = writeln!(out, "> **Not profiled**, {}: {}\n", md(name), md(&m));
        }
    }
    let _ = writeln!(
        out,
        "| Device | Base peak | New peak | Change |\n|---|---|---|---|"
    );
    for dev in &d.devices {
        let _ = writeln!(
            out,
            "| {} ({}) | {} | {} | {} ({}) |",
            dev.device,
            md(&dev.name),
            opt_bytes(dev.base_peak_bytes),
            opt_bytes(dev.new_peak_bytes),
            signed_bytes(dev.delta_peak_bytes),
            change(
                dev.base_peak_bytes.unwrap_or(0),
                dev.new_peak_bytes.unwrap_or(0)
            )
        );
    }
    let _ = writeln!(
        out,
        "\nLeaked at exit: {} → **{}** ({}). Allocated in all: {} → {}.\n",
        bytes(d.base.leaked_bytes),
        bytes(d.new.leaked_bytes),
        change(d.base.leaked_bytes, d.new.leaked_bytes),
        bytes(d.base.total_allocated_bytes),
        bytes(d.new.total_allocated_bytes)
    );
    if let Some(line) = steps_line(&d.base, &d.new) {
        let _ = writeln!(out, "{}\n", md(&line));
    }
    let roles = role_rows(&d.base, &d.new);
    if !roles.is_empty() {
        out.push_str(
            "| Tensors at the allocated peak | Base | New | Change |\n|---|---|---|---|\n",
        );
        for (role, base, new) in roles {
            let _ = writeln!(
                out,
                "| {role} | {} | {} | {} |",
                bytes(base),
                bytes(new),
                signed_bytes(new as i64 - base as i64)
            );
        }
        out.push('\n');
    }
    let moved: Vec<&SiteDiff> = d.sites.iter().filter(changed).take(SITES_SHOWN).collect();
    if !moved.is_empty() {
        out.push_str("| Site | Δ live at peak | Δ leaked | Δ allocated |\n|---|---|---|---|\n");
        for s in moved {
            let _ = writeln!(
                out,
                "| {}{} | {} | {} | {} |",
                md(&s.label),
                if s.presence == Presence::Both {
                    String::new()
                } else {
                    format!(" ({})", s.presence)
                },
                signed_bytes(s.delta_live_at_peak),
                signed_bytes(s.delta_leaked_bytes),
                signed_bytes(s.delta_total_bytes)
            );
        }
    }
    out
}

/// The comparison as one HTML page; `base`/`new` give the curves.
pub fn html(
    d: &Diff,
    (base_name, base): (&str, &Analysis),
    (new_name, new): (&str, &Analysis),
    w: &mut dyn Write,
) -> io::Result<()> {
    let title = format!("gmem-prof diff: {base_name} → {new_name}");
    let page = html! {
        (document_head(&title, false))
        h1 { (title) }
        @for (name, t) in [(base_name, &d.base), (new_name, &d.new)] {
            @for m in t.not_profiled.iter().map(unprofiled_part) {
                p.note { b { "Not profiled" } ", " (name) ": " (m) }
            }
        }
        h2 { "Peak per device" }
        table {
            tr { th { "device" } th.n { "base" } th.n { "new" } th.n { "change" } }
            @for dev in &d.devices {
                tr {
                    td { (dev.device) " (" (dev.name) ")" }
                    td.n { (opt_bytes(dev.base_peak_bytes)) }
                    td.n { (opt_bytes(dev.new_peak_bytes)) }
                    td.n {
                        (signed_bytes(dev.delta_peak_bytes)) " ("
                        (change(dev.base_peak_bytes.unwrap_or(0), dev.new_peak_bytes.unwrap_or(0))) ")"
                    }
                }
            }
        }
        @for dev in &d.devices {
            (charts::runs_overlay(
                format!("device{}-diff.svg", dev.device),
                format!("Device {}: live bytes, base and new", dev.device),
                dev.device,
                &[("base", base), ("new", new)],
            ))
            @if !dev.peak_changes.is_empty() {
                h3 { "What changed at the peak of device " (dev.device) }
                table {
                    tr { th { "site" } th.n { "base" } th.n { "new" } th.n { "change" } }
                    @for c in dev.peak_changes.iter().take(20) {
                        @let s = &d.sites[c.site as usize];
                        tr {
                            td { (frames_details(&s.label, &s.frames, false)) }
                            td.n { (bytes(c.base_bytes)) }
                            td.n { (bytes(c.new_bytes)) }
                            td.n { (signed_bytes(c.delta_bytes)) }
                        }
                    }
                }
            }
        }
        (totals(d))
        @let steps = steps_rows(&d.base, &d.new);
        @if !steps.is_empty() {
            h2 { "Training steps" }
            p.meta { "The steady state of each run's process with the most steps: the median of its steps after the first, and what its steps after the warm-up kept on average." }
            table {
                tr { th {} th.n { "base" } th.n { "new" } }
                @for (what, base, new) in &steps {
                    tr { td { (what) } td.n { (base) } td.n { (new) } }
                }
            }
        }
        h2 { "Sites, matched by stack" }
        p.meta { "Largest change of bytes live at the peak first; sites are matched by their frames' functions, not by address." }
        table {
            tr { th { "site" } th.n { "live at peak" } th.n { "leaked" } th.n { "allocated in all" } }
            @for s in d.sites.iter().filter(changed).take(100) {
                tr {
                    td {
                        (frames_details(&s.label, &s.frames, false))
                        @if s.presence != Presence::Both { " " span.cat { (s.presence) } }
                    }
                    (before_after(s.base.live_at_peak, s.new.live_at_peak, s.delta_live_at_peak))
                    (before_after(s.base.leaked_bytes, s.new.leaked_bytes, s.delta_leaked_bytes))
                    (before_after(s.base.total_bytes, s.new.total_bytes, s.delta_total_bytes))
                }
            }
        }
        (document_end())
    };
    w.write_all(page.into_string().as_bytes())
}

/// "1.00 MiB → 2.00 MiB", and the change under it, as a cell.
fn before_after(base: u64, new: u64, delta: i64) -> Markup {
    html! { td.n { (bytes(base)) " → " (bytes(new)) br; (signed_bytes(delta)) } }
}

/// The runs' totals side by side.
fn totals(d: &Diff) -> Markup {
    let (b, n) = (&d.base, &d.new);
    let rows = [
        ("leaked at exit", b.leaked_bytes, n.leaked_bytes),
        (
            "held by allocator caches at exit",
            b.cached_at_exit_bytes,
            n.cached_at_exit_bytes,
        ),
        (
            "allocated in all",
            b.total_allocated_bytes,
            n.total_allocated_bytes,
        ),
    ];
    html! {
        h2 { "Totals" }
        table {
            tr { th {} th.n { "base" } th.n { "new" } th.n { "change" } }
            @for (what, base, new) in rows {
                tr { td { (what) } td.n { (bytes(base)) } td.n { (bytes(new)) } td.n { (change(base, new)) } }
            }
            @for (role, base, new) in role_rows(b, n) {
                tr { td { (role.as_str()) " at the tensors' peak" } td.n { (bytes(base)) } td.n { (bytes(new)) } td.n { (change(base, new)) } }
            }
            tr { td { "allocations" } td.n { (b.allocations) } td.n { (n.allocations) } td.n {} }
            tr { td { "OOMs reaching the program" } td.n { (b.ooms_reached_program) } td.n { (n.ooms_reached_program) } td.n {} }
        }
    }
}
