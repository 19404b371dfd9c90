//! Random traces against a naive reference: the live-set curve, the peak and
//! the fragmentation samples must agree exactly.

use gmem_prof_model::Point;
use gmem_prof_traces::Record;
use proptest::prelude::*;

use crate::util::*;

const POOL: u64 = 0xB000_0000;
const POOL_SIZE: u64 = 32 * MIB;
const POOL_BASE: u64 = 0x7e00_0000_0000;
const PLAIN_BASE: u64 = 0x7f00_0000_0000;

/// One step of a random program: (gap before it in ns, action, slot, size).
type Step = (u64, u8, u8, u8);

struct Ev {
    time: u64,
    alloc: bool,
    address: u64,
    bytes: u64,
    pool: bool,
}

/// Turns random steps into a valid event sequence: allocations into free
/// slots (of a pool, or plain), frees of live slots.
fn program(steps: &[Step]) -> Vec<Ev> {
    let mut live: Vec<Option<(u64, bool)>> = vec![None; 64];
    let mut out = Vec::new();
    let mut t = 1_000;
    for &(gap, action, slot, size) in steps {
        t += gap;
        let slot = usize::from(slot % 64);
        let in_pool = slot < 32;
        let address = if in_pool {
            POOL_BASE + slot as u64 * MIB
        } else {
            PLAIN_BASE + slot as u64 * 0x1000_0000
        };
        match live[slot] {
            None if !action.is_multiple_of(3) => {
                let bytes = if in_pool {
                    MIB
                } else {
                    u64::from(size) * 4096 + 1
                };
                live[slot] = Some((bytes, in_pool));
                out.push(Ev {
                    time: t,
                    alloc: true,
                    address,
                    bytes,
                    pool: in_pool,
                });
            }
            Some((bytes, pool)) if action.is_multiple_of(3) || action.is_multiple_of(5) => {
                live[slot] = None;
                out.push(Ev {
                    time: t,
                    alloc: false,
                    address,
                    bytes,
                    pool,
                });
            }
            _ => {}
        }
    }
    out
}

fn records(evs: &[Ev]) -> Vec<Record> {
    evs.iter()
        .map(|e| {
            mem(
                e.time,
                e.alloc,
                e.address,
                e.bytes,
                e.pool.then_some((POOL, POOL_SIZE)),
            )
        })
        .collect()
}

/// The naive fragmentation of the pool: holes between live blocks plus the
/// pool's size beyond their span, as the analyzer defines it for pools.
fn naive_fragmentation(blocks: &[(u64, u64)]) -> (u64, u64) {
    let used: u64 = blocks.iter().map(|b| b.1).sum();
    let free = POOL_SIZE - used;
    let mut sorted = blocks.to_vec();
    sorted.sort();
    let Some(first) = sorted.first() else {
        return (free, free);
    };
    let last = sorted.last().unwrap();
    let span = last.0 + last.1 - first.0;
    let mut largest = POOL_SIZE.saturating_sub(span);
    let mut end = first.0;
    for &(a, l) in &sorted {
        largest = largest.max(a.saturating_sub(end));
        end = end.max(a + l);
    }
    (free, largest.min(free))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn curves_peak_and_fragmentation_match_a_naive_replay(
        steps in proptest::collection::vec((1u64..50_000_000, any::<u8>(), any::<u8>(), any::<u8>()), 1..400)
    ) {
        let evs = program(&steps);
        prop_assume!(!evs.is_empty());
        let a = analyze_bytes(&trace(&records(&evs)));
        let d = &a.devices[0];
        let start = a.timeline.start_ns;
        let width = a.timeline.bucket_ns;
        let n = a.timeline.buckets;
        prop_assert_eq!(start, evs[0].time);
        prop_assert!(n <= 512);

        // Naive replay: the value after every event, bucket by bucket.
        let mut live = 0u64;
        let mut peak = (0u64, 0u64);
        let mut points = vec![Point::default(); n];
        let mut frag: Vec<Option<u16>> = vec![None; n];
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        let mut pool_seen = false;
        let mut bucket = 0usize;
        for e in &evs {
            let b = ((e.time - start) / width) as usize;
            while bucket < b {
                // Carry the value through buckets without events.
                bucket += 1;
                points[bucket] = Point { max: live, last: live };
                frag[bucket] = frag[bucket - 1];
            }
            if e.alloc { live += e.bytes } else { live -= e.bytes }
            if e.pool {
                pool_seen = true;
                if e.alloc { blocks.push((e.address, e.bytes)) } else { blocks.retain(|x| x.0 != e.address) }
            }
            if live > peak.0 { peak = (live, e.time - start) }
            points[b].max = points[b].max.max(live);
            points[b].last = live;
            if pool_seen {
                let (free, largest) = naive_fragmentation(&blocks);
                let f = if free == 0 { 0.0 } else { 1.0 - largest as f64 / free as f64 };
                frag[b] = Some((f * 1000.0).round() as u16);
            }
        }
        for i in bucket + 1..n {
            points[i] = Point { max: live, last: live };
            frag[i] = frag[i - 1];
        }
        prop_assert_eq!((d.peak_bytes, d.peak_time_ns), peak);
        prop_assert_eq!(&d.live, &points);
        if pool_seen {
            prop_assert_eq!(&d.fragmentation.curve, &frag);
        }
    }
}
