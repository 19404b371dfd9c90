//! The event rows handed to exporters agree with the analysis built in the
//! same sweep, on every real sample.

use std::collections::BTreeMap;

use gmem_prof_analyzer::events::EventKind;
use gmem_prof_analyzer::{analyze_files_with_events, Options};

use crate::util::repo;

#[test]
fn rows_agree_with_the_analysis_on_every_sample() {
    let dir = repo().join("traces/samples");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    names.sort();
    assert!(names.len() >= 10);
    for path in names {
        let mut rows = Vec::new();
        let (a, sites) =
            analyze_files_with_events(std::slice::from_ref(&path), &Options::default(), &mut |r| {
                rows.extend_from_slice(r)
            })
            .unwrap();
        let name = path.display();
        // Rows come in time order.
        assert!(
            rows.windows(2).all(|w| w[0].time_ns <= w[1].time_ns),
            "{name}"
        );
        // Every memory record is a row; kernels too.
        let memory = rows
            .iter()
            .filter(|r| matches!(r.what, EventKind::Alloc | EventKind::Free))
            .count() as u64;
        assert_eq!(memory, a.input.memory_events, "{name}");
        let kernels = rows.iter().filter(|r| r.what == EventKind::Kernel).count() as u64;
        assert_eq!(kernels, a.input.kernels, "{name}");
        assert_eq!(
            rows.iter().filter(|r| r.what == EventKind::Failed).count(),
            a.ooms.len(),
            "{name}"
        );
        // The highest device_live of the rows is the device's peak.
        let mut peak: BTreeMap<u32, u64> = BTreeMap::new();
        for r in &rows {
            let p = peak.entry(r.device).or_default();
            *p = (*p).max(r.device_live);
        }
        for d in &a.devices {
            assert_eq!(
                peak.get(&d.device).copied().unwrap_or(0),
                d.peak_bytes,
                "{name}"
            );
        }
        // Allocated bytes per site, from the rows, are the sites' totals.
        let mut total: BTreeMap<u32, u64> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.what == EventKind::Alloc) {
            let s = sites.get(r.site.unwrap()).unwrap();
            *total.entry(s).or_default() += r.bytes;
        }
        for s in &a.sites {
            assert_eq!(
                total.get(&s.id).copied().unwrap_or(0),
                s.total_bytes,
                "{name}: {}",
                s.label
            );
        }
    }
}
