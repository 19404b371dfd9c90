//! The part of a run `record` records (its window), as the CLI hands it to
//! the collector in `env::WINDOW` and as the trace's `Window` records name
//! it. One spelling for both sides.

use std::fmt;

/// When the recorded window opens and closes, in each process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowPlan {
    /// Steps `first` to `last` of the process (its own numbering, 1, 2, …):
    /// opens as step `first - 1` ends (at the start for step 1), closes
    /// as step `last` ends.
    Steps { first: u64, last: u64 },
    /// The first instance of an NVTX range: opens as it begins, closes as
    /// it ends. `domain` None: any domain.
    Range {
        domain: Option<String>,
        name: String,
    },
    /// From `delay_ms` after the collector started in the process, for
    /// `duration_ms` (None: to the end).
    Time {
        delay_ms: u64,
        duration_ms: Option<u64>,
    },
    /// Opens at the first SIGUSR2 the process receives, closes at the
    /// second.
    Signal,
}

impl WindowPlan {
    /// The value of `env::WINDOW`: `steps:A-B`, `nvtx:NAME`,
    /// `nvtx:DOMAIN:NAME`, `time:DELAY_MS:DURATION_MS` (an empty duration:
    /// to the end), `signal`.
    pub fn to_env(&self) -> String {
        match self {
            WindowPlan::Steps { first, last } => format!("steps:{first}-{last}"),
            WindowPlan::Range { domain: None, name } => format!("nvtx:{name}"),
            WindowPlan::Range {
                domain: Some(d),
                name,
            } => format!("nvtx:{d}:{name}"),
            WindowPlan::Time {
                delay_ms,
                duration_ms,
            } => format!(
                "time:{delay_ms}:{}",
                duration_ms.map_or(String::new(), |d| d.to_string())
            ),
            WindowPlan::Signal => "signal".into(),
        }
    }

    /// Reads `to_env`'s form.
    pub fn from_env(value: &str) -> Result<WindowPlan, String> {
        let bad = || format!("not a window: {value:?}");
        let (what, rest) = value.split_once(':').unwrap_or((value, ""));
        match what {
            "steps" => Self::steps(rest),
            "nvtx" => Self::range(rest),
            "time" => {
                let (delay, duration) = rest.split_once(':').ok_or_else(bad)?;
                Ok(WindowPlan::Time {
                    delay_ms: delay.parse().map_err(|_| bad())?,
                    duration_ms: match duration {
                        "" => None,
                        d => Some(d.parse().map_err(|_| bad())?),
                    },
                })
            }
            "signal" if rest.is_empty() => Ok(WindowPlan::Signal),
            _ => Err(bad()),
        }
    }

    /// `A-B` (`record --steps`): steps A to B, 1 ≤ A ≤ B.
    pub fn steps(text: &str) -> Result<WindowPlan, String> {
        let bad = || format!("{text:?} is not a range of steps: give FIRST-LAST, as in 100-110");
        let (a, b) = text.trim().split_once('-').ok_or_else(bad)?;
        let (first, last): (u64, u64) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if first == 0 || last < first {
            return Err(format!(
                "steps {text:?}: steps count from 1 and the last comes after the first"
            ));
        }
        Ok(WindowPlan::Steps { first, last })
    }

    /// `NAME` or `DOMAIN:NAME` (as `--step-range` reads them).
    pub fn range(text: &str) -> Result<WindowPlan, String> {
        let (domain, name) = match text.split_once(':') {
            Some((d, n)) => (Some(d.to_string()), n),
            None => (None, text),
        };
        if name.is_empty() {
            return Err("an NVTX range needs a name: nvtx:NAME or nvtx:DOMAIN:NAME".into());
        }
        Ok(WindowPlan::Range {
            domain,
            name: name.to_string(),
        })
    }
}

/// The window in words, as the trace's `Window` records and the report say.
impl fmt::Display for WindowPlan {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let secs = |ms: u64| ms as f64 / 1e3;
        match self {
            WindowPlan::Steps { first, last } if first == last => write!(f, "step {first}"),
            WindowPlan::Steps { first, last } => write!(f, "steps {first} to {last}"),
            WindowPlan::Range { domain: None, name } => {
                write!(f, "the first NVTX range \"{name}\"")
            }
            WindowPlan::Range {
                domain: Some(d),
                name,
            } => write!(f, "the first NVTX range \"{name}\" of domain \"{d}\""),
            WindowPlan::Time {
                delay_ms,
                duration_ms: None,
            } => write!(f, "from {} s after the start to the end", secs(*delay_ms)),
            WindowPlan::Time {
                delay_ms,
                duration_ms: Some(d),
            } => write!(
                f,
                "{} s from {} s after the start",
                secs(*d),
                secs(*delay_ms)
            ),
            WindowPlan::Signal => write!(f, "between the first and second SIGUSR2"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plan_reads_back_from_its_env_value() {
        for plan in [
            WindowPlan::Steps { first: 3, last: 5 },
            WindowPlan::Range {
                domain: None,
                name: "train".into(),
            },
            WindowPlan::Range {
                domain: Some("app".into()),
                name: "a:b".into(),
            },
            WindowPlan::Time {
                delay_ms: 1500,
                duration_ms: Some(250),
            },
            WindowPlan::Time {
                delay_ms: 0,
                duration_ms: None,
            },
            WindowPlan::Signal,
        ] {
            assert_eq!(WindowPlan::from_env(&plan.to_env()), Ok(plan));
        }
    }

    #[test]
    fn bad_steps_and_values_are_refused() {
        for bad in ["5", "0-3", "4-2", "a-b", ""] {
            assert!(WindowPlan::steps(bad).is_err(), "{bad}");
        }
        for bad in ["steps", "time:1", "time:x:", "signal:1", "nvtx:", "other:1"] {
            assert!(WindowPlan::from_env(bad).is_err(), "{bad}");
        }
        assert_eq!(
            WindowPlan::steps(" 7 - 9 "),
            Ok(WindowPlan::Steps { first: 7, last: 9 })
        );
    }

    #[test]
    fn plans_say_what_they_are() {
        assert_eq!(
            WindowPlan::Steps { first: 3, last: 5 }.to_string(),
            "steps 3 to 5"
        );
        assert_eq!(
            WindowPlan::Time {
                delay_ms: 2000,
                duration_ms: Some(500)
            }
            .to_string(),
            "0.5 s from 2 s after the start"
        );
    }
}
