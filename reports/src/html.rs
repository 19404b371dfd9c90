//! The HTML report: one file, inline CSS and SVG, nothing fetched from the
//! network. Stacks expand with `<details>`. One inline script draws the
//! interactive timelines (`timeline.rs`); everything else reads without it.
//! Every string from the trace goes through `escape` (or, in the
//! timelines' JSON, cannot close its script element).

use std::fmt::Write as _;

use gmem_prof_model::{AllocatorView, Analysis, Category, DeviceReport, PeakPart, Site, SiteBytes};

use crate::blocks::{bytes_table, chart_html, frames_details, growth_table};
use crate::chart::Chart;
use crate::format::{bytes, escape, percent, time};
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

fn site_link(a: &Analysis, id: u32) -> String {
    format!("<a href=\"#site-{id}\">{}</a>", escape(&a.site_label(id)))
}

/// A site's label with its frames expandable.
fn site_frames(s: &Site) -> String {
    frames_details(&s.label, &s.frames, s.truncated)
}

/// Links to `ids`, each with what tells it apart from the others of the
/// same label among them (`words::alike_details`).
fn site_links(a: &Analysis, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .zip(crate::words::alike_details(a, ids))
        .map(|(&id, detail)| match detail {
            Some(d) => format!("{}, {}", site_link(a, id), escape(&d)),
            None => site_link(a, id),
        })
        .collect()
}

/// A table of sites (`site_links`).
fn site_bytes_table(a: &Analysis, rows: &[SiteBytes], whole: u64, limit: usize) -> String {
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
fn via_table(a: &Analysis, rows: &[SiteBytes], whole: u64, limit: usize) -> String {
    bytes_table(
        ("site (library entry)", "allocations"),
        rows,
        whole,
        limit,
        |id| {
            let via = a
                .sites
                .get(id as usize)
                .and_then(|s| crate::format::library_via(&s.label, &s.via))
                .map_or_else(String::new, |v| {
                    format!(" <span class=\"cat\">via {}</span>", escape(&v))
                });
            format!("{}{via}", site_link(a, id))
        },
    )
}

/// One device's section: its peak on the timeline and in nvidia-smi's
/// view, what was live at the peak, the kernels around it, fragmentation.
fn device_section(a: &Analysis, d: &DeviceReport, charts: &[Chart], out: &mut String) {
    device_head(a, d, charts, out);
    live_at_peak(a, d, charts, out);
    kernels_at_peak(d, out);
    fragmentation(d, charts, out);
}

/// The device's title and figures, its timeline and memory chart, and
/// what nvidia-smi showed.
fn device_head(a: &Analysis, d: &DeviceReport, charts: &[Chart], out: &mut String) {
    let _ = write!(
        out,
        "<h2 id=\"device-{}\">Device {}: {}</h2><p class=\"meta\">{} total; peak <b>{}</b> live at {}; allocators reserved at most {}.</p>",
        d.device,
        d.device,
        escape(&d.name),
        if d.total_memory > 0 { bytes(d.total_memory) } else { "unknown".into() },
        bytes(d.peak_bytes),
        time(d.peak_time_ns),
        bytes(d.reserved_peak)
    );
    let memory = format!("device{}-memory.svg", d.device);
    out.push_str(&crate::timeline::html(a, d));
    for c in charts.iter().filter(|c| c.name == memory) {
        out.push_str(&chart_html(c));
    }
    if let Some(v) = &d.device_view {
        let _ = write!(
            out,
            "<h3>What nvidia-smi showed</h3><p>At its highest, {}.</p>",
            escape(&crate::device_view::sentence(&v.highest))
        );
        if v.last != v.highest {
            let _ = write!(
                out,
                "<p>Last, {}.</p>",
                escape(&crate::device_view::sentence(&v.last))
            );
        }
        let _ = write!(
            out,
            "<p class=\"meta\">{} samples of NVML (the library nvidia-smi reads), taken at the collector's flush ticks, right after failed allocations and at exit; \"tracked\" is device memory the trace saw allocated and not yet freed at that moment, and what stream-ordered pools held beyond it.</p>",
            v.samples
        );
    }
}

/// What was live at the device's peak: by kind, inside the framework
/// allocators, by site, and its flame graph.
fn live_at_peak(a: &Analysis, d: &DeviceReport, charts: &[Chart], out: &mut String) {
    out.push_str("<h3>Live at the peak</h3>");
    let kinds: Vec<String> = d
        .peak_by_kind
        .iter()
        .map(|k| format!("{} {}", escape(&k.kind), bytes(k.bytes)))
        .collect();
    let _ = write!(out, "<p>By kind: {}.</p>", kinds.join(", "));
    for line in crate::pools::on_device(a, d.device) {
        let _ = write!(out, "<p>Inside it: {}.</p>", escape(&line));
    }
    for f in &d.frameworks_at_peak {
        out.push_str(&crate::framework::at_device_peak_html(a, f, d.peak_bytes));
    }
    if d.frameworks_at_peak.is_empty() {
        out.push_str(&site_bytes_table(a, &d.peak_sites, d.peak_bytes, 20));
    } else if !d.peak_sites.is_empty() {
        // The rest is what lies outside the allocators: each row says what
        // its memory came through (a library's entry point).
        out.push_str("<p>The rest of the peak, outside the framework allocators (library workspaces, CUDA graphs, other allocators, module globals; the CUDA context itself is not an allocation the trace sees):</p>");
        out.push_str(&via_table(a, &d.peak_sites, d.peak_bytes, 20));
    }
    let flame = format!("device{}-peak-flame.svg", d.device);
    for c in charts.iter().filter(|c| c.name == flame) {
        out.push_str(&chart_html(c));
    }
    if let Some(o) = d
        .outside_frameworks
        .as_ref()
        .filter(|_| d.frameworks_at_peak.is_empty())
    {
        let what = "library workspaces, CUDA graphs, other allocators, module globals; the CUDA context itself is not an allocation the trace sees";
        // With no site, no table follows (bytes_table writes none).
        let (amount, end) = if o.sites.is_empty() {
            ("nothing".to_string(), ".")
        } else {
            (format!("<b>{}</b>", bytes(o.bytes)), ":")
        };
        let _ = write!(
            out,
            "<p>Outside the framework allocators at the peak: {amount} ({what}){end}</p>"
        );
        out.push_str(&via_table(a, &o.sites, d.peak_bytes, 10));
    }
}

/// The kernels around the device's peak, and how they were traced.
fn kernels_at_peak(d: &DeviceReport, out: &mut String) {
    for (title, kernels) in [
        ("Kernels running at the peak:", &d.kernels_at_peak),
        (
            "The last kernel launched on each stream before the peak:",
            &d.kernels_launched_before_peak,
        ),
    ] {
        if kernels.is_empty() {
            continue;
        }
        let _ = write!(out, "<p>{title}</p><ul>");
        for k in kernels {
            let when = if k.timed {
                format!("{} – {}", time(k.start_ns), time(k.end_ns))
            } else {
                format!("launched at {}", time(k.start_ns))
            };
            let _ = write!(
                out,
                "<li><code>{}</code> (pid {}, stream {}, {when})</li>",
                escape(&k.name),
                k.pid,
                k.stream
            );
        }
        out.push_str("</ul>");
    }
    if let Some(k) = &d.next_kernel_after_peak {
        let (what, why) = if k.timed {
            ("First kernel to start after the peak", "")
        } else {
            (
                "First kernel launched after the peak",
                ", most often the one that uses what was just allocated",
            )
        };
        let _ = write!(
            out,
            "<p>{what}: <code>{}</code> (pid {}, stream {}, at {}){why}.</p>",
            escape(&k.name),
            k.pid,
            k.stream,
            time(k.start_ns)
        );
    }
    if !d.kernels_traced {
        out.push_str("<p class=\"note\">Kernels were not traced in every process on this device (recorded with <code>--kernels off</code>): the kernel at the peak may be unknown.</p>");
    } else if !d.kernels_timed {
        out.push_str("<p class=\"note\">Kernels were traced as launches (<code>record --kernels launches</code>, the default): when the program launched each, not when it ran. <code>--kernels timed</code> shows which ran at the peak, at about 0.9 µs more per launch on an H200.</p>");
    }
}

/// The device's fragmentation: its chart, the worst moment, each region,
/// and what the figure cannot see.
fn fragmentation(d: &DeviceReport, charts: &[Chart], out: &mut String) {
    out.push_str("<h3>Fragmentation</h3>");
    let frag = format!("device{}-fragmentation.svg", d.device);
    for c in charts.iter().filter(|c| c.name == frag) {
        out.push_str(&chart_html(c));
    }
    let f = &d.fragmentation;
    if let Some(w) = &f.worst {
        let _ = write!(
            out,
            "<p>Worst: <b>F = {:.3}</b> at {}: {} free in the worst region, largest free block {} (each region is judged alone: an allocation cannot span two).</p>",
            w.fragmentation,
            time(w.time_ns),
            bytes(w.free_bytes),
            bytes(w.largest_free_bytes)
        );
    }
    if !f.regions.is_empty() {
        out.push_str("<table><tr><th>region</th><th>pid</th><th class=\"n\">address</th><th class=\"n\">largest size</th><th class=\"n\">its worst F</th><th>layout</th></tr>");
        for r in &f.regions {
            let worst = r.worst.as_ref().map_or_else(
                || "never had free space".to_string(),
                |w| {
                    format!(
                        "{:.3} at {}: {} free, largest {}",
                        w.fragmentation,
                        time(w.time_ns),
                        bytes(w.free_bytes),
                        bytes(w.largest_free_bytes)
                    )
                },
            );
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"n\"><code>{:#x}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                escape(r.kind.as_str()),
                r.pid,
                r.address,
                bytes(r.max_size),
                worst,
                if r.estimated {
                    "estimated (CUPTI reports the pool's size, not its address ranges)"
                } else {
                    "exact"
                }
            );
        }
        out.push_str("</table>");
    }
    for b in &f.blind_spots {
        let _ = write!(out, "<p class=\"note\">{}</p>", escape(blind_spot(b)));
    }
}

/// The top allocation sites.
pub(crate) fn sites_section(a: &Analysis, _: &[Chart], out: &mut String) {
    out.push_str("<h2 id=\"sites\">Top allocation sites</h2>");
    if a.sites.is_empty() {
        out.push_str("<p>The trace holds no allocation.</p>");
        return;
    }
    out.push_str("<p class=\"meta\">Ranked by bytes live at the peak, then total bytes. Click a site for its stack (innermost frame first).</p>");
    out.push_str("<table><tr><th>#</th><th>site</th><th>category</th><th class=\"n\">live at peak</th><th class=\"n\">max live</th><th class=\"n\">total</th><th class=\"n\">count</th><th class=\"n\">temporaries</th><th class=\"n\">leaked</th><th class=\"n\">failed</th></tr>");
    for s in a.sites.iter().take(200) {
        let _ = write!(
            out,
            "<tr id=\"site-{}\"><td>{}</td><td>{}<span class=\"cat\">{} · pid {}</span></td><td class=\"cat\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            s.id,
            s.id,
            site_frames(s),
            escape(&s.kinds.join(", ")),
            s.pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "),
            escape(s.category.as_str()),
            bytes(s.live_at_peak),
            bytes(s.max_live),
            bytes(s.total_bytes),
            s.count,
            s.temporaries,
            if s.leaked_bytes > 0 { bytes(s.leaked_bytes) } else { "–".into() },
            s.failed
        );
    }
    if a.sites.len() > 200 {
        let _ = write!(
            out,
            "<tr><td colspan=\"10\">… and {} more sites (see the JSON output)</td></tr>",
            a.sites.len() - 200
        );
    }
    out.push_str("</table>");
}

/// A table of sites holding memory at exit: (site, bytes, allocations),
/// the first 50.
fn held_table(a: &Analysis, title: &str, column: &str, rows: &[(u32, u64, u64)], out: &mut String) {
    let _ = write!(
        out,
        "<h3>{title}</h3><table><tr><th>site</th><th class=\"n\">{column}</th><th class=\"n\">allocations</th></tr>"
    );
    let rows = &rows[..rows.len().min(50)];
    let ids: Vec<u32> = rows.iter().map(|r| r.0).collect();
    for (&(_, held, count), link) in rows.iter().zip(site_links(a, &ids)) {
        let _ = write!(
            out,
            "<tr><td>{link}</td><td class=\"n\">{}</td><td class=\"n\">{count}</td></tr>",
            bytes(held)
        );
    }
    out.push_str("</table>");
}

/// What was still held at exit, by kind of holder, and the leaking sites.
pub(crate) fn leaks_section(a: &Analysis, _: &[Chart], out: &mut String) {
    out.push_str("<h2 id=\"leaks\">Leaks and growth</h2>");
    out.push_str("<table><tr><th>pid</th><th>exit</th><th class=\"n\">leaked (never freed)</th><th class=\"n\">cached by an allocator</th><th class=\"n\">held by libraries (handles, workspaces, graph pools)</th><th class=\"n\">module globals</th><th class=\"n\">profiler</th></tr>");
    for p in &a.processes {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{} in {}</td><td class=\"n\">{} in {}</td><td class=\"n\">{} in {}</td><td class=\"n\">{} in {}</td><td class=\"n\">{}</td></tr>",
            p.pid,
            if p.clean_exit { "clean" } else { "did not end cleanly: live when the trace ends" },
            bytes(p.at_exit.leaked_bytes),
            p.at_exit.leaked_count,
            bytes(p.at_exit.cached_bytes),
            p.at_exit.cached_count,
            bytes(p.at_exit.library_bytes),
            p.at_exit.library_count,
            bytes(p.at_exit.runtime_bytes),
            p.at_exit.runtime_count,
            bytes(p.at_exit.profiler_bytes)
        );
    }
    out.push_str("</table><p class=\"meta\">Memory a caching allocator (PyTorch, CuPy, XLA) still holds at exit is cached, not leaked: the allocator keeps freed blocks for reuse and the driver reclaims them when the process ends. Memory allocated inside a CUDA library (cuBLAS, cuDNN, NCCL, cuFFT, …: its frames are on the stack) or by a framework for a library's handles, and CUDA graph pools, is held by libraries for the process's life, not leaked; a library that keeps allocating shows as growth.</p>");
    let library = a.sites_held_at_exit(Category::Library);
    if !library.is_empty() {
        let rows: Vec<_> = library
            .iter()
            .map(|s| (s.id, s.held_at_exit_bytes, s.held_at_exit_count))
            .collect();
        held_table(a, "Held by libraries at exit, by site", "held", &rows, out);
    }
    let leaking = a.leaking_sites();
    if leaking.is_empty() {
        out.push_str("<p>No leaks: everything the programs allocated was freed or is held by an allocator cache.</p>");
    } else {
        let rows: Vec<_> = leaking
            .iter()
            .map(|s| (s.id, s.leaked_bytes, s.leaked_count))
            .collect();
        held_table(a, "Leaked, by site", "leaked", &rows, out);
    }
}

/// The sites that kept growing after the warm-up (under "Leaks and
/// growth").
pub(crate) fn growth_section(a: &Analysis, charts: &[Chart], out: &mut String) {
    out.push_str("<h3>Growth after the warm-up</h3>");
    if a.growth.is_empty() && !a.tensor_growth.is_empty() {
        out.push_str("<p>No CUDA allocation site keeps growing beyond the <a href=\"#tensor-growth\">tensor sites that keep growing</a>.</p>");
    } else if a.growth.is_empty() {
        let _ = write!(
            out,
            "<p>No site keeps growing: none rose steadily by {} or more through the judged part of its process's run (from {}% to {}% of the time from its first allocation to its end) as one allocation among its loop's others still rising until freed, or held such a rise until its process ended. Memory filled and then released is a peak, not growth (<code>check --help</code> gives the rule).</p>",
            bytes(gmem_prof_model::GROWTH_MIN_BYTES),
            (gmem_prof_model::WARM_UP * 100.0) as u32,
            (gmem_prof_model::JUDGED_UNTIL * 100.0).round() as u32
        );
    } else {
        for c in charts.iter().filter(|c| c.name == "growth.svg") {
            out.push_str(&chart_html(c));
        }
        out.push_str(&growth_table(("site", "site"), &a.growth, |id| {
            site_link(a, id)
        }));
    }
}

/// The summary's answer on growth: every growing site, CUDA allocations
/// and tensors, said once.
fn growth_answer(a: &Analysis) -> String {
    let growing = a.growing();
    match growing.first() {
        None => "no site keeps growing".into(),
        Some((g, label, tensors)) => format!(
            "{} site(s) keep growing, most <b>{}{}</b>, +{} after the warm-up",
            growing.len(),
            if *tensors { "tensors at " } else { "" },
            escape(label),
            bytes(g.growth_bytes)
        ),
    }
}

pub(crate) fn oom_section(a: &Analysis, _: &[Chart], out: &mut String) {
    out.push_str("<h2 id=\"oom\">Out of memory</h2>");
    let raised: usize = a.frameworks.iter().map(|v| v.ooms.len()).sum();
    if raised > 0 {
        let _ = write!(
            out,
            "<p>{raised} out-of-memory error(s) raised by a framework's allocator: see <a href=\"#tensors\">inside the framework allocators</a>.</p>"
        );
    }
    if a.ooms.is_empty() {
        out.push_str("<p>No CUDA allocation failed.</p>");
        return;
    }
    out.push_str("<p class=\"meta\">\"recovered\": the same request succeeded on a retry (the allocator released its cache); \"retried\": it failed again on a retry; \"reached program\": the last attempt failed and the program saw the error.</p>");
    for (i, o) in a.ooms.iter().enumerate() {
        let _ = write!(
            out,
            "<h3 id=\"oom-{i}\">{} of {} at {} — {}{}</h3><p>pid {}, thread {}, device {}, CUDA error {}. Live on the device then: {} of {}; largest free block in pools/VMM regions: {}.</p><p>Requested from: {}</p>",
            escape(&o.function),
            bytes(o.requested_bytes),
            time(o.time_ns),
            escape(o.outcome.as_str()),
            o.raised_as
                .as_ref()
                .map_or_else(String::new, |r| format!(" (as {})", escape(r))),
            o.pid,
            o.tid,
            o.device,
            o.result,
            bytes(o.device_live_bytes),
            if o.device_total_bytes > 0 { bytes(o.device_total_bytes) } else { "unknown".into() },
            o.largest_free_extent.map_or_else(|| "not visible (no pool or VMM region)".into(), bytes),
            a.sites
                .get(o.site as usize)
                .map_or_else(|| format!("site {}", o.site), site_frames)
        );
        if let Some(m) = &o.device_view {
            let _ = write!(
                out,
                "<p>Right after, {}.</p>",
                escape(&crate::device_view::sentence(m))
            );
        }
        out.push_str(&site_bytes_table(
            a,
            &o.live_by_site,
            o.device_live_bytes,
            10,
        ));
    }
}

pub(crate) fn processes_section(a: &Analysis, charts: &[Chart], out: &mut String) {
    out.push_str("<h2 id=\"processes\">Processes</h2>");
    for c in charts.iter().filter(|c| c.name == "processes.svg") {
        out.push_str(&chart_html(c));
    }
    out.push_str("<table><tr><th>pid</th><th>parent</th><th>command</th><th class=\"n\">lifetime</th><th class=\"n\">allocations</th><th class=\"n\">frees</th><th class=\"n\">failed</th><th class=\"n\">peak</th><th>allocator view</th></tr>");
    for p in &a.processes {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td class=\"n\">{} – {}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            p.pid,
            p.ppid,
            escape(&p.cmdline.join(" ")),
            time(p.start_ns),
            time(p.end_ns),
            p.allocations,
            p.frees,
            p.failed_allocations,
            bytes(p.peak_bytes),
            match p.allocator_view {
                AllocatorView::Segments =>
                    "segments of a caching allocator (tensors inside are not seen)",
                AllocatorView::Tensors => "per tensor (stream-ordered allocator)",
                AllocatorView::Direct => "direct CUDA allocations",
            }
        );
    }
    out.push_str("</table>");
    for line in a.processes.iter().filter_map(crate::format::ipc_mapped) {
        let _ = write!(out, "<p>{}.</p>", escape(&line));
    }
    for p in a.processes.iter().filter(|p| !p.messages.is_empty()) {
        let _ = write!(out, "<p>pid {}:</p><ul>", p.pid);
        for m in p.messages.iter().map(process_message) {
            let _ = write!(out, "<li>{}</li>", escape(&m));
        }
        out.push_str("</ul>");
    }
}

/// The page's head: its title and style, and the run in one line.
pub(crate) fn page_head(a: &Analysis, title: &str, out: &mut String) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>gmem-prof: {}</title><style>{STYLE}</style></head><body>",
        escape(title)
    );
    let _ = write!(
        out,
        "<h1>GPU memory report</h1><p class=\"meta\">{} · {} process(es) · {} device(s) · {} over {} · {} allocation/free events, {} API calls, {} kernels</p>",
        escape(&a.input.files.join(", ")),
        a.processes.len(),
        a.devices.len(),
        bytes(a.input.bytes),
        time(a.timeline.end_ns),
        a.input.memory_events,
        a.input.api_calls,
        a.input.kernels
    );
}

/// The page's end, with the timeline's script when there is a timeline.
pub(crate) fn page_end(a: &Analysis, out: &mut String) {
    out.push_str("<p class=\"meta\">Written by gmem-prof. Times are measured from the first event of the trace.</p>");
    if !a.devices.is_empty() {
        let _ = write!(out, "<script>{}</script>", crate::timeline::SCRIPT);
    }
    out.push_str("</body></html>\n");
}

/// What must be read first: a run not wholly profiled, the input's
/// warnings, why it ran out of memory, and what to change.
pub(crate) fn headline(a: &Analysis, _: &[Chart], out: &mut String) {
    // A run not wholly profiled says so before anything else: its figures
    // are short of what the program used.
    let missing = a.not_profiled();
    if !missing.is_empty() {
        out.push_str(
            "<div class=\"warn\"><b>Part of this run was not profiled: the figures below are \
             short of what the program used.</b><ul>",
        );
        for m in missing.iter().map(unprofiled_part) {
            let _ = write!(out, "<li>{}</li>", escape(&m));
        }
        out.push_str("</ul></div>");
    }
    for warning in a.input.warnings.iter().map(input_warning) {
        let _ = write!(out, "<p class=\"warn\">{}</p>", escape(&warning));
    }
    // Why it ran out, then what to change, before the figures.
    if let Some(why) = crate::framework::why_out_of_memory(a) {
        let _ = write!(
            out,
            "<div class=\"warn\"><b>Ran out of memory:</b> {}. <a href=\"#oom\">Details</a>.</div>",
            escape(&why)
        );
    }
    let advice = crate::remedies::all(a);
    if !advice.is_empty() {
        out.push_str("<h2 id=\"remedies\">What to change</h2><ol class=\"remedies\">");
        for r in &advice {
            let _ = write!(
                out,
                "<li><b>{}</b><br>because {}.</li>",
                escape(&r.change),
                escape(&r.because)
            );
        }
        out.push_str("</ol>");
    }
}

/// The answers to the plain questions, one line each, linked to the
/// sections below: each device's peak and what took most of it, each
/// framework's tensors, the pools, leaks, growth and OOMs.
pub(crate) fn answers(a: &Analysis, _: &[Chart], out: &mut String) {
    out.push_str("<ul class=\"answers\">");
    for d in &a.devices {
        let top = match a.peak_parts(d).first() {
            None => String::new(),
            Some(PeakPart::Site(s)) => format!(
                "; largest share {} from {}",
                percent(s.bytes, d.peak_bytes),
                site_link(a, s.site)
            ),
            Some(PeakPart::Tensors { pid, site }) => format!(
                "; largest share {} in tensors from <a href=\"#tensor-site-{}\">{}</a> (pid {pid})",
                percent(site.bytes, d.peak_bytes),
                site.site,
                escape(&a.tensor_site_label(site.site))
            ),
            Some(PeakPart::FreeInSegments {
                pid,
                allocator,
                bytes: free,
            }) => format!(
                "; largest share {} free inside the segments of {} (pid {pid}): its cache",
                percent(*free, d.peak_bytes),
                escape(allocator)
            ),
        };
        let _ = write!(
            out,
            "<li><a href=\"#device-{}\">Device {}</a>: peak <b>{}</b> at {}{}.</li>",
            d.device,
            d.device,
            bytes(d.peak_bytes),
            time(d.peak_time_ns),
            top
        );
    }
    for v in &a.frameworks {
        let top = v.peak_sites.first().map_or_else(String::new, |s| {
            format!(
                "; largest share {} from <a href=\"#tensor-site-{}\">{}</a>",
                percent(s.bytes, v.allocated_peak),
                s.site,
                escape(&a.tensor_site_label(s.site))
            )
        });
        let _ = write!(
            out,
            "<li><a href=\"#{}\">Tensors</a> of pid {} on device {}: peak <b>{}</b> allocated at {} in {} reserved{}.</li>",
            crate::chart::framework_stem(v),
            v.pid,
            v.device,
            bytes(v.allocated_peak),
            time(v.allocated_peak_time_ns),
            bytes(v.reserved_at_allocated_peak),
            top
        );
    }
    crate::pools::overview(a, out);
    let (leaked, cached) = (a.leaked_bytes(), a.cached_bytes());
    let _ = write!(
        out,
        "<li><a href=\"#leaks\">Leaks</a>: {}{}.</li><li><a href=\"#leaks\">Growth</a>: {}.</li><li><a href=\"#oom\">Out of memory</a>: {}.</li>",
        if leaked > 0 { format!("<b>{}</b> never freed", bytes(leaked)) } else { "none".into() },
        if cached > 0 { format!(" ({} cached by an allocator at exit, not leaked)", bytes(cached)) } else { String::new() },
        growth_answer(a),
        if a.ooms.is_empty() && a.ooms_reached_program() == 0 { "never".into() } else { format!("{} failed allocation(s), {} error(s) reached the program", a.ooms.len(), a.ooms_reached_program()) }
    );
    out.push_str("</ul>");
}

/// What the trace saw inside the framework allocators: PyTorch's views,
/// then JAX's and CuPy's pools.
pub(crate) fn inside_allocators(a: &Analysis, charts: &[Chart], out: &mut String) {
    crate::framework::html_section(a, charts, out);
    crate::pools::html_section(a, charts, out);
}

/// A section per device.
pub(crate) fn devices(a: &Analysis, charts: &[Chart], out: &mut String) {
    for d in &a.devices {
        device_section(a, d, charts, out);
    }
}
