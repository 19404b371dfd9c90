//! The collector's clock. Records carry CUPTI's timestamps (its activity
//! records are stamped by CUPTI), which on Linux count nanoseconds of
//! CLOCK_REALTIME. Reading that clock through the vDSO takes tens of
//! nanoseconds; a `cuptiGetTimestamp` call takes longer, and the collector
//! stamps several records per allocation. So the offset between the two is
//! measured once at start (normally zero) and the collector reads
//! CLOCK_REALTIME: every record stays on CUPTI's clock.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cuda::cupti::Cupti;

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
pub struct EventTimer {
    events: AtomicU64,
    nanos: AtomicU64,
    /// The timed events by duration (`duration_bucket`), for the median: a
    /// few slow ones (a thread's first walk unwinds in full and reads
    /// unwind tables, milliseconds) move the mean by several times between
    /// runs of the same program.
    durations: [AtomicU64; DURATION_BUCKETS],
}

impl Default for EventTimer {
    fn default() -> Self {
        EventTimer {
            events: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            durations: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Durations up to 2^40 ns (18 minutes) in buckets a quarter of a power of
/// two wide: a median to within 12.5%.
const DURATION_BUCKETS: usize = 160;

/// The bucket of a duration of `ns`: 0-3 ns exactly, then four per power of
/// two (the two bits after the leading one).
fn duration_bucket(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize; // 2 or more
    let m = ((ns >> (e - 2)) & 3) as usize;
    (4 * (e - 1) + m).min(DURATION_BUCKETS - 1)
}

/// The middle of bucket `b`'s range, in nanoseconds.
fn bucket_middle(b: usize) -> f64 {
    if b < 4 {
        return b as f64;
    }
    let e = b / 4 + 1;
    let low = ((4 + b % 4) as u64) << (e - 2);
    low as f64 + (1u64 << (e - 2)) as f64 / 2.0
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
        let took = now.saturating_sub(started);
        self.nanos.fetch_add(took * TIMED_EVERY, Ordering::Relaxed);
        self.durations[duration_bucket(took)].fetch_add(1, Ordering::Relaxed);
    }

    fn bucket_counts(&self) -> [u64; DURATION_BUCKETS] {
        std::array::from_fn(|b| self.durations[b].load(Ordering::Relaxed))
    }

    /// The time under which a fraction `q` of the timed events took, in
    /// nanoseconds (0 with none), to within 12.5%.
    pub fn quantile_nanos(&self, q: f64) -> u64 {
        let counts = self.bucket_counts();
        let total: u64 = counts.iter().sum();
        let mut seen = 0;
        for (b, n) in counts.iter().enumerate() {
            seen += n;
            if total > 0 && seen as f64 >= q * total as f64 {
                return bucket_middle(b).round() as u64;
            }
        }
        0
    }

    /// The median time of the timed events, in nanoseconds (0 with none),
    /// to within 12.5%.
    pub fn median_nanos(&self) -> u64 {
        self.quantile_nanos(0.5)
    }

    /// `median_nanos` in microseconds.
    pub fn median_micros(&self) -> f64 {
        self.median_nanos() as f64 / 1000.0
    }

    /// The share of the timed events' time that their slowest `fraction`
    /// took (0 with none): whether the mean is the usual event's cost or a
    /// few slow ones' (a thread's first walk, a wait on a lock, the thread
    /// descheduled while timed).
    pub fn slowest_share(&self, fraction: f64) -> f64 {
        let counts = self.bucket_counts();
        let total: u64 = counts.iter().sum();
        let time = |b: usize, n: u64| n as f64 * bucket_middle(b);
        let all: f64 = counts.iter().enumerate().map(|(b, &n)| time(b, n)).sum();
        let mut left = (fraction * total as f64).ceil() as u64;
        let mut slowest = 0.0;
        for (b, &n) in counts.iter().enumerate().rev() {
            let take = n.min(left);
            slowest += time(b, take);
            left -= take;
        }
        if all > 0.0 {
            slowest / all
        } else {
            0.0
        }
    }

    /// "median 0.35, 99th percentile 1.20, the slowest 1% 30% of the time"
    /// (µs), for the trace's notes.
    pub fn describe_spread(&self) -> String {
        format!(
            "median {:.2}, 99th percentile {:.2}, the slowest 1% {:.0}% of the time",
            self.median_micros(),
            self.quantile_nanos(0.99) as f64 / 1000.0,
            self.slowest_share(0.01) * 100.0
        )
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

    /// The median sits where half the timed events are, whatever a few
    /// slow ones do to the mean, to within a bucket's 12.5%.
    #[test]
    fn the_median_ignores_a_few_slow_events() {
        let t = EventTimer::default();
        assert_eq!(t.median_micros(), 0.0);
        for i in 0..1000u64 {
            // 990 events of 300-399 ns, 10 of 10 ms.
            t.timed(
                0,
                if i % 100 == 0 {
                    10_000_000
                } else {
                    300 + i % 100
                },
            );
        }
        let median = t.median_micros();
        assert!((0.3..0.4).contains(&median), "{median}");
        // The mean (as summary gives it, over these timed events alone).
        let mean = t.totals().1 as f64 / TIMED_EVERY as f64 / 1000.0 / 1000.0;
        assert!(mean > 100.0, "{mean}");
        // Every duration lands in a bucket whose middle is within 12.5%.
        for ns in [1u64, 3, 4, 5, 7, 8, 100, 999, 1_000_000, 1 << 39] {
            let m = bucket_middle(duration_bucket(ns));
            assert!(
                (m - ns as f64).abs() <= 0.125 * ns as f64 + 0.5,
                "{ns}: {m}"
            );
        }
        assert_eq!(duration_bucket(u64::MAX), DURATION_BUCKETS - 1);
    }

    /// The tail's figures: 1% of the events at 10 ms take nearly all of
    /// the time; with every event alike the slowest 1% take 1%.
    #[test]
    fn the_slowest_events_share_of_the_time() {
        let t = EventTimer::default();
        assert_eq!(t.slowest_share(0.01), 0.0);
        for _ in 0..1000 {
            t.timed(0, 400);
        }
        assert!((t.slowest_share(0.01) - 0.01).abs() < 1e-9);
        assert_eq!(t.quantile_nanos(0.99), t.median_nanos());
        for _ in 0..10 {
            t.timed(0, 10_000_000);
        }
        // 10 of 1,010 events are the slowest 1% (rounded up: 11, one of
        // them a 400 ns event): 100 ms of 100.4 ms.
        let share = t.slowest_share(0.01);
        assert!(share > 0.99, "{share}");
        let p99 = t.quantile_nanos(0.99) as f64;
        assert!((p99 - 400.0).abs() <= 50.0, "{p99}");
        assert!(t.quantile_nanos(0.995) > 8_000_000);
        let text = t.describe_spread();
        assert!(text.starts_with("median 0.4"), "{text}");
        assert!(text.ends_with("the slowest 1% 100% of the time"), "{text}");
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
