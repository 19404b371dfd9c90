//! Budgets for CI (`gmem-prof check`) as data: the limits read from flags
//! or a TOML file, and the outcome of each budget applied to a target (the
//! figure, the limit, whether it held, and the evidence behind it, which
//! the reports crate puts in words). The analyzer applies them
//! (`gmem_prof_analyzer::budgets::evaluate`).
//! Reading limits from flags or TOML, and exit codes, are the CLI's.
//!
//!
//! ```toml
//! [run]                      # the whole run (every device for max_peak)
//! max_peak = "8GiB"
//! max_allocated = "6GiB"     # tensors inside PyTorch's caching allocator
//! max_leaked = 0
//! max_tensors_at_exit = 0
//! max_growth = "64MiB"
//! max_fragmentation = 0.3
//! max_ooms = 0
//! max_library_held = "1GiB"  # held at exit by CUDA libraries' handles
//! max_cached_at_exit = "8GiB" # held at exit by a caching allocator
//! max_module_globals = "64MiB"
//! max_pinned = "2GiB"        # pinned host memory live at once
//!
//! [device.1]                 # device 1 only: max_peak, max_pinned,
//! max_peak = "20GiB"         # max_allocated, max_fragmentation, max_ooms
//!
//! [process."train.py"]       # processes whose command line contains "train.py":
//! max_leaked = "16MiB"       # all but max_fragmentation and max_pinned
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Category, FrameworkOom, Role};

/// Sites (or errors) kept as evidence under one budget.
pub const SITES_SHOWN: usize = 5;

/// A byte count: "0", "512", "64MiB", "8GiB", "1.5GB" (binary units
/// KiB/MiB/GiB/TiB, decimal KB/MB/GB/TB); in TOML also a plain integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl std::str::FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a size (examples: 0, 512MiB, 8GiB, 1.5GB)"))?;
        let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "kib" | "k" => 1024.0,
            "mib" | "m" => 1024.0 * 1024.0,
            "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
            "tib" | "t" => 1024f64.powi(4),
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "tb" => 1e12,
            u => {
                return Err(format!(
                    "unknown unit {u:?} in {s:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
                ))
            }
        };
        let v = value * scale;
        if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
            return Err(format!("{s:?} is out of range"));
        }
        Ok(ByteSize(v.round() as u64))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A set of limits; any may be absent.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_peak: Option<ByteSize>,
    pub max_allocated: Option<ByteSize>,
    pub max_leaked: Option<ByteSize>,
    pub max_tensors_at_exit: Option<ByteSize>,
    pub max_growth: Option<ByteSize>,
    pub max_fragmentation: Option<f64>,
    pub max_ooms: Option<u64>,
    /// Memory held at exit in its other three kinds (docs/design.md): cached by
    /// an allocator, held by CUDA libraries, module globals.
    pub max_cached_at_exit: Option<ByteSize>,
    pub max_library_held: Option<ByteSize>,
    pub max_module_globals: Option<ByteSize>,
    /// Pinned host memory live at once (host RAM, not the device's).
    pub max_pinned: Option<ByteSize>,
    /// Bytes a process's steps may keep on average after the warm-up
    /// (`ProcessSteps::growth`).
    pub max_step_growth: Option<ByteSize>,
    /// The highest live bytes any one step of a process may reach.
    pub max_step_peak: Option<ByteSize>,
    /// Bytes of tensors of a role (its key: "activations",
    /// "optimizer_state", …; `Role::from_key`) at the allocated peak.
    #[serde(default)]
    pub max_role: BTreeMap<String, ByteSize>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// `other`'s limits where it has them, ours elsewhere.
    pub fn overridden_by(&self, other: &Limits) -> Limits {
        Limits {
            max_peak: other.max_peak.or(self.max_peak),
            max_allocated: other.max_allocated.or(self.max_allocated),
            max_leaked: other.max_leaked.or(self.max_leaked),
            max_tensors_at_exit: other.max_tensors_at_exit.or(self.max_tensors_at_exit),
            max_growth: other.max_growth.or(self.max_growth),
            max_fragmentation: other.max_fragmentation.or(self.max_fragmentation),
            max_ooms: other.max_ooms.or(self.max_ooms),
            max_cached_at_exit: other.max_cached_at_exit.or(self.max_cached_at_exit),
            max_library_held: other.max_library_held.or(self.max_library_held),
            max_module_globals: other.max_module_globals.or(self.max_module_globals),
            max_pinned: other.max_pinned.or(self.max_pinned),
            max_step_growth: other.max_step_growth.or(self.max_step_growth),
            max_step_peak: other.max_step_peak.or(self.max_step_peak),
            max_role: self
                .max_role
                .iter()
                .chain(&other.max_role)
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        }
    }

    /// The budgets of memory held at exit that are not leaks, with their
    /// limits.
    pub fn held(&self) -> Vec<(Budget, u64)> {
        [
            (Budget::MaxCachedAtExit, self.max_cached_at_exit),
            (Budget::MaxLibraryHeld, self.max_library_held),
            (Budget::MaxModuleGlobals, self.max_module_globals),
        ]
        .into_iter()
        .filter_map(|(b, m)| m.map(|m| (b, m.0)))
        .collect()
    }
}

/// Every budget of a check.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    #[serde(default)]
    pub run: Limits,
    /// By device number (TOML keys are text; `validate` checks they are
    /// numbers).
    #[serde(default)]
    pub device: BTreeMap<String, Limits>,
    /// By a piece of the command line (or executable name).
    #[serde(default)]
    pub process: BTreeMap<String, Limits>,
    /// By NVTX range name ("forward", or "DOMAIN:NAME"), in every process.
    #[serde(default)]
    pub range: BTreeMap<String, RangeLimits>,
}

/// The limits of one NVTX range, over its instances in every process, in
/// the terms that speak for a process (its tensors when the trace saw them,
/// else its CUDA allocations).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RangeLimits {
    /// The highest live bytes inside any instance.
    pub max_peak: Option<ByteSize>,
    /// The most an instance may rise above what was live when it began.
    pub max_rise: Option<ByteSize>,
    /// What the median instance may keep (live at its end minus at its
    /// start).
    pub max_kept: Option<ByteSize>,
}

impl Budgets {
    /// Device budgets by device number.
    pub fn devices(&self) -> impl Iterator<Item = (u32, &Limits)> {
        self.device
            .iter()
            .filter_map(|(d, l)| d.parse().ok().map(|d| (d, l)))
    }

    /// Whether any budget is on tensors (inside a framework's allocator).
    pub fn judges_tensors(&self) -> bool {
        std::iter::once(&self.run)
            .chain(self.device.values())
            .chain(self.process.values())
            .any(|l| {
                l.max_allocated.is_some()
                    || l.max_tensors_at_exit.is_some()
                    || !l.max_role.is_empty()
            })
    }

    pub fn is_empty(&self) -> bool {
        self.run.is_empty()
            && self.device.values().all(Limits::is_empty)
            && self.process.values().all(Limits::is_empty)
            && self.range.values().all(|l| *l == RangeLimits::default())
    }

    /// Budgets that cannot mean anything, said in words.
    pub fn validate(&self) -> Result<(), String> {
        let frac = |f: Option<f64>, what: &str| match f {
            Some(f) if !(0.0..=1.0).contains(&f) => Err(format!(
                "{what}: max_fragmentation takes a value between 0 and 1, not {f}"
            )),
            _ => Ok(()),
        };
        frac(self.run.max_fragmentation, "run")?;
        let tables = std::iter::once(("run".to_string(), &self.run))
            .chain(self.device.iter().map(|(d, l)| (format!("device.{d}"), l)))
            .chain(
                self.process
                    .iter()
                    .map(|(p, l)| (format!("process.{p:?}"), l)),
            );
        for (what, l) in tables {
            for key in l.max_role.keys() {
                if Role::from_key(key).is_none() {
                    return Err(format!(
                        "{what}: max_role.{key}: no such role; the roles are {}",
                        Role::ALL.map(Role::key).join(", ")
                    ));
                }
            }
        }
        for (d, l) in &self.device {
            if d.parse::<u32>().is_err() {
                return Err(format!(
                    "device.{d}: devices are named by number, as in [device.0]"
                ));
            }
            frac(l.max_fragmentation, &format!("device.{d}"))?;
            if l.max_leaked.is_some()
                || l.max_growth.is_some()
                || l.max_tensors_at_exit.is_some()
                || l.max_cached_at_exit.is_some()
                || l.max_library_held.is_some()
                || l.max_module_globals.is_some()
                || l.max_step_growth.is_some()
                || l.max_step_peak.is_some()
            {
                return Err(format!("device.{d}: device budgets take max_peak, max_pinned, max_allocated, max_fragmentation and max_ooms (memory held at exit, growth and steps are budgeted per run or per process)"));
            }
        }
        for (p, l) in &self.process {
            if p.is_empty() {
                return Err("process.\"\": give a piece of the command line to match".into());
            }
            if l.max_fragmentation.is_some() {
                return Err(format!(
                    "process.{p:?}: fragmentation is budgeted per run or per device, not per process"
                ));
            }
            if l.max_pinned.is_some() {
                return Err(format!("process.{p:?}: pinned host memory is budgeted per run or per device, not per process"));
            }
        }
        Ok(())
    }
}

/// What a budget limits; written as its TOML key ("max_peak",
/// "max_role.activations"), or "profiled" for the outcome that says
/// whether every process was profiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    Profiled,
    MaxPeak,
    MaxPinned,
    MaxAllocated,
    MaxFragmentation,
    MaxOoms,
    MaxLeaked,
    MaxCachedAtExit,
    MaxLibraryHeld,
    MaxModuleGlobals,
    MaxTensorsAtExit,
    MaxGrowth,
    MaxStepGrowth,
    MaxStepPeak,
    MaxRise,
    MaxKept,
    /// Tensors of one role at the allocated peak.
    MaxRole(Role),
}

impl Serialize for Budget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Budget::Profiled => "profiled",
            Budget::MaxPeak => "max_peak",
            Budget::MaxPinned => "max_pinned",
            Budget::MaxAllocated => "max_allocated",
            Budget::MaxFragmentation => "max_fragmentation",
            Budget::MaxOoms => "max_ooms",
            Budget::MaxLeaked => "max_leaked",
            Budget::MaxCachedAtExit => "max_cached_at_exit",
            Budget::MaxLibraryHeld => "max_library_held",
            Budget::MaxModuleGlobals => "max_module_globals",
            Budget::MaxTensorsAtExit => "max_tensors_at_exit",
            Budget::MaxGrowth => "max_growth",
            Budget::MaxStepGrowth => "max_step_growth",
            Budget::MaxStepPeak => "max_step_peak",
            Budget::MaxRise => "max_rise",
            Budget::MaxKept => "max_kept",
            Budget::MaxRole(role) => return write!(f, "max_role.{}", role.key()),
        })
    }
}

/// What a budget was applied to; written "run", "device 0",
/// "process 1234 (train.py)".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Run,
    Device(u32),
    /// A process matched by a piece of its command line (`key`).
    Process {
        pid: u32,
        key: String,
    },
    /// An NVTX range, by name, in every process.
    Range(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Run => f.write_str("run"),
            Target::Device(d) => write!(f, "device {d}"),
            Target::Process { pid, key } => write!(f, "process {pid} ({key})"),
            Target::Range(name) => write!(f, "range {name:?}"),
        }
    }
}

impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A budget in the file that judged nothing: its target is not in the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnmatchedBudget {
    /// `[device.N]` for a device the trace does not have.
    Device(u32),
    /// `[process."KEY"]` where no process's command line contains KEY.
    Process(String),
    /// `[range."NAME"]` where no process finished a range of that name.
    Range(String),
}

/// What a figure counts.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    Bytes,
    Fraction,
    Count,
}

/// A figure or limit: written to JSON as an integer when it is one (bytes,
/// counts), as a fraction otherwise.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Figure(pub f64);

impl Serialize for Figure {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.fract() == 0.0 && (0.0..9.0e15).contains(&v) {
            s.serialize_u64(v as u64)
        } else {
            s.serialize_f64(v)
        }
    }
}

/// One budget applied to one target of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The run (trace) it was checked on.
    pub run: String,
    pub budget: Budget,
    pub target: Target,
    pub unit: Unit,
    pub figure: Figure,
    pub limit: Figure,
    pub passed: bool,
    /// What the figure is made of, for the words the reports put on it.
    #[serde(skip)]
    pub evidence: Evidence,
}

/// A site's share of a figure: bytes in `count` allocations (or tensors).
#[derive(Clone, Debug, PartialEq)]
pub struct Share {
    pub bytes: u64,
    pub count: u64,
    pub label: String,
    /// The library that made the call, when the label (a line of the
    /// program) does not say: "cublasCreate_v2 (libcublas.so.13)".
    pub via: Option<String>,
}

/// A site that grew, with the process it grew in.
#[derive(Clone, Debug, PartialEq)]
pub struct Grew {
    pub bytes: u64,
    pub pid: u32,
    /// CUDA allocation sites by their label; tensor sites as
    /// "tensors at LABEL".
    pub label: String,
}

/// An out-of-memory error that reached the program.
#[derive(Clone, Debug)]
pub enum OomError {
    /// Raised by a framework's allocator (`torch.OutOfMemoryError`), with
    /// the tensor site that asked.
    Framework { oom: FrameworkOom, site: String },
    /// A failed CUDA allocation the program was told about.
    Driver {
        function: String,
        requested_bytes: u64,
        site: String,
    },
}

/// The evidence behind an outcome's figure, by budget.
#[derive(Clone, Debug, Default)]
pub enum Evidence {
    #[default]
    None,
    /// Parts of the run missing from the trace, and whether that was
    /// allowed (`--allow-unprofiled`).
    NotProfiled {
        parts: Vec<crate::UnprofiledPart>,
        allowed: bool,
    },
    /// A device's memory peak and the largest sites live at it.
    DevicePeak {
        device: u32,
        time_ns: u64,
        sites: Vec<Share>,
    },
    ProcessPeak {
        pid: u32,
    },
    Pinned {
        device: u32,
    },
    /// The highest tensor bytes among the framework views of the target
    /// (`None`: no view), with the tensor sites at that peak.
    Allocated {
        peak: Option<AllocatedPeak>,
        sites: Vec<Share>,
    },
    /// The most tensors of `role` at the allocated peak of a framework
    /// view of the target (`None`: no view), that peak's bytes, and the
    /// sites of that role at it.
    Role {
        role: Role,
        peak: Option<AllocatedPeak>,
        peak_bytes: u64,
        sites: Vec<Share>,
    },
    /// The device's worst fragmentation was in a framework's pool.
    PoolFragmentation {
        device: u32,
        pid: u32,
        pool: String,
        time_ns: u64,
        free_bytes: u64,
        largest_free_bytes: u64,
        /// Of `free_bytes`, those in segments that held no tensor (cache).
        free_in_idle_segments_bytes: u64,
    },
    /// The device's worst fragmentation in its driver pools and VMM regions
    /// (`worst`: none had free space), with what the figure cannot see.
    RegionFragmentation {
        device: u32,
        worst: Option<FragmentedAt>,
        blind_spots: Vec<crate::BlindSpot>,
    },
    Leaked {
        pid: Option<u32>,
        sites: Vec<Share>,
    },
    /// Held at exit in one of the kinds that are not leaks.
    HeldAtExit {
        category: Category,
        sites: Vec<Share>,
    },
    TensorsAtExit {
        count: u64,
        sites: Vec<Share>,
    },
    /// Every growing site, largest first; `over` of them above the limit.
    Growth {
        over: usize,
        sites: Vec<Grew>,
    },
    Ooms {
        errors: Vec<OomError>,
    },
    /// The process whose steps kept most per step after the warm-up (None:
    /// no process of the target marked steps), with the steps judged and
    /// the sites that kept most.
    StepGrowth {
        worst: Option<StepsJudged>,
        sites: Vec<Grew>,
    },
    /// The step that went highest (None: no process of the target marked
    /// steps).
    StepPeak {
        worst: Option<StepsJudged>,
    },
    /// The process whose instances of the range gave the figure (the
    /// worst), how many it finished, whether the figure is of tensors, and
    /// the site that kept most over them.
    Range {
        pid: u32,
        instances: u64,
        tensors: bool,
        kept_most: Option<Grew>,
    },
}

/// Which steps of which process a step budget's figure comes from: steps
/// `from_step` to `to_step` of `pid` (one step for a peak).
#[derive(Clone, Debug, PartialEq)]
pub struct StepsJudged {
    pub pid: u32,
    pub from_step: u64,
    pub to_step: u64,
    /// The figure is of tensors (else of CUDA allocations).
    pub tensors: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AllocatedPeak {
    pub pid: u32,
    pub device: u32,
    pub time_ns: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FragmentedAt {
    pub time_ns: u64,
    pub free_bytes: u64,
    pub largest_free_bytes: u64,
}

impl Outcome {
    pub fn new(
        run: &str,
        budget: Budget,
        target: Target,
        unit: Unit,
        figure: f64,
        limit: f64,
        evidence: Evidence,
    ) -> Outcome {
        Outcome {
            run: run.to_string(),
            budget,
            target,
            unit,
            figure: Figure(figure),
            limit: Figure(limit),
            passed: figure <= limit,
            evidence,
        }
    }

    pub fn bytes(
        run: &str,
        budget: Budget,
        target: Target,
        figure: u64,
        limit: u64,
        e: Evidence,
    ) -> Outcome {
        Self::new(
            run,
            budget,
            target,
            Unit::Bytes,
            figure as f64,
            limit as f64,
            e,
        )
    }
}
