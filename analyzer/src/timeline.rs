//! Bounded curves over a time axis whose length is unknown while streaming.
//!
//! Every curve shares one bucket width. Buckets start narrow; when time runs
//! past `MAX_BUCKETS` buckets the width doubles and every curve merges its
//! buckets pairwise. A bucket keeps the highest value during it and the value
//! at its end, so peaks survive any amount of merging. Memory is
//! `MAX_BUCKETS` points per curve whatever the trace length.

use crate::model::Point;

/// Buckets per curve at most (between half and all of them are used).
pub const MAX_BUCKETS: usize = 512;
const FIRST_WIDTH_NS: u64 = 1 << 10;

/// The shared axis: origin, width and the bucket time has reached.
#[derive(Clone, Debug)]
pub struct Axis {
    pub start: u64,
    /// A power of two, so that a bucket index is a shift: the sweep finds
    /// one for every event, and a 64-bit division per event costs more than
    /// the rest of the bookkeeping.
    pub width: u64,
    shift: u32,
    /// Index of the bucket holding the latest time seen.
    pub current: usize,
    /// How many times the width doubled; curves catch up lazily.
    pub generation: u32,
    latest: u64,
    /// Changes whenever `current` or `generation` does (never 0): a curve
    /// that cached its point for one epoch can keep writing to the cache
    /// until the epoch changes.
    epoch: u64,
}

impl Axis {
    pub fn new(start: u64) -> Self {
        Self::with_width(start, FIRST_WIDTH_NS)
    }

    /// An axis over another clock (e.g. a count of allocations); `width` is
    /// rounded down to a power of two.
    pub fn with_width(start: u64, width: u64) -> Self {
        let shift = width.max(1).ilog2();
        Axis {
            start,
            width: 1 << shift,
            shift,
            current: 0,
            generation: 0,
            latest: 0,
            epoch: 1,
        }
    }

    /// True when time `t` lies beyond the current bucket.
    #[inline]
    pub fn leaves_bucket(&self, t: u64) -> bool {
        let rel = t.saturating_sub(self.start);
        rel > self.latest && rel >> self.shift != self.current as u64
    }

    /// Moves time forward to `t` (never back).
    #[inline]
    pub fn advance(&mut self, t: u64) {
        let rel = t.saturating_sub(self.start).max(self.latest);
        self.latest = rel;
        while rel >> self.shift >= MAX_BUCKETS as u64 {
            self.shift += 1;
            self.width *= 2;
            self.generation += 1;
            self.epoch += 1;
        }
        let current = (rel >> self.shift) as usize;
        if current != self.current {
            self.current = current;
            self.epoch += 1;
        }
    }

    /// The bucket holding time `t` (times before the start fall in the
    /// first), for values placed after the sweep.
    pub fn bucket_of(&self, t: u64) -> usize {
        (t.saturating_sub(self.start) >> self.shift) as usize
    }

    /// Number of buckets in use.
    pub fn buckets(&self) -> usize {
        self.current + 1
    }
}

/// A curve of `Point`s; buckets not yet written carry the last value forward.
///
/// The point of the current bucket is kept apart (`open`) while the axis
/// stays in that bucket, so that setting a value, done several times per
/// event, is one comparison and two stores.
#[derive(Clone, Debug, Default)]
pub struct Curve {
    points: Vec<Point>,
    /// The last value set, as of the last `close` (a later one is in
    /// `open`): what buckets not yet written carry forward.
    value: u64,
    generation: u32,
    /// The axis epoch for which `open` holds `points[open_at]`; 0 for none.
    open_epoch: u64,
    open_at: usize,
    open: Point,
}

impl Curve {
    /// Writes the open point back into `points`.
    fn close(&mut self) {
        if self.open_epoch != 0 {
            self.points[self.open_at] = self.open;
            self.value = self.open.last;
            self.open_epoch = 0;
        }
    }

    #[cold]
    fn catch_up(&mut self, axis: &Axis) {
        self.close();
        while self.generation < axis.generation {
            self.points = halve(&self.points);
            self.generation += 1;
        }
        // Fill buckets between the last written one and the current one with
        // the value they held (no change happened in them).
        if self.points.len() <= axis.current {
            let carry = Point {
                max: self.value,
                last: self.value,
            };
            self.points.resize(axis.current + 1, carry);
        }
    }

    /// Opens the current bucket's point.
    #[cold]
    fn open(&mut self, axis: &Axis) {
        self.catch_up(axis);
        self.open = self.points[axis.current];
        self.open_at = axis.current;
        self.open_epoch = axis.epoch;
    }

    /// Sets the curve's value at the axis's current time.
    #[inline]
    pub fn set(&mut self, axis: &Axis, v: u64) {
        if self.open_epoch != axis.epoch {
            self.open(axis);
        }
        self.open.last = v;
        self.open.max = self.open.max.max(v);
    }

    /// Adds `delta` to the buckets from the one holding time `since` up to
    /// the current one, not including it: something that has been live
    /// since then is counted here only now (a tensor whose role became
    /// known). The current bucket is the caller's to `set`.
    pub fn add_since(&mut self, axis: &Axis, since: u64, delta: u64) {
        self.shift_since(axis, since, delta as i64);
    }

    /// `add_since` of a change either way (a count taken back from one
    /// curve and given to another).
    pub fn shift_since(&mut self, axis: &Axis, since: u64, delta: i64) {
        let from = axis.bucket_of(since);
        if from >= axis.current {
            return;
        }
        self.catch_up(axis);
        for p in &mut self.points[from..axis.current] {
            p.last = p.last.saturating_add_signed(delta);
            p.max = p.max.saturating_add_signed(delta);
        }
    }

    /// Adds `delta` to a value that was live from `made` to `freed`, both
    /// past (a freed tensor whose role became known): the buckets before
    /// the one holding `freed` by their last and highest values, that one
    /// by its highest (taken as reached while the value was live), the
    /// current bucket included.
    pub fn shift_between(&mut self, axis: &Axis, made: u64, freed: u64, delta: i64) {
        self.catch_up(axis);
        let to = axis.bucket_of(freed).min(axis.current);
        let from = axis.bucket_of(made).min(to);
        for p in &mut self.points[from..to] {
            p.last = p.last.saturating_add_signed(delta);
            p.max = p.max.saturating_add_signed(delta);
        }
        let p = &mut self.points[to];
        p.max = p.max.saturating_add_signed(delta);
    }

    /// The points up to and including `buckets - 1`.
    pub fn finish(&mut self, axis: &Axis, buckets: usize) -> Vec<Point> {
        self.catch_up(axis);
        let mut out = self.points.clone();
        let carry = Point {
            max: self.value,
            last: self.value,
        };
        out.resize(buckets, carry);
        out
    }
}

fn halve(points: &[Point]) -> Vec<Point> {
    points
        .chunks(2)
        .map(|pair| match pair {
            [a, b] => Point {
                max: a.max.max(b.max),
                last: b.last,
            },
            [a] => *a,
            _ => unreachable!("chunks(2) yields one or two"),
        })
        .collect()
}

/// A curve of optional samples taken at bucket ends (fragmentation).
#[derive(Clone, Debug, Default)]
pub struct Samples<T: Copy> {
    points: Vec<Option<T>>,
    generation: u32,
}

impl<T: Copy> Samples<T> {
    /// Records the value at the end of bucket `idx` (of the axis's current
    /// generation).
    pub fn put(&mut self, axis: &Axis, idx: usize, v: Option<T>) {
        self.catch_up(axis);
        if self.points.len() <= idx {
            let carry = self.points.last().copied().flatten();
            self.points.resize(idx + 1, carry);
        }
        self.points[idx] = v;
    }

    pub fn finish(&mut self, axis: &Axis, buckets: usize) -> Vec<Option<T>> {
        self.catch_up(axis);
        let carry = self.points.last().copied().flatten();
        let mut out = self.points.clone();
        out.resize(buckets, carry);
        out
    }

    /// The curve with buckets before the first sample at zero (largest
    /// free blocks: nothing free before anything was held).
    pub fn finish_or_zero(&mut self, axis: &Axis, buckets: usize) -> Vec<T>
    where
        T: Default,
    {
        self.finish(axis, buckets)
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect()
    }

    /// Merges bucket pairs once per doubling of the axis's width; a merged
    /// bucket ends where its second half ends.
    fn catch_up(&mut self, axis: &Axis) {
        while self.generation < axis.generation {
            self.points = self
                .points
                .chunks(2)
                .map(|pair| pair[pair.len() - 1])
                .collect();
            self.generation += 1;
        }
    }
}

/// Events counted per bucket (kernels launched); merged buckets add up.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    counts: Vec<u32>,
    generation: u32,
}

impl Counts {
    /// Counts one event in the axis's current bucket.
    #[inline]
    pub fn add(&mut self, axis: &Axis) {
        if self.generation < axis.generation {
            self.catch_up(axis);
        }
        let i = axis.current;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] = self.counts[i].saturating_add(1);
    }

    pub fn finish(&mut self, axis: &Axis, buckets: usize) -> Vec<u32> {
        self.catch_up(axis);
        let mut out = self.counts.clone();
        out.resize(buckets, 0);
        out
    }

    fn catch_up(&mut self, axis: &Axis) {
        while self.generation < axis.generation {
            self.counts = self
                .counts
                .chunks(2)
                .map(|pair| pair.iter().fold(0u32, |a, &b| a.saturating_add(b)))
                .collect();
            self.generation += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts survive the axis widening: merged buckets add up.
    #[test]
    fn counts_add_up_when_buckets_merge() {
        let mut axis = Axis::new(0);
        let mut c = Counts::default();
        let mut t = 0u64;
        for _ in 0..5_000 {
            t += 997;
            axis.advance(t);
            c.add(&axis);
        }
        let counts = c.finish(&axis, axis.buckets());
        assert_eq!(counts.iter().map(|&n| u64::from(n)).sum::<u64>(), 5_000);
        assert!(axis.generation > 0, "the axis widened");
    }

    /// The shifts give the buckets a division by the width would.
    #[test]
    fn bucket_index_is_time_over_width() {
        let mut axis = Axis::new(1_000);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut t = 1_000u64;
        for _ in 0..100_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            t += rng % (1 << (rng % 40));
            let leaves = {
                let rel = t - 1_000;
                rel > axis.latest && rel / axis.width != axis.current as u64
            };
            assert_eq!(axis.leaves_bucket(t), leaves);
            axis.advance(t);
            assert_eq!(axis.current as u64, (t - 1_000) / axis.width);
            assert_eq!(axis.bucket_of(t), axis.current);
            assert!(axis.current < MAX_BUCKETS);
        }
        assert_eq!(Axis::with_width(0, 1).width, 1);
        assert_eq!(Axis::with_width(0, 1000).width, 512);
    }

    #[test]
    fn peaks_survive_rescaling() {
        let mut axis = Axis::new(0);
        let mut c = Curve::default();
        c.set(&axis, 10);
        assert!(axis.leaves_bucket(5_000));
        axis.advance(5_000);
        assert!(!axis.leaves_bucket(5_001));
        c.set(&axis, 99);
        c.set(&axis, 20);
        // Far past the first width: the axis rescales many times.
        axis.advance(10_000_000_000);
        c.set(&axis, 30);
        let buckets = axis.buckets();
        let pts = c.finish(&axis, buckets);
        assert_eq!(pts.len(), buckets);
        assert!(buckets <= MAX_BUCKETS);
        assert_eq!(pts.iter().map(|p| p.max).max(), Some(99));
        assert_eq!(pts[0].max, 99);
        assert_eq!(pts.last().map(|p| p.last), Some(30));
    }

    proptest::proptest! {
        /// A curve equals its definition computed naively at the end: per
        /// bucket of the final width, the highest value held during it
        /// (what it started with included) and the value at its end.
        #[test]
        fn curve_matches_naive_buckets(
            steps in proptest::collection::vec((0u64..1 << 22, 0u64..1000, 0u8..3), 1..300),
        ) {
            let start = 5_000u64;
            let mut axis = Axis::new(start);
            let mut curve = Curve::default();
            let mut t = start;
            let mut sets: Vec<(u64, u64)> = Vec::new();
            for &(gap, v, times) in &steps {
                t += gap;
                axis.advance(t);
                // Several values in one bucket too.
                for k in 0..=u64::from(times) {
                    curve.set(&axis, v + k);
                    sets.push((t - start, v + k));
                }
            }
            let buckets = axis.buckets();
            let got = curve.finish(&axis, buckets);
            let mut want = Vec::new();
            let mut value = 0u64;
            let mut i = 0;
            for b in 0..buckets as u64 {
                let mut p = Point { max: value, last: value };
                while i < sets.len() && sets[i].0 >> axis.width.ilog2() == b {
                    value = sets[i].1;
                    p.max = p.max.max(value);
                    p.last = value;
                    i += 1;
                }
                want.push(p);
            }
            proptest::prop_assert_eq!(got, want);
        }
    }
}
