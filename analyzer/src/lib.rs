//! gmem-prof's analyzer: turns traces into the analysis model (the
//! `gmem-prof-model` crate, named `model` inside this crate).
//!
//! # Design constraints
//! - Streaming: chunks are decoded in parallel batches (rayon) and events are
//!   applied in time order by one sweep (`engine`); memory is bounded by what
//!   is live, by sites and by processes, not by the trace's length.
//! - Deterministic: the same trace gives the same model whatever the thread
//!   count; nothing is ordered by hash-map order.
//! - Never panics on a bad trace: damage becomes warnings in
//!   `Analysis.input.warnings`; only a file that is not a trace at all is an
//!   error.
//! - The definitions (live set, reserved, fragmentation, leaks, growth,
//!   temporaries, OOM outcomes) are those of docs/design.md and are documented on
//!   the model's fields.
//!
//! # Example
//! ```no_run
//! let analysis = gmem_prof_analyzer::analyze_files(
//!     &["trace.bin".into()],
//!     &gmem_prof_analyzer::Options::default(),
//! ).unwrap();
//! for d in &analysis.devices {
//!     println!("device {}: peak {} bytes", d.device, d.peak_bytes);
//! }
//! ```

pub mod budgets;
mod build;
mod device_view;
pub mod diff;
mod engine;
pub mod events;
mod fast_map;
mod framework;
mod framework_pools;
mod framework_view;
mod growth;
mod holding;
mod input;
mod pipeline;
mod ranges;
mod regions;
mod remedies;
mod roles;
mod site_figures;
mod sites;
mod steps;
pub mod synth;
mod timeline;

use std::path::PathBuf;

use gmem_prof_traces::TraceError;

use events::{EventRow, SiteIds};
use gmem_prof_model::*;
// The analyzer's files name the model `crate::model`.
use gmem_prof_model as model;
use pipeline::{run, with_files};

pub use engine::LIBRARY_WORKSPACE_NS;
pub use regions::Extents;
pub use sites::CodeRules;

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("cannot read {file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: {source}")]
    Trace { file: String, source: TraceError },
    #[error("internal analysis error: {0}")]
    Internal(String),
}

/// How to analyze.
#[derive(Default)]
pub struct Options<'a> {
    /// Called now and then with (bytes of trace done, bytes in all).
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
    /// Which frames are the program's own code (site labels name the
    /// innermost one).
    pub code: CodeRules,
    /// The NVTX range whose instances are the steps ("NAME", or
    /// "DOMAIN:NAME"), in place of `Step` records.
    pub step_range: Option<String>,
}

/// Analyzes trace files (or per-process files of one run) together.
pub fn analyze_files(paths: &[PathBuf], opts: &Options) -> Result<Analysis, AnalyzeError> {
    with_files(paths, |datas, names, done| {
        run(datas, names, opts, None, done).map(|(a, _)| a)
    })
}

/// Like `analyze_files`, and hands every event to `sink` in time order, in
/// batches, as the sweep applies them (for exporters).
pub fn analyze_files_with_events(
    paths: &[PathBuf],
    opts: &Options,
    sink: &mut dyn FnMut(&[EventRow]),
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    with_files(paths, |datas, names, done| {
        run(datas, names, opts, Some(sink), done)
    })
}

/// Like `analyze_files`, and also returns the final id of every raw site,
/// to map the rows of a later `analyze_files_with_events` pass (no rows are
/// built in this one).
pub fn analyze_files_with_site_ids(
    paths: &[PathBuf],
    opts: &Options,
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    with_files(paths, |datas, names, done| {
        run(datas, names, opts, None, done)
    })
}

/// Analyzes traces held in memory; `names` label them in messages.
pub fn analyze(
    datas: &[&[u8]],
    names: &[String],
    opts: &Options,
) -> Result<Analysis, AnalyzeError> {
    run(datas, names, opts, None, &|| {}).map(|(a, _)| a)
}

/// For benchmarks: frames and decodes every chunk of a trace into events,
/// as the analysis does, without the sweep. Returns the number of events.
#[doc(hidden)]
pub fn decode_only(data: &[u8]) -> Result<u64, AnalyzeError> {
    let (chunks, _, _) = input::frame(&[data], &["trace".to_string()])?;
    let refs: Vec<&input::ChunkRef> = chunks.iter().collect();
    Ok(refs
        .chunks(input::BATCH)
        .map(|b| {
            input::decode_batch(b)
                .into_iter()
                .map(|d| {
                    let n = d.events.len() as u64;
                    input::recycle(d.events);
                    n
                })
                .sum::<u64>()
        })
        .sum())
}
