//! The collector's clock. Records carry CUPTI's timestamps (its activity
//! records are stamped by CUPTI), which on Linux count nanoseconds of
//! CLOCK_REALTIME. Reading that clock through the vDSO takes tens of
//! nanoseconds; a `cuptiGetTimestamp` call takes longer, and the collector
//! stamps several records per allocation. So the offset between the two is
//! measured once at start (normally zero) and the collector reads
//! CLOCK_REALTIME: every record stays on CUPTI's clock.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cupti::Cupti;

pub struct Clock {
    /// CUPTI's clock minus CLOCK_REALTIME, in nanoseconds.
    pub offset: i64,
    /// What one `cuptiGetTimestamp` call took at start (the fastest of a
    /// few), for the trace's notes.
    pub cupti_call_ns: u64,
}

fn realtime() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

impl Clock {
    /// Measures the offset: of several readings of CUPTI's clock between
    /// two readings of CLOCK_REALTIME, the tightest one.
    pub fn calibrate(cupti: &Cupti) -> Clock {
        let mut best: Option<(u64, i64)> = None;
        for _ in 0..16 {
            let before = realtime();
            let c = cupti.timestamp();
            let after = realtime();
            let span = after.saturating_sub(before);
            let mid = before + span / 2;
            let offset = c.wrapping_sub(mid) as i64;
            if best.is_none_or(|(s, _)| span < s) {
                best = Some((span, offset));
            }
        }
        let (span, offset) = best.unwrap_or((0, 0));
        Clock {
            offset,
            cupti_call_ns: span,
        }
    }

    /// Now, on CUPTI's clock.
    #[inline]
    pub fn now(&self) -> u64 {
        realtime().wrapping_add_signed(self.offset)
    }
}

/// What the collector's handling of one kind of event costs the thread
/// that raised it: every event is counted, one in `TIMED_EVERY` is timed and
/// its time counted that many times over (a second clock read on every
/// event would cost a tenth of what recording one does). Which events are
/// timed is pseudo-random: every Nth event would keep meeting costs that
/// come every so many events (waking the writer every 8,192 queued items
/// fell on timed launches every time, and the figure came out above the
/// launch's whole cost).
#[derive(Default)]
pub struct EventTimer {
    events: AtomicU64,
    nanos: AtomicU64,
}

pub const TIMED_EVERY: u64 = 16;

/// What to do with an event `EventTimer::count` counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sample {
    /// Nothing more.
    No,
    /// Time it whole (`EventTimer::timed`).
    Timed,
    /// Time its parts (`PartClock`, `CostSplit`), another one in
    /// `TIMED_EVERY`: their clock reads (~20 ns each on the H200) then stay
    /// out of the events timed whole.
    Parts,
}

impl EventTimer {
    /// Counts an event and says whether to time it, whole or by parts.
    pub fn count(&self) -> Sample {
        let n = self.events.fetch_add(1, Ordering::Relaxed);
        // The event's number, scrambled (Fibonacci hashing): its top bits
        // are as good as random for this, for one multiplication and no
        // per-thread state.
        let h = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        if h < u64::MAX / TIMED_EVERY {
            Sample::Timed
        } else if h < u64::MAX / TIMED_EVERY * 2 {
            Sample::Parts
        } else {
            Sample::No
        }
    }

    pub fn timed(&self, started: u64, now: u64) {
        self.nanos
            .fetch_add(now.saturating_sub(started) * TIMED_EVERY, Ordering::Relaxed);
    }

    /// Events counted, and the time of all of them as estimated from the
    /// timed ones, in nanoseconds.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.events.load(Ordering::Relaxed),
            self.nanos.load(Ordering::Relaxed),
        )
    }

    /// Events counted, and microseconds per event (0 with none).
    pub fn summary(&self) -> (u64, f64) {
        let (events, nanos) = self.totals();
        (events, nanos as f64 / events.max(1) as f64 / 1000.0)
    }
}

/// The CPU's timestamp counter: a few nanoseconds to read, where the
/// clock takes tens. Only ratios of its ticks are used (`CostSplit`), so its
/// rate need not be known.
#[inline]
pub fn ticks() -> u64 {
    // SAFETY: RDTSC reads a counter; every x86-64 CPU has it.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
}

/// Where the time of an `EventTimer`'s events goes: timestamp counter
/// ticks spent in each of N parts, summed over its `Sample::Parts` events, so the
/// trace can say which part of recording an event costs most (on the H200,
/// where no profiler runs, this is how the cost is taken apart).
pub struct CostSplit<const N: usize> {
    ticks: [AtomicU64; N],
}

/// One timed event's parts, kept on its own stack while it runs: adding
/// each part to the shared totals as it ended would count that addition
/// (a locked instruction) in the next part and in the event's time.
pub struct PartClock<const N: usize> {
    last: u64,
    ticks: [u64; N],
}

impl<const N: usize> PartClock<N> {
    pub fn start() -> Self {
        PartClock {
            last: ticks(),
            ticks: [0; N],
        }
    }

    /// The time since the last mark (or the start) was spent in `part`.
    #[inline]
    pub fn mark(&mut self, part: usize) {
        let now = ticks();
        if let Some(t) = self.ticks.get_mut(part) {
            *t += now.saturating_sub(self.last);
        }
        self.last = now;
    }
}

impl<const N: usize> Default for CostSplit<N> {
    fn default() -> Self {
        CostSplit {
            ticks: [const { AtomicU64::new(0) }; N],
        }
    }
}

impl<const N: usize> CostSplit<N> {
    /// Adds a finished event's parts (after its end was read).
    pub fn add(&self, parts: &PartClock<N>) {
        for (total, t) in self.ticks.iter().zip(parts.ticks) {
            if t > 0 {
                total.fetch_add(t, Ordering::Relaxed);
            }
        }
    }

    /// Each part's share of all the ticks counted (all zero with none).
    pub fn shares(&self) -> [f64; N] {
        let ticks = self
            .ticks
            .each_ref()
            .map(|t| t.load(Ordering::Relaxed) as f64);
        let total: f64 = ticks.iter().sum();
        ticks.map(|t| if total > 0.0 { t / total } else { 0.0 })
    }

    /// "name 12%, stream 3%, …" for the trace's notes.
    pub fn describe(&self, names: [&str; N]) -> String {
        let shares = self.shares();
        names
            .iter()
            .zip(shares)
            .map(|(name, share)| format!("{name} {:.0}%", share * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event is counted; about one in `TIMED_EVERY` is timed; and a
    /// cost that comes every 8,192 events (the writer's wake-up) weighs
    /// what it costs on average, not sixteen times that.
    #[test]
    fn the_timer_samples_without_meeting_periodic_costs_every_time() {
        let t = EventTimer::default();
        let (n, every, spike, base) = (163_840u64, 8_192u64, 1_000_000u64, 100u64);
        let (mut timed, mut parts) = (0, 0);
        for i in 0..n {
            let sample = t.count();
            parts += (sample == Sample::Parts) as u64;
            if sample == Sample::Timed {
                timed += 1;
                t.timed(0, if i % every == 0 { spike } else { base });
            }
        }
        let (events, micros) = t.summary();
        assert_eq!(events, n);
        assert!((timed as f64 - (n / TIMED_EVERY) as f64).abs() < 0.05 * (n / TIMED_EVERY) as f64);
        // As many others have their parts timed, apart from those.
        assert!((parts as f64 - (n / TIMED_EVERY) as f64).abs() < 0.05 * (n / TIMED_EVERY) as f64);
        // The true mean: 100 ns + 1 ms / 8,192 = 0.22 µs. Timing every 16th
        // event gave 2.05 µs.
        assert!(micros < 0.6, "{micros}");
    }

    #[test]
    fn a_cost_split_gives_each_part_its_share() {
        let split = CostSplit::<3>::default();
        assert_eq!(split.shares(), [0.0; 3]);
        let mut parts = PartClock::<3> {
            last: 0,
            ticks: [30, 60, 10],
        };
        split.add(&parts);
        assert_eq!(split.shares(), [0.3, 0.6, 0.1]);
        assert_eq!(split.describe(["a", "b", "c"]), "a 30%, b 60%, c 10%");
        // Marks count the ticks since the last one to their part; a part
        // that does not exist is ignored.
        parts = PartClock::start();
        parts.mark(1);
        parts.mark(7);
        assert!(parts.last > 0 && parts.ticks[0] == 0);
    }
}
