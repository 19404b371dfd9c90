//! Several runs side by side (ranks of one job, or repeated runs): one line
//! per run with its peak, leaks and OOMs, the skew of peaks between runs,
//! and every run's live curve on one chart.

use std::fmt::Write as _;
use std::io::{self, Write};

use gmem_prof_model::{Analysis, DeviceReport};

use crate::charts;
use crate::format::{bytes, escape, time};
use crate::html::STYLE;

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
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>gmem-prof: {} runs</title><style>{STYLE}</style></head><body><h1>{} runs side by side</h1>",
        runs.len(),
        runs.len()
    );
    if let Some((min, max, mean, spread)) = skew(runs) {
        let _ = write!(
            out,
            "<p class=\"note\">Peaks range from {} to {} (mean {}): a spread of {:.1}% of the mean.</p>",
            bytes(min),
            bytes(max),
            bytes(mean as u64),
            spread * 100.0
        );
    }
    out.push_str("<table><tr><th>#</th><th>run</th><th class=\"n\">peak</th><th>device</th><th class=\"n\">at</th><th class=\"n\">leaked</th><th class=\"n\">cached at exit</th><th class=\"n\">OOMs reaching the program</th><th class=\"n\">worst fragmentation</th><th class=\"n\">duration</th></tr>");
    for (i, (name, a)) in runs.iter().enumerate() {
        let d = top_device(a);
        let worst = a
            .devices
            .iter()
            .filter_map(|d| d.fragmentation.worst.as_ref().map(|w| w.fragmentation))
            .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.max(f))));
        let _ = write!(
            out,
            "<tr><td>run {}</td><td><a href=\"{}\">{}</a></td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            i + 1,
            escape(links.get(i).map_or("", |s| s.as_str())),
            escape(name),
            d.map_or("–".into(), |d| bytes(d.peak_bytes)),
            d.map_or("–".into(), |d| format!("{} ({})", d.device, escape(&d.name))),
            d.map_or("–".into(), |d| time(d.peak_time_ns)),
            bytes(a.leaked_bytes()),
            bytes(a.cached_bytes()),
            a.ooms_reached_program(),
            worst.map_or("–".into(), |f| format!("{f:.3}")),
            time(a.timeline.end_ns)
        );
    }
    out.push_str("</table>");
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
    for n in numbers {
        let chart = charts::runs_overlay(
            format!("runs-device{n}.svg"),
            format!("Device {n}: live bytes per run"),
            n,
            &numbered,
        );
        out.push_str(&chart.svg);
    }
    out.push_str("</body></html>\n");
    w.write_all(out.as_bytes())
}
