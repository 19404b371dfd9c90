//! gmem-prof's analysis as plain data: what the analyzer fills from a trace
//! and what reports, exports and the CLI read. No polars, no rayon, no wire
//! records: a renderer that depends on this crate alone cannot reach into
//! the analysis' machinery, and builds in seconds.
//!
//! - the analysis of one run ([`Analysis`], at the crate's root);
//! - [`budgets`]: the limits of `gmem-prof check` and each budget's outcome;
//! - [`diff`]: the comparison of two runs and its verdicts;
//! - what its tensors are (`Role`): parameters, gradients, optimizer
//!   state, activations, …, at each view's peak and in each step;
//! - the program's steps (training iterations), each one's peak and what it
//!   kept by site (`ProcessSteps`); its NVTX ranges, each name's peak,
//!   rise and kept bytes (`ProcessRanges`);
//! - why figures may be short or uncertain, as facts (`InputWarning`,
//!   `BlindSpot`, `NotProfiled`, `ProcessMessage`), worded by the reports;
//! - the definitions the analysis and its readers share (the growth rule's
//!   thresholds, below).
//!
//! Times are nanoseconds since the first event of the trace; everything is
//! ordered deterministically (by value, then by id), never by hash-map order.

#[macro_use]
mod vocabulary;

mod analysis;
pub mod budgets;
pub mod diff;
mod ranges;
mod reasons;
mod roles;
mod steps;

pub use analysis::*;
pub use ranges::{
    MarkAt, ProcessRanges, RangeFigures, RangeInstance, RangeMemory, MARKS_KEPT, RANGES_KEPT,
    RANGE_NAMES,
};
pub use reasons::{
    BlindSpot, InputWarning, MessageLevel, NotProfiled, ProcessMessage, UnprofiledPart,
};
pub use roles::{Role, RoleBytes, RoleCurve, RolesAtPeak};
pub use steps::{
    ProcessSteps, SiteKept, SteadyStep, StepFigures, StepGrowth, StepSource, StepTensors,
    STEPS_KEPT, STEP_SITES,
};

/// Sites whose live bytes rise by at least this much after the warm-up are
/// reported as growing.
pub const GROWTH_MIN_BYTES: u64 = 1 << 20;
/// The warm-up: growth is not judged over this share of each process's
/// allocations (the analyzer's `growth::judge_growth`).
pub const WARM_UP: f64 = 0.2;
/// The end of the judged window, as a share of the allocations (what comes
/// after, such as an interpreter's shutdown, is not judged).
pub const JUDGED_UNTIL: f64 = 0.95;
