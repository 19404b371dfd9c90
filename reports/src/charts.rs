//! SVG charts (plotters, SVG backend, no fonts). Only our own words go into
//! charts (no string from a trace), so nothing in them needs escaping.

use gmem_prof_model::{
    Analysis, DeviceReport, FrameworkPool, FrameworkView, Growth, Point, ReservedIn,
};
use plotters::prelude::*;

use crate::chart::{framework_stem, Chart};
use crate::format::bytes;

const SIZE: (u32, u32) = (960, 320);
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// How a series is drawn.
#[derive(Clone, Copy)]
enum Draw<'a> {
    Line,
    /// Filled down to zero, lightly (curves that overlap).
    Area,
    /// A band of a stacked chart: filled between these values (the band
    /// below's top) and its own.
    Band(&'a [u64]),
}

struct Series<'a> {
    label: String,
    values: &'a [u64],
    /// Values before this index are not drawn (not known then).
    from: usize,
    draw: Draw<'a>,
    /// Seconds per value (the bucket width of the values' timeline).
    step_s: f64,
}

fn step(a: &Analysis) -> f64 {
    a.timeline.bucket_ns as f64 / 1e9
}

fn seconds(a: &Analysis, i: usize) -> f64 {
    i as f64 * a.timeline.bucket_ns as f64 / 1e9
}

/// A chart of byte values over time, `xmax` seconds wide.
fn bytes_chart(
    name: String,
    title: String,
    xmax: f64,
    series: &[Series],
    mark: Option<(u64, u64)>,
) -> Chart {
    let mut svg = String::new();
    let ymax = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.08;
    let xmax = xmax.max(1e-9);
    let drawn = (|| -> Result<(), String> {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(84)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("time since the first event (s)")
            .y_label_formatter(&|v| bytes(*v as u64))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let points: Vec<(f64, f64)> = s
                .values
                .iter()
                .enumerate()
                .skip(s.from)
                .map(|(j, &v)| (j as f64 * s.step_s, v as f64))
                .collect();
            let legend = move |(x, y): (i32, i32)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            };
            let drawn = match s.draw {
                Draw::Area => chart
                    .draw_series(AreaSeries::new(points, 0.0, color.mix(0.25)).border_style(color)),
                Draw::Line => chart.draw_series(LineSeries::new(points, color.stroke_width(2))),
                Draw::Band(below) => {
                    // The band's top left to right, then its bottom back.
                    let bottom = below
                        .iter()
                        .enumerate()
                        .skip(s.from)
                        .rev()
                        .map(|(j, &v)| (j as f64 * s.step_s, v as f64));
                    let outline: Vec<(f64, f64)> = points.into_iter().chain(bottom).collect();
                    chart.draw_series(std::iter::once(Polygon::new(
                        outline,
                        color.mix(0.75).filled(),
                    )))
                }
            };
            drawn
                .map_err(|e| e.to_string())?
                .label(s.label.clone())
                .legend(legend);
        }
        if let Some((t, v)) = mark {
            let x = t as f64 / 1e9;
            chart
                .draw_series(std::iter::once(Circle::new((x, v as f64), 5, RED.filled())))
                .map_err(|e| e.to_string())?
                .label(format!("peak {}", bytes(v)))
                .legend(|(x, y)| Circle::new((x + 9, y), 4, RED.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    })();
    if let Err(e) = drawn {
        svg = maud::html! {
            svg xmlns="http://www.w3.org/2000/svg" width=(SIZE.0) height="40" {
                text x="4" y="20" { "chart failed: " (e) }
            }
        }
        .into_string();
    }
    Chart { name, title, svg }
}

/// Live (split by kind) and reserved bytes of one device, peak marked.
pub fn device_memory(a: &Analysis, d: &DeviceReport) -> Chart {
    let live: Vec<u64> = d.live.iter().map(|p| p.max).collect();
    let reserved: Vec<u64> = d.reserved.iter().map(|p| p.max).collect();
    let kinds: Vec<Vec<u64>> = d
        .live_by_kind
        .iter()
        .map(|k| k.points.iter().map(|p| p.max).collect())
        .collect();
    let mut series = vec![Series {
        label: "live (all kinds)".into(),
        values: &live,
        from: 0,
        draw: Draw::Area,
        step_s: step(a),
    }];
    if d.reserved_peak > d.peak_bytes {
        series.push(Series {
            label: "reserved by allocators".into(),
            values: &reserved,
            from: 0,
            draw: Draw::Line,
            step_s: step(a),
        });
    }
    // What nvidia-smi showed (everyone's use of the device), from its first
    // sample on.
    let device_used: Vec<u64> = d
        .device_view
        .as_ref()
        .map(|v| v.used_curve.iter().map(|u| u.unwrap_or(0)).collect())
        .unwrap_or_default();
    if let Some(first) = d
        .device_view
        .as_ref()
        .and_then(|v| v.used_curve.iter().position(Option::is_some))
    {
        series.push(Series {
            label: "used on the device (nvidia-smi)".into(),
            values: &device_used,
            from: first,
            draw: Draw::Line,
            step_s: step(a),
        });
    }
    if d.live_by_kind.len() > 1 {
        for (k, v) in d.live_by_kind.iter().zip(&kinds) {
            series.push(Series {
                label: k.kind.clone(),
                values: v,
                from: 0,
                draw: Draw::Line,
                step_s: step(a),
            });
        }
    }
    bytes_chart(
        format!("device{}-memory.svg", d.device),
        format!("Device {}: memory over time", d.device),
        seconds(a, a.timeline.buckets.max(1)),
        &series,
        Some((d.peak_time_ns, d.peak_bytes)),
    )
}

/// Fragmentation F(t) (per mille) of a device: its figure (the worst
/// region's at each moment) and, when it has several, each region's own
/// line (the most fragmented first, as many as the palette holds).
pub fn fragmentation(a: &Analysis, d: &DeviceReport) -> Option<Chart> {
    let mut curves: Vec<(String, &Vec<Option<u16>>)> =
        vec![("device (worst region)".into(), &d.fragmentation.curve)];
    let mut regions: Vec<_> = d
        .fragmentation
        .regions
        .iter()
        .filter(|r| r.worst.is_some())
        .collect();
    if regions.len() > 1 {
        regions.sort_by(|x, y| {
            let f = |r: &&gmem_prof_model::RegionSummary| {
                r.worst.as_ref().map_or(0.0, |w| w.fragmentation)
            };
            f(y).total_cmp(&f(x))
        });
        curves.extend(
            regions
                .iter()
                .take(PALETTE.len() - 1)
                .map(|r| (format!("{} {:#x}", r.kind.as_str(), r.address), &r.curve)),
        );
    }
    fraction_chart(
        a,
        format!("device{}-fragmentation.svg", d.device),
        format!("Device {}: fragmentation", d.device),
        format!(
            "Device {}: fragmentation F = 1 − largest free / total free, per pool or VMM region",
            d.device
        ),
        &curves,
    )
}

/// F(t) curves (per mille; `None` where undefined), one line each.
fn fraction_chart(
    a: &Analysis,
    name: String,
    title: String,
    caption: String,
    curves: &[(String, &Vec<Option<u16>>)],
) -> Option<Chart> {
    if curves.iter().all(|(_, c)| c.iter().all(|v| v.is_none())) {
        return None;
    }
    let mut svg = String::new();
    let xmax = seconds(a, a.timeline.buckets.max(1));
    let drawn = (|| -> Result<(), String> {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax, 0f64..1.05f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("time since the first event (s)")
            .y_desc("F")
            .draw()
            .map_err(|e| e.to_string())?;
        for (k, (label, curve)) in curves.iter().enumerate() {
            let color = PALETTE[(k + 3) % PALETTE.len()];
            // Draw each run of defined samples as its own line.
            let mut run: Vec<(f64, f64)> = Vec::new();
            let mut runs = Vec::new();
            for (i, v) in curve.iter().enumerate() {
                match v {
                    Some(f) => run.push((seconds(a, i), f64::from(*f) / 1000.0)),
                    None => {
                        if !run.is_empty() {
                            runs.push(std::mem::take(&mut run));
                        }
                    }
                }
            }
            if !run.is_empty() {
                runs.push(run);
            }
            for (j, r) in runs.into_iter().enumerate() {
                let drawn = chart
                    .draw_series(LineSeries::new(r, color.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
                if j == 0 && curves.len() > 1 {
                    drawn.label(label.clone()).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
                    });
                }
            }
        }
        if curves.len() > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())
    })();
    if drawn.is_err() {
        return None;
    }
    Some(Chart { name, title, svg })
}

/// What an allocator's memory held (an area) and what it held from CUDA
/// (a line) on one chart: PyTorch's tensors and segments, a JAX or CuPy
/// pool and its arrays.
fn used_and_held(
    a: &Analysis,
    (name, title): (String, String),
    (used_label, used): (&str, &[Point]),
    (held_label, held): (&str, &[Point]),
    mark: Option<(u64, u64)>,
) -> Chart {
    let used: Vec<u64> = used.iter().map(|p| p.max).collect();
    let held: Vec<u64> = held.iter().map(|p| p.max).collect();
    let series = [
        Series {
            label: used_label.into(),
            values: &used,
            from: 0,
            draw: Draw::Area,
            step_s: step(a),
        },
        Series {
            label: held_label.into(),
            values: &held,
            from: 0,
            draw: Draw::Line,
            step_s: step(a),
        },
    ];
    bytes_chart(
        name,
        title,
        seconds(a, a.timeline.buckets.max(1)),
        &series,
        mark,
    )
}

/// A framework allocator's allocated (tensors) and reserved (segments, or
/// its CUDA pool) bytes on one chart, the allocated peak marked.
pub fn framework_memory(a: &Analysis, v: &FrameworkView) -> Chart {
    let held = if v.reserved_in == ReservedIn::Segments {
        "segments"
    } else {
        "pool"
    };
    used_and_held(
        a,
        (
            format!("{}-memory.svg", framework_stem(v)),
            format!("pid {} device {}: tensors and {held}", v.pid, v.device),
        ),
        ("allocated (tensors)", &v.allocated),
        (&format!("reserved ({held})"), &v.reserved),
        Some((v.allocated_peak_time_ns, v.allocated_peak)),
    )
}

/// A view's tensors by role over time, stacked: each band a role's live
/// bytes at each bucket's end, the top one the view's allocated bytes.
pub fn framework_roles(a: &Analysis, v: &FrameworkView) -> Option<Chart> {
    if v.timeline_roles.is_empty() {
        return None;
    }
    let buckets = v.timeline_roles.iter().map(|c| c.live.len()).max()?;
    // Each role's band from the top of the one below to its own top.
    let mut tops: Vec<(String, Vec<u64>)> = vec![(String::new(), vec![0u64; buckets])];
    for c in &v.timeline_roles {
        let mut top = tops[tops.len() - 1].1.clone();
        for (acc, x) in top.iter_mut().zip(&c.live) {
            *acc += x;
        }
        tops.push((c.role.to_string(), top));
    }
    // The legend lists the top band first, as the chart stacks them.
    let series: Vec<Series> = tops
        .windows(2)
        .rev()
        .map(|pair| Series {
            label: pair[1].0.clone(),
            values: &pair[1].1,
            from: 0,
            draw: Draw::Band(&pair[0].1),
            step_s: step(a),
        })
        .collect();
    Some(bytes_chart(
        format!("{}-roles.svg", framework_stem(v)),
        format!("pid {} device {}: tensors by role", v.pid, v.device),
        seconds(a, a.timeline.buckets.max(1)),
        &series,
        None,
    ))
}

/// What a JAX or CuPy pool's arrays used (the framework's own count) and
/// what the pool held from CUDA.
pub fn framework_pool(a: &Analysis, p: &FrameworkPool) -> Chart {
    used_and_held(
        a,
        (
            format!("{}-memory.svg", crate::pools::stem(p)),
            format!(
                "pid {} device {}: the pool and what its arrays used",
                p.pid, p.device
            ),
        ),
        ("in use (arrays)", &p.in_use),
        ("pool (held from CUDA)", &p.pool),
        None,
    )
}

/// Fragmentation of each pool of a framework allocator.
pub fn framework_fragmentation(a: &Analysis, v: &FrameworkView) -> Option<Chart> {
    let curves: Vec<(String, &Vec<Option<u16>>)> = v
        .pools
        .iter()
        .take(PALETTE.len())
        .map(|p| (format!("pool {}", pool_short(&p.pool)), &p.curve))
        .collect();
    fraction_chart(
        a,
        format!("{}-fragmentation.svg", framework_stem(v)),
        format!("pid {} device {}: fragmentation per pool", v.pid, v.device),
        format!(
            "pid {} device {}: fragmentation per pool, F = 1 − largest free block / free",
            v.pid, v.device
        ),
        &curves,
    )
}

/// A pool's name with no stream address (the legend has little room; the
/// text comes from the analysis, not the trace).
fn pool_short(pool: &str) -> String {
    pool.split(", stream").next().unwrap_or(pool).to_string()
}

/// Live bytes of each tensor site that keeps growing (at most five).
pub fn tensor_growth(a: &Analysis) -> Option<Chart> {
    growth_chart(
        a,
        &a.tensor_growth,
        "tensor-growth.svg",
        "Tensor sites that keep growing: live bytes",
        "tensor site",
    )
}

/// Live bytes of each growing site of `growth` (at most five).
fn growth_chart(
    a: &Analysis,
    growth: &[Growth],
    name: &str,
    title: &str,
    what: &str,
) -> Option<Chart> {
    if growth.is_empty() {
        return None;
    }
    let series: Vec<Series> = growth
        .iter()
        .take(5)
        .map(|g| Series {
            label: format!("{what} {} (pid {})", g.site, g.pid),
            values: &g.curve,
            from: 0,
            draw: Draw::Line,
            step_s: step(a),
        })
        .collect();
    Some(bytes_chart(
        name.into(),
        title.into(),
        seconds(a, a.timeline.buckets.max(1)),
        &series,
        None,
    ))
}

/// Live bytes of each growing site (at most five).
pub fn growth(a: &Analysis) -> Option<Chart> {
    growth_chart(
        a,
        &a.growth,
        "growth.svg",
        "Sites that keep growing: live bytes",
        "site",
    )
}

/// Live bytes per process, when there are several.
pub fn processes(a: &Analysis) -> Option<Chart> {
    if a.processes.len() < 2 {
        return None;
    }
    let curves: Vec<Vec<u64>> = a
        .processes
        .iter()
        .map(|p| p.live.iter().map(|x| x.max).collect())
        .collect();
    let series: Vec<Series> = a
        .processes
        .iter()
        .zip(&curves)
        .map(|(p, c)| Series {
            label: format!("pid {}", p.pid),
            values: c,
            from: 0,
            draw: Draw::Line,
            step_s: step(a),
        })
        .collect();
    Some(bytes_chart(
        "processes.svg".into(),
        "Live bytes per process".into(),
        seconds(a, a.timeline.buckets.max(1)),
        &series,
        None,
    ))
}

/// Every chart of the report, in page order.
pub fn all(a: &Analysis) -> Vec<Chart> {
    let mut out = Vec::new();
    for d in &a.devices {
        out.push(device_memory(a, d));
        out.extend(fragmentation(a, d));
        out.extend(crate::flame::device(a, d));
    }
    for v in &a.frameworks {
        out.push(framework_memory(a, v));
        out.extend(framework_roles(a, v));
        out.extend(framework_fragmentation(a, v));
        out.extend(crate::flame::framework(a, v));
    }
    for p in &a.framework_pools {
        out.push(framework_pool(a, p));
    }
    out.extend(growth(a));
    out.extend(tensor_growth(a));
    out.extend(processes(a));
    out
}

/// Live bytes of one device in several runs, overlaid, each on its own
/// clock (seconds since its first event). Runs without the device are left
/// out. `name` is the SVG file name.
pub fn runs_overlay(name: String, title: String, device: u32, runs: &[(&str, &Analysis)]) -> Chart {
    let curves: Vec<(String, Vec<u64>, f64)> = runs
        .iter()
        .filter_map(|(label, a)| {
            let d = a.devices.iter().find(|d| d.device == device)?;
            Some((
                (*label).to_string(),
                d.live.iter().map(|p| p.max).collect(),
                step(a),
            ))
        })
        .collect();
    let series: Vec<Series> = curves
        .iter()
        .map(|(label, values, step_s)| Series {
            label: label.clone(),
            values,
            from: 0,
            draw: Draw::Line,
            step_s: *step_s,
        })
        .collect();
    let xmax = runs
        .iter()
        .map(|(_, a)| seconds(a, a.timeline.buckets.max(1)))
        .fold(0.0, f64::max);
    bytes_chart(name, title, xmax, &series, None)
}
