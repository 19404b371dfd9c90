//! `gmem-prof check`: budgets for CI. Exit 0 when every budget holds, 1 when
//! one is exceeded (each violation printed with the figure, the budget and
//! the sites responsible), 2 on bad input.

use std::fmt::Write as _;

use anyhow::{bail, Result};
use gmem_prof_analyzer::model::Analysis;
use gmem_prof_analyzer::{analyze_files, Options};
use gmem_prof_reports::format::bytes;

use crate::cli::CheckArgs;

/// Exit code when a budget is exceeded.
pub const EXIT_OVER_BUDGET: i32 = 1;

/// One broken budget, in words.
struct Violation {
    what: String,
    details: Vec<String>,
}

pub fn run(a: CheckArgs) -> Result<i32> {
    if a.max_peak.is_none()
        && a.max_leaked.is_none()
        && a.max_growth.is_none()
        && a.max_fragmentation.is_none()
        && a.max_ooms.is_none()
    {
        bail!("no budget given: use --max-peak, --max-leaked, --max-growth, --max-fragmentation or --max-ooms");
    }
    if let Some(f) = a.max_fragmentation {
        if !(0.0..=1.0).contains(&f) {
            bail!("--max-fragmentation takes a value between 0 and 1, not {f}");
        }
    }
    let files = crate::inputs::expand(&a.traces)?;
    let analysis = analyze_files(&files, &Options::default())?;
    let violations = evaluate(&analysis, &a);
    for w in &analysis.input.warnings {
        eprintln!("gmem-prof: warning: {w}");
    }
    if violations.is_empty() {
        println!("gmem-prof check: every budget holds");
        return Ok(0);
    }
    let mut out = String::new();
    for v in &violations {
        let _ = writeln!(out, "over budget: {}", v.what);
        for d in &v.details {
            let _ = writeln!(out, "    {d}");
        }
    }
    print!("{out}");
    println!("gmem-prof check: {} budget(s) exceeded", violations.len());
    Ok(EXIT_OVER_BUDGET)
}

fn evaluate(a: &Analysis, b: &CheckArgs) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Some(max) = b.max_peak {
        for d in a.devices.iter().filter(|d| d.peak_bytes > max.0) {
            out.push(Violation {
                what: format!(
                    "device {} peaked at {} ({} bytes) at {:.3} s; budget {} ({} bytes)",
                    d.device,
                    bytes(d.peak_bytes),
                    d.peak_bytes,
                    d.peak_time_ns as f64 / 1e9,
                    bytes(max.0),
                    max.0
                ),
                details: d
                    .peak_sites
                    .iter()
                    .take(5)
                    .map(|s| {
                        format!(
                            "{} live at the peak from {}",
                            bytes(s.bytes),
                            a.site_label(s.site)
                        )
                    })
                    .collect(),
            });
        }
    }
    if let Some(max) = b.max_leaked {
        let leaked = a.leaked_bytes();
        if leaked > max.0 {
            let sites = a.leaking_sites();
            out.push(Violation {
                what: format!(
                    "{} ({leaked} bytes) never freed; budget {} ({} bytes)",
                    bytes(leaked),
                    bytes(max.0),
                    max.0
                ),
                details: sites
                    .iter()
                    .take(5)
                    .map(|s| {
                        format!(
                            "{} in {} allocation(s) from {}",
                            bytes(s.leaked_bytes),
                            s.leaked_count,
                            s.label
                        )
                    })
                    .collect(),
            });
        }
    }
    if let Some(max) = b.max_growth {
        let over: Vec<_> = a.growth.iter().filter(|g| g.growth_bytes > max.0).collect();
        if !over.is_empty() {
            out.push(Violation {
                what: format!(
                    "{} site(s) grew by more than {} after the warm-up (most: {})",
                    over.len(),
                    bytes(max.0),
                    bytes(over[0].growth_bytes)
                ),
                details: over
                    .iter()
                    .take(5)
                    .map(|g| {
                        format!(
                            "+{} in pid {} from {}",
                            bytes(g.growth_bytes),
                            g.pid,
                            a.site_label(g.site)
                        )
                    })
                    .collect(),
            });
        }
    }
    if let Some(max) = b.max_fragmentation {
        for d in &a.devices {
            if let Some(w) = d
                .fragmentation
                .worst
                .as_ref()
                .filter(|w| w.fragmentation > max)
            {
                out.push(Violation {
                    what: format!(
                        "device {} fragmentation reached {:.3} at {:.3} s; budget {max}",
                        d.device,
                        w.fragmentation,
                        w.time_ns as f64 / 1e9
                    ),
                    details: vec![format!(
                        "{} free in pools/VMM regions, largest free block {}",
                        bytes(w.free_bytes),
                        bytes(w.largest_free_bytes)
                    )],
                });
            }
        }
    }
    if let Some(max) = b.max_ooms {
        let reached: Vec<_> = a
            .ooms
            .iter()
            .filter(|o| o.outcome == "reached program")
            .collect();
        if reached.len() as u64 > max {
            out.push(Violation {
                what: format!(
                    "{} out-of-memory failure(s) reached the program; budget {max}",
                    reached.len()
                ),
                details: reached
                    .iter()
                    .take(5)
                    .map(|o| {
                        format!(
                            "{} of {} from {}",
                            o.function,
                            bytes(o.requested_bytes),
                            a.site_label(o.site)
                        )
                    })
                    .collect(),
            });
        }
    }
    out
}

/// A byte count given on the command line: "0", "512", "64MiB", "8GiB",
/// "1.5GB" (binary units KiB/MiB/GiB/TiB, decimal KB/MB/GB/TB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl std::str::FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a size (examples: 0, 512MiB, 8GiB, 1.5GB)"))?;
        let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "kib" | "k" => 1024.0,
            "mib" | "m" => 1024.0 * 1024.0,
            "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
            "tib" | "t" => 1024f64.powi(4),
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "tb" => 1e12,
            u => {
                return Err(format!(
                    "unknown unit {u:?} in {s:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
                ))
            }
        };
        let v = value * scale;
        if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
            return Err(format!("{s:?} is out of range"));
        }
        Ok(ByteSize(v.round() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::ByteSize;

    #[test]
    fn sizes() {
        let p = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(p("0"), Ok(0));
        assert_eq!(p("64MiB"), Ok(64 << 20));
        assert_eq!(p("8GiB"), Ok(8 << 30));
        assert_eq!(p("1.5GB"), Ok(1_500_000_000));
        assert_eq!(p(" 2 kib "), Ok(2048));
        assert!(p("lots").is_err());
        assert!(p("5 parsecs").is_err());
        assert!(p("-1").is_err());
    }
}
