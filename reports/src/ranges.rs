//! The program's NVTX ranges: per process and per range name, how many
//! instances, how much memory rose inside one at its highest above where it
//! began (what the range takes), the peak inside, and what its instances
//! kept by site; for the terminal summary and the page. Where the trace saw
//! a framework allocator's tensors, the tensors speak.

use std::io::{self, Write};

use gmem_prof_model::{Analysis, ProcessRanges, RangeFigures, RangeMemory};
use maud::{html, Markup};

use crate::chart::Chart;
use crate::format::{bytes, signed_bytes, time};

/// Range names listed per process in the summary; the page lists more.
const NAMES_IN_TEXT: usize = 8;
const NAMES_ON_PAGE: usize = 50;

/// The memory that speaks for a range (its tensors when seen); the bool
/// says tensors.
fn speaking(r: &RangeFigures) -> (&RangeMemory, bool) {
    match &r.tensors {
        Some(t) => (t, true),
        None => (&r.driver, false),
    }
}

fn head(p: &ProcessRanges) -> String {
    let count: u64 = p.ranges.iter().map(|r| r.instances).sum();
    let mut out = format!(
        "pid {}: {} range name(s), {} instance(s)",
        p.pid,
        p.ranges.len(),
        count + p.other_instances
    );
    if p.unfinished > 0 {
        out += &format!(", {} still open when the trace ended", p.unfinished);
    }
    if p.mark_count > 0 {
        out += &format!(", {} mark(s)", p.mark_count);
    }
    out
}

/// The summary's lines on ranges.
pub(crate) fn text(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for p in &a.ranges {
        writeln!(w, "\nranges of {}", head(p))?;
        for r in p.ranges.iter().take(NAMES_IN_TEXT) {
            let (m, tensors) = speaking(r);
            writeln!(
                w,
                "  {:<24} x{:<6} rises {:>11}, peak {:>11}, keeps {:>11} each (median){}",
                r.full_name(),
                r.instances,
                bytes(m.rise_bytes),
                bytes(m.peak_bytes),
                signed_bytes(m.kept_median),
                if tensors { ", of tensors" } else { "" }
            )?;
            if let Some(k) = m.kept_by_site.first() {
                writeln!(
                    w,
                    "    kept most (all instances): {} at {}",
                    signed_bytes(k.bytes),
                    a.site_or_tensor_label(k.site, tensors)
                )?;
            }
        }
        if p.ranges.len() > NAMES_IN_TEXT {
            writeln!(
                w,
                "  … and {} more names (see the report page)",
                p.ranges.len() - NAMES_IN_TEXT
            )?;
        }
    }
    Ok(())
}

/// The page's answer on ranges, one line per process that made any: the
/// range that takes most at its highest.
pub(crate) fn answer(a: &Analysis) -> Markup {
    html! {
        @for p in &a.ranges {
            @if let Some(r) = p.ranges.first() {
                @let (m, tensors) = speaking(r);
                li {
                    a href="#ranges" { "Ranges" } " of pid " (p.pid) ": "
                    b { (r.full_name()) } " takes most, rising " b { (bytes(m.rise_bytes)) }
                    @if tensors { " of tensors" }
                    " at its highest"
                    @if m.kept_median != 0 { " and keeping " (signed_bytes(m.kept_median)) " each time" }
                    "."
                }
            }
        }
    }
}

/// The page's section on ranges.
pub(crate) fn html(a: &Analysis, _: &[Chart]) -> Markup {
    html! {
        @if !a.ranges.is_empty() {
            h2 #ranges { "Ranges" }
            p.meta {
                "The program's NVTX ranges (C/C++, " code { "torch.cuda.nvtx" } ", the " code { "nvtx" } " package). "
                "\"Rise\" is the most memory went above where an instance began: what the range takes at its highest. "
                "\"Kept\" is what was live at an instance's end minus at its start. A range counts everything the process allocated while it was open, on any thread."
            }
            @for p in &a.ranges {
                (process_ranges(a, p))
            }
        }
    }
}

fn process_ranges(a: &Analysis, p: &ProcessRanges) -> Markup {
    let tensors = p.ranges.iter().any(|r| r.tensors.is_some());
    html! {
        h3 { (head(p)) }
        table {
            tr {
                th { "range" } th.n { "instances" } th.n { "time inside" }
                th.n { "rise" } th.n { "peak inside" } th.n { "kept (median)" } th.n { "kept (all)" }
                @if tensors { th.n { "tensors: rise" } th.n { "tensors kept (median)" } }
                th { "kept most" }
            }
            @for r in p.ranges.iter().take(NAMES_ON_PAGE) {
                @let (m, by_tensors) = speaking(r);
                tr {
                    td { (r.full_name()) }
                    td.n { (r.instances) }
                    td.n { (time(r.total_ns)) }
                    td.n { (bytes(r.driver.rise_bytes)) }
                    td.n { (bytes(r.driver.peak_bytes)) }
                    td.n { (signed_bytes(r.driver.kept_median)) }
                    td.n { (signed_bytes(r.driver.kept_bytes)) }
                    @if let Some(t) = &r.tensors {
                        td.n { (bytes(t.rise_bytes)) }
                        td.n { (signed_bytes(t.kept_median)) }
                    } @else if tensors {
                        td.n {} td.n {}
                    }
                    td {
                        @if let Some(k) = m.kept_by_site.first() {
                            (signed_bytes(k.bytes)) " " (a.site_or_tensor_label(k.site, by_tensors))
                        }
                    }
                }
            }
            @if p.ranges.len() > NAMES_ON_PAGE {
                tr { td colspan="10" { "… and " (p.ranges.len() - NAMES_ON_PAGE) " more (see the JSON output)" } }
            }
        }
    }
}
