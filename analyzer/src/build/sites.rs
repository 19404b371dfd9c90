//! The sites of the model: the sweep's raw sites (one stack of one process
//! on one device) merged by call path (`sites::merge_sites`), ranked by
//! bytes live at the peak (`sites::rank`), and numbered by rank.

use crate::engine::{Engine, KINDS};
use crate::model::*;
use crate::site_figures::site_bytes;
use crate::{events, sites, AnalyzeError, Options};

pub(super) struct SiteTable {
    pub merged: Vec<sites::MergedSite>,
    /// The merged site of each raw site.
    pub of_raw: Vec<usize>,
    /// The category of each raw site (its merged site's).
    pub categories: Vec<Category>,
    /// The final id (rank) of each merged site.
    id_of_merged: Vec<u32>,
    /// The model's sites, by final id.
    pub list: Vec<Site>,
}

impl SiteTable {
    pub fn new(engine: &Engine, opts: &Options) -> Result<SiteTable, AnalyzeError> {
        let defs: Vec<&sites::ProcDefs> = engine.procs.iter().map(|s| &s.defs).collect();
        let (merged, of_raw) = sites::merge_sites(&engine.sites, &defs, &opts.code);
        let categories: Vec<Category> = of_raw.iter().map(|&m| merged[m].category).collect();
        let leaked: Vec<bool> = categories.iter().map(|c| c.leaks()).collect();
        let cached: Vec<bool> = categories
            .iter()
            .map(|c| *c == Category::AllocatorCache)
            .collect();
        let ranked = sites::rank(&engine.sites, &of_raw, merged.len(), &leaked, &cached)
            .map_err(|e| AnalyzeError::Internal(e.to_string()))?;
        // Final site id = rank position.
        let mut id_of_merged = vec![0u32; merged.len()];
        for (rank, &m) in ranked.order.iter().enumerate() {
            id_of_merged[m] = rank as u32;
        }
        let column = |name: &str, rank: usize| ranked.columns[name][rank];
        let list = ranked
            .order
            .iter()
            .enumerate()
            .map(|(rank, &m)| {
                let ms = &merged[m];
                Site {
                    id: rank as u32,
                    label: ms.label.clone(),
                    category: ms.category,
                    allocator: ms.allocator.map(str::to_string),
                    via: ms.via.clone(),
                    frames: ms.frames.clone(),
                    truncated: ms.truncated,
                    pids: ms.pids.clone(),
                    kinds: kinds_of(ms.kinds),
                    count: column("count", rank),
                    total_bytes: column("total_bytes", rank),
                    live_at_peak: column("live_at_peak", rank),
                    max_live: column("max_live", rank),
                    leaked_bytes: column("leaked_bytes", rank),
                    leaked_count: column("leaked_count", rank),
                    cached_at_exit_bytes: column("cached_at_exit_bytes", rank),
                    held_at_exit_bytes: column("held_at_exit_bytes", rank),
                    held_at_exit_count: column("held_at_exit_count", rank),
                    temporaries: column("temporaries", rank),
                    failed: column("failed", rank),
                }
            })
            .collect();
        Ok(SiteTable {
            merged,
            of_raw,
            categories,
            id_of_merged,
            list,
        })
    }

    /// The final id of raw site `raw`.
    pub fn id(&self, raw: u32) -> u32 {
        self.id_of_merged[self.of_raw[raw as usize]]
    }

    /// (raw site, bytes, count) rows summed by final site, largest first.
    pub fn by_site(&self, rows: &[(u32, u64, u64)]) -> Vec<SiteBytes> {
        site_bytes(rows, |raw| self.id(raw))
    }
}

fn kinds_of(mask: u8) -> Vec<String> {
    (0..KINDS)
        .filter(|k| mask & (1 << k) != 0)
        .map(|k| events::kind_name(k as u8).to_string())
        .collect()
}
