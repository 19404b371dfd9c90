//! gmem-prof's exports: the trace's events in formats other tools read.
//!
//! - `perfetto`: Chrome trace-event JSON for Perfetto's UI: counter tracks
//!   of live and reserved bytes per device, kernel slices, OOM instants.
//! - `parquet`: one row per event, for DuckDB, pandas, Spark, polars, in
//!   one file or in a folder of runs (hive layout).
//! - `torch_snapshot`: a PyTorch memory snapshot pickle of one process,
//!   for PyTorch's own viewers (it gathers the process's events, then
//!   writes the history and the state at the end).
//!
//! The first two stream: the analyzer hands events out in batches while it sweeps
//! (`gmem_prof_analyzer::analyze_files_with_events`), so memory stays
//! bounded by the live set, not by the trace.

pub mod parquet;
pub mod perfetto;
pub mod torch_snapshot;

pub use parquet::{ParquetEvents, PartitionedEvents};
pub use perfetto::PerfettoWriter;
pub use torch_snapshot::TorchSnapshotEvents;
