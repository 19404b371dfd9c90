//! The steps of a program (its training iterations, marked by `Step`
//! records): per process, how high each step went and what it kept (bytes
//! live at its end minus at its start) by site, for its CUDA allocations
//! and, seen from the inside, a framework allocator's tensors; and the
//! steady state the first step is compared with.
//!
//! Step N is what happened since step N−1 ended, or, for step 1, since the
//! process started: step 1 holds the program's set-up (the model's
//! parameters) and whatever its first step made to keep (an optimizer's
//! state).

use serde::{Deserialize, Serialize};

/// Steps kept one by one per process; a longer run keeps its first ones
/// (`ProcessSteps::count` says how many there were; the steady state is
/// over all of them).
pub const STEPS_KEPT: usize = 1000;
/// Sites listed for each step, the largest change first.
pub const STEP_SITES: usize = 10;

vocabulary! {
    /// What marked a process's steps (`ProcessSteps::marked_by`).
    pub enum StepSource {
        /// PyTorch's optimizer stepping (its global post-step hook).
        Optimizer => "optimizer",
        /// The program itself (`gmem_prof.step()`, `gmem_prof_step`).
        Program => "program",
        /// Both, in one process.
        Both => "optimizer and program",
        /// The ends of an NVTX range's instances (`--step-range`; its name
        /// is `ProcessSteps::range`).
        Range => "NVTX range",
    }
}

/// One process's steps.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessSteps {
    pub pid: u32,
    pub marked_by: StepSource,
    /// The NVTX range whose instances are the steps (`--step-range`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// Steps the process finished.
    pub count: u64,
    /// Each step, the first `STEPS_KEPT`.
    pub steps: Vec<StepFigures>,
    /// The median step after the first (with at least 3 steps).
    pub steady: Option<SteadyStep>,
    /// The step the process's highest live bytes fell in (None: after its
    /// last step).
    pub peak_step: Option<u64>,
    /// What the steps after the warm-up kept on average (with at least 2
    /// such steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth: Option<StepGrowth>,
}

/// Memory kept step after step: the bytes the steps after the warm-up (the
/// first `WARM_UP` share of the steps, at least one) kept on average, in
/// the terms that speak for the process (its tensors when the trace saw
/// them, else its CUDA allocations), and the sites that kept them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepGrowth {
    /// The first step judged.
    pub from_step: u64,
    /// How many steps were judged (to the last).
    pub steps: u64,
    /// Bytes kept per step, on average over the judged steps.
    pub bytes_per_step: i64,
    /// The figures are the tensors' (site ids are tensor sites).
    pub tensors: bool,
    /// The sites that kept most per step on average, over the judged steps
    /// that are listed (`STEPS_KEPT`), the most first; only those that
    /// kept memory.
    pub sites: Vec<SiteKept>,
}

/// One step's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepFigures {
    pub number: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The process's highest live bytes (its CUDA allocations) in the step,
    /// and when it first reached them.
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// Live bytes at the step's end minus at its start.
    pub kept_bytes: i64,
    /// What each site kept, the largest change first (`STEP_SITES` at most).
    pub kept_by_site: Vec<SiteKept>,
    /// The same for a framework allocator's tensors (site ids are tensor
    /// sites), when the trace saw them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors: Option<StepTensors>,
}

/// A step's tensors: the allocated peak in it and what it kept.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepTensors {
    pub allocated_peak: u64,
    pub kept_bytes: i64,
    pub kept_by_site: Vec<SiteKept>,
    /// The tensors live at the step's allocated peak, by role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles_at_peak: Option<crate::RoleBytes>,
}

/// Bytes a site kept over a step (negative: it released more than it
/// allocated).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteKept {
    pub site: u32,
    pub bytes: i64,
}

/// The median of the steps after the first: what a step of the steady state
/// takes and keeps.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SteadyStep {
    /// The steps it is the median of: from this one to the last.
    pub from_step: u64,
    pub peak_bytes: u64,
    pub kept_bytes: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_peak: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors_kept_bytes: Option<i64>,
}
