//! Several runs side by side (ranks of one job, or repeated runs): one line
//! per run with its peak, leaks and OOMs, the skew of peaks between runs,
//! and every run's live curve on one chart.

use std::io::{self, Write};

use gmem_prof_model::{Analysis, DeviceReport};

use maud::html;

use crate::charts;
use crate::format::{bytes, time};
use crate::html::{document_end, document_head};

/// A run's highest device: the figure runs are compared by (ranks usually
/// use different device numbers, or device 0 on different hosts).
fn top_device(a: &Analysis) -> Option<&DeviceReport> {
    a.devices.iter().max_by(|x, y| {
        x.peak_bytes
            .cmp(&y.peak_bytes)
            .then(y.device.cmp(&x.device))
    })
}

/// Spread of the runs' peaks: (min, max, mean, (max − min) / mean).
pub fn skew(runs: &[(&str, &Analysis)]) -> Option<(u64, u64, f64, f64)> {
    let peaks: Vec<u64> = runs
        .iter()
        .filter_map(|(_, a)| top_device(a).map(|d| d.peak_bytes))
        .collect();
    let min = *peaks.iter().min()?;
    let max = *peaks.iter().max()?;
    let mean = peaks.iter().map(|&p| p as f64).sum::<f64>() / peaks.len() as f64;
    let spread = if mean > 0.0 {
        (max - min) as f64 / mean
    } else {
        0.0
    };
    Some((min, max, mean, spread))
}

pub fn text(runs: &[(&str, &Analysis)], w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, "{} runs side by side:", runs.len())?;
    let width = runs.iter().map(|(n, _)| n.len()).max().unwrap_or(3).max(3);
    writeln!(
        w,
        "  {:<width$}  {:>11}  {:>8}  {:>11}  {:>5}",
        "run", "peak", "device", "leaked", "OOMs"
    )?;
    for (name, a) in runs {
        let (peak, dev) = top_device(a).map_or(("–".into(), "–".into()), |d| {
            (bytes(d.peak_bytes), d.device.to_string())
        });
        writeln!(
            w,
            "  {name:<width$}  {peak:>11}  {dev:>8}  {:>11}  {:>5}",
            bytes(a.leaked_bytes()),
            a.ooms_reached_program()
        )?;
    }
    if let Some((min, max, mean, spread)) = skew(runs) {
        writeln!(
            w,
            "skew of peaks: {} to {} (mean {}), spread {:.1}% of the mean",
            bytes(min),
            bytes(max),
            bytes(mean as u64),
            spread * 100.0
        )?;
    }
    Ok(())
}

/// The side-by-side page; `links[i]` is run i's own report file.
pub fn html(runs: &[(&str, &Analysis)], links: &[String], w: &mut dyn Write) -> io::Result<()> {
    // One chart per device number any run used, each run on its own clock.
    let mut numbers: Vec<u32> = runs
        .iter()
        .flat_map(|(_, a)| a.devices.iter().map(|d| d.device))
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    // Charts carry only our words: runs are "run 1", "run 2", … there.
    let labels: Vec<String> = (1..=runs.len()).map(|i| format!("run {i}")).collect();
    let numbered: Vec<(&str, &Analysis)> = labels
        .iter()
        .zip(runs)
        .map(|(l, (_, a))| (l.as_str(), *a))
        .collect();
    let page = html! {
        (document_head(&format!("gmem-prof: {} runs", runs.len()), false))
        h1 { (runs.len()) " runs side by side" }
        @if let Some((min, max, mean, spread)) = skew(runs) {
            p.note {
                "Peaks range from " (bytes(min)) " to " (bytes(max)) " (mean " (bytes(mean as u64))
                "): a spread of " (format!("{:.1}", spread * 100.0)) "% of the mean."
            }
        }
        table {
            tr { th { "#" } th { "run" } th.n { "peak" } th { "device" } th.n { "at" } th.n { "leaked" } th.n { "cached at exit" } th.n { "OOMs reaching the program" } th.n { "worst fragmentation" } th.n { "duration" } }
            @for (i, (name, a)) in runs.iter().enumerate() {
                @let d = top_device(a);
                @let worst = a
                    .devices
                    .iter()
                    .filter_map(|d| d.fragmentation.worst.as_ref().map(|w| w.fragmentation))
                    .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.max(f))));
                tr {
                    td { "run " (i + 1) }
                    td { a href=(links.get(i).map_or("", |s| s.as_str())) { (name) } }
                    td.n { (d.map_or("–".into(), |d| bytes(d.peak_bytes))) }
                    td { (d.map_or("–".into(), |d| format!("{} ({})", d.device, d.name))) }
                    td.n { (d.map_or("–".into(), |d| time(d.peak_time_ns))) }
                    td.n { (bytes(a.leaked_bytes())) }
                    td.n { (bytes(a.cached_bytes())) }
                    td.n { (a.ooms_reached_program()) }
                    td.n { (worst.map_or("–".into(), |f| format!("{f:.3}"))) }
                    td.n { (time(a.timeline.end_ns)) }
                }
            }
        }
        @for n in numbers {
            (charts::runs_overlay(
                format!("runs-device{n}.svg"),
                format!("Device {n}: live bytes per run"),
                n,
                &numbered,
            ))
        }
        (document_end())
    };
    w.write_all(page.into_string().as_bytes())
}
