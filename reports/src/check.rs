//! `gmem-prof check`'s outcomes in words: the terminal text, and for CI
//! systems a JSON summary (schema in docs/formats.md), Markdown for a
//! pull-request comment or GitHub's step summary, and JUnit XML with one
//! test case per budget. The outcomes themselves are the analyzer's
//! (`gmem_prof_model::budgets`).

use std::fmt::Write as _;

use gmem_prof_model::budgets::{Budget, Evidence, OomError, Outcome, Share, StepsJudged, Unit};
use gmem_prof_model::{Analysis, Category, OomOutcome};
use serde::Serialize;

use crate::format::{bytes, markdown as md};
use crate::reasons::{blind_spot, unprofiled_part};
use crate::words::oom_limit;

/// Version of the check JSON summary; bumped when a field changes meaning or
/// disappears.
pub const CHECK_SCHEMA_VERSION: u32 = 1;

/// One checked run: its name and its analysis.
pub struct Run {
    pub name: String,
    pub analysis: Analysis,
}

/// The line of a budget on tensors at the allocated peak (all of them, or
/// one role's).
fn tensor_peak_words(o: &Outcome) -> String {
    let (fig_b, max) = (o.figure.0 as u64, o.limit.0 as u64);
    let budget = format!("budget {} ({max} bytes)", bytes(max));
    let (peak, what) = match &o.evidence {
        Evidence::Allocated { peak, .. } => (peak, None),
        Evidence::Role {
            role,
            peak,
            peak_bytes,
            ..
        } => (peak, Some((role, peak_bytes))),
        _ => return String::new(),
    };
    match (peak, what) {
        (Some(p), None) => format!(
            "tensors peaked at {} ({fig_b} bytes) in pid {} on device {} at {:.3} s; {budget}",
            bytes(fig_b),
            p.pid,
            p.device,
            p.time_ns as f64 / 1e9,
        ),
        (Some(p), Some((role, peak_bytes))) => format!(
            "{role} were {} ({fig_b} bytes) of the tensors' peak of {} in pid {} on device {} at {:.3} s; {budget}",
            bytes(fig_b),
            bytes(*peak_bytes),
            p.pid,
            p.device,
            p.time_ns as f64 / 1e9,
        ),
        (None, what) => format!(
            "no framework allocator's inside was seen (no tensors{} to count); budget {}",
            if what.is_some() { " whose role" } else { "" },
            bytes(max)
        ),
    }
}

/// One line: the figure against the budget, in words.
pub fn summary(o: &Outcome) -> String {
    let (figure, limit) = (o.figure.0, o.limit.0);
    let (fig_b, max) = (figure as u64, limit as u64);
    let budget = || format!("budget {} ({max} bytes)", bytes(max));
    match &o.evidence {
        Evidence::NotProfiled { parts, allowed } => format!(
            "not profiled: {} part(s) of the run are missing from the trace or not seen{}",
            parts.len(),
            if *allowed {
                " (allowed by --allow-unprofiled)"
            } else {
                ""
            }
        ),
        Evidence::DevicePeak {
            device, time_ns, ..
        } => format!(
            "device {device}'s memory peaked at {} ({fig_b} bytes) at {:.3} s; {}",
            bytes(fig_b),
            *time_ns as f64 / 1e9,
            budget()
        ),
        Evidence::ProcessPeak { pid } => format!(
            "process {pid} peaked at {} ({fig_b} bytes); {}",
            bytes(fig_b),
            budget()
        ),
        Evidence::Pinned { device } => format!(
            "pinned host memory of device {device}'s contexts peaked at {} ({fig_b} bytes); {}",
            bytes(fig_b),
            budget()
        ),
        Evidence::Allocated { .. } | Evidence::Role { .. } => tensor_peak_words(o),
        Evidence::PoolFragmentation {
            device,
            pid,
            pool,
            time_ns,
            ..
        } => format!(
            "device {device} fragmentation reached {figure:.3} at {:.3} s in pid {pid}'s PyTorch pool ({pool}); budget {limit}",
            *time_ns as f64 / 1e9
        ),
        Evidence::RegionFragmentation { device, worst, .. } => match worst {
            Some(w) => format!(
                "device {device} fragmentation reached {figure:.3} at {:.3} s; budget {limit}",
                w.time_ns as f64 / 1e9
            ),
            None => format!(
                "device {device} has no pool or VMM reservation with free space to fragment; budget {limit}"
            ),
        },
        Evidence::Leaked { pid, .. } => format!(
            "{}{} ({fig_b} bytes) never freed; {}",
            pid.map_or_else(String::new, |p| format!("process {p}: ")),
            bytes(fig_b),
            budget()
        ),
        Evidence::HeldAtExit { category, .. } => format!(
            "{} ({fig_b} bytes) {} at exit; {}",
            bytes(fig_b),
            held_what(*category),
            budget()
        ),
        Evidence::TensorsAtExit { count, .. } => format!(
            "{} ({fig_b} bytes) in {count} tensor(s) still allocated when the process ended; {}",
            bytes(fig_b),
            budget()
        ),
        Evidence::Growth { over, .. } => {
            if *over == 0 {
                format!(
                    "no site grew by more than {} after the warm-up (most: {})",
                    bytes(max),
                    bytes(fig_b)
                )
            } else {
                format!(
                    "{over} site(s) grew by more than {} after the warm-up (most: {})",
                    bytes(max),
                    bytes(fig_b)
                )
            }
        }
        Evidence::Ooms { .. } => {
            format!("{fig_b} out-of-memory error(s) reached the program; budget {max}")
        }
        Evidence::StepGrowth { worst, .. } => steps_summary(o, worst.as_ref(), true),
        Evidence::StepPeak { worst } => steps_summary(o, worst.as_ref(), false),
        Evidence::Range {
            pid,
            instances,
            tensors,
            ..
        } => format!(
            "{} ({instances} instance(s) in process {pid}): {} {} ({fig_b} bytes){}; {}",
            o.target,
            match o.budget {
                Budget::MaxRise => "rose at most",
                Budget::MaxKept => "the median instance kept",
                _ => "went up to",
            },
            bytes(fig_b),
            if *tensors { " of tensors" } else { "" },
            budget()
        ),
        Evidence::None => format!("{} {}: {figure} against {limit}", o.budget, o.target),
    }
}

/// A step budget's line: what the steps judged kept per step (`growth`) or
/// how high the highest went.
fn steps_summary(o: &Outcome, worst: Option<&StepsJudged>, growth: bool) -> String {
    let (fig_b, max) = (o.figure.0 as u64, o.limit.0 as u64);
    let budget = format!("budget {} ({max} bytes)", bytes(max));
    match worst {
        None => format!(
            "no process of {} marked steps, so {} cannot be judged (PyTorch's optimizer marks them in programs that use one; others call gmem_prof.step())",
            o.target, o.budget
        ),
        Some(w) if growth => format!(
            "process {}'s steps {} to {} (after the warm-up) kept {} ({fig_b} bytes) per step on average{}; {budget}",
            w.pid,
            w.from_step,
            w.to_step,
            bytes(fig_b),
            if w.tensors { " of tensors" } else { "" },
        ),
        Some(w) => format!(
            "step {} of process {} went up to {} ({fig_b} bytes); {budget}",
            w.from_step,
            w.pid,
            bytes(fig_b),
        ),
    }
}

fn held_what(category: Category) -> &'static str {
    match category {
        Category::AllocatorCache => "cached by an allocator",
        Category::Library => "held by CUDA libraries (handles, workspaces, graph pools)",
        _ => "in module globals",
    }
}

/// The sites (or regions, or errors) responsible, one per line.
pub fn details(o: &Outcome) -> Vec<String> {
    let shares = |sites: &[Share], what: &str| -> Vec<String> {
        sites
            .iter()
            .map(|s| {
                let via = s
                    .via
                    .as_ref()
                    .map_or_else(String::new, |v| format!(" via {v}"));
                format!(
                    "{} in {} {what} from {}{via}",
                    bytes(s.bytes),
                    s.count,
                    s.label
                )
            })
            .collect()
    };
    match &o.evidence {
        Evidence::NotProfiled { parts, .. } => parts.iter().map(unprofiled_part).collect(),
        Evidence::DevicePeak { sites, .. } => sites
            .iter()
            .map(|s| format!("{} live at the peak from {}", bytes(s.bytes), s.label))
            .collect(),
        Evidence::Allocated { sites, .. } | Evidence::Role { sites, .. } => sites
            .iter()
            .map(|s| format!("{} allocated at the peak from {}", bytes(s.bytes), s.label))
            .collect(),
        Evidence::PoolFragmentation {
            free_bytes,
            largest_free_bytes,
            free_in_idle_segments_bytes,
            ..
        } => vec![format!(
            "{} free inside the pool's segments{}, largest free block {}",
            bytes(*free_bytes),
            crate::format::idle_words(*free_bytes, Some(*free_in_idle_segments_bytes)),
            bytes(*largest_free_bytes)
        )],
        Evidence::RegionFragmentation {
            worst, blind_spots, ..
        } => match worst {
            Some(w) => vec![format!(
                "{} free in the worst pool or VMM region, largest free block {}",
                bytes(w.free_bytes),
                bytes(w.largest_free_bytes)
            )],
            None => blind_spots
                .iter()
                .map(|b| blind_spot(b).to_string())
                .collect(),
        },
        Evidence::Leaked { sites, .. } | Evidence::HeldAtExit { sites, .. } => {
            shares(sites, "allocation(s)")
        }
        Evidence::TensorsAtExit { sites, .. } => shares(sites, "tensor(s)"),
        Evidence::Growth { sites, .. } => sites
            .iter()
            .map(|g| format!("+{} in pid {} from {}", bytes(g.bytes), g.pid, g.label))
            .collect(),
        Evidence::StepGrowth { sites, .. } => sites
            .iter()
            .map(|g| {
                format!(
                    "+{} per step in pid {} from {}",
                    bytes(g.bytes),
                    g.pid,
                    g.label
                )
            })
            .collect(),
        Evidence::Ooms { errors } => errors
            .iter()
            .map(|e| match e {
                OomError::Framework { oom, site } => format!(
                    "PyTorch OutOfMemoryError for {} from {site}: refused by {}",
                    crate::words::oom_request(oom),
                    oom_limit(oom)
                ),
                OomError::Driver {
                    function,
                    requested_bytes,
                    site,
                } => format!("{function} of {} from {site}", bytes(*requested_bytes)),
            })
            .collect(),
        Evidence::ProcessPeak { .. }
        | Evidence::Pinned { .. }
        | Evidence::StepPeak { .. }
        | Evidence::None => Vec::new(),
        Evidence::Range { kept_most, .. } => kept_most
            .iter()
            .map(|g| {
                format!(
                    "kept most over its instances: {} at {}",
                    bytes(g.bytes),
                    g.label
                )
            })
            .collect(),
    }
}

fn figure(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Bytes => bytes(v as u64),
        Unit::Fraction => format!("{v:.3}"),
        Unit::Count => format!("{v}"),
    }
}

/// Violations first, each with its details; then one line per budget held.
pub fn text(outcomes: &[Outcome], several_runs: bool) -> String {
    let mut out = String::new();
    let run = |o: &Outcome| {
        if several_runs {
            format!("{}: ", o.run)
        } else {
            String::new()
        }
    };
    for o in outcomes.iter().filter(|o| !o.passed) {
        // The "profiled" outcome's summary says what it is.
        let over = if o.budget == Budget::Profiled {
            ""
        } else {
            "over budget: "
        };
        let _ = writeln!(out, "{over}{}{}", run(o), summary(o));
        for d in &details(o) {
            let _ = writeln!(out, "    {d}");
        }
    }
    for o in outcomes.iter().filter(|o| o.passed) {
        let _ = writeln!(
            out,
            "ok: {}{} {}: {} ≤ {}",
            run(o),
            o.budget,
            o.target,
            figure(o.unit, o.figure.0),
            figure(o.unit, o.limit.0)
        );
    }
    out
}

#[derive(Serialize)]
struct Summary<'a> {
    schema: &'static str,
    schema_version: u32,
    passed: bool,
    budgets: Vec<OutcomeWithWords<'a>>,
    runs: Vec<RunSummary>,
}

/// An outcome as the JSON summary holds it: with its words.
#[derive(Serialize)]
struct OutcomeWithWords<'a> {
    #[serde(flatten)]
    outcome: &'a Outcome,
    summary: String,
    details: Vec<String>,
}

#[derive(Serialize)]
struct RunSummary {
    name: String,
    files: Vec<String>,
    devices: Vec<DeviceSummary>,
    leaked_bytes: u64,
    cached_at_exit_bytes: u64,
    ooms_reached_program: u64,
    ooms_recovered: u64,
    growing_sites: u64,
    top_sites: Vec<SiteSummary>,
    warnings: Vec<String>,
}

#[derive(Serialize)]
struct DeviceSummary {
    device: u32,
    name: String,
    peak_bytes: u64,
    peak_time_ns: u64,
    reserved_peak_bytes: u64,
    worst_fragmentation: Option<f64>,
}

#[derive(Serialize)]
struct SiteSummary {
    label: String,
    category: String,
    live_at_peak_bytes: u64,
    total_bytes: u64,
    leaked_bytes: u64,
}

fn run_summary(r: &Run) -> RunSummary {
    let a = &r.analysis;
    RunSummary {
        name: r.name.clone(),
        files: a.input.files.clone(),
        devices: a
            .devices
            .iter()
            .map(|d| DeviceSummary {
                device: d.device,
                name: d.name.clone(),
                peak_bytes: d.peak_bytes,
                peak_time_ns: d.peak_time_ns,
                reserved_peak_bytes: d.reserved_peak,
                worst_fragmentation: d.fragmentation.worst.as_ref().map(|w| w.fragmentation),
            })
            .collect(),
        leaked_bytes: a.leaked_bytes(),
        cached_at_exit_bytes: a.cached_bytes(),
        ooms_reached_program: a.ooms_reached_program(),
        ooms_recovered: a
            .ooms
            .iter()
            .filter(|o| o.outcome == OomOutcome::Recovered)
            .count() as u64,
        growing_sites: a.growth.len() as u64,
        top_sites: a
            .sites
            .iter()
            .take(10)
            .map(|s| SiteSummary {
                label: s.label.clone(),
                category: s.category.to_string(),
                live_at_peak_bytes: s.live_at_peak,
                total_bytes: s.total_bytes,
                leaked_bytes: s.leaked_bytes,
            })
            .collect(),
        warnings: a
            .input
            .warnings
            .iter()
            .map(crate::reasons::input_warning)
            .collect(),
    }
}

pub fn json(runs: &[Run], outcomes: &[Outcome]) -> serde_json::Result<String> {
    let s = Summary {
        schema: "gmem-prof-check",
        schema_version: CHECK_SCHEMA_VERSION,
        passed: outcomes.iter().all(|o| o.passed),
        budgets: outcomes
            .iter()
            .map(|o| OutcomeWithWords {
                outcome: o,
                summary: summary(o),
                details: details(o),
            })
            .collect(),
        runs: runs.iter().map(run_summary).collect(),
    };
    Ok(serde_json::to_string_pretty(&s)? + "\n")
}

pub fn markdown(runs: &[Run], outcomes: &[Outcome]) -> String {
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    let mut out = String::new();
    if failed == 0 {
        let _ = writeln!(
            out,
            "## gmem-prof check: ✅ every budget holds ({} checked)\n",
            outcomes.len()
        );
    } else {
        let _ = writeln!(
            out,
            "## gmem-prof check: ❌ {failed} of {} budgets exceeded\n",
            outcomes.len()
        );
    }
    out.push_str("| | Run | Budget | Target | Figure | Limit |\n|---|---|---|---|---|---|\n");
    for o in outcomes {
        let _ = writeln!(
            out,
            "| {} | {} | `{}` | {} | {} | {} |",
            if o.passed { "✅" } else { "❌" },
            md(&o.run),
            o.budget,
            md(&o.target.to_string()),
            figure(o.unit, o.figure.0),
            figure(o.unit, o.limit.0)
        );
    }
    for o in outcomes.iter().filter(|o| !o.passed) {
        let lines = details(o);
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n<details><summary>{}: {}</summary>\n",
            md(&o.run),
            md(&summary(o))
        );
        for d in &lines {
            let _ = writeln!(out, "- {}", md(d));
        }
        out.push_str("\n</details>\n");
    }
    for r in runs {
        let a = &r.analysis;
        let _ = writeln!(out, "\n### {}\n", md(&r.name));
        for d in &a.devices {
            let _ = writeln!(
                out,
                "- device {} ({}): peak **{}** at {:.3} s",
                d.device,
                md(&d.name),
                bytes(d.peak_bytes),
                d.peak_time_ns as f64 / 1e9
            );
        }
        let _ = writeln!(
            out,
            "- leaked at exit: **{}**; held by allocator caches at exit: {}",
            bytes(a.leaked_bytes()),
            bytes(a.cached_bytes())
        );
        let reached = a.ooms_reached_program();
        let _ = writeln!(
            out,
            "- out-of-memory failures: {} ({reached} reached the program)",
            a.ooms.len()
        );
        // What was live at each device's peak, taken apart as far as the
        // trace sees (inside framework allocators: tensors and free space,
        // not the requests that first took their segments).
        for d in &a.devices {
            let parts = a.peak_parts(d);
            if parts.is_empty() {
                continue;
            }
            let _ = write!(
                out,
                "\n| Live at device {}'s peak | Bytes | Allocations |\n|---|---|---|\n",
                d.device
            );
            for p in parts.iter().take(5) {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} |",
                    md(&a.peak_part_label(p)),
                    bytes(p.bytes()),
                    p.count()
                );
            }
        }
        let leaking = a.leaking_sites();
        if !leaking.is_empty() {
            out.push_str("\n| Leaked by | Bytes | Allocations |\n|---|---|---|\n");
            for s in leaking.iter().take(5) {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} |",
                    md(&s.label),
                    bytes(s.leaked_bytes),
                    s.leaked_count
                );
            }
        }
    }
    out
}

/// XML text and attribute escaping.
fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // Characters XML 1.0 cannot hold at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

/// One `<testsuite>` per run, one `<testcase>` per budget and target.
pub fn junit(outcomes: &[Outcome]) -> String {
    let mut runs: Vec<&str> = Vec::new();
    for o in outcomes {
        if !runs.contains(&o.run.as_str()) {
            runs.push(&o.run);
        }
    }
    let failures = outcomes.iter().filter(|o| !o.passed).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"gmem-prof check\" tests=\"{}\" failures=\"{failures}\">",
        outcomes.len()
    );
    for run in runs {
        let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.run == run).collect();
        let _ = writeln!(
            out,
            "  <testsuite name=\"gmem-prof check: {}\" tests=\"{}\" failures=\"{}\">",
            xml(run),
            mine.len(),
            mine.iter().filter(|o| !o.passed).count()
        );
        for o in mine {
            let _ = write!(
                out,
                "    <testcase classname=\"gmem-prof.{}\" name=\"{} {}\"",
                xml(run),
                o.budget,
                xml(&o.target.to_string())
            );
            if o.passed {
                out.push_str(" />\n");
            } else {
                let _ = writeln!(
                    out,
                    ">\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>",
                    o.budget,
                    xml(&summary(o)),
                    xml(&details(o).join("\n"))
                );
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_strings_cannot_break_markdown_or_xml() {
        let hostile = "a|b `c` <script>&\u{1}";
        assert_eq!(md(hostile), "a&#124;b &#96;c&#96; &lt;script&gt;&amp;\u{1}");
        assert_eq!(xml(hostile), "a|b `c` &lt;script&gt;&amp;\u{fffd}");
        assert!(roundtrips_as_xml(&format!(
            "<t a=\"{}\">{}</t>",
            xml(hostile),
            xml(hostile)
        )));
    }

    fn roundtrips_as_xml(s: &str) -> bool {
        // Minimal well-formedness: no raw markup characters left in text.
        let inner = &s[s.find('>').unwrap() + 1..s.rfind('<').unwrap()];
        !inner.contains('<') && !inner.contains('>')
    }
}
