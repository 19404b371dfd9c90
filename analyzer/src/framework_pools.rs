//! The pools of JAX (XLA's BFC allocator) and CuPy as the frameworks
//! themselves count them: readings of `memory_stats()` / the pool's
//! used and total bytes, taken in the program by the Python bootstrap of
//! `record` (`PoolUsage` records). CUDA sees only the pool; these say how
//! much of it the program's arrays used.

use std::collections::BTreeMap;

use gmem_prof_traces::record::{pool_usage, PoolUsage};

use crate::engine::Engine;
use crate::model::{FrameworkPool, Point, PoolReading};
use crate::timeline::Axis;

pub fn pools(engine: &Engine, axis: &Axis, buckets: usize, start: u64) -> Vec<FrameworkPool> {
    let mut by_pool: BTreeMap<(u32, u32, u8), Vec<&PoolUsage>> = BTreeMap::new();
    for st in &engine.procs {
        for u in &st.defs.pool_usage {
            by_pool
                .entry((st.pid(), u.device, u.framework))
                .or_default()
                .push(u);
        }
    }
    by_pool
        .into_iter()
        .map(|((pid, device, framework), mut readings)| {
            readings.sort_by_key(|u| u.time.0);
            pool(pid, device, framework, &readings, axis, buckets, start)
        })
        .collect()
}

fn pool(
    pid: u32,
    device: u32,
    framework: u8,
    readings: &[&PoolUsage],
    axis: &Axis,
    buckets: usize,
    start: u64,
) -> FrameworkPool {
    let known = |b: u64| (b != pool_usage::UNKNOWN).then_some(b);
    let highest = readings
        .iter()
        .max_by_key(|u| (u.in_use.0, std::cmp::Reverse(u.time.0)))
        .expect("a pool has at least one reading");
    // The framework's own peak, when it keeps one, includes what happened
    // between readings; the last reading holds the latest.
    let own_peak = readings.iter().filter_map(|u| known(u.peak_in_use.0)).max();
    let last = readings.last().expect("a pool has at least one reading");
    let rel = |t: u64| t.saturating_sub(start);
    FrameworkPool {
        framework: match framework {
            pool_usage::JAX => "JAX (XLA's BFC allocator)".into(),
            pool_usage::CUPY => crate::sites::CUPY_POOL.into(),
            other => format!("framework {other}"),
        },
        pid,
        device,
        readings: readings.len() as u64,
        in_use_peak: own_peak.unwrap_or(0).max(highest.in_use.0),
        in_use_peak_exact: own_peak.is_some(),
        highest_reading_time_ns: rel(highest.time.0),
        pool_peak: readings.iter().map(|u| u.pool.0).max().unwrap_or(0),
        limit: readings.iter().rev().find_map(|u| known(u.limit.0)),
        last: PoolReading {
            time_ns: rel(last.time.0),
            in_use: last.in_use.0,
            pool: last.pool.0,
            at_exit: last.reason == pool_usage::EXIT,
        },
        in_use: curve(readings, |u| u.in_use.0, axis, buckets),
        pool: curve(readings, |u| u.pool.0, axis, buckets),
    }
}

/// The readings on the report's time axis: each bucket's highest reading
/// and the last one by its end; a bucket with none carries the last value.
fn curve(
    readings: &[&PoolUsage],
    value: impl Fn(&PoolUsage) -> u64,
    axis: &Axis,
    buckets: usize,
) -> Vec<Point> {
    let mut out: Vec<Option<Point>> = vec![None; buckets];
    for u in readings {
        let i = axis.bucket_of(u.time.0);
        let slot = &mut out[i.min(buckets.saturating_sub(1))];
        let v = value(u);
        *slot = Some(match *slot {
            Some(p) => Point {
                max: p.max.max(v),
                last: v,
            },
            None => Point { max: v, last: v },
        });
    }
    let mut carry = 0;
    out.into_iter()
        .map(|p| {
            let p = p.unwrap_or(Point {
                max: carry,
                last: carry,
            });
            carry = p.last;
            p
        })
        .collect()
}
