//! Patterns whose answers are known exactly.

use crate::util::*;

const POOL: u64 = 0xA000_0000;
const BASE: u64 = 0x7f00_0000_0000;

/// A 64 MiB pool filled by eight 8 MiB blocks; blocks 1, 3 and 5 freed:
/// 24 MiB free in three 8 MiB holes, F = 1 − 8/24 = 2/3. Then block 6
/// freed too: holes of 8, 8 and 16 MiB, F = 1 − 16/32 = 1/2.
#[test]
fn pool_with_three_holes_has_fragmentation_two_thirds() {
    let pool = Some((POOL, 64 * MIB));
    let second = 1_000_000_000;
    let mut records = Vec::new();
    let mut t = 0;
    for i in 0..8 {
        t += second;
        records.push(mem(t, true, BASE + i * 8 * MIB, 8 * MIB, pool));
    }
    for i in [1, 3, 5] {
        t += second;
        records.push(mem(t, false, BASE + i * 8 * MIB, 8 * MIB, pool));
    }
    let at_two_thirds = t;
    t += second;
    records.push(mem(t, false, BASE + 6 * 8 * MIB, 8 * MIB, pool));
    let a = analyze_bytes(&trace(&records));
    let d = &a.devices[0];
    let worst = d.fragmentation.worst.as_ref().expect("a pool was seen");
    assert!((worst.fragmentation - 2.0 / 3.0).abs() < 1e-12, "{worst:?}");
    assert_eq!(worst.free_bytes, 24 * MIB);
    assert_eq!(worst.largest_free_bytes, 8 * MIB);
    assert_eq!(worst.time_ns, at_two_thirds - second);
    // The curve ends at F = 0.5 (per mille) with a 16 MiB largest block.
    assert_eq!(d.fragmentation.curve.last().copied().flatten(), Some(500));
    assert_eq!(d.fragmentation.largest_free.last().copied(), Some(16 * MIB));
    assert!(d
        .fragmentation
        .regions
        .iter()
        .all(|r| r.kind == "pool" && r.estimated));
    // Reserved is the pool's 64 MiB; live peaked at 64 MiB too.
    assert_eq!(d.reserved_peak, 64 * MIB);
    assert_eq!(d.peak_bytes, 64 * MIB);
}

/// Live set, peak and leak of a plain sequence.
#[test]
fn peak_is_the_highest_sum_and_leaks_are_what_is_left() {
    let records = vec![
        mem(10, true, BASE, 3 * MIB, None),
        mem(20, true, BASE + 0x1000_0000, 5 * MIB, None),
        mem(30, false, BASE, 3 * MIB, None),
        mem(40, true, BASE + 0x2000_0000, 4 * MIB, None),
        mem(50, true, BASE + 0x3000_0000, MIB, None),
        mem(60, false, BASE + 0x2000_0000, 4 * MIB, None),
    ];
    let a = analyze_bytes(&trace(&records));
    let d = &a.devices[0];
    assert_eq!(d.peak_bytes, 10 * MIB);
    assert_eq!(d.peak_time_ns, 40, "first reached by the fourth event");
    // No process end record: still live when the trace ends.
    let p = &a.processes[0];
    assert!(!p.clean_exit);
    assert_eq!(
        p.at_exit.leaked_bytes + p.at_exit.cached_bytes + p.at_exit.runtime_bytes,
        6 * MIB
    );
    assert_eq!(p.allocations, 4);
    assert_eq!(p.frees, 2);
}
