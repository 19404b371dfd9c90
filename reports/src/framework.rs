//! The framework allocators' part of the reports: tensors inside PyTorch's
//! caching allocator (allocated and reserved, the allocated peak by Python
//! line, fragmentation per pool, the errors it raised, whether the driver
//! saw its segments), for the HTML page and the terminal summary.

use std::fmt::Write as _;
use std::io::{self, Write};

use gmem_prof_model::{
    Analysis, FrameworkAtExit, FrameworkAtPeak, FrameworkOom, FrameworkView, ReservedIn, SiteBytes,
};

use crate::blocks::{bytes_table, chart_html, frames_details, growth_table};
use crate::chart::{framework_stem, Chart};
use crate::format::{bytes, escape, time};
use crate::reasons::ALLOCATOR_UNSEEN;
use crate::words::{oom_limit, oom_request, peak_lines};

fn tensor_link(a: &Analysis, id: u32) -> String {
    format!(
        "<a href=\"#tensor-site-{id}\">{}</a>",
        escape(&a.tensor_site_label(id))
    )
}

/// A framework allocator's segments at a device's peak, for the device's
/// section: what they were and the tensors they held.
pub fn at_device_peak_html(a: &Analysis, f: &FrameworkAtPeak, peak: u64) -> String {
    let mut out = format!(
        "<p><b>{}</b> ({}) in {}, and {} free in them (the allocator's cache):</p>",
        bytes(f.segment_bytes),
        crate::format::percent(f.segment_bytes, peak),
        escape(&at_device_peak_words(f)),
        bytes(f.segment_bytes.saturating_sub(f.tensor_bytes))
    );
    out.push_str(&tensor_table(a, &f.tensor_sites, peak, 10));
    out
}

fn tensor_table(a: &Analysis, rows: &[SiteBytes], whole: u64, limit: usize) -> String {
    bytes_table(
        (
            "where (innermost line of the program's own code)",
            "tensors",
        ),
        rows,
        whole,
        limit,
        |id| tensor_link(a, id),
    )
}

/// The CUDA libraries' workspaces among the blocks held at exit, in words
/// (", and 65.0 MiB in 3 CUDA library workspaces (cuBLAS's, held for the
/// process's life)"); empty when there are none.
fn library_words(e: &FrameworkAtExit) -> String {
    if e.library_tensors == 0 {
        return String::new();
    }
    format!(
        ", and {} in {} CUDA library workspace{} (cuBLAS's and the like, held for the process's life, not the program's tensors)",
        bytes(e.library_bytes),
        e.library_tensors,
        if e.library_tensors == 1 { "" } else { "s" }
    )
}

/// A framework allocator's segments at a device's peak, in words:
/// "19 segments of PyTorch caching allocator (pid 528), whose tensors held
/// at most 409 MiB while the device stood at this peak (at 5.045 s)".
pub fn at_device_peak_words(f: &FrameworkAtPeak) -> String {
    format!(
        "{} segment{} of {} (pid {}), whose tensors held at most {} while the device stood at \
         this peak (at {})",
        f.segments,
        if f.segments == 1 { "" } else { "s" },
        f.allocator,
        f.pid,
        bytes(f.tensor_bytes),
        time(f.tensor_time_ns)
    )
}

/// What the allocator held when it raised an error, in words.
fn oom_state(o: &FrameworkOom) -> String {
    if o.cuda_malloc_async {
        // No segments: its pool is CUDA's.
        return format!(
            "{} allocated, {} in its pool",
            bytes(o.allocated_bytes),
            bytes(o.reserved_bytes)
        );
    }
    format!(
        "{} allocated, {} reserved, {} free inside its segments, largest free block {}",
        bytes(o.allocated_bytes),
        bytes(o.reserved_bytes),
        bytes(o.free_in_segments),
        bytes(o.largest_free_block)
    )
}

/// Why the run ran out of memory, in one sentence: the first error that
/// reached the program (a framework's, or a failed CUDA allocation no
/// framework turned into its own). None when none did.
pub fn why_out_of_memory(a: &Analysis) -> Option<String> {
    let framework = a
        .frameworks
        .iter()
        .flat_map(|v| v.ooms.iter())
        .min_by_key(|o| o.time_ns);
    let driver = a
        .ooms
        .iter()
        .filter(|o| o.reached_program() && o.raised_as.is_none())
        .min_by_key(|o| o.time_ns);
    let framework_first = match (framework, driver) {
        (Some(f), Some(d)) => f.time_ns <= d.time_ns,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => return None,
    };
    if framework_first {
        let o = framework?;
        Some(format!(
            "PyTorch raised OutOfMemoryError for {} at {} (pid {}, device {}, at {}): refused by {}; {}",
            oom_request(o),
            o.site
                .map_or_else(|| "an unknown site".into(), |s| a.tensor_site_label(s)),
            o.pid,
            o.device,
            time(o.time_ns),
            oom_limit(o),
            oom_state(o)
        ))
    } else {
        let o = driver?;
        let device_view = o.device_view.as_ref().map_or_else(String::new, |m| {
            format!(
                "; nvidia-smi right after: {} used, {} free",
                bytes(m.used_bytes),
                bytes(m.free_bytes)
            )
        });
        Some(format!(
            "{} of {} failed at {} (pid {}, device {}, at {}) with {} live on the device{}{}",
            o.function,
            bytes(o.requested_bytes),
            a.site_label(o.site),
            o.pid,
            o.device,
            time(o.time_ns),
            bytes(o.device_live_bytes),
            if o.device_total_bytes > 0 {
                format!(" of {}", bytes(o.device_total_bytes))
            } else {
                String::new()
            },
            device_view
        ))
    }
}

/// Whether a view's reserved memory is a CUDA pool (the cudaMallocAsync
/// backend) rather than segments with blocks inside.
fn in_cuda_pool(v: &FrameworkView) -> bool {
    v.reserved_in == ReservedIn::CudaPool
}

/// What holds a view's reserved memory, in words.
fn reserve_words(v: &FrameworkView) -> &'static str {
    if in_cuda_pool(v) {
        "its CUDA pool"
    } else {
        "segments"
    }
}

/// The HTML section of one view: its figures and charts, the fragmentation
/// of each of its pools (none for a CUDA pool, whose inside CUDA does not
/// show), how its segments matched the driver's, and its OOMs.
fn view_section(a: &Analysis, v: &FrameworkView, charts: &[Chart], out: &mut String) {
    let stem = framework_stem(v);
    view_figures(a, v, &stem, charts, out);
    if in_cuda_pool(v) {
        out.push_str("<p class=\"meta\">CUDA does not say how the free memory inside a stream-ordered pool lies, so this view has no fragmentation per pool; the device's section above estimates it from the addresses of the pool's allocations.</p>");
    } else {
        pools_fragmentation(v, &stem, charts, out);
        segments_matched(v, out);
    }
    ooms_html(a, v, &stem, out);
}

/// A view's title, settings and counts, its timeline and charts, its
/// allocated peak by tensor site, and what it held at exit.
fn view_figures(a: &Analysis, v: &FrameworkView, stem: &str, charts: &[Chart], out: &mut String) {
    let memory = if in_cuda_pool(v) {
        "each one a stream-ordered CUDA allocation from the pool, whose size is the reserved memory"
            .to_string()
    } else {
        format!(
            "{} segments obtained from the driver, {} given back{}",
            v.segments_allocated,
            v.segments_freed,
            if v.pages_mapped > 0 {
                format!(
                    "; {} page mappings into expandable segments, {} unmapped",
                    v.pages_mapped, v.pages_unmapped
                )
            } else {
                String::new()
            }
        )
    };
    let _ = write!(
        out,
        "<h3 id=\"{stem}\">pid {} on device {}: {}</h3><p class=\"meta\">Settings: <code>{}</code>. {} tensors allocated, {} freed; {memory}.</p>",
        v.pid,
        v.device,
        escape(&v.allocator),
        if v.settings.is_empty() { "defaults".into() } else { escape(&v.settings) },
        v.tensors_allocated,
        v.tensors_freed,
    );
    out.push_str(&crate::timeline::framework_html(a, v));
    for c in charts
        .iter()
        .filter(|c| c.name == format!("{stem}-memory.svg"))
    {
        out.push_str(&chart_html(c));
    }
    let _ = write!(
        out,
        "<p>Allocated peak <b>{}</b> at {} ({} then: {}, so {} of it held no tensor); reserved at most {}.</p>",
        bytes(v.allocated_peak),
        reserve_words(v),
        time(v.allocated_peak_time_ns),
        bytes(v.reserved_at_allocated_peak),
        bytes(v.reserved_at_allocated_peak.saturating_sub(v.allocated_peak)),
        bytes(v.reserved_peak)
    );
    out.push_str(&tensor_table(a, &v.peak_sites, v.allocated_peak, 20));
    for c in charts
        .iter()
        .filter(|c| c.name == format!("{stem}-peak-flame.svg"))
    {
        out.push_str(&chart_html(c));
    }
    let e = &v.at_exit;
    let _ = write!(
        out,
        "<p>At exit: {} in {} tensors still allocated (the program's live objects, not leaks: a Python program's leak is what keeps growing, below){}; {} held in {}, {} of it cached with no tensor in it.</p>",
        bytes(e.live_tensor_bytes),
        e.live_tensors,
        escape(&library_words(e)),
        bytes(e.reserved_bytes),
        reserve_words(v),
        bytes(e.cached_bytes)
    );
}

/// Each pool's worst fragmentation, and the pools at the program's memory
/// snapshots.
fn pools_fragmentation(v: &FrameworkView, stem: &str, charts: &[Chart], out: &mut String) {
    out.push_str("<h4>Fragmentation per pool</h4>");
    for c in charts
        .iter()
        .filter(|c| c.name == format!("{stem}-fragmentation.svg"))
    {
        out.push_str(&chart_html(c));
    }
    out.push_str("<p class=\"meta\">F = 1 − largest free block / free bytes inside the pool's segments. A block of one pool (small or large blocks, one stream, one private pool) never comes from another pool's segments, so each pool is judged on its own; the device's figure is the worst pool's.</p>");
    out.push_str("<table><tr><th>pool</th><th class=\"n\">segments at most</th><th class=\"n\">worst F</th><th class=\"n\">when</th><th class=\"n\">free then</th><th class=\"n\">of it in segments holding no tensor (cache)</th><th class=\"n\">largest free block then</th></tr>");
    for p in &v.pools {
        match &p.worst {
            Some(w) => {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    escape(&p.pool),
                    bytes(p.reserved_peak),
                    w.fragmentation,
                    time(w.time_ns),
                    bytes(w.free_bytes),
                    w.free_in_idle_segments_bytes.map_or_else(String::new, bytes),
                    bytes(w.largest_free_bytes)
                );
            }
            None => {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">–</td><td class=\"n\">never free space</td><td></td><td></td><td></td></tr>",
                    escape(&p.pool),
                    bytes(p.reserved_peak)
                );
            }
        }
    }
    out.push_str("</table>");
    for s in &v.snapshots {
        let pools: Vec<String> = s
            .pools
            .iter()
            .map(|p| {
                format!(
                    "{}: F {:.3}, {} free, largest {}",
                    escape(&p.pool),
                    p.fragmentation,
                    bytes(p.free_bytes),
                    bytes(p.largest_free_bytes)
                )
            })
            .collect();
        let _ = write!(
            out,
            "<p>At the program's memory snapshot at {}: {}.</p>",
            time(s.time_ns),
            pools.join("; ")
        );
    }
}

/// How the segments the allocator reported matched the driver's
/// allocations in the trace.
fn segments_matched(v: &FrameworkView, out: &mut String) {
    let seg = &v.segments;
    let _ = write!(
        out,
        "<p{}>Segments: {} of the {} the allocator reported match a driver allocation of the same address and size in the trace.",
        if seg.matched == seg.reported { "" } else { " class=\"warn\"" },
        seg.matched,
        seg.reported
    );
    for (addr, size) in &seg.unmatched {
        let _ = write!(
            out,
            " Unmatched: {} at <code>{addr:#x}</code>.",
            bytes(*size)
        );
    }
    out.push_str("</p>");
}

/// The errors a view's allocator raised, each with what was live then.
fn ooms_html(a: &Analysis, v: &FrameworkView, stem: &str, out: &mut String) {
    for (i, o) in v.ooms.iter().enumerate() {
        let _ = write!(
            out,
            "<h4 id=\"{stem}-oom-{i}\">Out of memory raised by the allocator at {}: {} requested</h4><p>Refused by {}. The allocator then: {}{}.</p><p>Requested from: {}</p>",
            time(o.time_ns),
            oom_request(o),
            oom_limit(o),
            escape(&oom_state(o)),
            o.tried_bytes
                .filter(|t| *t != o.requested_bytes)
                .map_or_else(String::new, |t| format!("; it tried to obtain {} from the driver", bytes(t))),
            o.site.map_or_else(|| "unknown".into(), |s| tensor_link(a, s))
        );
        out.push_str(&tensor_table(a, &o.live_by_site, o.allocated_bytes, 10));
    }
    for n in &v.notes {
        let _ = write!(out, "<p class=\"note\">{}</p>", escape(n));
    }
}

/// The HTML section of every view, the tensor sites and their growth; first
/// the processes whose tensors no view shows (`Analysis::tensors_unseen`).
pub fn html_section(a: &Analysis, charts: &[Chart], out: &mut String) {
    for (p, why) in a.tensors_unseen() {
        out.push_str(&format!(
            "<p class=\"note\">pid {}: {ALLOCATOR_UNSEEN}: {}. Its memory is in the device's figures above; budgets on its tensors cannot be judged.</p>",
            p.pid,
            escape(why)
        ));
    }
    if a.frameworks.is_empty() {
        return;
    }
    out.push_str("<h2 id=\"tensors\">Inside the framework allocators</h2><p class=\"meta\">");
    if a.frameworks.iter().any(|v| !in_cuda_pool(v)) {
        out.push_str("What PyTorch's caching allocator did inside the segments it holds from the driver, reported by the allocator itself: each tensor (block) allocated and freed, with the Python line that asked for it. ");
    }
    if a.frameworks.iter().any(in_cuda_pool) {
        out.push_str("PyTorch's cudaMallocAsync backend reports nothing itself: each of its tensors is a stream-ordered CUDA allocation made through it, with the Python line that asked for it, and what it reserves is the size of the CUDA pool they come from. ");
    }
    out.push_str("Allocated is PyTorch's <code>memory_allocated()</code>; reserved its <code>memory_reserved()</code>.</p>");
    for v in &a.frameworks {
        view_section(a, v, charts, out);
    }
    out.push_str("<h3 id=\"tensor-growth\">Tensor sites that keep growing</h3>");
    if a.tensor_growth.is_empty() {
        out.push_str("<p>None: no tensor site's live bytes kept rising after the warm-up.</p>");
    } else {
        for c in charts.iter().filter(|c| c.name == "tensor-growth.svg") {
            out.push_str(&chart_html(c));
        }
        out.push_str(&growth_table(
            ("where", "tensor site"),
            &a.tensor_growth,
            |id| tensor_link(a, id),
        ));
    }
    out.push_str("<h3 id=\"tensor-sites\">Tensor sites</h3><p class=\"meta\">Grouped by the innermost frame of the program's own code (Python files outside site-packages and the standard library; see <code>gmem-prof report --help</code>), or by the PyTorch operator or backward node for tensors made on threads that run no Python. Click one for the full stack of its first tensor.</p>");
    out.push_str("<table><tr><th>#</th><th>where</th><th class=\"n\">at the allocated peak</th><th class=\"n\">max live</th><th class=\"n\">total</th><th class=\"n\">tensors</th><th class=\"n\">temporaries</th><th class=\"n\">live at exit</th></tr>");
    for s in a.tensor_sites.iter().take(200) {
        let _ = write!(
            out,
            "<tr id=\"tensor-site-{}\"><td>{}</td><td>{}<span class=\"cat\">pid {}</span></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            s.id,
            s.id,
            frames_details(&s.label, &s.frames, s.truncated),
            s.pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "),
            bytes(s.at_peak_bytes),
            bytes(s.max_live),
            bytes(s.total_bytes),
            s.count,
            s.temporaries,
            bytes(s.live_at_exit_bytes)
        );
    }
    if a.tensor_sites.len() > 200 {
        let _ = write!(
            out,
            "<tr><td colspan=\"8\">… and {} more (see the JSON output)</td></tr>",
            a.tensor_sites.len() - 200
        );
    }
    out.push_str("</table>");
}

/// Lines of the terminal summary for each view.
pub fn summary(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for (p, why) in a.tensors_unseen() {
        writeln!(w, "\npid {}: {ALLOCATOR_UNSEEN}: {why}", p.pid)?;
    }
    for v in &a.frameworks {
        writeln!(
            w,
            "\n{}, pid {} on device {}: tensors peak {} at {} ({} then {}; at most {})",
            v.allocator,
            v.pid,
            v.device,
            bytes(v.allocated_peak),
            time(v.allocated_peak_time_ns),
            reserve_words(v),
            bytes(v.reserved_at_allocated_peak),
            bytes(v.reserved_peak)
        )?;
        peak_lines(
            w,
            "",
            &v.peak_sites,
            v.allocated_peak,
            |s| a.tensor_site_label(s),
            |ids| vec![None; ids.len()],
        )?;
        writeln!(
            w,
            "  at exit: {} in {} live tensors{}, {} in {} ({} cached, no tensor)",
            bytes(v.at_exit.live_tensor_bytes),
            v.at_exit.live_tensors,
            library_words(&v.at_exit),
            bytes(v.at_exit.reserved_bytes),
            reserve_words(v),
            bytes(v.at_exit.cached_bytes)
        )?;
        if let Some(f) = &v.worst_fragmentation {
            writeln!(
                w,
                "  worst fragmentation {:.2} ({}) at {}: {} free in segments{}, largest free block {}",
                f.at.fragmentation,
                f.pool,
                time(f.at.time_ns),
                bytes(f.at.free_bytes),
                crate::format::idle_words(f.at.free_bytes, f.at.free_in_idle_segments_bytes),
                bytes(f.at.largest_free_bytes)
            )?;
        }
        let seg = &v.segments;
        if seg.reported > 0 {
            writeln!(
                w,
                "  segments: {} of {} match a driver allocation of the same address and size{}",
                seg.matched,
                seg.reported,
                if seg.matched == seg.reported {
                    ""
                } else {
                    " (see the report)"
                }
            )?;
        }
        for o in &v.ooms {
            writeln!(
                w,
                "  out of memory raised at {}: {} requested, refused by {}; {}: {}",
                time(o.time_ns),
                oom_request(o),
                oom_limit(o),
                oom_state(o),
                o.site
                    .map_or_else(|| "unknown site".into(), |s| a.tensor_site_label(s))
            )?;
        }
    }
    Ok(())
}
