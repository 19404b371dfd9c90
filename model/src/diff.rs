//! The comparison of two runs as data: per device, per site (matched by
//! symbolized stack), in totals, and the verdicts of `diff --fail-above`.
//! The analyzer computes it (`gmem_prof_analyzer::diff`).

use serde::Serialize;

use crate::FrameText;

/// Version of the diff's JSON form.
pub const DIFF_SCHEMA_VERSION: u32 = 2;

#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub schema: &'static str,
    pub schema_version: u32,
    pub base: RunTotals,
    pub new: RunTotals,
    /// Devices of either run, by number.
    pub devices: Vec<DeviceDiff>,
    /// Every site of either run, largest change of bytes live at the peak
    /// first.
    pub sites: Vec<SiteDiff>,
    /// Every tensor site of either run (`live_at_peak`: bytes at the
    /// allocated peak; `leaked_bytes`: live at exit), largest change first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tensor_sites: Vec<SiteDiff>,
    /// The figures `--fail-above` judged, with their verdicts (absent when
    /// nothing was judged).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<Verdict>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RunTotals {
    pub files: Vec<String>,
    pub duration_ns: u64,
    pub leaked_bytes: u64,
    pub cached_at_exit_bytes: u64,
    /// Bytes allocated over the whole run.
    pub total_allocated_bytes: u64,
    pub allocations: u64,
    pub ooms_reached_program: u64,
    pub growing_sites: u64,
    /// The highest tensor bytes any framework allocator held at once.
    pub allocated_peak_bytes: u64,
    /// Those tensors by role (docs/design.md, "Roles").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles_at_peak: Option<crate::RoleBytes>,
    pub growing_tensor_sites: u64,
    /// Held at exit by CUDA libraries (handles, workspaces, graph pools).
    pub library_held_bytes: u64,
    /// The worst pool's fragmentation over the run, driver pools and
    /// framework pools alike (0 when nothing was free in any pool).
    pub worst_fragmentation: f64,
    /// The largest growth of any site, CUDA allocations or tensors.
    pub max_growth_bytes: u64,
    /// Why the run shows less than it used, per process, as `report` and
    /// `check` say it (`Analysis::not_profiled`); absent when it was
    /// profiled from start to end.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_profiled: Vec<crate::UnprofiledPart>,
    /// The steady state of the process with the most steps (training
    /// steps are what two runs of one training compare best by).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<SteadySteps>,
}

/// A run's steady-state step: the medians of the steps after the first
/// (`crate::SteadyStep`) and what the steps after the warm-up kept on
/// average (`crate::StepGrowth`), of its process with the most steps.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SteadySteps {
    pub pid: u32,
    pub count: u64,
    pub peak_bytes: u64,
    pub kept_bytes: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated_peak: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensors_kept_bytes: Option<i64>,
    /// Bytes kept per step after the warm-up (tensors' where seen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_step: Option<i64>,
}

/// A figure of the diff `--fail-above` can judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Judged {
    /// Each device's peak (every device of either run).
    Peak,
    /// The highest tensor bytes a framework allocator held at once.
    Allocated,
    /// The program's leaks.
    Leaked,
    /// Held at exit by CUDA libraries.
    Library,
    /// Out-of-memory errors that reached the program.
    Ooms,
    /// The worst pool's fragmentation.
    Fragmentation,
    /// The largest growth of any site.
    Growth,
    /// The steady-state step's peak (the median step's, of the process with
    /// the most steps).
    StepPeak,
    /// The bytes kept per step after the warm-up.
    StepGrowth,
}

impl Judged {
    /// What `--fail-above` judges unless told otherwise.
    pub const DEFAULT: [Judged; 3] = [Judged::Peak, Judged::Leaked, Judged::Ooms];
    /// Every figure, with its name on the command line and in the JSON.
    pub const ALL: [(Judged, &'static str); 9] = [
        (Judged::Peak, "peak"),
        (Judged::Allocated, "allocated"),
        (Judged::Leaked, "leaked"),
        (Judged::Library, "library"),
        (Judged::Ooms, "ooms"),
        (Judged::Fragmentation, "fragmentation"),
        (Judged::Growth, "growth"),
        (Judged::StepPeak, "step_peak"),
        (Judged::StepGrowth, "step_growth"),
    ];
}

impl std::str::FromStr for Judged {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Judged::ALL
            .iter()
            .find(|(_, name)| *name == s.trim())
            .map(|(j, _)| *j)
            .ok_or_else(|| {
                let names: Vec<&str> = Judged::ALL.iter().map(|(_, n)| *n).collect();
                format!(
                    "{s:?} is not a figure diff judges (one of {})",
                    names.join(", ")
                )
            })
    }
}

/// One figure of the diff judged against a threshold.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub figure: Judged,
    /// "device 0 peak", "leaked at exit", …
    pub what: String,
    pub base: f64,
    pub new: f64,
    /// new / base − 1; None when the base is 0 and the new is not.
    pub relative_change: Option<f64>,
    /// Above the threshold: a rise of more than it, or any rise from 0.
    pub above: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct DeviceDiff {
    pub device: u32,
    pub name: String,
    /// `None` when the run did not use the device.
    pub base_peak_bytes: Option<u64>,
    pub new_peak_bytes: Option<u64>,
    pub delta_peak_bytes: i64,
    /// What explains the change: sites' bytes live at this device's peak in
    /// each run, largest change first (index into `Diff.sites`).
    pub peak_changes: Vec<PeakChange>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PeakChange {
    pub site: u32,
    pub base_bytes: u64,
    pub new_bytes: u64,
    pub delta_bytes: i64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SiteFigures {
    pub live_at_peak: u64,
    pub total_bytes: u64,
    pub count: u64,
    pub leaked_bytes: u64,
    pub max_live: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SiteDiff {
    pub id: u32,
    pub label: String,
    /// The site's `Category`, or "tensor" for a tensor site.
    pub category: String,
    /// Frames of the new run's site (the base's when only it has the site).
    pub frames: Vec<FrameText>,
    /// What its memory came through (`Site::via`; empty for tensors).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub via: Vec<String>,
    /// In which runs the site is.
    pub presence: Presence,
    pub base: SiteFigures,
    pub new: SiteFigures,
    pub delta_live_at_peak: i64,
    pub delta_total_bytes: i64,
    pub delta_leaked_bytes: i64,
}

vocabulary! {
    /// In which of the two runs a site is (`SiteDiff::presence`).
    pub enum Presence {
        Both => "both",
        /// Gone in the new run.
        BaseOnly => "base only",
        /// New in the new run.
        NewOnly => "new only",
    }
}

/// A change as a share of the base: `None` when the base is 0 and the new
/// figure is not (it appeared: above any threshold).
pub fn relative_change(base: u64, new: u64) -> Option<f64> {
    if base == 0 {
        return if new == 0 { Some(0.0) } else { None };
    }
    Some((new as f64 - base as f64) / base as f64)
}
