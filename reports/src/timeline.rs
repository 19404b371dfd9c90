//! The interactive timeline of a device: its memory stacked by site (the
//! largest at the peak, the rest grouped), with the live peak line, OOMs
//! and the kernels at the peak marked; a pointer on a band shows its site,
//! bytes and stack; a drag zooms. Drawn by an inline script
//! (`timeline.js`) from JSON written beside it: one offline file, nothing
//! fetched. The SVG charts stay for CI attachments.

use std::fmt::Write as _;

use gmem_prof_analyzer::model::{Analysis, DeviceReport, FrameText};
use serde::Serialize;

/// The script, once per page.
pub const SCRIPT: &str = include_str!("timeline.js");

#[derive(Serialize)]
struct Data {
    buckets: usize,
    bucket_s: f64,
    sites: Vec<Band>,
    /// Live bytes at the end of each bucket, and the highest in it.
    live: Vec<u64>,
    live_max: Vec<u64>,
    ooms: Vec<Mark>,
    kernels: Vec<Kernel>,
    peak: Peak,
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

/// The timeline of device `d`: its container and data (the page adds
/// `SCRIPT` once). Nothing when the run has no time axis.
pub fn html(a: &Analysis, d: &DeviceReport) -> String {
    let buckets = a.timeline.buckets;
    if buckets == 0 || d.live.is_empty() {
        return String::new();
    }
    let secs = |ns: u64| ns as f64 / 1e9;
    let data = Data {
        buckets,
        bucket_s: a.timeline.bucket_ns as f64 / 1e9,
        sites: d
            .timeline_sites
            .iter()
            .map(|c| Band {
                label: a.site_label(c.site),
                frames: a
                    .sites
                    .get(c.site as usize)
                    .map(|s| s.frames.iter().map(frame_text).collect())
                    .unwrap_or_default(),
                live: c.live.clone(),
            })
            .collect(),
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
            .chain(
                a.frameworks
                    .iter()
                    .filter(|v| v.device == d.device)
                    .flat_map(|v| v.ooms.iter())
                    .map(|o| Mark {
                        t: secs(o.time_ns),
                        label: format!("OutOfMemoryError for {} bytes", o.requested_bytes),
                    }),
            )
            .collect(),
        kernels: d
            .kernels_at_peak
            .iter()
            .chain(d.next_kernel_after_peak.iter())
            .map(|k| Kernel {
                t: secs(k.start_ns),
                name: k.name.clone(),
            })
            .collect(),
        peak: Peak {
            t: secs(d.peak_time_ns),
            bytes: d.peak_bytes,
        },
    };
    let json = embeddable(&serde_json::to_string(&data).unwrap_or_else(|_| "{}".into()));
    let mut out = String::new();
    let _ = write!(
        out,
        "<div class=\"timeline\" data-json=\"timeline-data-{dev}\"><div class=\"tip\" hidden></div>\
         <p class=\"meta\">Live memory stacked by site (the largest at the peak; dashed: the highest in each moment). \
         Point at a band for its site, bytes and stack; drag across the chart to zoom in, double-click for the whole run. \
         Red lines: out-of-memory errors; red dot: the peak; ticks under the axis: kernels at the peak.</p></div>\
         <script type=\"application/json\" id=\"timeline-data-{dev}\">{json}</script>",
        dev = d.device
    );
    out
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
