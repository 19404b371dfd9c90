//! The HTML report: one file, inline CSS and SVG, nothing fetched from the
//! network. Stacks expand with `<details>`. One inline script draws the
//! interactive timelines (`timeline.rs`); everything else reads without it.
//! Written with maud's `html!`, which escapes every value it splices in:
//! what is already markup is a `Markup` (or a `Chart`), and the only text
//! wrapped as markup by hand is our own style and script.

use gmem_prof_model::{AllocatorView, Analysis, Category, DeviceReport, PeakPart, Site, SiteBytes};
use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::blocks::{bytes_table, charts_named, frames_details, growth_table, pid_list};
use crate::chart::Chart;
use crate::format::{bytes, percent, time};
use crate::reasons::{blind_spot, input_warning, process_message, unprofiled_part};

pub(crate) const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;padding:0 16px 48px;color:#222}
h1{margin:24px 0 4px}h2{margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px}
.timeline{position:relative;margin:8px 0}.timeline svg{user-select:none;touch-action:none}
.timeline .tip{position:absolute;top:4px;right:4px;max-width:60%;background:#fffffff0;border:1px solid #999;padding:6px 8px;font-size:12px;pointer-events:none}
.timeline .tip ol{margin:4px 0 0;padding-left:18px}
.meta{color:#555;margin:0 0 12px}
table{border-collapse:collapse;width:100%;margin:8px 0 16px;font-size:14px}
th,td{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f6f6f6}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.warn{background:#fff4e5;border:1px solid #f0c36d;padding:8px 12px;margin:8px 0}
.note{background:#eef5ff;border:1px solid #b6d0f5;padding:8px 12px;margin:8px 0}
.answers li{margin:4px 0}
details summary{cursor:pointer}ol.frames{font-family:ui-monospace,monospace;font-size:12px;margin:4px 0 8px;padding-left:28px}
ol.frames .unresolved{color:#a00}.cat{font-size:12px;color:#555;white-space:nowrap}
svg{max-width:100%;height:auto}code{font-family:ui-monospace,monospace;overflow-wrap:anywhere}
"#;

fn site_link(a: &Analysis, id: u32) -> Markup {
    html! { a href={ "#site-" (id) } { (a.site_label(id)) } }
}

/// A site's label with its frames expandable.
fn site_frames(s: &Site) -> Markup {
    frames_details(&s.label, &s.frames, s.truncated)
}

/// Links to `ids`, each with what tells it apart from the others of the
/// same label among them (`words::alike_details`).
fn site_links(a: &Analysis, ids: &[u32]) -> Vec<Markup> {
    ids.iter()
        .zip(crate::words::alike_details(a, ids))
        .map(|(&id, detail)| match detail {
            Some(d) => html! { (site_link(a, id)) ", " (d) },
            None => site_link(a, id),
        })
        .collect()
}

/// A table of sites (`site_links`).
fn site_bytes_table(a: &Analysis, rows: &[SiteBytes], whole: u64, limit: usize) -> Markup {
    let ids: Vec<u32> = rows.iter().take(limit).map(|r| r.site).collect();
    let links = site_links(a, &ids);
    bytes_table(("site", "allocations"), rows, whole, limit, |id| {
        ids.iter()
            .position(|&i| i == id)
            .map_or_else(|| site_link(a, id), |k| links[k].clone())
    })
}

/// A table of sites, each with what its memory came through (a library's
/// entry point, `Site::via`).
fn via_table(a: &Analysis, rows: &[SiteBytes], whole: u64, limit: usize) -> Markup {
    bytes_table(
        ("site (library entry)", "allocations"),
        rows,
        whole,
        limit,
        |id| {
            let via = a
                .sites
                .get(id as usize)
                .and_then(|s| crate::format::library_via(&s.label, &s.via));
            html! {
                (site_link(a, id))
                @if let Some(v) = via { " " span.cat { "via " (v) } }
            }
        },
    )
}

/// One device's section: its peak on the timeline and in nvidia-smi's
/// view, what was live at the peak, the kernels around it, fragmentation.
fn device_section(a: &Analysis, d: &DeviceReport, charts: &[Chart]) -> Markup {
    html! {
        (device_head(a, d, charts))
        (live_at_peak(a, d, charts))
        (kernels_at_peak(d))
        (fragmentation(d, charts))
    }
}

/// The device's title and figures, its timeline and memory chart, and
/// what nvidia-smi showed.
fn device_head(a: &Analysis, d: &DeviceReport, charts: &[Chart]) -> Markup {
    html! {
        h2 id={ "device-" (d.device) } { "Device " (d.device) ": " (d.name) }
        p.meta {
            (if d.total_memory > 0 { bytes(d.total_memory) } else { "unknown".into() })
            " total; peak " b { (bytes(d.peak_bytes)) } " live at " (time(d.peak_time_ns))
            "; allocators reserved at most " (bytes(d.reserved_peak)) "."
        }
        (crate::timeline::html(a, d))
        (charts_named(charts, &format!("device{}-memory.svg", d.device)))
        @if let Some(v) = &d.device_view {
            h3 { "What nvidia-smi showed" }
            p { "At its highest, " (crate::device_view::sentence(&v.highest)) "." }
            @if v.last != v.highest {
                p { "Last, " (crate::device_view::sentence(&v.last)) "." }
            }
            p.meta {
                (v.samples) " samples of NVML (the library nvidia-smi reads), taken at the collector's flush ticks, right after failed allocations and at exit; \"tracked\" is device memory the trace saw allocated and not yet freed at that moment, and what stream-ordered pools held beyond it."
            }
        }
    }
}

/// What was live at the device's peak: by kind, inside the framework
/// allocators, by site, and its flame graph.
fn live_at_peak(a: &Analysis, d: &DeviceReport, charts: &[Chart]) -> Markup {
    let kinds: Vec<String> = d
        .peak_by_kind
        .iter()
        .map(|k| format!("{} {}", k.kind, bytes(k.bytes)))
        .collect();
    let outside = d
        .outside_frameworks
        .as_ref()
        .filter(|_| d.frameworks_at_peak.is_empty());
    let what = "library workspaces, CUDA graphs, other allocators, module globals; the CUDA context itself is not an allocation the trace sees";
    html! {
        h3 { "Live at the peak" }
        p { "By kind: " (kinds.join(", ")) "." }
        @for line in crate::pools::on_device(a, d.device) {
            p { "Inside it: " (line) "." }
        }
        @for f in &d.frameworks_at_peak {
            (crate::framework::at_device_peak_html(a, f, d.peak_bytes))
        }
        @if d.frameworks_at_peak.is_empty() {
            (site_bytes_table(a, &d.peak_sites, d.peak_bytes, 20))
        } @else if !d.peak_sites.is_empty() {
            // The rest is what lies outside the allocators: each row says
            // what its memory came through (a library's entry point).
            p { "The rest of the peak, outside the framework allocators (" (what) "):" }
            (via_table(a, &d.peak_sites, d.peak_bytes, 20))
        }
        (charts_named(charts, &format!("device{}-peak-flame.svg", d.device)))
        @if let Some(o) = outside {
            // With no site, no table follows (bytes_table writes none).
            p {
                "Outside the framework allocators at the peak: "
                @if o.sites.is_empty() { "nothing" } @else { b { (bytes(o.bytes)) } }
                " (" (what) ")"
                (if o.sites.is_empty() { "." } else { ":" })
            }
            (via_table(a, &o.sites, d.peak_bytes, 10))
        }
    }
}

/// The kernels around the device's peak, and how they were traced.
fn kernels_at_peak(d: &DeviceReport) -> Markup {
    let lists = [
        ("Kernels running at the peak:", &d.kernels_at_peak),
        (
            "The last kernel launched on each stream before the peak:",
            &d.kernels_launched_before_peak,
        ),
    ];
    html! {
        @for (title, kernels) in lists.into_iter().filter(|(_, k)| !k.is_empty()) {
            p { (title) }
            ul {
                @for k in kernels {
                    li {
                        code { (k.name) } " (pid " (k.pid) ", stream " (k.stream) ", "
                        @if k.timed {
                            (time(k.start_ns)) " – " (time(k.end_ns))
                        } @else {
                            "launched at " (time(k.start_ns))
                        }
                        ")"
                    }
                }
            }
        }
        @if let Some(k) = &d.next_kernel_after_peak {
            p {
                (if k.timed { "First kernel to start after the peak" } else { "First kernel launched after the peak" })
                ": " code { (k.name) } " (pid " (k.pid) ", stream " (k.stream) ", at " (time(k.start_ns)) ")"
                @if !k.timed { ", most often the one that uses what was just allocated" }
                "."
            }
        }
        @if !d.kernels_traced {
            p.note { "Kernels were not traced in every process on this device (recorded with " code { "--kernels off" } "): the kernel at the peak may be unknown." }
        } @else if !d.kernels_timed {
            p.note { "Kernels were traced as launches (" code { "record --kernels launches" } ", the default): when the program launched each, not when it ran. " code { "--kernels timed" } " shows which ran at the peak, at about 0.9 µs more per launch on an H200." }
        }
    }
}

/// The device's fragmentation: its chart, the worst moment, each region,
/// and what the figure cannot see.
fn fragmentation(d: &DeviceReport, charts: &[Chart]) -> Markup {
    let f = &d.fragmentation;
    html! {
        h3 { "Fragmentation" }
        (charts_named(charts, &format!("device{}-fragmentation.svg", d.device)))
        @if let Some(w) = &f.worst {
            p {
                "Worst: " b { "F = " (format!("{:.3}", w.fragmentation)) } " at " (time(w.time_ns)) ": "
                (bytes(w.free_bytes)) " free in the worst region, largest free block " (bytes(w.largest_free_bytes))
                " (each region is judged alone: an allocation cannot span two)."
            }
        }
        @if !f.regions.is_empty() {
            table {
                tr { th { "region" } th { "pid" } th.n { "address" } th.n { "largest size" } th.n { "its worst F" } th { "layout" } }
                @for r in &f.regions {
                    tr {
                        td { (r.kind.as_str()) }
                        td { (r.pid) }
                        td.n { code { (format!("{:#x}", r.address)) } }
                        td.n { (bytes(r.max_size)) }
                        td.n {
                            @if let Some(w) = &r.worst {
                                (format!("{:.3}", w.fragmentation)) " at " (time(w.time_ns)) ": " (bytes(w.free_bytes)) " free, largest " (bytes(w.largest_free_bytes))
                            } @else {
                                "never had free space"
                            }
                        }
                        td { (if r.estimated { "estimated (CUPTI reports the pool's size, not its address ranges)" } else { "exact" }) }
                    }
                }
            }
        }
        @for b in &f.blind_spots {
            p.note { (blind_spot(b)) }
        }
    }
}

/// The top allocation sites.
pub(crate) fn sites_section(a: &Analysis, _: &[Chart]) -> Markup {
    html! {
        h2 #sites { "Top allocation sites" }
        @if a.sites.is_empty() {
            p { "The trace holds no allocation." }
        } @else {
            p.meta { "Ranked by bytes live at the peak, then total bytes. Click a site for its stack (innermost frame first)." }
            table {
                tr { th { "#" } th { "site" } th { "category" } th.n { "live at peak" } th.n { "max live" } th.n { "total" } th.n { "count" } th.n { "temporaries" } th.n { "leaked" } th.n { "failed" } }
                @for s in a.sites.iter().take(200) {
                    tr id={ "site-" (s.id) } {
                        td { (s.id) }
                        td { (site_frames(s)) span.cat { (s.kinds.join(", ")) " · pid " (pid_list(&s.pids)) } }
                        td.cat { (s.category.as_str()) }
                        td.n { (bytes(s.live_at_peak)) }
                        td.n { (bytes(s.max_live)) }
                        td.n { (bytes(s.total_bytes)) }
                        td.n { (s.count) }
                        td.n { (s.temporaries) }
                        td.n { (if s.leaked_bytes > 0 { bytes(s.leaked_bytes) } else { "–".into() }) }
                        td.n { (s.failed) }
                    }
                }
                @if a.sites.len() > 200 {
                    tr { td colspan="10" { "… and " (a.sites.len() - 200) " more sites (see the JSON output)" } }
                }
            }
        }
    }
}

/// A table of sites holding memory at exit: (site, bytes, allocations),
/// the first 50.
fn held_table(a: &Analysis, title: &str, column: &str, rows: &[(u32, u64, u64)]) -> Markup {
    let rows = &rows[..rows.len().min(50)];
    let ids: Vec<u32> = rows.iter().map(|r| r.0).collect();
    html! {
        h3 { (title) }
        table {
            tr { th { "site" } th.n { (column) } th.n { "allocations" } }
            @for (&(_, held, count), link) in rows.iter().zip(site_links(a, &ids)) {
                tr { td { (link) } td.n { (bytes(held)) } td.n { (count) } }
            }
        }
    }
}

/// What was still held at exit, by kind of holder, and the leaking sites.
pub(crate) fn leaks_section(a: &Analysis, _: &[Chart]) -> Markup {
    let library: Vec<_> = a
        .sites_held_at_exit(Category::Library)
        .iter()
        .map(|s| (s.id, s.held_at_exit_bytes, s.held_at_exit_count))
        .collect();
    let leaking: Vec<_> = a
        .leaking_sites()
        .iter()
        .map(|s| (s.id, s.leaked_bytes, s.leaked_count))
        .collect();
    html! {
        h2 #leaks { "Leaks and growth" }
        table {
            tr { th { "pid" } th { "exit" } th.n { "leaked (never freed)" } th.n { "cached by an allocator" } th.n { "held by libraries (handles, workspaces, graph pools)" } th.n { "module globals" } th.n { "profiler" } }
            @for p in &a.processes {
                @let e = &p.at_exit;
                tr {
                    td { (p.pid) }
                    td {
                        (if p.window.as_ref().is_some_and(|w| w.closed_ns.is_some()) {
                            "recorded window closed: held then"
                        } else if p.clean_exit {
                            "clean"
                        } else {
                            "did not end cleanly: live when the trace ends"
                        })
                    }
                    td.n { (bytes(e.leaked_bytes)) " in " (e.leaked_count) }
                    td.n { (bytes(e.cached_bytes)) " in " (e.cached_count) }
                    td.n { (bytes(e.library_bytes)) " in " (e.library_count) }
                    td.n { (bytes(e.runtime_bytes)) " in " (e.runtime_count) }
                    td.n { (bytes(e.profiler_bytes)) }
                }
            }
        }
        p.meta { "Memory a caching allocator (PyTorch, CuPy, XLA) still holds at exit is cached, not leaked: the allocator keeps freed blocks for reuse and the driver reclaims them when the process ends. Memory allocated inside a CUDA library (cuBLAS, cuDNN, NCCL, cuFFT, …: its frames are on the stack) or by a framework for a library's handles, and CUDA graph pools, is held by libraries for the process's life, not leaked; a library that keeps allocating shows as growth." }
        @if !library.is_empty() {
            (held_table(a, "Held by libraries at exit, by site", "held", &library))
        }
        @if leaking.is_empty() {
            p { "No leaks: everything the programs allocated was freed or is held by an allocator cache." }
        } @else {
            (held_table(a, "Leaked, by site", "leaked", &leaking))
        }
    }
}

/// The sites that kept growing after the warm-up (under "Leaks and
/// growth").
pub(crate) fn growth_section(a: &Analysis, charts: &[Chart]) -> Markup {
    html! {
        h3 { "Growth after the warm-up" }
        @if a.growth.is_empty() && !a.tensor_growth.is_empty() {
            p { "No CUDA allocation site keeps growing beyond the " a href="#tensor-growth" { "tensor sites that keep growing" } "." }
        } @else if a.growth.is_empty() {
            p {
                "No site keeps growing: none rose steadily by " (bytes(gmem_prof_model::GROWTH_MIN_BYTES))
                " or more through the judged part of its process's run (from " ((gmem_prof_model::WARM_UP * 100.0) as u32)
                "% to " ((gmem_prof_model::JUDGED_UNTIL * 100.0).round() as u32)
                "% of the time from its first allocation to its end) as one allocation among its loop's others still rising until freed, or held such a rise until its process ended. Memory filled and then released is a peak, not growth ("
                code { "check --help" } " gives the rule)."
            }
        } @else {
            (charts_named(charts, "growth.svg"))
            (growth_table(("site", "site"), &a.growth, |id| site_link(a, id)))
        }
        @for line in a.steps.iter().filter_map(crate::format::step_growth) {
            p { (line) " (" a href="#steps" { "steps" } ")." }
        }
    }
}

/// The summary's answer on growth: every growing site, CUDA allocations
/// and tensors, said once.
fn growth_answer(a: &Analysis) -> Markup {
    let growing = a.growing();
    html! {
        @match growing.first() {
            None => "no site keeps growing",
            Some((g, label, tensors)) => {
                (growing.len()) " site(s) keep growing, most "
                b { @if *tensors { "tensors at " } (label) }
                ", +" (bytes(g.growth_bytes)) " after the warm-up"
            }
        }
    }
}

pub(crate) fn oom_section(a: &Analysis, _: &[Chart]) -> Markup {
    let raised: usize = a.frameworks.iter().map(|v| v.ooms.len()).sum();
    html! {
        h2 #oom { "Out of memory" }
        @if raised > 0 {
            p { (raised) " out-of-memory error(s) raised by a framework's allocator: see " a href="#tensors" { "inside the framework allocators" } "." }
        }
        @if a.ooms.is_empty() {
            p { "No CUDA allocation failed." }
        } @else {
            p.meta { "\"recovered\": the same request succeeded on a retry (the allocator released its cache); \"retried\": it failed again on a retry; \"reached program\": the last attempt failed and the program saw the error." }
            @for (i, o) in a.ooms.iter().enumerate() {
                h3 id={ "oom-" (i) } {
                    (o.function) " of " (bytes(o.requested_bytes)) " at " (time(o.time_ns)) (crate::words::in_step_and_ranges(o.step, &o.ranges)) " — " (o.outcome.as_str())
                    @if let Some(r) = &o.raised_as { " (as " (r) ")" }
                }
                p {
                    "pid " (o.pid) ", thread " (o.tid) ", device " (o.device) ", CUDA error " (o.result)
                    ". Live on the device then: " (bytes(o.device_live_bytes)) " of "
                    (if o.device_total_bytes > 0 { bytes(o.device_total_bytes) } else { "unknown".into() })
                    "; largest free block in pools/VMM regions: "
                    (o.largest_free_extent.map_or_else(|| "not visible (no pool or VMM region)".into(), bytes))
                    "."
                }
                p {
                    "Requested from: "
                    @match a.sites.get(o.site as usize) {
                        Some(s) => (site_frames(s)),
                        None => { "site " (o.site) },
                    }
                }
                @if let Some(m) = &o.device_view {
                    p { "Right after, " (crate::device_view::sentence(m)) "." }
                }
                (site_bytes_table(a, &o.live_by_site, o.device_live_bytes, 10))
            }
        }
    }
}

pub(crate) fn processes_section(a: &Analysis, charts: &[Chart]) -> Markup {
    html! {
        h2 #processes { "Processes" }
        (charts_named(charts, "processes.svg"))
        table {
            tr { th { "pid" } th { "parent" } th { "command" } th.n { "lifetime" } th.n { "allocations" } th.n { "frees" } th.n { "failed" } th.n { "peak" } th { "allocator view" } }
            @for p in &a.processes {
                tr {
                    td { (p.pid) }
                    td { (p.ppid) }
                    td { code { (p.cmdline.join(" ")) } }
                    td.n { (time(p.start_ns)) " – " (time(p.end_ns)) }
                    td.n { (p.allocations) }
                    td.n { (p.frees) }
                    td.n { (p.failed_allocations) }
                    td.n { (bytes(p.peak_bytes)) }
                    td {
                        (match p.allocator_view {
                            AllocatorView::Segments => "segments of a caching allocator (tensors inside are not seen)",
                            AllocatorView::Tensors => "per tensor (stream-ordered allocator)",
                            AllocatorView::Direct => "direct CUDA allocations",
                        })
                    }
                }
            }
        }
        @for line in a.processes.iter().filter_map(crate::format::ipc_mapped) {
            p { (line) "." }
        }
        @for line in a.processes.iter().filter_map(crate::format::recorded_window) {
            p { (line) "." }
        }
        @for p in a.processes.iter().filter(|p| !p.messages.is_empty()) {
            p { "pid " (p.pid) ":" }
            ul {
                @for m in p.messages.iter().map(process_message) {
                    li { (m) }
                }
            }
        }
    }
}

/// A page's head: its title and our style (every page of gmem-prof shares
/// them); the body follows.
pub(crate) fn document_head(title: &str, viewport: bool) -> Markup {
    html! {
        (DOCTYPE)
        @if viewport { "\n" }
        (PreEscaped("<html lang=\"en\">"))
        head {
            meta charset="utf-8";
            @if viewport { meta name="viewport" content="width=device-width, initial-scale=1"; }
            title { (title) }
            style { (PreEscaped(STYLE)) }
        }
        (PreEscaped("<body>"))
    }
}

/// The end of a page that `document_head` began.
pub(crate) fn document_end() -> Markup {
    PreEscaped("</body></html>\n".to_string())
}

/// The page's head: its title and style, and the run in one line.
pub(crate) fn page_head(a: &Analysis, title: &str) -> Markup {
    html! {
        (document_head(&format!("gmem-prof: {title}"), true))
        h1 { "GPU memory report" }
        p.meta {
            (a.input.files.join(", ")) " · " (a.processes.len()) " process(es) · " (a.devices.len()) " device(s) · "
            (bytes(a.input.bytes)) " over " (time(a.timeline.end_ns)) " · " (a.input.memory_events)
            " allocation/free events, " (a.input.api_calls) " API calls, " (a.input.kernels) " kernels"
        }
    }
}

/// The page's end, with the timeline's script when there is a timeline.
pub(crate) fn page_end(a: &Analysis) -> Markup {
    html! {
        p.meta { "Written by gmem-prof. Times are measured from the first event of the trace." }
        @if !a.devices.is_empty() {
            script { (PreEscaped(crate::timeline::SCRIPT)) }
        }
        (document_end())
    }
}

/// What must be read first: a run not wholly profiled, the input's
/// warnings, why it ran out of memory, and what to change.
pub(crate) fn headline(a: &Analysis, _: &[Chart]) -> Markup {
    let missing = a.not_profiled();
    let advice = crate::remedies::all(a);
    html! {
        // A run not wholly profiled says so before anything else: its
        // figures are short of what the program used.
        @if !missing.is_empty() {
            div.warn {
                b { "Part of this run was not profiled: the figures below are short of what the program used." }
                ul { @for m in missing.iter().map(unprofiled_part) { li { (m) } } }
            }
        }
        @for warning in a.input.warnings.iter().map(input_warning) {
            p.warn { (warning) }
        }
        // Why it ran out, then what to change, before the figures.
        @if let Some(why) = crate::framework::why_out_of_memory(a) {
            div.warn { b { "Ran out of memory:" } " " (why) ". " a href="#oom" { "Details" } "." }
        }
        @if !advice.is_empty() {
            h2 #remedies { "What to change" }
            ol.remedies {
                @for r in &advice {
                    li { b { (r.change) } br; "because " (r.because) "." }
                }
            }
        }
    }
}

/// The answers to the plain questions, one line each, linked to the
/// sections below: each device's peak and what took most of it, each
/// framework's tensors, the pools, leaks, growth and OOMs.
pub(crate) fn answers(a: &Analysis, _: &[Chart]) -> Markup {
    let (leaked, cached) = (a.leaked_bytes(), a.cached_bytes());
    html! {
        ul.answers {
            @for d in &a.devices {
                li {
                    a href={ "#device-" (d.device) } { "Device " (d.device) }
                    ": peak " b { (bytes(d.peak_bytes)) } " at " (time(d.peak_time_ns))
                    (largest_share(a, d))
                    "."
                }
            }
            @for v in &a.frameworks {
                li {
                    a href={ "#" (crate::chart::framework_stem(v)) } { "Tensors" }
                    " of pid " (v.pid) " on device " (v.device) ": peak " b { (bytes(v.allocated_peak)) }
                    " allocated at " (time(v.allocated_peak_time_ns)) " in " (bytes(v.reserved_at_allocated_peak)) " reserved"
                    @if let Some(s) = v.peak_sites.first() {
                        "; largest share " (percent(s.bytes, v.allocated_peak)) " from "
                        a href={ "#tensor-site-" (s.site) } { (a.tensor_site_label(s.site)) }
                    }
                    "."
                }
            }
            (crate::pools::overview(a))
            li {
                a href="#leaks" { "Leaks" } ": "
                @if leaked > 0 { b { (bytes(leaked)) } " never freed" } @else { "none" }
                @if cached > 0 { " (" (bytes(cached)) " cached by an allocator at exit, not leaked)" }
                "."
            }
            li { a href="#leaks" { "Growth" } ": " (growth_answer(a)) "." }
            (crate::steps::answer(a))
            (crate::ranges::answer(a))
            li {
                a href="#oom" { "Out of memory" } ": "
                @if a.ooms.is_empty() && a.ooms_reached_program() == 0 {
                    "never"
                } @else {
                    (a.ooms.len()) " failed allocation(s), " (a.ooms_reached_program()) " error(s) reached the program"
                }
                "."
            }
        }
    }
}

/// "; largest share 28% from …": what took most of a device's peak.
fn largest_share(a: &Analysis, d: &DeviceReport) -> Markup {
    html! {
        @match a.peak_parts(d).first() {
            None => {},
            Some(PeakPart::Site(s)) => {
                "; largest share " (percent(s.bytes, d.peak_bytes)) " from " (site_link(a, s.site))
            },
            Some(PeakPart::Tensors { pid, site }) => {
                "; largest share " (percent(site.bytes, d.peak_bytes)) " in tensors from "
                a href={ "#tensor-site-" (site.site) } { (a.tensor_site_label(site.site)) }
                " (pid " (pid) ")"
            },
            Some(PeakPart::FreeInSegments { pid, allocator, bytes: free }) => {
                "; largest share " (percent(*free, d.peak_bytes)) " free inside the segments of "
                (allocator) " (pid " (pid) "): its cache"
            },
        }
    }
}

/// What the trace saw inside the framework allocators: PyTorch's views,
/// then JAX's and CuPy's pools.
pub(crate) fn inside_allocators(a: &Analysis, charts: &[Chart]) -> Markup {
    html! {
        (crate::framework::html_section(a, charts))
        (crate::pools::html_section(a, charts))
    }
}

/// A section per device.
pub(crate) fn devices(a: &Analysis, charts: &[Chart]) -> Markup {
    html! {
        @for d in &a.devices {
            (device_section(a, d, charts))
        }
    }
}
