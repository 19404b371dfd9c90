//! gmem-prof's renderers: the analysis model (`gmem_prof_model`)
//! to a terminal summary, a self-contained HTML page with SVG charts, SVG
//! files and JSON.
//!
//! # Design constraints
//! - Render into any `Write`; the same analysis gives byte-identical output
//!   (no clock, no absolute paths of this machine, no hash-map order), so
//!   golden files can pin it.
//! - The HTML fetches nothing: inline CSS and SVG, `<details>` instead of
//!   script.
//! - Every string that comes from a trace (kernel names, symbols, paths,
//!   command lines) is escaped; charts carry only our own words.
//! - Reads only the model: never wire records, never polars.

mod blocks;
mod chart;
mod charts;
pub mod check;
mod device_view;
pub mod diff;
mod flame;
pub mod format;
mod framework;
mod html;
mod outline;
mod pools;
mod ranges;
pub mod reasons;
pub mod remedies;
mod roles;
pub mod runs;
mod steps;
mod text;
mod timeline;
mod words;

use std::io::{self, Write};

use gmem_prof_model::Analysis;

pub use chart::Chart;
pub use outline::{html, summary};
pub use words::oom_limit as framework_oom_limit;

/// The SVG charts of the report, each with the file name it is written as.
pub fn charts(a: &Analysis) -> Vec<Chart> {
    charts::all(a)
}

/// The analysis as pretty JSON (schema: `schema_version` in the model).
pub fn json(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, a).map_err(io::Error::other)?;
    w.write_all(b"\n")
}
