//! The program's steps (training iterations): per process, what the first
//! step kept (a model's parameters, an optimizer's state), what the steps
//! after the warm-up keep on average by site (memory growing step after
//! step), the steady state's peak, and each step's figures; for the
//! terminal summary and the page. Where the trace saw a framework
//! allocator's tensors, the tensors speak (the driver sees only its
//! segments).

use std::io::{self, Write};

use gmem_prof_model::{Analysis, ProcessSteps, SiteKept, StepFigures};
use maud::{html, Markup};

use crate::chart::Chart;
use crate::format::{bytes, signed_bytes, time};

/// Steps listed one by one on the page.
const STEPS_SHOWN: usize = 100;

/// What a step kept, by site, in the terms that speak for the process:
/// its tensors when seen, else its CUDA allocations. The bool says tensors.
fn kept_of(s: &StepFigures) -> (i64, &[SiteKept], bool) {
    match &s.tensors {
        Some(t) => (t.kept_bytes, &t.kept_by_site, true),
        None => (s.kept_bytes, &s.kept_by_site, false),
    }
}

/// "peak 1.00 GiB, kept +2.00 MiB (tensors: allocated peak …, kept …)".
fn step_words(peak: u64, kept: i64, tensors: Option<(u64, i64)>) -> String {
    let mut out = format!("peak {}, kept {}", bytes(peak), signed_bytes(kept));
    if let Some((t_peak, t_kept)) = tensors {
        out += &format!(
            " (tensors: allocated peak {}, kept {})",
            bytes(t_peak),
            signed_bytes(t_kept)
        );
    }
    out
}

fn head(p: &ProcessSteps) -> String {
    format!(
        "pid {}: {} steps, marked by the {}{}{}",
        p.pid,
        p.count,
        p.marked_by,
        p.range
            .as_ref()
            .map_or(String::new(), |r| format!(" \"{r}\"")),
        if p.count as usize > p.steps.len() {
            format!(" (the first {} listed)", p.steps.len())
        } else {
            String::new()
        }
    )
}

/// The summary's lines on steps.
pub(crate) fn text(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for p in &a.steps {
        writeln!(w, "\nsteps of {}", head(p))?;
        if let Some(first) = p.steps.first() {
            let t = first
                .tensors
                .as_ref()
                .map(|t| (t.allocated_peak, t.kept_bytes));
            writeln!(
                w,
                "  step 1: {}",
                step_words(first.peak_bytes, first.kept_bytes, t)
            )?;
            if let Some(r) = first
                .tensors
                .as_ref()
                .and_then(|t| t.roles_at_peak.as_ref())
            {
                writeln!(w, "    at its peak: {}", crate::roles::role_list(r))?;
            }
            let (_, sites, tensors) = kept_of(first);
            for k in sites.iter().take(3) {
                writeln!(
                    w,
                    "    {:>11}  {}",
                    signed_bytes(k.bytes),
                    a.site_or_tensor_label(k.site, tensors)
                )?;
            }
        }
        if let Some(s) = &p.steady {
            let t = s.allocated_peak.zip(s.tensors_kept_bytes);
            writeln!(
                w,
                "  steady state (median of steps {} on): {}",
                s.from_step,
                step_words(s.peak_bytes, s.kept_bytes, t)
            )?;
        }
        if let Some(g) = &p.growth {
            writeln!(
                w,
                "  kept step after step: {}/step on average over steps {} to {} (after the warm-up){}",
                signed_bytes(g.bytes_per_step),
                g.from_step,
                g.from_step + g.steps - 1,
                if g.tensors { ", of tensors" } else { "" }
            )?;
            for k in &g.sites {
                writeln!(
                    w,
                    "    {:>11}/step  {}",
                    signed_bytes(k.bytes),
                    a.site_or_tensor_label(k.site, g.tensors)
                )?;
            }
        }
        if let Some(n) = p.peak_step {
            writeln!(w, "  the process's peak fell in step {n}")?;
        }
    }
    Ok(())
}

/// The page's answer on steps, one line per process that marked them:
/// how many, and what the steps after the warm-up kept per step (the
/// site that kept most).
pub(crate) fn answer(a: &Analysis) -> Markup {
    html! {
        @for p in &a.steps {
            li {
                a href="#steps" { "Steps" } " of pid " (p.pid) ": " (p.count)
                @if let Some(g) = &p.growth {
                    ", kept " b { (signed_bytes(g.bytes_per_step)) " per step" }
                    @if g.tensors { " of tensors" }
                    " after the warm-up"
                    @if let Some(k) = g.sites.first() {
                        ", most at " (a.site_or_tensor_label(k.site, g.tensors))
                    }
                }
                "."
            }
        }
    }
}

/// The page's section on steps.
pub(crate) fn html(a: &Analysis, _: &[Chart]) -> Markup {
    html! {
        @if !a.steps.is_empty() {
            h2 #steps { "Steps" }
            p.meta {
                "Step N is what happened since step N−1 ended (step 1: since the process started, so it holds the set-up). "
                "\"Kept\" is what was live at a step's end minus at its start. Steps are marked by PyTorch's optimizer (no code change) or by the program ("
                code { "gmem_prof.step()" } ")."
            }
            @for p in &a.steps {
                (process_steps(a, p))
            }
        }
    }
}

fn process_steps(a: &Analysis, p: &ProcessSteps) -> Markup {
    let tensors = p.steps.first().is_some_and(|s| s.tensors.is_some());
    html! {
        h3 { (head(p)) }
        @if let Some(first) = p.steps.first() {
            @let (kept, sites, tensors) = kept_of(first);
            p { "Step 1 kept " b { (signed_bytes(kept)) } @if tensors { " of tensors" } ":" }
            (kept_table(a, sites, tensors, "kept"))
        }
        @if let Some(s) = &p.steady {
            p {
                "The steady state (the median of steps " (s.from_step) " on): "
                (step_words(s.peak_bytes, s.kept_bytes, s.allocated_peak.zip(s.tensors_kept_bytes))) " per step."
            }
        }
        @if let Some(g) = &p.growth {
            p {
                "Kept step after step: " b { (signed_bytes(g.bytes_per_step)) " per step" }
                @if g.tensors { " of tensors" }
                ", on average over steps " (g.from_step) " to " (g.from_step + g.steps - 1) " (after the warm-up)"
                (if g.sites.is_empty() { "." } else { ":" })
            }
            (kept_table(a, &g.sites, g.tensors, "per step"))
        }
        @if let Some(n) = p.peak_step {
            p { "The process's peak fell in step " (n) "." }
        }
        table {
            tr {
                th.n { "step" } th.n { "ended at" } th.n { "peak" } th.n { "kept" }
                @if tensors { th.n { "tensors' allocated peak" } th.n { "tensors kept" } th { "at that peak, by role" } }
            }
            @for s in p.steps.iter().take(STEPS_SHOWN) {
                tr {
                    td.n { (s.number) }
                    td.n { (time(s.end_ns)) }
                    td.n { (bytes(s.peak_bytes)) }
                    td.n { (signed_bytes(s.kept_bytes)) }
                    @if let Some(t) = &s.tensors {
                        td.n { (bytes(t.allocated_peak)) }
                        td.n { (signed_bytes(t.kept_bytes)) }
                        td { (t.roles_at_peak.as_ref().map(crate::roles::role_list).unwrap_or_default()) }
                    } @else if tensors {
                        td.n {} td.n {} td {}
                    }
                }
            }
            @if p.steps.len() > STEPS_SHOWN {
                tr { td colspan="7" { "… and " (p.steps.len() - STEPS_SHOWN) " more (see the JSON output)" } }
            }
        }
    }
}

/// Sites with the bytes they kept (`column` heads the bytes); nothing
/// when there is none.
fn kept_table(a: &Analysis, sites: &[SiteKept], tensors: bool, column: &str) -> Markup {
    html! {
        @if !sites.is_empty() {
            table {
                tr { th { "site" } th.n { (column) } }
                @for k in sites {
                    tr { td { (a.site_or_tensor_label(k.site, tensors)) } td.n { (signed_bytes(k.bytes)) } }
                }
            }
        }
    }
}
