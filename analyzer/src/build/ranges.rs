//! Each process's ranges (`ranges.rs` in the sweep) into the model: names
//! from the process's strings, raw sites to the report's ids, the names
//! ordered by what they take at their highest.

use gmem_prof_model::{MarkAt, ProcessRanges, RangeFigures, RangeInstance, RangeMemory};

use crate::build::steps::kept_by_site;
use crate::engine::Engine;
use crate::ranges::Summed;
use crate::timeline::Axis;

fn memory(s: &Summed, rel: impl Fn(u64) -> u64, id: impl Fn(u32) -> Option<u32>) -> RangeMemory {
    let mut samples = s.kept_samples.clone();
    samples.sort_unstable();
    let raw: Vec<(u32, i64)> = s.kept_by_site.iter().map(|(&k, &v)| (k, v)).collect();
    RangeMemory {
        peak_bytes: s.peak,
        peak_time_ns: rel(s.peak_time),
        rise_bytes: s.rise,
        kept_bytes: s.kept,
        kept_median: samples.get(samples.len() / 2).copied().unwrap_or(0),
        kept_by_site: kept_by_site(&raw, &id),
        rise_by_site: kept_by_site(&s.rise_by_site, &id),
    }
}

/// The ranges of every process that made any; `site_id` and `tensor_ids`
/// give the report's id of a raw site and (per process) raw tensor site.
pub fn process_ranges(
    engine: &Engine,
    axis: &Axis,
    site_id: impl Fn(u32) -> u32,
    tensor_ids: &[Vec<u32>],
) -> Vec<ProcessRanges> {
    let rel = |t: u64| t.saturating_sub(axis.start);
    let mut out = Vec::new();
    for (proc, st) in engine.procs.iter().enumerate() {
        let Some(r) = st.ranges.as_deref() else {
            continue;
        };
        let text = |id: u32| st.defs.strings.get(&id).cloned().unwrap_or_default();
        let tensor_id = |raw: u32| tensor_ids.get(proc)?.get(raw as usize).copied();
        let mut ranges: Vec<(u32, RangeFigures)> = r
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let figures = RangeFigures {
                    name: text(n.name),
                    domain: if n.domain == 0 {
                        String::new()
                    } else {
                        text(n.domain)
                    },
                    instances: n.instances,
                    total_ns: n.total_ns,
                    driver: memory(&n.driver, rel, |raw| Some(site_id(raw))),
                    tensors: n.tensors.as_ref().map(|s| memory(s, rel, tensor_id)),
                };
                (i as u32, figures)
            })
            .collect();
        // What a range takes at its highest, in the terms that speak for
        // the process (its tensors when seen), the most first.
        let rise = |f: &RangeFigures| f.tensors.as_ref().unwrap_or(&f.driver).rise_bytes;
        ranges.sort_by(|(_, a), (_, b)| {
            rise(b)
                .cmp(&rise(a))
                .then_with(|| (&a.domain, &a.name).cmp(&(&b.domain, &b.name)))
        });
        // Instances point at names by their place in the sorted list.
        let mut place = vec![0u32; ranges.len()];
        for (at, (i, _)) in ranges.iter().enumerate() {
            place[*i as usize] = at as u32;
        }
        let instances = r
            .instances
            .iter()
            .map(|i| RangeInstance {
                range: i.name.map(|n| place[n as usize]),
                tid: i.tid,
                depth: i.depth,
                start_ns: rel(i.start),
                end_ns: i.end.map(rel),
                kept_bytes: i.kept,
            })
            .collect();
        let marks = r
            .marks
            .iter()
            .map(|&(t, tid, domain, name)| MarkAt {
                time_ns: rel(t),
                tid,
                name: text(name),
                domain: if domain == 0 {
                    String::new()
                } else {
                    text(domain)
                },
            })
            .collect();
        out.push(ProcessRanges {
            pid: st.pid(),
            ranges: ranges.into_iter().map(|(_, f)| f).collect(),
            instances,
            unfinished: r.open.len() as u64,
            other_instances: r.other_instances,
            marks,
            mark_count: r.mark_count,
        });
    }
    out
}
