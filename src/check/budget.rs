//! Budgets: from flags, or from a TOML file with budgets for the whole run,
//! per device and per process.
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
//! max_leaked = "16MiB"       # all but max_fragmentation
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

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
    /// Memory held at exit in its other three kinds (DESIGN.md): cached by
    /// an allocator, held by CUDA libraries, module globals.
    pub max_cached_at_exit: Option<ByteSize>,
    pub max_library_held: Option<ByteSize>,
    pub max_module_globals: Option<ByteSize>,
    /// Pinned host memory live at once (host RAM, not the device's).
    pub max_pinned: Option<ByteSize>,
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
        }
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
}

impl Budgets {
    pub fn from_file(path: &Path) -> Result<Budgets> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the budget file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("bad budget file {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Budgets> {
        let b: Budgets = toml::from_str(text)?;
        b.validate()?;
        Ok(b)
    }

    /// Device budgets by device number.
    pub fn devices(&self) -> impl Iterator<Item = (u32, &Limits)> {
        self.device
            .iter()
            .filter_map(|(d, l)| d.parse().ok().map(|d| (d, l)))
    }

    pub fn is_empty(&self) -> bool {
        self.run.is_empty()
            && self.device.values().all(Limits::is_empty)
            && self.process.values().all(Limits::is_empty)
    }

    pub fn validate(&self) -> Result<()> {
        let frac = |f: Option<f64>, what: &str| -> Result<()> {
            match f {
                Some(f) if !(0.0..=1.0).contains(&f) => {
                    bail!("{what}: max_fragmentation takes a value between 0 and 1, not {f}")
                }
                _ => Ok(()),
            }
        };
        frac(self.run.max_fragmentation, "run")?;
        for (d, l) in &self.device {
            if d.parse::<u32>().is_err() {
                bail!("device.{d}: devices are named by number, as in [device.0]");
            }
            frac(l.max_fragmentation, &format!("device.{d}"))?;
            if l.max_leaked.is_some()
                || l.max_growth.is_some()
                || l.max_tensors_at_exit.is_some()
                || l.max_cached_at_exit.is_some()
                || l.max_library_held.is_some()
                || l.max_module_globals.is_some()
            {
                bail!("device.{d}: device budgets take max_peak, max_pinned, max_allocated, max_fragmentation and max_ooms (memory held at exit and growth are budgeted per run or per process)");
            }
        }
        for (p, l) in &self.process {
            if p.is_empty() {
                bail!("process.\"\": give a piece of the command line to match");
            }
            if l.max_fragmentation.is_some() {
                bail!("process.{p:?}: fragmentation is budgeted per run or per device, not per process");
            }
            if l.max_pinned.is_some() {
                bail!("process.{p:?}: pinned host memory is budgeted per run or per device, not per process");
            }
        }
        Ok(())
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let p = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(p("0"), Ok(0));
        assert_eq!(p("64MiB"), Ok(64 << 20));
        assert_eq!(p("8GiB"), Ok(8 << 30));
        assert_eq!(p("1.5GB"), Ok(1_500_000_000));
        assert_eq!(p(" 2 kib "), Ok(2048));
        assert!(p("lots").is_err());
        assert!(p("5 parsecs").is_err());
        assert!(p("-1").is_err());
    }

    #[test]
    fn budget_file() {
        let b = Budgets::parse(
            r#"
            [run]
            max_peak = "8GiB"
            max_leaked = 0
            [device.1]
            max_peak = 1024
            max_ooms = 2
            [process."train.py"]
            max_leaked = "16MiB"
            "#,
        )
        .unwrap();
        assert_eq!(b.run.max_peak, Some(ByteSize(8 << 30)));
        assert_eq!(b.run.max_leaked, Some(ByteSize(0)));
        assert_eq!(b.device["1"].max_peak, Some(ByteSize(1024)));
        assert_eq!(b.device["1"].max_ooms, Some(2));
        assert_eq!(b.process["train.py"].max_leaked, Some(ByteSize(16 << 20)));
    }

    #[test]
    fn bad_budget_files_say_why() {
        let e = |t: &str| format!("{:#}", Budgets::parse(t).unwrap_err());
        assert!(e("[run]\nmax_peek = 1").contains("max_peek"));
        assert!(e("[run]\nmax_peak = \"8 GiBs\"").contains("unknown unit"));
        assert!(e("[device.0]\nmax_leaked = 0").contains("device budgets take"));
        assert!(e("[process.\"x\"]\nmax_fragmentation = 0.1").contains("per run or per device"));
        assert!(e("[run]\nmax_fragmentation = 3").contains("between 0 and 1"));
        assert!(e("[device.gpu0]\nmax_peak = 1").contains("device"));
    }
}
