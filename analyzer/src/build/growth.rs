//! Sites that keep growing: the growth rule (`crate::growth`) applied to
//! each site of the program in each process, over the judged part of that
//! process's run.

use std::collections::BTreeMap;

use crate::engine::Engine;
use crate::growth::{judged_buckets, steady_rise, GrowthCandidate};
use crate::holding::SiteClass;
use crate::model::*;
use crate::sites;
use crate::timeline::Axis;

use super::sites::SiteTable;

/// The growing CUDA allocation sites, largest growth first.
pub(super) fn site_growth(
    engine: &mut Engine,
    axis: &Axis,
    sites: &SiteTable,
    framework_pools: &[FrameworkPool],
) -> Vec<Growth> {
    let buckets = axis.buckets();
    let judged: Vec<Vec<usize>> = engine
        .procs
        .iter_mut()
        .map(|st| judged_buckets(st, axis, buckets))
        .collect();
    // A caching allocator's segments that keep growing are its cache
    // growing, unless the framework's own count says its arrays grew with
    // them: CuPy's pool, whose in-use readings the trace holds. Its chunks
    // then grow with the lines that needed them.
    let arrays_grew: Vec<bool> = engine
        .procs
        .iter()
        .zip(&judged)
        .map(|(st, judged)| {
            framework_pools
                .iter()
                .filter(|p| p.pid == st.pid() && p.framework == sites::CUPY_POOL)
                .any(|p| {
                    let in_use: Vec<u64> = p.in_use.iter().map(|x| x.last).collect();
                    steady_rise(&in_use, judged).is_some()
                })
        })
        .collect();
    let mut candidates: BTreeMap<(u32, u32), GrowthCandidate> = BTreeMap::new();
    for (i, s) in engine.sites.iter_mut().enumerate() {
        let cupy_chunks = sites.merged[sites.of_raw[i]].allocator == Some(sites::CUPY_POOL)
            && arrays_grew[s.proc as usize];
        let cache = sites.categories[i] == Category::AllocatorCache;
        if s.class != SiteClass::Call || (cache && !cupy_chunks) {
            continue;
        }
        candidates
            .entry((sites.id(i as u32), s.proc))
            .or_default()
            .add(&mut s.held, axis, buckets);
    }
    let mut growth = Vec::new();
    for ((site, proc), c) in candidates {
        let st = &engine.procs[proc as usize];
        if let Some((from, to)) = c.judge(&judged[proc as usize], st.allocations) {
            growth.push(Growth {
                site,
                pid: st.pid(),
                from_bytes: from,
                to_bytes: to,
                growth_bytes: to - from,
                curve: c.curve,
            });
        }
    }
    growth.sort_by(|a, b| {
        b.growth_bytes
            .cmp(&a.growth_bytes)
            .then(a.site.cmp(&b.site))
    });
    growth
}

/// One verdict per line: a CUDA site growing in a process where a tensor
/// site of the same label grows too is that tensor site seen from the
/// driver (PyTorch's cudaMallocAsync backend: each tensor is a CUDA
/// allocation), judged over the same part of the run: said once, as
/// tensors.
pub(super) fn said_once(
    growth: &mut Vec<Growth>,
    sites: &[Site],
    tensor_growth: &[Growth],
    tensor_sites: &[TensorSite],
) {
    growth.retain(|g| {
        let label = &sites[g.site as usize].label;
        !tensor_growth
            .iter()
            .any(|t| t.pid == g.pid && tensor_sites[t.site as usize].label == *label)
    });
}
