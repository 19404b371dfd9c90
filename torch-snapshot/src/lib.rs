//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`) in and
//! out of gmem-prof.
//!
//! - [`pickle`]: the part of Python's pickle format snapshots use, read
//!   without running code and written as PyTorch's viewer reads it;
//! - [`mod@read`]: a snapshot turned into a trace, the records the collector
//!   writes for a PyTorch process (`gmem-prof report snapshot.pickle`);
//! - [`mod@write`]: a snapshot written from a trace's events
//!   (`gmem-prof export --format torch-snapshot`).

pub mod pickle;
pub mod read;
pub mod write;

pub use read::{to_trace, Converted, SnapshotError};
