//! The interactive timeline of a device: its memory stacked by site (the
//! largest at the peak, the rest grouped), with the live peak line, OOMs
//! and the kernels at the peak marked; a pointer on a band shows its site,
//! bytes and stack; a drag zooms. Drawn by an inline script
//! (`timeline.js`) from JSON written beside it: one offline file, nothing
//! fetched. The SVG charts stay for CI attachments.

use gmem_prof_model::{Analysis, DeviceReport, FrameText, FrameworkView};
use maud::{html, Markup, PreEscaped};
use serde::Serialize;

/// The script, once per page.
pub const SCRIPT: &str = include_str!("timeline.js");

#[derive(Serialize)]
struct Data {
    buckets: usize,
    bucket_s: f64,
    sites: Vec<Band>,
    /// The band of everything else ("other sites", "other lines").
    other_label: String,
    /// Live bytes at the end of each bucket, and the highest in it.
    live: Vec<u64>,
    live_max: Vec<u64>,
    ooms: Vec<Mark>,
    kernels: Vec<Kernel>,
    /// Kernels started in each bucket (empty: none traced, or not a device);
    /// launched, when they were traced as launches.
    kernel_counts: Vec<u32>,
    kernels_launched: bool,
    peak: Peak,
    /// The steps (training iterations) of the processes drawn, for the
    /// strip under the axis; absent without steps.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    steps: Vec<StepBand>,
    /// The program's NVTX range instances of the processes drawn, one lane
    /// per nesting depth (`range_lanes` of them); absent without ranges.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ranges: Vec<RangeBand>,
    #[serde(skip_serializing_if = "is_zero")]
    range_lanes: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Range lanes drawn: deeper instances are left to Perfetto's view.
const RANGE_LANES: u32 = 3;
/// Range instances drawn per chart (the first, in the order they began).
const RANGES_DRAWN: usize = 5_000;

/// One range instance: its span (seconds), lane and figures, for its
/// tooltip.
#[derive(Serialize)]
struct RangeBand {
    pid: u32,
    tid: u32,
    depth: u32,
    name: String,
    /// Which name, for its shade.
    name_index: u32,
    t0: f64,
    t1: f64,
    /// Still open when the trace ended (drawn to the end).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    open: bool,
    kept: i64,
}

/// The range instances of the processes `of` accepts, as the lanes draw
/// them, how many lanes they take, and words for what is not drawn.
fn range_bands(a: &Analysis, of: impl Fn(u32) -> bool) -> (Vec<RangeBand>, u32, String) {
    let secs = |ns: u64| ns as f64 / 1e9;
    let end = a.timeline.end_ns.saturating_sub(a.timeline.start_ns);
    let processes: Vec<_> = a.ranges.iter().filter(|p| of(p.pid)).collect();
    let band = |p: &gmem_prof_model::ProcessRanges, i: &gmem_prof_model::RangeInstance| {
        let figures = i.range.and_then(|r| p.ranges.get(r as usize));
        RangeBand {
            pid: p.pid,
            tid: i.tid,
            depth: i.depth,
            name: figures.map_or("(a range not measured)".into(), |f| f.full_name()),
            name_index: i.range.unwrap_or(u32::MAX),
            t0: secs(i.start_ns),
            t1: secs(i.end_ns.unwrap_or(end)),
            open: i.end_ns.is_none(),
            kept: i.kept_bytes,
        }
    };
    let bands: Vec<RangeBand> = processes
        .iter()
        .flat_map(|p| {
            p.instances
                .iter()
                .filter(|i| i.depth < RANGE_LANES)
                .map(move |i| band(p, i))
        })
        .take(RANGES_DRAWN)
        .collect();
    let lanes = bands.iter().map(|b| b.depth + 1).max().unwrap_or(0);
    let all: u64 = processes
        .iter()
        .map(|p| p.ranges.iter().map(|r| r.instances).sum::<u64>() + p.other_instances)
        .sum();
    let deeper = processes
        .iter()
        .any(|p| p.instances.iter().any(|i| i.depth >= RANGE_LANES));
    let mut note = String::new();
    if all > bands.len() as u64 && (bands.len() == RANGES_DRAWN || deeper) {
        note = format!(
            " The range lanes draw {} of the {all} instances (the first ones{}).",
            bands.len(),
            if deeper {
                format!(", nested at most {RANGE_LANES} deep")
            } else {
                String::new()
            }
        );
    }
    (bands, lanes, note)
}

/// One step: its span (seconds) and figures, for its tooltip.
#[derive(Serialize)]
struct StepBand {
    pid: u32,
    n: u64,
    t0: f64,
    t1: f64,
    peak: u64,
    kept: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tensors_peak: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tensors_kept: Option<i64>,
}

/// The steps of the processes `of` accepts, as the strip draws them.
fn step_bands(a: &Analysis, of: impl Fn(u32) -> bool) -> Vec<StepBand> {
    let secs = |ns: u64| ns as f64 / 1e9;
    a.steps
        .iter()
        .filter(|p| of(p.pid))
        .flat_map(|p| {
            p.steps.iter().map(move |s| StepBand {
                pid: p.pid,
                n: s.number,
                t0: secs(s.start_ns),
                t1: secs(s.end_ns),
                peak: s.peak_bytes,
                kept: s.kept_bytes,
                tensors_peak: s.tensors.as_ref().map(|t| t.allocated_peak),
                tensors_kept: s.tensors.as_ref().map(|t| t.kept_bytes),
            })
        })
        .collect()
}

#[derive(Serialize)]
struct Band {
    label: String,
    frames: Vec<String>,
    live: Vec<u64>,
}

#[derive(Serialize)]
struct Mark {
    t: f64,
    label: String,
}

#[derive(Serialize)]
struct Kernel {
    t: f64,
    name: String,
}

#[derive(Serialize)]
struct Peak {
    t: f64,
    bytes: u64,
}

fn frame_text(f: &FrameText) -> String {
    if !f.resolved {
        format!("{}+{:#x}", f.module, f.offset)
    } else if f.location.is_empty() {
        format!("{} ({})", f.function, f.module)
    } else {
        format!("{} {}", f.function, f.location)
    }
}

/// JSON that cannot end the script element it sits in, whatever the
/// trace's strings hold.
fn embeddable(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

fn band(label: String, frames: &[FrameText], live: &[u64]) -> Band {
    Band {
        label,
        frames: frames.iter().map(frame_text).collect(),
        live: live.to_vec(),
    }
}

/// The timeline of device `d`: its container and data (the page adds
/// `SCRIPT` once). Nothing when the run has no time axis.
pub fn html(a: &Analysis, d: &DeviceReport) -> Markup {
    let secs = |ns: u64| ns as f64 / 1e9;
    let on_device = |pid: u32| {
        a.processes
            .iter()
            .any(|p| p.pid == pid && p.devices.contains(&d.device))
    };
    let (ranges, range_lanes, ranges_note) = range_bands(a, on_device);
    let data = Data {
        buckets: a.timeline.buckets,
        bucket_s: a.timeline.bucket_ns as f64 / 1e9,
        sites: d
            .timeline_sites
            .iter()
            .map(|c| {
                let frames = a
                    .sites
                    .get(c.site as usize)
                    .map_or(&[][..], |s| &s.frames[..]);
                band(a.site_label(c.site), frames, &c.live)
            })
            .collect(),
        other_label: "other sites".into(),
        live: d.live.iter().map(|p| p.last).collect(),
        live_max: d.live.iter().map(|p| p.max).collect(),
        ooms: a
            .ooms
            .iter()
            .filter(|o| o.device == d.device)
            .map(|o| Mark {
                t: secs(o.time_ns),
                label: format!("{} of {} bytes", o.function, o.requested_bytes),
            })
            .chain(framework_ooms(a, |v| v.device == d.device))
            .collect(),
        kernels: d
            .kernels_at_peak
            .iter()
            .chain(&d.kernels_launched_before_peak)
            .chain(d.next_kernel_after_peak.iter())
            .map(|k| Kernel {
                t: secs(k.start_ns),
                name: k.name.clone(),
            })
            .collect(),
        kernel_counts: d.kernels_per_bucket.clone(),
        kernels_launched: d.kernels_traced && !d.kernels_timed,
        peak: Peak {
            t: secs(d.peak_time_ns),
            bytes: d.peak_bytes,
        },
        steps: step_bands(a, on_device),
        ranges,
        range_lanes,
    };
    container(
        &format!("device{}", d.device),
        &data,
        &format!(
            "Live memory stacked by allocation site (the largest at the peak; dashed: the \
             highest in each moment).{ranges_note}"
        ),
    )
}

/// The tensors of a framework allocator (one process on one device),
/// stacked by Python line, with what the allocator reserved as the dashed
/// line.
pub fn framework_html(a: &Analysis, v: &FrameworkView) -> Markup {
    let secs = |ns: u64| ns as f64 / 1e9;
    let (ranges, range_lanes, ranges_note) = range_bands(a, |pid| pid == v.pid);
    let data = Data {
        buckets: a.timeline.buckets,
        bucket_s: a.timeline.bucket_ns as f64 / 1e9,
        sites: v
            .timeline_sites
            .iter()
            .map(|c| {
                let frames = a
                    .tensor_sites
                    .get(c.site as usize)
                    .map_or(&[][..], |s| &s.frames[..]);
                band(a.tensor_site_label(c.site), frames, &c.live)
            })
            .collect(),
        other_label: "other lines".into(),
        live: v.allocated.iter().map(|p| p.last).collect(),
        live_max: v.reserved.iter().map(|p| p.max).collect(),
        ooms: framework_ooms(a, |x| x.pid == v.pid && x.device == v.device).collect(),
        kernels: Vec::new(),
        kernel_counts: Vec::new(),
        kernels_launched: false,
        peak: Peak {
            t: secs(v.allocated_peak_time_ns),
            bytes: v.allocated_peak,
        },
        steps: step_bands(a, |pid| pid == v.pid),
        ranges,
        range_lanes,
    };
    container(
        &crate::chart::framework_stem(v),
        &data,
        &format!(
            "Tensors stacked by the line that allocated them (the largest at the allocated \
             peak; dashed: what the allocator reserved).{ranges_note}"
        ),
    )
}

fn framework_ooms<'a>(
    a: &'a Analysis,
    of: impl Fn(&FrameworkView) -> bool + 'a,
) -> impl Iterator<Item = Mark> + 'a {
    a.frameworks
        .iter()
        .filter(move |v| of(v))
        .flat_map(|v| v.ooms.iter())
        .map(|o| Mark {
            t: o.time_ns as f64 / 1e9,
            label: format!("OutOfMemoryError for {}", crate::words::oom_request(o)),
        })
}

/// The element the script draws into, with its data.
fn container(id: &str, data: &Data, what: &str) -> Markup {
    if data.buckets == 0 || data.live.is_empty() {
        return html! {};
    }
    let json = embeddable(&serde_json::to_string(data).unwrap_or_else(|_| "{}".into()));
    let script_id = format!("timeline-data-{id}");
    html! {
        div.timeline data-json=(script_id) {
            div.tip hidden {}
            p.meta {
                (what) " Point at a band for its site, bytes and stack; drag across the chart to zoom in, double-click for the whole run. Red lines: out-of-memory errors; red dot: the peak; under the axis, grey: how many kernels started (or, traced as launches, were launched) in each moment (point at it for the count); ticks: the kernels at the peak. Under that, when the program marked them: its steps, then its NVTX ranges (a lane per nesting depth); point at one for its figures."
            }
        }
        // JSON is not HTML: `embeddable` keeps it from closing the element.
        script type="application/json" id=(script_id) { (PreEscaped(json)) }
    }
}

#[cfg(test)]
mod tests {
    use super::embeddable;

    #[test]
    fn trace_strings_cannot_close_the_script() {
        let j = serde_json::to_string("</script><script>alert(1)</script>&").unwrap();
        let e = embeddable(&j);
        assert!(!e.contains('<') && !e.contains('>') && !e.contains('&'));
        let back: String = serde_json::from_str(&e).unwrap();
        assert_eq!(back, "</script><script>alert(1)</script>&");
    }
}
