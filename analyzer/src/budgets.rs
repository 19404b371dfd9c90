//! Budgets for CI (`gmem-prof check`): limits for the whole run, per device
//! and per process, applied to a finished analysis.
//!
//! Each budget applied to one target (the run, a device, a process) gives
//! an [`Outcome`]: the figure, the limit, whether it held, and the evidence
//! behind the figure (sites, pools, errors), which the reports crate puts in
//! words. Reading limits from flags or TOML, and exit codes, are the CLI's.
//!
//! ```toml
//! [run]                      # the whole run (every device for max_peak)
//! max_peak = "8GiB"
//! max_allocated = "6GiB"     # tensors inside PyTorch's caching allocator
//! max_leaked = 0
//! max_tensors_at_exit = 0
//! max_growth = "64MiB"
//! max_fragmentation = 0.3
//! max_ooms = 0
//! max_library_held = "1GiB"  # held at exit by CUDA libraries' handles
//! max_cached_at_exit = "8GiB" # held at exit by a caching allocator
//! max_module_globals = "64MiB"
//! max_pinned = "2GiB"        # pinned host memory live at once
//! max_step_growth = "1MiB"   # kept per training step after the warm-up
//! max_step_peak = "70GiB"    # the highest live bytes of any one step
//! max_role.activations = "8GiB" # tensors of a role at the allocated peak
//!
//! [device.1]                 # device 1 only: max_peak, max_pinned, max_allocated,
//! max_peak = "20GiB"         # max_role, max_fragmentation, max_ooms
//!
//! [process."train.py"]       # processes whose command line contains "train.py":
//! max_leaked = "16MiB"       # all but max_fragmentation and max_pinned
//!
//! [range."forward"]          # the NVTX range "forward" ("DOMAIN:NAME" for a
//! max_peak = "40GiB"         # domain's), in every process: the highest inside,
//! max_rise = "12GiB"         # the most one instance rose above its start,
//! max_kept = "0"             # what the median instance kept
//! ```

use gmem_prof_model::budgets::*;
use gmem_prof_model::{
    Analysis, Category, FrameworkOom, FrameworkView, Oom, ProcessReport, ProcessSteps, Role,
};

/// Applies every budget to the analysis of run `run`. Also returns
/// warnings (a budget for a device or process the run does not have). A run
/// with a process that was not profiled (or, when a budget is on tensors,
/// whose tensors no view shows) gets a first outcome, `Profiled`, that
/// fails unless `allow_unprofiled`.
#[expect(
    clippy::too_many_lines,
    reason = "one budget after another, each applied to its targets: a list read top to bottom"
)]
pub fn evaluate(
    run: &str,
    a: &Analysis,
    b: &Budgets,
    allow_unprofiled: bool,
) -> (Vec<Outcome>, Vec<UnmatchedBudget>) {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    let mut missing = a.not_profiled();
    if b.judges_tensors() {
        // Over every process, whichever the budgets name: a process whose
        // tensors are unseen would pass any of them at 0 B.
        missing.extend(a.tensors_unseen_parts());
    }
    if !missing.is_empty() {
        let n = missing.len() as f64;
        let mut o = Outcome::new(
            run,
            Budget::Profiled,
            Target::Run,
            Unit::Count,
            n,
            if allow_unprofiled { n } else { 0.0 },
            Evidence::NotProfiled {
                parts: missing,
                allowed: allow_unprofiled,
            },
        );
        o.passed = allow_unprofiled;
        out.push(o);
    }

    // Per device: peak, pinned, allocated, fragmentation, OOMs.
    for (d, _) in b.devices() {
        if !a.devices.iter().any(|x| x.device == d) {
            warnings.push(UnmatchedBudget::Device(d));
        }
    }
    for d in &a.devices {
        let own = b.devices().find(|&(n, _)| n == d.device).map(|(_, l)| l);
        let limits = match own {
            Some(l) => b.run.overridden_by(l),
            None => b.run.clone(),
        };
        let target = Target::Device(d.device);
        if let Some(max) = limits.max_peak {
            let sites = a
                .peak_parts(d)
                .into_iter()
                .take(SITES_SHOWN)
                .map(|p| Share {
                    bytes: p.bytes(),
                    count: p.count(),
                    label: a.peak_part_label(&p),
                    via: None,
                })
                .collect();
            out.push(Outcome::bytes(
                run,
                Budget::MaxPeak,
                target.clone(),
                d.device_memory_peak_bytes,
                max.0,
                Evidence::DevicePeak {
                    device: d.device,
                    time_ns: d.device_memory_peak_time_ns,
                    sites,
                },
            ));
        }
        if let Some(max) = limits.max_pinned {
            out.push(Outcome::bytes(
                run,
                Budget::MaxPinned,
                target.clone(),
                d.pinned_host_peak_bytes,
                max.0,
                Evidence::Pinned { device: d.device },
            ));
        }
        if let Some(max) = limits.max_allocated {
            out.push(allocated(run, a, target.clone(), max.0, |v| {
                v.device == d.device
            }));
        }
        out.extend(roles(run, a, &limits, &target, |v| v.device == d.device));
        if let Some(max) = limits.max_fragmentation {
            out.push(fragmentation(run, a, d, max));
        }
        // OOMs are budgeted per device only where the device has its own
        // budget; [run]'s counts the whole run (below).
        if let Some(max) = own.and_then(|l| l.max_ooms) {
            out.push(ooms(run, a, target, max, |_, dev| dev == d.device));
        }
    }

    // The whole run: leaks, held at exit, tensors, growth, OOMs.
    if let Some(max) = b.run.max_leaked {
        out.push(Outcome::bytes(
            run,
            Budget::MaxLeaked,
            Target::Run,
            a.leaked_bytes(),
            max.0,
            Evidence::Leaked {
                pid: None,
                sites: leaking(a, None),
            },
        ));
    }
    for (budget, max) in b.run.held() {
        out.push(held(run, a, budget, Target::Run, max, None));
    }
    if let Some(max) = b.run.max_tensors_at_exit {
        out.push(tensors_at_exit(run, a, Target::Run, max.0, None));
    }
    if let Some(max) = b.run.max_growth {
        out.push(growth(run, a, Target::Run, None, max.0));
    }
    out.extend(steps(run, a, &b.run, Target::Run, None));
    if let Some(max) = b.run.max_ooms {
        out.push(ooms(run, a, Target::Run, max, |_, _| true));
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
            warnings.push(UnmatchedBudget::Process(key.clone()));
        }
        for p in matching {
            let target = Target::Process {
                pid: p.pid,
                key: key.clone(),
            };
            if let Some(max) = limits.max_peak {
                out.push(Outcome::bytes(
                    run,
                    Budget::MaxPeak,
                    target.clone(),
                    p.peak_bytes,
                    max.0,
                    Evidence::ProcessPeak { pid: p.pid },
                ));
            }
            if let Some(max) = limits.max_leaked {
                out.push(Outcome::bytes(
                    run,
                    Budget::MaxLeaked,
                    target.clone(),
                    p.at_exit.leaked_bytes,
                    max.0,
                    Evidence::Leaked {
                        pid: Some(p.pid),
                        sites: leaking(a, Some(p.pid)),
                    },
                ));
            }
            if let Some(max) = limits.max_allocated {
                out.push(allocated(run, a, target.clone(), max.0, |v| v.pid == p.pid));
            }
            out.extend(roles(run, a, limits, &target, |v| v.pid == p.pid));
            for (budget, max) in limits.held() {
                out.push(held(run, a, budget, target.clone(), max, Some(p.pid)));
            }
            if let Some(max) = limits.max_tensors_at_exit {
                out.push(tensors_at_exit(run, a, target.clone(), max.0, Some(p.pid)));
            }
            if let Some(max) = limits.max_growth {
                out.push(growth(run, a, target.clone(), Some(p.pid), max.0));
            }
            out.extend(steps(run, a, limits, target.clone(), Some(p.pid)));
            if let Some(max) = limits.max_ooms {
                out.push(ooms(run, a, target.clone(), max, |pid, _| pid == p.pid));
            }
        }
    }
    for (name, limits) in &b.range {
        let judged = ranges(run, a, name, limits);
        if judged.is_empty() && *limits != RangeLimits::default() {
            warnings.push(UnmatchedBudget::Range(name.clone()));
        }
        out.extend(judged);
    }
    (out, warnings)
}

/// One range's budgets: each figure, the worst over the processes that
/// finished an instance of it (`name` is "NAME" in any domain, or
/// "DOMAIN:NAME").
fn ranges(run: &str, a: &Analysis, name: &str, limits: &RangeLimits) -> Vec<Outcome> {
    let (domain, bare) = match name.split_once(':') {
        Some((d, n)) => (Some(d), n),
        None => (None, name),
    };
    let found: Vec<(u32, &gmem_prof_model::RangeFigures)> = a
        .ranges
        .iter()
        .flat_map(|p| p.ranges.iter().map(move |r| (p.pid, r)))
        .filter(|(_, r)| r.name == bare && domain.is_none_or(|d| r.domain == d) && r.instances > 0)
        .collect();
    let speaking = |r: &gmem_prof_model::RangeFigures| {
        r.tensors
            .clone()
            .map_or((r.driver.clone(), false), |t| (t, true))
    };
    let mut out = Vec::new();
    let budgets = [
        (Budget::MaxPeak, limits.max_peak),
        (Budget::MaxRise, limits.max_rise),
        (Budget::MaxKept, limits.max_kept),
    ];
    for (budget, max) in budgets {
        let Some(max) = max else { continue };
        let figure = |r: &gmem_prof_model::RangeFigures| {
            let (m, _) = speaking(r);
            match budget {
                Budget::MaxPeak => m.peak_bytes,
                Budget::MaxRise => m.rise_bytes,
                _ => m.kept_median.max(0) as u64,
            }
        };
        let Some(&(pid, worst)) = found
            .iter()
            .max_by_key(|(pid, r)| (figure(r), std::cmp::Reverse(*pid)))
        else {
            continue;
        };
        let (m, tensors) = speaking(worst);
        let kept_most = m.kept_by_site.first().map(|k| Grew {
            bytes: k.bytes.max(0) as u64,
            pid,
            label: a.site_or_tensor_label(k.site, tensors),
        });
        out.push(Outcome::bytes(
            run,
            budget,
            Target::Range(name.to_string()),
            figure(worst),
            max.0,
            Evidence::Range {
                pid,
                instances: worst.instances,
                tensors,
                kept_most,
            },
        ));
    }
    out
}

/// A device's fragmentation: its worst pool's, whether a framework's pool
/// or a driver pool or VMM region (docs/design.md).
fn fragmentation(run: &str, a: &Analysis, d: &crate::model::DeviceReport, max: f64) -> Outcome {
    let target = Target::Device(d.device);
    let pool = a
        .frameworks
        .iter()
        .filter(|v| v.device == d.device)
        .filter_map(|v| v.worst_fragmentation.as_ref().map(|w| (v.pid, w)))
        .max_by(|x, y| x.1.at.fragmentation.total_cmp(&y.1.at.fragmentation));
    let region = d.fragmentation.worst.as_ref();
    match pool {
        Some((pid, w)) if region.is_none_or(|r| w.at.fragmentation > r.fragmentation) => {
            Outcome::new(
                run,
                Budget::MaxFragmentation,
                target,
                Unit::Fraction,
                w.at.fragmentation,
                max,
                Evidence::PoolFragmentation {
                    device: d.device,
                    pid,
                    pool: w.pool.clone(),
                    time_ns: w.at.time_ns,
                    free_bytes: w.at.free_bytes,
                    largest_free_bytes: w.at.largest_free_bytes,
                    free_in_idle_segments_bytes: w.at.free_in_idle_segments_bytes.unwrap_or(0),
                },
            )
        }
        _ => Outcome::new(
            run,
            Budget::MaxFragmentation,
            target,
            Unit::Fraction,
            region.map_or(0.0, |w| w.fragmentation),
            max,
            Evidence::RegionFragmentation {
                device: d.device,
                worst: region.map(|w| FragmentedAt {
                    time_ns: w.time_ns,
                    free_bytes: w.free_bytes,
                    largest_free_bytes: w.largest_free_bytes,
                }),
                blind_spots: d.fragmentation.blind_spots.clone(),
            },
        ),
    }
}

/// A budget of memory held at exit that is not leaked, for the run or one
/// process (`pid`).
fn held(
    run: &str,
    a: &Analysis,
    budget: Budget,
    target: Target,
    max: u64,
    pid: Option<u32>,
) -> Outcome {
    let (category, of): (Category, fn(&ProcessReport) -> u64) = match budget {
        Budget::MaxCachedAtExit => (Category::AllocatorCache, |p| p.at_exit.cached_bytes),
        Budget::MaxLibraryHeld => (Category::Library, |p| p.at_exit.library_bytes),
        _ => (Category::Runtime, |p| p.at_exit.runtime_bytes),
    };
    let figure: u64 = a
        .processes
        .iter()
        .filter(|p| pid.is_none_or(|x| p.pid == x))
        .map(of)
        .sum();
    let sites = a
        .sites_held_at_exit(category)
        .iter()
        .filter(|s| pid.is_none_or(|x| s.pids.contains(&x)))
        .take(SITES_SHOWN)
        .map(|s| Share {
            bytes: s.held_at_exit_bytes,
            count: s.held_at_exit_count,
            label: s.label.clone(),
            via: via(s),
        })
        .collect();
    Outcome::bytes(
        run,
        budget,
        target,
        figure,
        max,
        Evidence::HeldAtExit { category, sites },
    )
}

/// Leaking sites, largest first (of one process when `pid` is given).
fn leaking(a: &Analysis, pid: Option<u32>) -> Vec<Share> {
    a.leaking_sites()
        .iter()
        .filter(|s| pid.is_none_or(|p| s.pids.contains(&p)))
        .take(SITES_SHOWN)
        .map(|s| Share {
            bytes: s.leaked_bytes,
            count: s.leaked_count,
            label: s.label.clone(),
            via: via(s),
        })
        .collect()
}

fn via(s: &crate::model::Site) -> Option<String> {
    crate::model::library_via(&s.label, &s.via)
}

/// The largest growth of any site (CUDA allocations and tensors) of the
/// run or one process.
fn growth(run: &str, a: &Analysis, target: Target, pid: Option<u32>, max: u64) -> Outcome {
    let mut sites: Vec<Grew> = a
        .growth
        .iter()
        .map(|g| (g, a.site_label(g.site)))
        .chain(
            a.tensor_growth
                .iter()
                .map(|g| (g, format!("tensors at {}", a.tensor_site_label(g.site)))),
        )
        .filter(|(g, _)| pid.is_none_or(|p| g.pid == p))
        .map(|(g, label)| Grew {
            bytes: g.growth_bytes,
            pid: g.pid,
            label,
        })
        .collect();
    sites.sort_by_key(|g| std::cmp::Reverse(g.bytes));
    let most = sites.first().map_or(0, |g| g.bytes);
    let over = sites.iter().filter(|g| g.bytes > max).count();
    sites.truncate(SITES_SHOWN);
    Outcome::bytes(
        run,
        Budget::MaxGrowth,
        target,
        most,
        max,
        Evidence::Growth { over, sites },
    )
}

/// The step budgets of `limits` for the run or one process. With no step
/// in the target each fails, saying so: a budget that cannot be judged
/// must not pass.
fn steps(
    run: &str,
    a: &Analysis,
    limits: &Limits,
    target: Target,
    pid: Option<u32>,
) -> Vec<Outcome> {
    let of_target: Vec<&ProcessSteps> = a
        .steps
        .iter()
        .filter(|p| pid.is_none_or(|x| p.pid == x))
        .collect();
    let judged = |budget: Budget, figure: u64, max: u64, evidence: Evidence, any: bool| {
        let mut o = Outcome::bytes(run, budget, target.clone(), figure, max, evidence);
        o.passed &= any;
        o
    };
    let mut out = Vec::new();
    if let Some(max) = limits.max_step_growth {
        let worst = of_target
            .iter()
            .filter_map(|p| p.growth.as_ref().map(|g| (p.pid, g)))
            .max_by_key(|(pid, g)| (g.bytes_per_step, std::cmp::Reverse(*pid)));
        let figure = worst.map_or(0, |(_, g)| g.bytes_per_step.max(0) as u64);
        let sites = worst.map_or_else(Vec::new, |(pid, g)| {
            g.sites
                .iter()
                .map(|k| Grew {
                    bytes: k.bytes as u64,
                    pid,
                    label: if g.tensors {
                        format!("tensors at {}", a.tensor_site_label(k.site))
                    } else {
                        a.site_label(k.site)
                    },
                })
                .collect()
        });
        let evidence = Evidence::StepGrowth {
            worst: worst.map(|(pid, g)| StepsJudged {
                pid,
                from_step: g.from_step,
                to_step: g.from_step + g.steps - 1,
                tensors: g.tensors,
            }),
            sites,
        };
        out.push(judged(
            Budget::MaxStepGrowth,
            figure,
            max.0,
            evidence,
            worst.is_some(),
        ));
    }
    if let Some(max) = limits.max_step_peak {
        let worst = of_target
            .iter()
            .flat_map(|p| p.steps.iter().map(move |s| (p.pid, s)))
            .max_by_key(|(pid, s)| (s.peak_bytes, std::cmp::Reverse((*pid, s.number))));
        let evidence = Evidence::StepPeak {
            worst: worst.map(|(pid, s)| StepsJudged {
                pid,
                from_step: s.number,
                to_step: s.number,
                tensors: false,
            }),
        };
        let figure = worst.map_or(0, |(_, s)| s.peak_bytes);
        out.push(judged(
            Budget::MaxStepPeak,
            figure,
            max.0,
            evidence,
            worst.is_some(),
        ));
    }
    out
}

/// The highest tensor bytes of the framework views `of_target` accepts.
fn allocated(
    run: &str,
    a: &Analysis,
    target: Target,
    max: u64,
    of_target: impl Fn(&FrameworkView) -> bool,
) -> Outcome {
    let top = a
        .frameworks
        .iter()
        .filter(|v| of_target(v))
        .max_by_key(|v| v.allocated_peak);
    let sites = top.map_or_else(Vec::new, |v| {
        v.peak_sites
            .iter()
            .take(SITES_SHOWN)
            .map(|s| Share {
                bytes: s.bytes,
                count: 0,
                label: a.tensor_site_label(s.site),
                via: None,
            })
            .collect()
    });
    Outcome::bytes(
        run,
        Budget::MaxAllocated,
        target,
        top.map_or(0, |v| v.allocated_peak),
        max,
        Evidence::Allocated {
            peak: top.map(|v| AllocatedPeak {
                pid: v.pid,
                device: v.device,
                time_ns: v.allocated_peak_time_ns,
            }),
            sites,
        },
    )
}

/// `max_role` budgets: each role's bytes at the allocated peak of the
/// target's view that held most of it then, with the sites of that role
/// at that peak.
fn roles(
    run: &str,
    a: &Analysis,
    limits: &Limits,
    target: &Target,
    of_target: impl Fn(&FrameworkView) -> bool,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    for (key, max) in &limits.max_role {
        let Some(role) = Role::from_key(key) else {
            continue;
        };
        let top = a
            .frameworks
            .iter()
            .filter(|v| of_target(v))
            .filter_map(|v| Some((v, v.roles_at_peak.as_ref()?.roles.get(role))))
            .max_by_key(|&(v, b)| (b, v.allocated_peak));
        let sites = top.map_or_else(Vec::new, |(v, _)| {
            v.peak_sites
                .iter()
                .filter(|s| a.tensor_sites.get(s.site as usize).and_then(|t| t.role) == Some(role))
                .take(SITES_SHOWN)
                .map(|s| Share {
                    bytes: s.bytes,
                    count: s.count,
                    label: a.tensor_site_label(s.site),
                    via: None,
                })
                .collect()
        });
        out.push(Outcome::bytes(
            run,
            Budget::MaxRole(role),
            target.clone(),
            top.map_or(0, |(_, b)| b),
            max.0,
            Evidence::Role {
                role,
                peak: top.map(|(v, _)| AllocatedPeak {
                    pid: v.pid,
                    device: v.device,
                    time_ns: v.allocated_peak_time_ns,
                }),
                peak_bytes: top.map_or(0, |(v, _)| v.allocated_peak),
                sites,
            },
        ));
    }
    out
}

/// Tensors still allocated when processes ended (of one process when `pid`
/// is given).
fn tensors_at_exit(run: &str, a: &Analysis, target: Target, max: u64, pid: Option<u32>) -> Outcome {
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
    let sites = sites
        .iter()
        .take(SITES_SHOWN)
        .map(|s| Share {
            bytes: s.live_at_exit_bytes,
            count: s.live_at_exit_count,
            label: s.label.clone(),
            via: None,
        })
        .collect();
    Outcome::bytes(
        run,
        Budget::MaxTensorsAtExit,
        target,
        figure,
        max,
        Evidence::TensorsAtExit { count, sites },
    )
}

/// Out-of-memory errors that reached the program among those of the
/// (pid, device) `of_target` accepts: failed CUDA allocations not
/// recovered, and errors a framework's allocator raised (a failure a
/// framework turned into its own error counts once, as that error).
fn ooms(
    run: &str,
    a: &Analysis,
    target: Target,
    max: u64,
    of_target: impl Fn(u32, u32) -> bool,
) -> Outcome {
    let driver: Vec<&Oom> = a
        .ooms
        .iter()
        .filter(|o| o.reached_program() && o.raised_as.is_none() && of_target(o.pid, o.device))
        .collect();
    let raised: Vec<&FrameworkOom> = a
        .frameworks
        .iter()
        .flat_map(|v| v.ooms.iter())
        .filter(|o| of_target(o.pid, o.device))
        .collect();
    let n = driver.len() + raised.len();
    let errors = raised
        .iter()
        .map(|o| OomError::Framework {
            oom: (*o).clone(),
            site: o
                .site
                .map_or_else(|| "an unknown site".into(), |s| a.tensor_site_label(s)),
        })
        .chain(driver.iter().map(|o| OomError::Driver {
            function: o.function.clone(),
            requested_bytes: o.requested_bytes,
            site: a.site_label(o.site),
        }))
        .take(SITES_SHOWN)
        .collect();
    Outcome::new(
        run,
        Budget::MaxOoms,
        target,
        Unit::Count,
        n as f64,
        max as f64,
        Evidence::Ooms { errors },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn budgets_that_mean_nothing_say_why() {
        let with = |f: fn(&mut Budgets)| {
            let mut b = Budgets::default();
            f(&mut b);
            b.validate().unwrap_err()
        };
        assert!(with(|b| {
            b.device.insert(
                "0".into(),
                Limits {
                    max_leaked: Some(ByteSize(0)),
                    ..Default::default()
                },
            );
        })
        .contains("device budgets take"));
        assert!(with(|b| {
            b.process.insert(
                "x".into(),
                Limits {
                    max_fragmentation: Some(0.1),
                    ..Default::default()
                },
            );
        })
        .contains("per run or per device"));
        assert!(with(|b| b.run.max_fragmentation = Some(3.0)).contains("between 0 and 1"));
        assert!(with(|b| {
            b.device.insert("gpu0".into(), Limits::default());
        })
        .contains("named by number"));
    }

    #[test]
    fn names_are_the_budget_keys() {
        assert_eq!(Budget::MaxCachedAtExit.to_string(), "max_cached_at_exit");
        assert_eq!(Target::Device(1).to_string(), "device 1");
        assert_eq!(
            Target::Process {
                pid: 7,
                key: "train.py".into()
            }
            .to_string(),
            "process 7 (train.py)"
        );
    }
}
