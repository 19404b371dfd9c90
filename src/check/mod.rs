//! `gmem-prof check`: budgets for CI. Exit 0 when every budget holds, 1 when
//! one is exceeded (each violation printed with the figure, the budget and
//! the sites responsible), 2 on bad input.
//!
//! - `budget.rs`: the budgets, from flags or a TOML file;
//! - `outputs.rs`: what CI systems read (JSON summary, Markdown, JUnit XML).

pub mod budget;
mod outputs;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use gmem_prof_analyzer::model::{Analysis, Category, Oom, ProcessReport};
use gmem_prof_analyzer::{analyze_files, Options};
use gmem_prof_reports::format::bytes;
use serde::Serialize;

use crate::cli::CheckArgs;
use budget::{Budgets, Limits};

/// Exit code when a budget is exceeded.
pub const EXIT_OVER_BUDGET: i32 = 1;
/// Exit code when part of a run was not profiled (and that was not allowed):
/// its figures cannot be trusted either way.
pub const EXIT_NOT_PROFILED: i32 = 2;
/// The outcome that says whether every process was profiled.
const PROFILED: &str = "profiled";
/// Sites named under a broken budget.
const SITES_SHOWN: usize = 5;

/// What a figure counts.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    Bytes,
    Fraction,
    Count,
}

/// A figure or limit: written to JSON as an integer when it is one (bytes,
/// counts), as a fraction otherwise.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Figure(pub f64);

impl Serialize for Figure {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.fract() == 0.0 && (0.0..9.0e15).contains(&v) {
            s.serialize_u64(v as u64)
        } else {
            s.serialize_f64(v)
        }
    }
}

/// One budget applied to one target: a device, a process or the run.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The run (trace) it was checked on.
    pub run: String,
    /// "max_peak", "max_leaked", "max_growth", "max_fragmentation", "max_ooms",
    /// … or "profiled" (present only when a process was not profiled).
    pub budget: &'static str,
    /// "run", "device 0", "process 1234 (train.py)".
    pub target: String,
    pub unit: Unit,
    pub figure: Figure,
    pub limit: Figure,
    pub passed: bool,
    /// One line: the figure against the budget, in words.
    pub summary: String,
    /// The sites (or regions) responsible, one per line.
    pub details: Vec<String>,
}

impl Outcome {
    /// A budget applied to one target of run `r`: passed when the figure is
    /// within the limit.
    #[allow(clippy::too_many_arguments)]
    fn judged(
        r: &Run,
        budget: &'static str,
        target: String,
        unit: Unit,
        figure: f64,
        limit: f64,
        summary: String,
        details: Vec<String>,
    ) -> Outcome {
        Outcome {
            run: r.name.clone(),
            budget,
            target,
            unit,
            figure: Figure(figure),
            limit: Figure(limit),
            passed: figure <= limit,
            summary,
            details,
        }
    }
}

/// One run's analysis with its name.
pub struct Run {
    pub name: String,
    pub analysis: Analysis,
}

pub fn run(a: CheckArgs) -> Result<i32> {
    let mut budgets = match &a.budget {
        Some(p) => Budgets::from_file(p)?,
        None => Budgets::default(),
    };
    // Flags override the file's run budgets.
    budgets.run = budgets.run.overridden_by(&Limits {
        max_peak: a.max_peak,
        max_allocated: a.max_allocated,
        max_leaked: a.max_leaked,
        max_tensors_at_exit: a.max_tensors_at_exit,
        max_growth: a.max_growth,
        max_fragmentation: a.max_fragmentation,
        max_ooms: a.max_ooms,
        max_cached_at_exit: a.max_cached_at_exit,
        max_library_held: a.max_library_held,
        max_module_globals: a.max_module_globals,
        max_pinned: a.max_pinned,
    });
    budgets.validate()?;
    if budgets.is_empty() {
        bail!("no budget given: use --budget FILE, --max-peak, --max-pinned, --max-allocated, --max-leaked, --max-library-held, --max-cached-at-exit, --max-module-globals, --max-tensors-at-exit, --max-growth, --max-fragmentation or --max-ooms");
    }
    let mut runs = Vec::new();
    for t in &a.traces {
        let files = crate::inputs::expand(std::slice::from_ref(t))?;
        let opts = Options {
            code: a.code.rules(),
            ..Default::default()
        };
        let analysis = analyze_files(&files, &opts)?;
        for w in &analysis.input.warnings {
            eprintln!("gmem-prof: warning: {}: {w}", t.display());
        }
        runs.push(Run {
            name: crate::report::report_stem(&files),
            analysis,
        });
    }
    let mut outcomes = Vec::new();
    for r in &runs {
        let (o, warnings) = evaluate(r, &budgets, a.allow_unprofiled);
        for w in warnings {
            eprintln!("gmem-prof: warning: {}: {w}", r.name);
        }
        outcomes.extend(o);
    }
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    let not_profiled = outcomes.iter().any(|o| o.budget == PROFILED && !o.passed);

    let write = |path: &Option<PathBuf>, data: String| -> Result<()> {
        if let Some(p) = path {
            std::fs::write(p, data).with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(())
    };
    write(&a.json, outputs::json(&runs, &outcomes)?)?;
    write(&a.markdown, outputs::markdown(&runs, &outcomes))?;
    write(&a.junit, outputs::junit(&outcomes))?;
    // Printed after the files are written: a closed stdout (`| head`)
    // ends the command early but must not cost CI its files.
    crate::out(format_args!("{}", outputs::text(&outcomes, runs.len() > 1)))?;
    if not_profiled {
        crate::out(format_args!(
            "gmem-prof check: part of the run was not profiled, so its budgets prove nothing \
             (above: why); pass --allow-unprofiled if that is acceptable\n"
        ))?;
        Ok(EXIT_NOT_PROFILED)
    } else if failed == 0 {
        crate::out(format_args!(
            "gmem-prof check: every budget holds ({} checked)\n",
            outcomes.len()
        ))?;
        Ok(0)
    } else {
        crate::out(format_args!(
            "gmem-prof check: {failed} of {} budget(s) exceeded\n",
            outcomes.len()
        ))?;
        Ok(EXIT_OVER_BUDGET)
    }
}

/// Applies every budget to one run. Also returns warnings (a budget for a
/// device or process the run does not have). A run with a process that was
/// not profiled gets a first outcome, "profiled", that fails unless
/// `allow_unprofiled`.
pub fn evaluate(r: &Run, b: &Budgets, allow_unprofiled: bool) -> (Vec<Outcome>, Vec<String>) {
    let a = &r.analysis;
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    let missing = a.not_profiled();
    if !missing.is_empty() {
        out.push(Outcome {
            run: r.name.clone(),
            budget: PROFILED,
            target: "run".into(),
            unit: Unit::Count,
            figure: Figure(missing.len() as f64),
            limit: Figure(if allow_unprofiled {
                missing.len() as f64
            } else {
                0.0
            }),
            passed: allow_unprofiled,
            summary: format!(
                "not profiled: {} part(s) of the run are missing from the trace{}",
                missing.len(),
                if allow_unprofiled {
                    " (allowed by --allow-unprofiled)"
                } else {
                    ""
                }
            ),
            details: missing,
        });
    }

    // Per device: peak, fragmentation, OOMs.
    for (d, _) in b.devices() {
        if !a.devices.iter().any(|x| x.device == d) {
            warnings.push(format!(
                "the budget for device {d} checks nothing: the trace has no device {d}"
            ));
        }
    }
    for d in &a.devices {
        let own = b.devices().find(|&(n, _)| n == d.device).map(|(_, l)| l);
        let limits = match own {
            Some(l) => b.run.overridden_by(l),
            None => b.run.clone(),
        };
        let target = format!("device {}", d.device);
        if let Some(max) = limits.max_peak {
            out.push(Outcome::judged(
                r,
                "max_peak",
                target.clone(),
                Unit::Bytes,
                d.device_memory_peak_bytes as f64,
                max.0 as f64,
                format!(
                    "device {}'s memory peaked at {} ({} bytes) at {:.3} s; budget {} ({} bytes)",
                    d.device,
                    bytes(d.device_memory_peak_bytes),
                    d.device_memory_peak_bytes,
                    d.device_memory_peak_time_ns as f64 / 1e9,
                    bytes(max.0),
                    max.0
                ),
                d.peak_sites
                    .iter()
                    .take(SITES_SHOWN)
                    .map(|s| {
                        format!(
                            "{} live at the peak from {}",
                            bytes(s.bytes),
                            a.site_label(s.site)
                        )
                    })
                    .collect(),
            ));
        }
        if let Some(max) = limits.max_pinned {
            let pinned = d.pinned_host_peak_bytes;
            out.push(Outcome::judged(
                r,
                "max_pinned",
                target.clone(),
                Unit::Bytes,
                pinned as f64,
                max.0 as f64,
                format!(
                    "pinned host memory of device {}'s contexts peaked at {} ({pinned} bytes); budget {} ({} bytes)",
                    d.device,
                    bytes(pinned),
                    bytes(max.0),
                    max.0
                ),
                Vec::new(),
            ));
        }
        if let Some(max) = limits.max_allocated {
            out.push(allocated_outcome(r, target.clone(), max.0, |v| {
                v.device == d.device
            }));
        }
        // A framework pool more fragmented than the device's regions is
        // the device's figure (the worst pool's).
        let pool = a
            .frameworks
            .iter()
            .filter(|v| v.device == d.device)
            .filter_map(|v| v.worst_fragmentation.as_ref().map(|w| (v.pid, w)))
            .max_by(|x, y| x.1.at.fragmentation.total_cmp(&y.1.at.fragmentation));
        let pool_worse = pool.is_some_and(|(_, w)| {
            d.fragmentation
                .worst
                .as_ref()
                .is_none_or(|r| w.at.fragmentation > r.fragmentation)
        });
        if let (Some(max), true, Some((pid, w))) = (limits.max_fragmentation, pool_worse, pool) {
            out.push(Outcome::judged(
                r,
                "max_fragmentation",
                target.clone(),
                Unit::Fraction,
                w.at.fragmentation,
                max,
                format!(
                    "device {} fragmentation reached {:.3} at {:.3} s in pid {pid}'s PyTorch pool ({}); budget {max}",
                    d.device,
                    w.at.fragmentation,
                    w.at.time_ns as f64 / 1e9,
                    w.pool
                ),
                vec![format!(
                    "{} free inside the pool's segments, largest free block {}",
                    bytes(w.at.free_bytes),
                    bytes(w.at.largest_free_bytes)
                )],
            ));
        } else if let Some(max) = limits.max_fragmentation {
            let (f, summary, details) = match &d.fragmentation.worst {
                Some(w) => (
                    w.fragmentation,
                    format!(
                        "device {} fragmentation reached {:.3} at {:.3} s; budget {max}",
                        d.device,
                        w.fragmentation,
                        w.time_ns as f64 / 1e9
                    ),
                    vec![format!(
                        "{} free in the worst pool or VMM region, largest free block {}",
                        bytes(w.free_bytes),
                        bytes(w.largest_free_bytes)
                    )],
                ),
                None => (
                    0.0,
                    format!(
                        "device {} has no pool or VMM reservation with free space to fragment; budget {max}",
                        d.device
                    ),
                    d.fragmentation.blind_spots.clone(),
                ),
            };
            out.push(Outcome::judged(
                r,
                "max_fragmentation",
                target.clone(),
                Unit::Fraction,
                f,
                max,
                summary,
                details,
            ));
        }
        // OOMs are budgeted per device only where the device has its own
        // budget; [run]'s counts the whole run (below).
        if let Some(max) = own.and_then(|l| l.max_ooms) {
            out.push(oom_outcome(r, target, max, |_, dev| dev == d.device));
        }
    }

    // The whole run: leaks, growth, OOMs.
    if let Some(max) = b.run.max_leaked {
        let leaked = a.leaked_bytes();
        out.push(Outcome::judged(
            r,
            "max_leaked",
            "run".into(),
            Unit::Bytes,
            leaked as f64,
            max.0 as f64,
            format!(
                "{} ({leaked} bytes) never freed; budget {} ({} bytes)",
                bytes(leaked),
                bytes(max.0),
                max.0
            ),
            leak_lines(a, None),
        ));
    }
    for (budget, max) in held_budgets(&b.run) {
        out.push(held_outcome(r, budget, "run".into(), max, None));
    }
    if let Some(max) = b.run.max_tensors_at_exit {
        out.push(tensors_at_exit_outcome(r, "run".into(), max.0, None));
    }
    if let Some(max) = b.run.max_growth {
        out.push(growth_outcome(r, "run".into(), None, max.0));
    }
    if let Some(max) = b.run.max_ooms {
        out.push(oom_outcome(r, "run".into(), max, |_, _| true));
    }

    // Per process, matched by a piece of its command line.
    for (key, limits) in &b.process {
        let matching: Vec<&ProcessReport> = a
            .processes
            .iter()
            .filter(|p| {
                p.exe.contains(key.as_str()) || p.cmdline.iter().any(|w| w.contains(key.as_str()))
            })
            .collect();
        if matching.is_empty() {
            warnings.push(format!("the budget for process {key:?} checks nothing: no process's command line contains it"));
        }
        for p in matching {
            let target = format!("process {} ({key})", p.pid);
            if let Some(max) = limits.max_peak {
                out.push(Outcome::judged(
                    r,
                    "max_peak",
                    target.clone(),
                    Unit::Bytes,
                    p.peak_bytes as f64,
                    max.0 as f64,
                    format!(
                        "process {} peaked at {} ({} bytes); budget {} ({} bytes)",
                        p.pid,
                        bytes(p.peak_bytes),
                        p.peak_bytes,
                        bytes(max.0),
                        max.0
                    ),
                    Vec::new(),
                ));
            }
            if let Some(max) = limits.max_leaked {
                let leaked = p.at_exit.leaked_bytes;
                out.push(Outcome::judged(
                    r,
                    "max_leaked",
                    target.clone(),
                    Unit::Bytes,
                    leaked as f64,
                    max.0 as f64,
                    format!(
                        "process {}: {} ({leaked} bytes) never freed; budget {} ({} bytes)",
                        p.pid,
                        bytes(leaked),
                        bytes(max.0),
                        max.0
                    ),
                    leak_lines(a, Some(p.pid)),
                ));
            }
            if let Some(max) = limits.max_allocated {
                out.push(allocated_outcome(r, target.clone(), max.0, |v| {
                    v.pid == p.pid
                }));
            }
            for (budget, max) in held_budgets(limits) {
                out.push(held_outcome(r, budget, target.clone(), max, Some(p.pid)));
            }
            if let Some(max) = limits.max_tensors_at_exit {
                out.push(tensors_at_exit_outcome(
                    r,
                    target.clone(),
                    max.0,
                    Some(p.pid),
                ));
            }
            if let Some(max) = limits.max_growth {
                out.push(growth_outcome(r, target.clone(), Some(p.pid), max.0));
            }
            if let Some(max) = limits.max_ooms {
                out.push(oom_outcome(r, target.clone(), max, |pid, _| pid == p.pid));
            }
        }
    }
    (out, warnings)
}

/// The budgets of memory held at exit that are not leaks, with their limits.
fn held_budgets(l: &Limits) -> Vec<(&'static str, u64)> {
    [
        ("max_cached_at_exit", l.max_cached_at_exit),
        ("max_library_held", l.max_library_held),
        ("max_module_globals", l.max_module_globals),
    ]
    .into_iter()
    .filter_map(|(b, m)| m.map(|m| (b, m.0)))
    .collect()
}

/// A budget of memory held at exit that is not leaked (`held_budgets`), for
/// the run or one process (`pid`).
fn held_outcome(
    r: &Run,
    budget: &'static str,
    target: String,
    max: u64,
    pid: Option<u32>,
) -> Outcome {
    let a = &r.analysis;
    let (what, category, of): (&str, Category, fn(&ProcessReport) -> u64) = match budget {
        "max_cached_at_exit" => ("cached by an allocator", Category::AllocatorCache, |p| {
            p.at_exit.cached_bytes
        }),
        "max_library_held" => (
            "held by CUDA libraries (handles, workspaces, graph pools)",
            Category::Library,
            |p| p.at_exit.library_bytes,
        ),
        _ => ("in module globals", Category::Runtime, |p| {
            p.at_exit.runtime_bytes
        }),
    };
    let figure: u64 = a
        .processes
        .iter()
        .filter(|p| pid.is_none_or(|x| p.pid == x))
        .map(of)
        .sum();
    Outcome::judged(
        r,
        budget,
        target,
        Unit::Bytes,
        figure as f64,
        max as f64,
        format!(
            "{} ({figure} bytes) {what} at exit; budget {} ({max} bytes)",
            bytes(figure),
            bytes(max)
        ),
        a.sites_held_at_exit(category)
            .iter()
            .filter(|s| pid.is_none_or(|x| s.pids.contains(&x)))
            .take(SITES_SHOWN)
            .map(|s| {
                format!(
                    "{} in {} allocation(s) from {}",
                    bytes(s.held_at_exit_bytes),
                    s.held_at_exit_count,
                    s.label
                )
            })
            .collect(),
    )
}

/// Leaking sites, largest first (of one process when `pid` is given).
fn leak_lines(a: &Analysis, pid: Option<u32>) -> Vec<String> {
    a.leaking_sites()
        .iter()
        .filter(|s| pid.is_none_or(|p| s.pids.contains(&p)))
        .take(SITES_SHOWN)
        .map(|s| {
            format!(
                "{} in {} allocation(s) from {}",
                bytes(s.leaked_bytes),
                s.leaked_count,
                s.label
            )
        })
        .collect()
}

fn growth_outcome(r: &Run, target: String, pid: Option<u32>, max: u64) -> Outcome {
    let a = &r.analysis;
    // CUDA allocation sites and tensor sites, labelled apart.
    let mut growing: Vec<(&gmem_prof_analyzer::model::Growth, String)> = a
        .growth
        .iter()
        .map(|g| (g, a.site_label(g.site)))
        .chain(
            a.tensor_growth
                .iter()
                .map(|g| (g, format!("tensors at {}", a.tensor_site_label(g.site)))),
        )
        .filter(|(g, _)| pid.is_none_or(|p| g.pid == p))
        .collect();
    growing.sort_by_key(|g| std::cmp::Reverse(g.0.growth_bytes));
    let most = growing.iter().map(|g| g.0.growth_bytes).max().unwrap_or(0);
    let over: Vec<_> = growing.iter().filter(|g| g.0.growth_bytes > max).collect();
    let summary = if over.is_empty() {
        format!(
            "no site grew by more than {} after the warm-up (most: {})",
            bytes(max),
            bytes(most)
        )
    } else {
        format!(
            "{} site(s) grew by more than {} after the warm-up (most: {})",
            over.len(),
            bytes(max),
            bytes(most)
        )
    };
    Outcome::judged(
        r,
        "max_growth",
        target,
        Unit::Bytes,
        most as f64,
        max as f64,
        summary,
        growing
            .iter()
            .take(SITES_SHOWN)
            .map(|(g, label)| format!("+{} in pid {} from {label}", bytes(g.growth_bytes), g.pid))
            .collect(),
    )
}

/// The allocated budget: the highest tensor bytes of the framework views
/// `of_target` accepts.
fn allocated_outcome(
    r: &Run,
    target: String,
    max: u64,
    of_target: impl Fn(&gmem_prof_analyzer::model::FrameworkView) -> bool,
) -> Outcome {
    let a = &r.analysis;
    let views: Vec<_> = a.frameworks.iter().filter(|v| of_target(v)).collect();
    let top = views.iter().max_by_key(|v| v.allocated_peak);
    let figure = top.map_or(0, |v| v.allocated_peak);
    Outcome::judged(
        r,
        "max_allocated",
        target,
        Unit::Bytes,
        figure as f64,
        max as f64,
        match top {
            Some(v) => format!(
                "tensors peaked at {} ({figure} bytes) in pid {} on device {} at {:.3} s; budget {} ({max} bytes)",
                bytes(figure),
                v.pid,
                v.device,
                v.allocated_peak_time_ns as f64 / 1e9,
                bytes(max)
            ),
            None => format!(
                "no framework allocator's inside was seen (no tensors to count); budget {}",
                bytes(max)
            ),
        },
        top
            .map(|v| {
                v.peak_sites
                    .iter()
                    .take(SITES_SHOWN)
                    .map(|s| format!("{} allocated at the peak from {}", bytes(s.bytes), a.tensor_site_label(s.site)))
                    .collect()
            })
            .unwrap_or_default(),
    )
}

/// Tensors still allocated when processes ended (of one process when `pid`
/// is given).
fn tensors_at_exit_outcome(r: &Run, target: String, max: u64, pid: Option<u32>) -> Outcome {
    let a = &r.analysis;
    let views: Vec<_> = a
        .frameworks
        .iter()
        .filter(|v| pid.is_none_or(|p| v.pid == p))
        .collect();
    let figure: u64 = views.iter().map(|v| v.at_exit.live_tensor_bytes).sum();
    let count: u64 = views.iter().map(|v| v.at_exit.live_tensors).sum();
    let mut sites: Vec<_> = a
        .tensor_sites
        .iter()
        .filter(|s| s.live_at_exit_bytes > 0 && pid.is_none_or(|p| s.pids.contains(&p)))
        .collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.live_at_exit_bytes));
    Outcome::judged(
        r,
        "max_tensors_at_exit",
        target,
        Unit::Bytes,
        figure as f64,
        max as f64,
        format!(
            "{} ({figure} bytes) in {count} tensor(s) still allocated when the process ended; budget {} ({max} bytes)",
            bytes(figure),
            bytes(max)
        ),
        sites
            .iter()
            .take(SITES_SHOWN)
            .map(|s| format!("{} in {} tensor(s) from {}", bytes(s.live_at_exit_bytes), s.live_at_exit_count, s.label))
            .collect(),
    )
}

/// The OOMs budget of one target: errors that reached the program among
/// those of the (pid, device) `of_target` accepts: failed CUDA allocations
/// not recovered, and errors a framework's allocator raised (a failure a
/// framework turned into its own error counts once, as that error).
fn oom_outcome(r: &Run, target: String, max: u64, of_target: impl Fn(u32, u32) -> bool) -> Outcome {
    let a = &r.analysis;
    let driver: Vec<&Oom> = a
        .ooms
        .iter()
        .filter(|o| o.reached_program() && o.raised_as.is_none() && of_target(o.pid, o.device))
        .collect();
    let raised: Vec<_> = a
        .frameworks
        .iter()
        .flat_map(|v| v.ooms.iter())
        .filter(|o| of_target(o.pid, o.device))
        .collect();
    let n = driver.len() + raised.len();
    Outcome::judged(
        r,
        "max_ooms",
        target,
        Unit::Count,
        n as f64,
        max as f64,
        format!("{n} out-of-memory error(s) reached the program; budget {max}"),
        raised
            .iter()
            .map(|o| {
                format!(
                    "PyTorch OutOfMemoryError for {} from {}: refused by {}",
                    bytes(o.requested_bytes),
                    o.site
                        .map_or_else(|| "an unknown site".into(), |s| a.tensor_site_label(s)),
                    gmem_prof_reports::framework_oom_limit(o)
                )
            })
            .chain(driver.iter().map(|o| {
                format!(
                    "{} of {} from {}",
                    o.function,
                    bytes(o.requested_bytes),
                    a.site_label(o.site)
                )
            }))
            .take(SITES_SHOWN)
            .collect(),
    )
}
