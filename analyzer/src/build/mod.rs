//! Assembling the analysis model from a finished sweep, one finding per
//! file: the sites merged and ranked (`sites`), each device's report
//! (`devices`), the growing sites (`growth`), the failed allocations
//! (`ooms`), the framework allocators' views (`framework_view`) and their
//! part of each device's peak (`frameworks_at_peak`), each process's
//! report (`processes`), the sweep's warnings (`warnings`), and last the
//! remedies, which read the rest.

mod devices;
mod frameworks_at_peak;
mod growth;
mod ooms;
mod processes;
mod ranges;
mod sites;
mod steps;
mod warnings;

use crate::engine::Engine;
use crate::events::SiteIds;
use crate::model::*;
use crate::{framework_pools, framework_view, AnalyzeError, Options};

/// Assembles the model from the finished sweep; also returns the final id
/// of every raw site.
pub fn build(
    mut engine: Engine,
    mut summary: InputSummary,
    opts: &Options,
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    let Some(axis) = engine.axis.clone() else {
        summary.warnings.push(InputWarning::NoEvents);
        let analysis = Analysis {
            schema_version: SCHEMA_VERSION,
            input: summary,
            timeline: Timeline::default(),
            devices: Vec::new(),
            processes: processes::process_reports(&mut engine, None, &[], 0),
            sites: Vec::new(),
            growth: Vec::new(),
            ooms: Vec::new(),
            frameworks: Vec::new(),
            tensor_sites: Vec::new(),
            tensor_growth: Vec::new(),
            framework_pools: Vec::new(),
            remedies: Vec::new(),
            steps: Vec::new(),
            ranges: Vec::new(),
        };
        return Ok((analysis, SiteIds::default()));
    };
    let buckets = axis.buckets();
    let sites = sites::SiteTable::new(&engine, opts)?;
    let (mut devices, oom_views) = devices::device_reports(&mut engine, &axis, &sites);
    let framework_pools = framework_pools::pools(&engine, &axis, buckets, axis.start);
    let mut growth = growth::site_growth(&mut engine, &axis, &sites, &framework_pools);
    let mut ooms = ooms::oom_reports(&engine, &axis, &sites, &devices, oom_views);
    let framework_view::Views {
        mut frameworks,
        tensor_sites,
        tensor_growth,
        at_device_peak,
        site_ids: tensor_site_ids,
    } = framework_view::views(&mut engine, &axis, buckets, &opts.code, &mut ooms);
    frameworks_at_peak::take_apart(&engine, &sites, &mut devices, &at_device_peak);
    growth::said_once(&mut growth, &sites.list, &tensor_growth, &tensor_sites);
    let processes =
        processes::process_reports(&mut engine, Some(&axis), &sites.categories, buckets);
    summary.dropped_records = processes.iter().map(|p| p.dropped_records).sum();
    warnings::add_sweep_warnings(&mut summary, &engine);
    let steps = steps::process_steps(&engine, &axis, |raw| sites.id(raw), &tensor_site_ids);
    let ranges = ranges::process_ranges(&engine, &axis, |raw| sites.id(raw), &tensor_site_ids);
    let open_ranges = |pid: u32, t: u64| {
        ranges
            .iter()
            .find(|r| r.pid == pid)
            .map_or_else(Vec::new, |r| r.open_at(t))
    };
    for o in &mut ooms {
        o.step = steps::step_of(&steps, o.pid, o.time_ns);
        o.ranges = open_ranges(o.pid, o.time_ns);
    }
    for o in frameworks.iter_mut().flat_map(|v| v.ooms.iter_mut()) {
        o.step = steps::step_of(&steps, o.pid, o.time_ns);
        o.ranges = open_ranges(o.pid, o.time_ns);
    }
    let site_ids = SiteIds {
        sites: (0..engine.sites.len() as u32)
            .map(|raw| sites.id(raw))
            .collect(),
        tensors: tensor_site_ids,
    };
    let mut analysis = Analysis {
        schema_version: SCHEMA_VERSION,
        input: summary,
        timeline: Timeline {
            start_ns: axis.start,
            end_ns: engine.now.saturating_sub(axis.start),
            bucket_ns: axis.width,
            buckets,
        },
        devices,
        processes,
        sites: sites.list,
        growth,
        ooms,
        frameworks,
        tensor_sites,
        tensor_growth,
        framework_pools,
        remedies: Vec::new(),
        steps,
        ranges,
    };
    analysis.remedies = crate::remedies::remedies(&analysis);
    Ok((analysis, site_ids))
}
