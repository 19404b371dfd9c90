//! Figures by final site, from the sweep's raw sites: bytes held at a
//! moment (a peak, a failed request) and the bands of a timeline. For CUDA
//! allocation sites (`build`) and tensor sites (`framework_view`) alike.

use crate::model::{Point, SiteBytes, SiteCurve};

/// Sites shown as bands of a timeline: the largest at its peak.
const TIMELINE_SITES: usize = 8;

/// The live bytes over time (at each bucket's end) of the largest sites at
/// a peak (`peak`, largest first), each summed over its raw sites among
/// `raws` (`final_id` of a raw site; `curve` its live curve): the bands of
/// a timeline, for CUDA allocation sites and tensor sites alike.
pub fn site_curves(
    peak: &[SiteBytes],
    raws: &[u32],
    final_id: impl Fn(u32) -> u32,
    mut curve: impl FnMut(u32) -> Vec<Point>,
    buckets: usize,
) -> Vec<SiteCurve> {
    peak.iter()
        .take(TIMELINE_SITES)
        .map(|top| {
            let mut live = vec![0u64; buckets];
            for &raw in raws.iter().filter(|&&r| final_id(r) == top.site) {
                for (sum, p) in live.iter_mut().zip(curve(raw)) {
                    *sum += p.last;
                }
            }
            SiteCurve {
                site: top.site,
                live,
            }
        })
        .collect()
}

/// (raw site, bytes, count) rows summed by final site id, largest first.
pub fn site_bytes(rows: &[(u32, u64, u64)], id: impl Fn(u32) -> u32) -> Vec<SiteBytes> {
    let mut acc: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
    for &(raw, b, c) in rows {
        let e = acc.entry(id(raw)).or_default();
        e.0 += b;
        e.1 += c;
    }
    let mut v: Vec<SiteBytes> = acc
        .into_iter()
        .map(|(site, (bytes, count))| SiteBytes { site, bytes, count })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
    v
}
