//! The framework allocators' part of the reports: tensors inside PyTorch's
//! caching allocator (allocated and reserved, the allocated peak by Python
//! line, fragmentation per pool, the errors it raised, whether the driver
//! saw its segments), for the HTML page and the terminal summary.

use std::io::{self, Write};

use gmem_prof_model::{
    Analysis, FrameworkAtExit, FrameworkAtPeak, FrameworkOom, FrameworkView, ReservedIn, SiteBytes,
};

use maud::{html, Markup};

use crate::blocks::{bytes_table, charts_named, frames_details, growth_table, pid_list};
use crate::chart::{framework_stem, Chart};
use crate::format::{bytes, time};
use crate::reasons::ALLOCATOR_UNSEEN;
use crate::words::{oom_limit, oom_request, peak_lines};

fn tensor_link(a: &Analysis, id: u32) -> Markup {
    html! { a href={ "#tensor-site-" (id) } { (a.tensor_site_label(id)) } }
}

/// A framework allocator's segments at a device's peak, for the device's
/// section: what they were and the tensors they held.
pub fn at_device_peak_html(a: &Analysis, f: &FrameworkAtPeak, peak: u64) -> Markup {
    html! {
        p {
            b { (bytes(f.segment_bytes)) } " (" (crate::format::percent(f.segment_bytes, peak)) ") in "
            (at_device_peak_words(f)) ", and " (bytes(f.segment_bytes.saturating_sub(f.tensor_bytes)))
            " free in them (the allocator's cache):"
        }
        (tensor_table(a, &f.tensor_sites, peak, 10))
    }
}

fn tensor_table(a: &Analysis, rows: &[SiteBytes], whole: u64, limit: usize) -> Markup {
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
            "PyTorch raised OutOfMemoryError for {} at {} (pid {}, device {}, at {}{}): refused by {}; {}",
            oom_request(o),
            o.site
                .map_or_else(|| "an unknown site".into(), |s| a.tensor_site_label(s)),
            o.pid,
            o.device,
            time(o.time_ns),
            crate::words::in_step_and_ranges(o.step, &o.ranges),
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
            "{} of {} failed at {} (pid {}, device {}, at {}{}) with {} live on the device{}{}",
            o.function,
            bytes(o.requested_bytes),
            a.site_label(o.site),
            o.pid,
            o.device,
            time(o.time_ns),
            crate::words::in_step_and_ranges(o.step, &o.ranges),
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
fn view_section(a: &Analysis, v: &FrameworkView, charts: &[Chart]) -> Markup {
    let stem = framework_stem(v);
    html! {
        (view_figures(a, v, &stem, charts))
        @if in_cuda_pool(v) {
            p.meta { "CUDA does not say how the free memory inside a stream-ordered pool lies, so this view has no fragmentation per pool; the device's section above estimates it from the addresses of the pool's allocations." }
        } @else {
            (pools_fragmentation(v, &stem, charts))
            (segments_matched(v))
        }
        (ooms_html(a, v, &stem))
    }
}

/// A view's title, settings and counts, its timeline and charts, its
/// allocated peak by tensor site, and what it held at exit.
fn view_figures(a: &Analysis, v: &FrameworkView, stem: &str, charts: &[Chart]) -> Markup {
    let e = &v.at_exit;
    html! {
        h3 id=(stem) { "pid " (v.pid) " on device " (v.device) ": " (v.allocator) }
        p.meta {
            "Settings: " code { (if v.settings.is_empty() { "defaults" } else { &v.settings }) } ". "
            (v.tensors_allocated) " tensors allocated, " (v.tensors_freed) " freed; "
            @if in_cuda_pool(v) {
                "each one a stream-ordered CUDA allocation from the pool, whose size is the reserved memory"
            } @else {
                (v.segments_allocated) " segments obtained from the driver, " (v.segments_freed) " given back"
                @if v.pages_mapped > 0 {
                    "; " (v.pages_mapped) " page mappings into expandable segments, " (v.pages_unmapped) " unmapped"
                }
            }
            "."
        }
        (crate::timeline::framework_html(a, v))
        (charts_named(charts, &format!("{stem}-memory.svg")))
        p {
            "Allocated peak " b { (bytes(v.allocated_peak)) } " at " (reserve_words(v)) " ("
            (time(v.allocated_peak_time_ns)) " then: " (bytes(v.reserved_at_allocated_peak)) ", so "
            (bytes(v.reserved_at_allocated_peak.saturating_sub(v.allocated_peak)))
            " of it held no tensor); reserved at most " (bytes(v.reserved_peak)) "."
        }
        (tensor_table(a, &v.peak_sites, v.allocated_peak, 20))
        (charts_named(charts, &format!("{stem}-peak-flame.svg")))
        (crate::roles::html(v, charts))
        p {
            "At exit: " (bytes(e.live_tensor_bytes)) " in " (e.live_tensors)
            " tensors still allocated (the program's live objects, not leaks: a Python program's leak is what keeps growing, below)"
            (library_words(e)) "; " (bytes(e.reserved_bytes)) " held in " (reserve_words(v)) ", "
            (bytes(e.cached_bytes)) " of it cached with no tensor in it."
        }
    }
}

/// Each pool's worst fragmentation, and the pools at the program's memory
/// snapshots.
fn pools_fragmentation(v: &FrameworkView, stem: &str, charts: &[Chart]) -> Markup {
    html! {
        h4 { "Fragmentation per pool" }
        (charts_named(charts, &format!("{stem}-fragmentation.svg")))
        p.meta { "F = 1 − largest free block / free bytes inside the pool's segments. A block of one pool (small or large blocks, one stream, one private pool) never comes from another pool's segments, so each pool is judged on its own; the device's figure is the worst pool's." }
        table {
            tr { th { "pool" } th.n { "segments at most" } th.n { "worst F" } th.n { "when" } th.n { "free then" } th.n { "of it in segments holding no tensor (cache)" } th.n { "largest free block then" } }
            @for p in &v.pools {
                tr {
                    td { (p.pool) }
                    td.n { (bytes(p.reserved_peak)) }
                    @if let Some(w) = &p.worst {
                        td.n { (format!("{:.3}", w.fragmentation)) }
                        td.n { (time(w.time_ns)) }
                        td.n { (bytes(w.free_bytes)) }
                        td.n { (w.free_in_idle_segments_bytes.map_or_else(String::new, bytes)) }
                        td.n { (bytes(w.largest_free_bytes)) }
                    } @else {
                        td.n { "–" } td.n { "never free space" } td {} td {} td {}
                    }
                }
            }
        }
        @for s in &v.snapshots {
            p {
                "At the program's memory snapshot at " (time(s.time_ns)) ": "
                @for (i, p) in s.pools.iter().enumerate() {
                    @if i > 0 { "; " }
                    (p.pool) ": F " (format!("{:.3}", p.fragmentation)) ", " (bytes(p.free_bytes)) " free, largest " (bytes(p.largest_free_bytes))
                }
                "."
            }
        }
    }
}

/// How the segments the allocator reported matched the driver's
/// allocations in the trace.
fn segments_matched(v: &FrameworkView) -> Markup {
    let seg = &v.segments;
    html! {
        p class=[(seg.matched != seg.reported).then_some("warn")] {
            "Segments: " (seg.matched) " of the " (seg.reported)
            " the allocator reported match a driver allocation of the same address and size in the trace."
            @for (addr, size) in &seg.unmatched {
                " Unmatched: " (bytes(*size)) " at " code { (format!("{addr:#x}")) } "."
            }
        }
    }
}

/// The errors a view's allocator raised, each with what was live then.
fn ooms_html(a: &Analysis, v: &FrameworkView, stem: &str) -> Markup {
    html! {
        @for (i, o) in v.ooms.iter().enumerate() {
            h4 id={ (stem) "-oom-" (i) } {
                "Out of memory raised by the allocator at " (time(o.time_ns)) (crate::words::in_step_and_ranges(o.step, &o.ranges)) ": " (oom_request(o)) " requested"
            }
            p {
                "Refused by " (oom_limit(o)) ". The allocator then: " (oom_state(o))
                @if let Some(t) = o.tried_bytes.filter(|t| *t != o.requested_bytes) {
                    "; it tried to obtain " (bytes(t)) " from the driver"
                }
                "."
            }
            p {
                "Requested from: "
                @match o.site { Some(s) => (tensor_link(a, s)), None => "unknown" }
            }
            (tensor_table(a, &o.live_by_site, o.allocated_bytes, 10))
        }
        @for n in &v.notes {
            p.note { (n) }
        }
    }
}

/// The HTML section of every view, the tensor sites and their growth; first
/// the processes whose tensors no view shows (`Analysis::tensors_unseen`).
pub fn html_section(a: &Analysis, charts: &[Chart]) -> Markup {
    html! {
        @for (p, why) in a.tensors_unseen() {
            p.note { "pid " (p.pid) ": " (ALLOCATOR_UNSEEN) ": " (why) ". Its memory is in the device's figures above; budgets on its tensors cannot be judged." }
        }
        @if !a.frameworks.is_empty() {
            h2 #tensors { "Inside the framework allocators" }
            p.meta {
                @if a.frameworks.iter().any(|v| !in_cuda_pool(v)) {
                    "What PyTorch's caching allocator did inside the segments it holds from the driver, reported by the allocator itself: each tensor (block) allocated and freed, with the Python line that asked for it. "
                }
                @if a.frameworks.iter().any(in_cuda_pool) {
                    "PyTorch's cudaMallocAsync backend reports nothing itself: each of its tensors is a stream-ordered CUDA allocation made through it, with the Python line that asked for it, and what it reserves is the size of the CUDA pool they come from. "
                }
                "Allocated is PyTorch's " code { "memory_allocated()" } "; reserved its " code { "memory_reserved()" } "."
            }
            @for v in &a.frameworks {
                (view_section(a, v, charts))
            }
            (tensor_sites(a, charts))
        }
    }
}

/// The tensor sites that keep growing, and the table of all tensor sites.
fn tensor_sites(a: &Analysis, charts: &[Chart]) -> Markup {
    html! {
        h3 #tensor-growth { "Tensor sites that keep growing" }
        @if a.tensor_growth.is_empty() {
            p { "None: no tensor site's live bytes kept rising after the warm-up." }
        } @else {
            (charts_named(charts, "tensor-growth.svg"))
            (growth_table(("where", "tensor site"), &a.tensor_growth, |id| tensor_link(a, id)))
        }
        h3 #tensor-sites { "Tensor sites" }
        p.meta { "Grouped by the innermost frame of the program's own code (Python files outside site-packages and the standard library; see " code { "gmem-prof report --help" } "), or by the PyTorch operator or backward node for tensors made on threads that run no Python. Click one for the full stack of its first tensor." }
        table {
            tr { th { "#" } th { "where" } th { "role" } th.n { "at the allocated peak" } th.n { "max live" } th.n { "total" } th.n { "tensors" } th.n { "temporaries" } th.n { "live at exit" } }
            @for s in a.tensor_sites.iter().take(200) {
                tr id={ "tensor-site-" (s.id) } {
                    td { (s.id) }
                    td { (frames_details(&s.label, &s.frames, s.truncated)) span.cat { "pid " (pid_list(&s.pids)) } }
                    td { (s.role.map_or("", |r| r.as_str())) }
                    td.n { (bytes(s.at_peak_bytes)) }
                    td.n { (bytes(s.max_live)) }
                    td.n { (bytes(s.total_bytes)) }
                    td.n { (s.count) }
                    td.n { (s.temporaries) }
                    td.n { (bytes(s.live_at_exit_bytes)) }
                }
            }
            @if a.tensor_sites.len() > 200 {
                tr { td colspan="9" { "… and " (a.tensor_sites.len() - 200) " more (see the JSON output)" } }
            }
        }
    }
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
        if let Some(r) = &v.roles_at_peak {
            writeln!(w, "{}", crate::roles::summary_line(r))?;
        }
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
