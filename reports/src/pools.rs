//! JAX's and CuPy's pools as the frameworks count them (`FrameworkPool`):
//! how much of the memory the pool holds from CUDA the program's arrays
//! used, in the summary and on the page.

use std::io::{self, Write};

use gmem_prof_model::{Analysis, FrameworkPool};

use maud::{html, Markup};

use crate::blocks::chart_html;
use crate::chart::Chart;
use crate::format::{bytes, percent, time};

/// File-name stem of a pool's chart.
pub fn stem(p: &FrameworkPool) -> String {
    format!("pid{}-device{}-pool", p.pid, p.device)
}

/// "its arrays used at most 126 MiB (JAX's own peak) of the 105 GiB it
/// holds from CUDA (75% of the device); 6.00 MiB in use at exit".
pub fn sentence(a: &Analysis, p: &FrameworkPool) -> String {
    let how = if p.in_use_peak_exact {
        "the framework's own peak".to_string()
    } else {
        format!(
            "the highest of {} readings: a spike between two is not seen",
            p.readings
        )
    };
    let device_total = a
        .devices
        .iter()
        .find(|d| d.device == p.device)
        .map_or(0, |d| d.total_memory);
    let share = if device_total > 0 {
        format!(" ({} of the device)", percent(p.pool_peak, device_total))
    } else {
        String::new()
    };
    let end = if p.last.at_exit {
        "at exit"
    } else {
        "at the last reading"
    };
    format!(
        "its arrays used at most {} ({how}) of the {} the pool held from CUDA{share}; {} in use {end}, {} held",
        bytes(p.in_use_peak),
        bytes(p.pool_peak),
        bytes(p.last.in_use),
        bytes(p.last.pool),
    )
}

/// Under a device's peak: the pools on it whose inside the frameworks
/// reported, "JAX (XLA's BFC allocator) of pid 558 holds 105 GiB as its
/// pool; its arrays used at most 126 MiB of it".
pub fn on_device(a: &Analysis, device: u32) -> Vec<String> {
    a.framework_pools
        .iter()
        .filter(|p| p.device == device)
        .map(|p| {
            format!(
                "{} of pid {} holds {} as its pool; its arrays used at most {} of it",
                p.framework,
                p.pid,
                bytes(p.pool_peak),
                bytes(p.in_use_peak)
            )
        })
        .collect()
}

fn title(p: &FrameworkPool) -> String {
    format!("{}, pid {} on device {}", p.framework, p.pid, p.device)
}

pub fn summary(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for p in &a.framework_pools {
        writeln!(w, "\n{}: {}", title(p), sentence(a, p))?;
    }
    Ok(())
}

pub fn html_section(a: &Analysis, charts: &[Chart]) -> Markup {
    html! {
        @if !a.framework_pools.is_empty() {
            h2 #pools { "Inside JAX's and CuPy's pools" }
            p.meta {
                "These frameworks take memory from CUDA in large pieces and place their arrays inside, where CUDA (and the rest of this report) cannot see. What their arrays used is the frameworks' own count, read in the program while it ran (JAX's "
                code { "memory_stats()" } ", CuPy's " code { "used_bytes()" } " and " code { "total_bytes()" } ") by the module "
                code { "gmem-prof record" } " puts on the Python path."
            }
            @for p in &a.framework_pools {
                h3 id=(stem(p)) { (title(p)) }
                p { (sentence(a, p)) "." }
                @for c in charts.iter().filter(|c| c.name.starts_with(&stem(p))) {
                    (chart_html(c))
                }
            }
        }
    }
}

/// The page's overview line of each pool.
pub fn overview(a: &Analysis) -> Markup {
    html! {
        @for p in &a.framework_pools {
            li {
                a href={ "#" (stem(p)) } { (title(p)) } ": arrays used at most " b { (bytes(p.in_use_peak)) }
                " of a " (bytes(p.pool_peak)) " pool (peak reading at " (time(p.highest_reading_time_ns)) ")."
            }
        }
    }
}
