//! Comparing two runs: per device, per site (matched by symbolized stack,
//! never by address), and in totals. Works on two finished analyses.
//!
//! A site's key is its category and its frames' function names (module and
//! offset for unresolved frames); line numbers are left out so that an edit
//! elsewhere in a file does not unmatch a site. A stack with Python frames
//! is keyed by those alone (function and file): the native frames under a
//! Python line change with the operators it runs. Tensor sites (inside a
//! framework's allocator) are compared the same way, apart from CUDA
//! allocation sites. Sites of one run that share a key are added together.

use std::collections::BTreeMap;

use gmem_prof_model::diff::*;
use gmem_prof_model::{Analysis, FrameText, Site, TensorSite};

/// Judges the `figures` of a diff against a threshold (a share of the
/// base, 0.05 for 5%): a figure is above it when it rose by more than that
/// share, or rose at all from 0. Figures that fell, or stayed, are not.
pub fn judge(d: &Diff, figures: &[Judged], threshold: f64) -> Vec<Verdict> {
    let mut out = Vec::new();
    let mut push = |figure: Judged, what: String, base: f64, new: f64| {
        let relative_change = if base == 0.0 {
            (new == 0.0).then_some(0.0)
        } else {
            Some((new - base) / base)
        };
        let above = relative_change.is_none_or(|r| r > threshold);
        out.push(Verdict {
            figure,
            what,
            base,
            new,
            relative_change,
            above,
        });
    };
    let (b, n) = (&d.base, &d.new);
    // One figure of whole counts (bytes, errors).
    let one = |what: &str, base: u64, new: u64| vec![(what.to_string(), base as f64, new as f64)];
    let mut figures = figures.to_vec();
    figures.sort();
    figures.dedup();
    for f in figures {
        let rows = match f {
            Judged::Peak => d
                .devices
                .iter()
                .map(|dev| {
                    (
                        format!("device {} peak", dev.device),
                        dev.base_peak_bytes.unwrap_or(0) as f64,
                        dev.new_peak_bytes.unwrap_or(0) as f64,
                    )
                })
                .collect(),
            Judged::Allocated => one(
                "allocated peak (tensors)",
                b.allocated_peak_bytes,
                n.allocated_peak_bytes,
            ),
            Judged::Leaked => one("leaked at exit", b.leaked_bytes, n.leaked_bytes),
            Judged::Library => one(
                "held by libraries at exit",
                b.library_held_bytes,
                n.library_held_bytes,
            ),
            Judged::Ooms => one(
                "out-of-memory errors",
                b.ooms_reached_program,
                n.ooms_reached_program,
            ),
            Judged::Fragmentation => vec![(
                "worst fragmentation".to_string(),
                b.worst_fragmentation,
                n.worst_fragmentation,
            )],
            Judged::Growth => one("largest growth", b.max_growth_bytes, n.max_growth_bytes),
            Judged::StepPeak => one(
                "steady-state step's peak",
                b.steps.as_ref().map_or(0, |s| s.peak_bytes),
                n.steps.as_ref().map_or(0, |s| s.peak_bytes),
            ),
            Judged::StepGrowth => {
                let per_step = |t: &RunTotals| {
                    t.steps
                        .as_ref()
                        .and_then(|s| s.bytes_per_step)
                        .map_or(0, |b| b.max(0) as u64)
                };
                one("kept per step after the warm-up", per_step(b), per_step(n))
            }
        };
        for (what, base, new) in rows {
            push(f, what, base, new);
        }
    }
    out
}

/// The stack-based identity of a site across runs.
pub fn site_key(s: &Site) -> String {
    frames_key(s.category.as_str(), &s.label, &s.frames)
}

fn frames_key(category: &str, label: &str, frames: &[FrameText]) -> String {
    let mut key = category.to_string();
    if frames.is_empty() {
        key.push('|');
        key.push_str(label);
    }
    if frames.iter().any(|f| f.python) {
        for f in frames.iter().filter(|f| f.python) {
            let file = f
                .location
                .rsplit_once(':')
                .map_or(f.location.as_str(), |(file, _)| file);
            key.push_str(&format!("|py:{}@{file}", f.function));
        }
        return key;
    }
    for f in frames {
        key.push('|');
        if f.resolved {
            key.push_str(&f.function);
        } else {
            key.push_str(&format!("{}+{:#x}", f.module, f.offset));
        }
    }
    key
}

fn delta(a: u64, b: u64) -> i64 {
    (i128::from(b) - i128::from(a)).clamp(i64::MIN.into(), i64::MAX.into()) as i64
}

/// The steady state of the run's process with the most steps.
fn steady_steps(a: &Analysis) -> Option<SteadySteps> {
    let p = a
        .steps
        .iter()
        .filter(|p| p.steady.is_some())
        .max_by_key(|p| (p.count, std::cmp::Reverse(p.pid)))?;
    let s = p.steady.as_ref()?;
    Some(SteadySteps {
        pid: p.pid,
        count: p.count,
        peak_bytes: s.peak_bytes,
        kept_bytes: s.kept_bytes,
        allocated_peak: s.allocated_peak,
        tensors_kept_bytes: s.tensors_kept_bytes,
        bytes_per_step: p.growth.as_ref().map(|g| g.bytes_per_step),
    })
}

fn totals(a: &Analysis) -> RunTotals {
    RunTotals {
        steps: steady_steps(a),
        files: a.input.files.clone(),
        duration_ns: a.timeline.end_ns,
        leaked_bytes: a.leaked_bytes(),
        cached_at_exit_bytes: a.cached_bytes(),
        total_allocated_bytes: a.sites.iter().map(|s| s.total_bytes).sum(),
        allocations: a.sites.iter().map(|s| s.count).sum(),
        ooms_reached_program: a.ooms_reached_program(),
        growing_sites: a.growth.len() as u64,
        allocated_peak_bytes: a
            .frameworks
            .iter()
            .map(|v| v.allocated_peak)
            .max()
            .unwrap_or(0),
        roles_at_peak: a
            .frameworks
            .iter()
            .max_by_key(|v| v.allocated_peak)
            .and_then(|v| v.roles_at_peak.as_ref())
            .map(|r| r.roles),
        growing_tensor_sites: a.tensor_growth.len() as u64,
        library_held_bytes: a.library_bytes(),
        worst_fragmentation: a
            .devices
            .iter()
            .filter_map(|d| d.fragmentation.worst.as_ref().map(|w| w.fragmentation))
            .chain(
                a.frameworks
                    .iter()
                    .filter_map(|v| v.worst_fragmentation.as_ref().map(|w| w.at.fragmentation)),
            )
            .fold(0.0, f64::max),
        max_growth_bytes: a
            .growth
            .iter()
            .chain(&a.tensor_growth)
            .map(|g| g.growth_bytes)
            .max()
            .unwrap_or(0),
        not_profiled: a.not_profiled(),
    }
}

/// A tensor site of the base run and of the new one, with their figures.
type TensorEntry<'a> = (
    Option<&'a TensorSite>,
    Option<&'a TensorSite>,
    SiteFigures,
    SiteFigures,
);

/// Tensor sites of both runs, matched by their Python frames (or their
/// label when they have none), largest change first.
fn tensor_site_diffs(base: &Analysis, new: &Analysis) -> Vec<SiteDiff> {
    let mut by_key: BTreeMap<String, TensorEntry> = BTreeMap::new();
    for (side, a) in [(0, base), (1, new)] {
        for s in &a.tensor_sites {
            let key = if s.frames.iter().any(|f| f.python) {
                frames_key("tensor", &s.label, &s.frames)
            } else {
                format!("tensor|{}", s.label)
            };
            let e = by_key.entry(key).or_default();
            let f = SiteFigures {
                live_at_peak: s.at_peak_bytes,
                total_bytes: s.total_bytes,
                count: s.count,
                leaked_bytes: s.live_at_exit_bytes,
                max_live: s.max_live,
            };
            let (site, figures) = if side == 0 {
                (&mut e.0, &mut e.2)
            } else {
                (&mut e.1, &mut e.3)
            };
            site.get_or_insert(s);
            figures.live_at_peak += f.live_at_peak;
            figures.total_bytes += f.total_bytes;
            figures.count += f.count;
            figures.leaked_bytes += f.leaked_bytes;
            figures.max_live = figures.max_live.max(f.max_live);
        }
    }
    let mut out: Vec<(String, SiteDiff)> = by_key
        .into_iter()
        .map(|(k, (b, n, bf, nf))| {
            let shown = n.or(b).expect("an entry has a site");
            let d = SiteDiff {
                id: 0,
                label: shown.label.clone(),
                category: "tensor".into(),
                frames: shown.frames.clone(),
                via: Vec::new(),
                presence: match (b, n) {
                    (Some(_), Some(_)) => Presence::Both,
                    (Some(_), None) => Presence::BaseOnly,
                    _ => Presence::NewOnly,
                },
                delta_live_at_peak: delta(bf.live_at_peak, nf.live_at_peak),
                delta_total_bytes: delta(bf.total_bytes, nf.total_bytes),
                delta_leaked_bytes: delta(bf.leaked_bytes, nf.leaked_bytes),
                base: bf,
                new: nf,
            };
            (k, d)
        })
        .collect();
    out.sort_by(|(ka, a), (kb, b)| {
        b.delta_live_at_peak
            .unsigned_abs()
            .cmp(&a.delta_live_at_peak.unsigned_abs())
            .then(
                b.delta_total_bytes
                    .unsigned_abs()
                    .cmp(&a.delta_total_bytes.unsigned_abs()),
            )
            .then(ka.cmp(kb))
    });
    out.into_iter()
        .enumerate()
        .map(|(i, (_, mut d))| {
            d.id = i as u32;
            d
        })
        .collect()
}

fn add(f: &mut SiteFigures, s: &Site) {
    f.live_at_peak += s.live_at_peak;
    f.total_bytes += s.total_bytes;
    f.count += s.count;
    f.leaked_bytes += s.leaked_bytes;
    f.max_live = f.max_live.max(s.max_live);
}

/// Compares `new` against `base`.
pub fn diff(base: &Analysis, new: &Analysis) -> Diff {
    let matched = match_sites(base, new);
    let devices = device_diffs(base, new, &matched);
    Diff {
        schema: "gmem-prof-diff",
        schema_version: DIFF_SCHEMA_VERSION,
        base: totals(base),
        new: totals(new),
        devices,
        sites: matched.sites.into_iter().map(|(_, s)| s).collect(),
        tensor_sites: tensor_site_diffs(base, new),
        verdicts: Vec::new(),
    }
}

/// The sites of both runs matched by stack: each diff site with its key,
/// largest change first (its place is its id), and each run's sites'
/// keys by site id.
struct MatchedSites {
    sites: Vec<(String, SiteDiff)>,
    key_of_base: Vec<String>,
    key_of_new: Vec<String>,
}

fn match_sites(base: &Analysis, new: &Analysis) -> MatchedSites {
    // key → (first site of base, first site of new, figures of each).
    struct Entry<'a> {
        base_site: Option<&'a Site>,
        new_site: Option<&'a Site>,
        base: SiteFigures,
        new: SiteFigures,
    }
    let mut by_key: BTreeMap<String, Entry> = BTreeMap::new();
    let mut key_of_base = Vec::with_capacity(base.sites.len());
    let mut key_of_new = Vec::with_capacity(new.sites.len());
    for (side, a) in [(0, base), (1, new)] {
        for s in &a.sites {
            let k = site_key(s);
            let e = by_key.entry(k.clone()).or_insert(Entry {
                base_site: None,
                new_site: None,
                base: SiteFigures::default(),
                new: SiteFigures::default(),
            });
            if side == 0 {
                e.base_site.get_or_insert(s);
                add(&mut e.base, s);
                key_of_base.push(k);
            } else {
                e.new_site.get_or_insert(s);
                add(&mut e.new, s);
                key_of_new.push(k);
            }
        }
    }
    let mut sites: Vec<(String, SiteDiff)> = by_key
        .into_iter()
        .map(|(k, e)| {
            let shown = e.new_site.or(e.base_site).expect("an entry has a site");
            let presence = match (e.base_site, e.new_site) {
                (Some(_), Some(_)) => Presence::Both,
                (Some(_), None) => Presence::BaseOnly,
                _ => Presence::NewOnly,
            };
            let d = SiteDiff {
                id: 0,
                label: shown.label.clone(),
                category: shown.category.to_string(),
                frames: shown.frames.clone(),
                via: shown.via.clone(),
                presence,
                delta_live_at_peak: delta(e.base.live_at_peak, e.new.live_at_peak),
                delta_total_bytes: delta(e.base.total_bytes, e.new.total_bytes),
                delta_leaked_bytes: delta(e.base.leaked_bytes, e.new.leaked_bytes),
                base: e.base,
                new: e.new,
            };
            (k, d)
        })
        .collect();
    sites.sort_by(|(ka, a), (kb, b)| {
        b.delta_live_at_peak
            .unsigned_abs()
            .cmp(&a.delta_live_at_peak.unsigned_abs())
            .then(
                b.delta_leaked_bytes
                    .unsigned_abs()
                    .cmp(&a.delta_leaked_bytes.unsigned_abs()),
            )
            .then(
                b.delta_total_bytes
                    .unsigned_abs()
                    .cmp(&a.delta_total_bytes.unsigned_abs()),
            )
            .then(ka.cmp(kb))
    });
    for (i, (_, s)) in sites.iter_mut().enumerate() {
        s.id = i as u32;
    }
    MatchedSites {
        sites,
        key_of_base,
        key_of_new,
    }
}

/// Each device of either run: its two peaks, and the diff sites whose
/// bytes live at its peak changed, largest change first.
fn device_diffs(base: &Analysis, new: &Analysis, matched: &MatchedSites) -> Vec<DeviceDiff> {
    let id_of_key: BTreeMap<&str, u32> = matched
        .sites
        .iter()
        .map(|(k, s)| (k.as_str(), s.id))
        .collect();
    let mut numbers: Vec<u32> = base
        .devices
        .iter()
        .chain(&new.devices)
        .map(|d| d.device)
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
        .into_iter()
        .map(|n| {
            let b = base.devices.iter().find(|d| d.device == n);
            let w = new.devices.iter().find(|d| d.device == n);
            // Per diff site: bytes live at this device's peak in each run.
            let mut at_peak: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
            for (side, d, keys) in [(0, b, &matched.key_of_base), (1, w, &matched.key_of_new)] {
                for sb in d.map(|d| d.peak_sites.as_slice()).unwrap_or_default() {
                    let Some(k) = keys.get(sb.site as usize) else {
                        continue;
                    };
                    let id = id_of_key[k.as_str()];
                    let e = at_peak.entry(id).or_default();
                    if side == 0 {
                        e.0 += sb.bytes;
                    } else {
                        e.1 += sb.bytes;
                    }
                }
            }
            let mut peak_changes: Vec<PeakChange> = at_peak
                .into_iter()
                .map(|(site, (bb, nb))| PeakChange {
                    site,
                    base_bytes: bb,
                    new_bytes: nb,
                    delta_bytes: delta(bb, nb),
                })
                .filter(|c| c.delta_bytes != 0)
                .collect();
            peak_changes.sort_by(|x, y| {
                y.delta_bytes
                    .unsigned_abs()
                    .cmp(&x.delta_bytes.unsigned_abs())
                    .then(x.site.cmp(&y.site))
            });
            DeviceDiff {
                device: n,
                name: w.or(b).map(|d| d.name.clone()).unwrap_or_default(),
                base_peak_bytes: b.map(|d| d.peak_bytes),
                new_peak_bytes: w.map(|d| d.peak_bytes),
                delta_peak_bytes: delta(
                    b.map_or(0, |d| d.peak_bytes),
                    w.map_or(0, |d| d.peak_bytes),
                ),
                peak_changes,
            }
        })
        .collect()
}
