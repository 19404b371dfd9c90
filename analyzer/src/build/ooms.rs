//! Every failed allocation: the request, where it came from, what the
//! device held then and by which sites, and the device's own view right
//! after it.

use crate::engine::Engine;
use crate::model::*;
use crate::timeline::Axis;

use super::sites::SiteTable;

/// Sites of the live set kept with each failure.
const LIVE_SITES_KEPT: usize = 10;

/// The failed allocations in time order; `device_views` holds the
/// device's own view after each (`Engine::ooms`' order).
pub(super) fn oom_reports(
    engine: &Engine,
    axis: &Axis,
    sites: &SiteTable,
    devices: &[DeviceReport],
    device_views: Vec<Option<DeviceViewMoment>>,
) -> Vec<Oom> {
    let device_total = |d: u32| {
        devices
            .iter()
            .find(|x| x.device == d)
            .map_or(0, |x| x.total_memory)
    };
    engine
        .ooms
        .iter()
        .zip(device_views)
        .map(|(o, device_view)| {
            let st = &engine.procs[o.proc as usize];
            Oom {
                time_ns: o.time.saturating_sub(axis.start),
                pid: st.pid(),
                tid: o.tid,
                device: o.device,
                function: o.func.name().unwrap_or("?").to_string(),
                requested_bytes: o.bytes,
                result: o.result,
                site: sites.id(o.site),
                outcome: o.outcome,
                device_live_bytes: o.device_live,
                device_total_bytes: device_total(o.device),
                largest_free_extent: o.largest_free,
                live_by_site: sites
                    .by_site(&o.live_by_site)
                    .into_iter()
                    .take(LIVE_SITES_KEPT)
                    .collect(),
                raised_as: None,
                device_view,
                step: None,
                ranges: Vec::new(),
            }
        })
        .collect()
}
