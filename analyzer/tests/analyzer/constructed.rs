//! Patterns whose answers are known exactly.

use gmem_prof_model::Remedy;
use gmem_prof_traces::record::{
    ApiCall, ApiFunc, Bytes, Frame, KernelLaunch, ModuleInfo, Nanos, ProcessEnd, StackDef, StackId,
    StringDef, StringId, SymbolFrame, SymbolInfo,
};
use gmem_prof_traces::Record;

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
        .all(|r| r.kind == gmem_prof_model::RegionKind::Pool && r.estimated));
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

/// A program of steps, written as its allocation calls: each step, in
/// order, is a list of (site, bytes, freed within the step). Sites 1..=3
/// have stacks of their own; temporaries are freed at the step's end. `end_free` frees what is still live after the
/// last step (an interpreter's shutdown, or the program's own clean-up);
/// `ended` writes the process's end record.
fn steps_trace(steps: &[Vec<(u32, u64, bool)>], end_free: bool, ended: bool) -> Vec<u8> {
    steps_trace_paused(steps, 0, end_free, ended)
}

/// `steps_trace` with `pause` ns after the last step (work that allocates
/// nothing) before the end.
fn steps_trace_paused(
    steps: &[Vec<(u32, u64, bool)>],
    pause: u64,
    end_free: bool,
    ended: bool,
) -> Vec<u8> {
    let mut records: Vec<Record> = (1..=3)
        .map(|s| {
            Record::Stack(StackDef {
                id: StackId(s),
                frames: vec![Frame::Native(0x40_0000 + u64::from(s) * 0x100)],
                truncated: false,
            })
        })
        .collect();
    let (mut t, mut corr, mut next) = (1_000_000u64, 0u32, BASE);
    let mut live = Vec::new();
    for step in steps {
        let mut freed = Vec::new();
        for &(site, bytes, temporary) in step {
            t += 1000;
            corr += 1;
            records.push(Record::Api(ApiCall {
                time: Nanos(t + 500),
                duration: Nanos(500),
                tid: 7,
                func: ApiFunc::MEM_ALLOC,
                correlation: corr,
                bytes: Bytes(bytes),
                address: next,
                stack: StackId(site),
                ..Default::default()
            }));
            let mut m = mem(t + 100, true, next, bytes, None);
            if let Record::Memory(e) = &mut m {
                e.correlation = corr;
            }
            records.push(m);
            if temporary {
                freed.push((next, bytes))
            } else {
                live.push((next, bytes))
            }
            next += bytes.next_multiple_of(MIB);
        }
        for (address, bytes) in freed {
            t += 1000;
            records.push(mem(t, false, address, bytes, None));
        }
    }
    t += pause;
    if end_free {
        for (address, bytes) in live.drain(..) {
            t += 1000;
            records.push(mem(t, false, address, bytes, None));
        }
    }
    if ended {
        records.push(Record::ProcessEnd(ProcessEnd {
            time: Nanos(t + 1000),
        }));
    }
    trace(&records)
}

/// Bytes of growth of every growing site.
fn growth_of(a: &gmem_prof_model::Analysis) -> Vec<u64> {
    a.growth.iter().map(|g| g.growth_bytes).collect()
}

/// Each step a temporary of 8 MiB (site 2) and 2 MiB kept (site 1).
fn leaking_steps(n: usize) -> Vec<Vec<(u32, u64, bool)>> {
    (0..n)
        .map(|_| vec![(2, 8 * MIB, true), (1, 2 * MIB, false)])
        .collect()
}

#[test]
fn a_leak_in_a_loop_grows_whether_or_not_it_is_freed_at_shutdown() {
    for end_free in [false, true] {
        let a = analyze_bytes(&steps_trace(&leaking_steps(100), end_free, true));
        assert_eq!(
            a.growth.len(),
            1,
            "end_free {end_free}: {:?}",
            growth_of(&a)
        );
        let g = &a.growth[0];
        // From the end of the warm-up (20% of 200 allocations: 20 steps
        // kept) to 95% (95 steps kept), one 2 MiB block per step.
        assert_eq!(g.from_bytes, 20 * 2 * MIB, "{g:?}");
        assert_eq!(g.to_bytes, 95 * 2 * MIB, "{g:?}");
    }
}

#[test]
fn memory_filled_then_released_is_a_peak_not_growth() {
    // oom.bin's shape: one site fills memory, block after block, then the
    // program frees it all and exits.
    let fill: Vec<_> = (0..50).map(|_| vec![(1, 16 * MIB, false)]).collect();
    let a = analyze_bytes(&steps_trace(&fill, true, true));
    assert_eq!(growth_of(&a), Vec::<u64>::new());
    assert_eq!(a.devices[0].peak_bytes, 50 * 16 * MIB);
    // The same fill never released (the program was killed while holding
    // it): still held at the end, so it grew.
    let a = analyze_bytes(&steps_trace(&fill, false, false));
    assert_eq!(a.growth.len(), 1, "{:?}", growth_of(&a));
}

#[test]
fn a_set_up_phase_held_flat_then_freed_is_not_growth() {
    // NVIDIA's UnifiedMemoryStreams: 40 tasks, each three buffers from three
    // sites (a third of the allocations each, so each is "among others"),
    // then the tasks run for ten times as long with nothing allocated, and
    // the program frees everything. Rising by allocation count, flat in time.
    let set_up: Vec<_> = (0..40)
        .map(|_| vec![(1, 2 * MIB, false), (2, MIB, false), (3, MIB, false)])
        .collect();
    let a = analyze_bytes(&steps_trace_paused(&set_up, 1_200_000, true, true));
    assert_eq!(growth_of(&a), Vec::<u64>::new());
    assert_eq!(a.devices[0].peak_bytes, 40 * 4 * MIB);
    // Without the pause it is a loop that kept everything until its
    // shutdown freed it: growth, as in the test above.
    let a = analyze_bytes(&steps_trace_paused(&set_up, 0, true, true));
    assert!(!a.growth.is_empty());
}

#[test]
fn a_sawtooth_does_not_grow() {
    // Twelve cycles: ten 2 MiB blocks kept among temporaries, then all
    // freed at the cycle's end (a batch of buffers, cleared).
    let cycle: Vec<_> = (0..10)
        .flat_map(|_| [(2, 8 * MIB, true), (1, 2 * MIB, true)])
        .collect();
    let a = analyze_bytes(&steps_trace(&vec![cycle; 12], false, true));
    assert_eq!(growth_of(&a), Vec::<u64>::new());
    assert!(a.devices[0].peak_bytes >= 20 * MIB);
}

#[test]
fn a_warm_up_then_a_flat_run_does_not_grow() {
    // 30 blocks of 2 MiB kept during the first tenth of the allocations
    // (a model's weights), then 270 steps of temporaries only.
    let mut steps: Vec<_> = (0..30).map(|_| vec![(1, 2 * MIB, false)]).collect();
    steps.extend((0..270).map(|_| vec![(2, 8 * MIB, true)]));
    let a = analyze_bytes(&steps_trace(&steps, false, true));
    assert_eq!(growth_of(&a), Vec::<u64>::new());
    // Still held at exit: a leak in compute-sanitizer's meaning, not growth.
    assert_eq!(a.processes[0].at_exit.leaked_bytes, 60 * MIB);
}

/// Two stream-ordered pools on one device: the default pool, empty (one
/// 32 MiB block allocated and freed: 32 MiB free in one piece), and a
/// custom pool of 64 × 1 MiB blocks with every other one freed (32 MiB
/// free in 1 MiB holes). No allocation from the custom pool can use the
/// default pool's space: the device's figure is the custom pool's,
/// 1 − 1/32, not the 0.5 that adding both pools' free space gave.
#[test]
fn fragmentation_is_the_worst_pools_never_a_sum_of_pools() {
    let default_pool = Some((0xD000, 32 * MIB));
    let custom_pool = Some((0xC000, 64 * MIB));
    let (a_base, c_base) = (BASE, BASE + 0x1000_0000);
    let mut records = vec![
        mem(1_000, true, a_base, 32 * MIB, default_pool),
        mem(2_000, false, a_base, 32 * MIB, default_pool),
    ];
    let mut t = 10_000;
    for i in 0..64 {
        t += 1_000;
        records.push(mem(t, true, c_base + i * MIB, MIB, custom_pool));
    }
    for i in (0..64).step_by(2) {
        t += 1_000;
        records.push(mem(t, false, c_base + i * MIB, MIB, custom_pool));
    }
    let a = analyze_bytes(&trace(&records));
    let worst = a.devices[0]
        .fragmentation
        .worst
        .as_ref()
        .expect("pools seen");
    assert!(
        (worst.fragmentation - (1.0 - 1.0 / 32.0)).abs() < 1e-12,
        "{worst:?}"
    );
    assert_eq!(worst.free_bytes, 32 * MIB);
    assert_eq!(worst.largest_free_bytes, MIB);
    // Each free adds a hole: F is highest after the last one (times count
    // from the first event, at 1 µs).
    assert_eq!(worst.time_ns, t - 1_000, "{worst:?}");
    // Each pool has its own figure: the default pool was never fragmented
    // (its 32 MiB free in one piece), the custom pool's is the device's.
    let regions = &a.devices[0].fragmentation.regions;
    assert_eq!(regions.len(), 2, "{regions:?}");
    for r in regions {
        let w = r.worst.as_ref().expect("each had free space");
        if r.max_size == 32 * MIB {
            assert_eq!(
                (w.fragmentation, w.free_bytes, w.largest_free_bytes),
                (0.0, 32 * MIB, 32 * MIB)
            );
        } else {
            assert_eq!((w.free_bytes, w.largest_free_bytes), (32 * MIB, MIB));
        }
    }
}

/// Pinned host memory lives in the host's RAM: the device's own peak
/// leaves it out (`check --max-peak` judges that), and it has a peak of
/// its own (`--max-pinned`). 4 MiB on the device, then 8 MiB pinned.
#[test]
fn the_device_memory_peak_leaves_pinned_host_memory_out() {
    let pinned = |time, alloc, address, bytes| {
        let mut r = mem(time, alloc, address, bytes, None);
        if let Record::Memory(e) = &mut r {
            e.kind = gmem_prof_traces::record::memory_kind::PINNED;
        }
        r
    };
    let records = vec![
        mem(10, true, BASE, 4 * MIB, None),
        pinned(20, true, 0x5000_0000, 8 * MIB),
        pinned(30, false, 0x5000_0000, 8 * MIB),
        mem(40, false, BASE, 4 * MIB, None),
    ];
    let a = analyze_bytes(&trace(&records));
    let d = &a.devices[0];
    assert_eq!(d.peak_bytes, 12 * MIB, "every kind together");
    assert_eq!(d.device_memory_peak_bytes, 4 * MIB);
    assert_eq!(
        d.device_memory_peak_time_ns, 0,
        "reached by the first event"
    );
    assert_eq!(d.pinned_host_peak_bytes, 8 * MIB);
}

fn launch(time: u64, name: u32, stream: u32) -> Record {
    Record::KernelLaunch(KernelLaunch {
        time: Nanos(time),
        name: StringId(name),
        device: 0,
        stream,
        ..Default::default()
    })
}

/// Kernels traced as launches: at the peak, the last kernel launched on
/// each stream before it; after it, the first launched (the one that will
/// use what was just allocated). None of them claims to be running.
#[test]
fn kernels_traced_as_launches_are_named_around_the_peak_by_launch_order() {
    let names = [(1, "k_a"), (2, "k_b"), (3, "k_c"), (4, "k_d")].map(|(id, text)| {
        Record::String(StringDef {
            id: StringId(id),
            text: text.into(),
        })
    });
    let mut records = names.to_vec();
    records.extend([
        mem(1_000, true, 0x1000, MIB, None),
        launch(2_000, 1, 7),
        launch(3_000, 2, 9),
        launch(4_000, 3, 7),
        mem(5_000, true, 0x200000, 4 * MIB, None),
        launch(6_000, 4, 7),
        mem(7_000, false, 0x200000, 4 * MIB, None),
        launch(8_000, 1, 9),
    ]);
    let a = analyze_bytes(&trace(&records));
    let d = &a.devices[0];
    assert_eq!(d.peak_bytes, 5 * MIB);
    assert!(d.kernels_traced && !d.kernels_timed);
    assert!(d.kernels_at_peak.is_empty(), "none is known to be running");
    let at_peak: Vec<(&str, u32, bool)> = d
        .kernels_launched_before_peak
        .iter()
        .map(|k| (k.name.as_str(), k.stream, k.timed))
        .collect();
    assert_eq!(at_peak, [("k_b", 9, false), ("k_c", 7, false)]);
    let next = d.next_kernel_after_peak.as_ref().unwrap();
    assert_eq!(
        (next.name.as_str(), next.stream, next.timed),
        ("k_d", 7, false)
    );
    assert_eq!(next.start_ns, next.end_ns);
    assert_eq!(a.input.kernels, 5);
}

/// A process whose XLA BFC allocator takes 75% of an 80 GiB device at
/// start (a stack through `tsl::BFCAllocator` in XLA's plugin), and, with
/// `fails`, a later allocation of 30 GiB that fails on the same device.
fn jax_trace(fails: bool) -> Vec<u8> {
    const PLUGIN: u64 = 0x40_0000;
    let mut records = vec![
        Record::Module(ModuleInfo {
            id: 1,
            path: "/venv/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
                .into(),
            bias: 0,
            start: PLUGIN,
            end: PLUGIN + 0x10_0000,
            build_id: Vec::new(),
        }),
        Record::Symbol(SymbolInfo {
            address: PLUGIN + 0x1000,
            module: 1,
            module_offset: 0x1000,
            frames: vec![SymbolFrame {
                function: "tsl::BFCAllocator::Extend(unsigned long, unsigned long)".into(),
                ..Default::default()
            }],
        }),
        Record::Stack(StackDef {
            id: StackId(1),
            frames: vec![Frame::Native(PLUGIN + 0x1000)],
            truncated: false,
        }),
    ];
    let pool = 60u64 << 30;
    records.push(Record::Api(ApiCall {
        time: Nanos(1_000),
        duration: Nanos(500),
        tid: 7,
        func: ApiFunc::MEM_ALLOC,
        correlation: 1,
        bytes: Bytes(pool),
        address: BASE,
        stack: StackId(1),
        ..Default::default()
    }));
    let mut m = mem(1_100, true, BASE, pool, None);
    if let Record::Memory(e) = &mut m {
        e.correlation = 1;
    }
    records.push(m);
    if fails {
        records.push(Record::Api(ApiCall {
            time: Nanos(5_000),
            duration: Nanos(500),
            tid: 7,
            func: ApiFunc::MEM_ALLOC,
            correlation: 2,
            result: 2,
            bytes: Bytes(30 << 30),
            stack: StackId(1),
            ..Default::default()
        }));
    }
    records.push(Record::ProcessEnd(ProcessEnd {
        time: Nanos(10_000),
    }));
    trace(&records)
}

/// JAX's preallocation is something to change only where the device ran
/// short: with an allocation failing on it, the remedy names the pool and
/// the failure; alone on the device with nothing failing, there is none.
#[test]
fn jax_preallocation_is_a_remedy_only_where_the_device_ran_short() {
    let a = analyze_bytes(&jax_trace(true));
    let site = &a.sites[0];
    assert_eq!(site.allocator.as_deref(), Some("XLA's BFC allocator"));
    let r: Vec<_> = a
        .remedies
        .iter()
        .filter_map(|r| match r {
            Remedy::JaxPreallocation {
                preallocated_bytes,
                fraction,
                failed_allocations,
                other_processes,
                ..
            } => Some((
                *preallocated_bytes,
                *fraction,
                *failed_allocations,
                *other_processes,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(r, [(60 << 30, 0.75, 1, 0)]);
    let a = analyze_bytes(&jax_trace(false));
    assert!(
        !a.remedies
            .iter()
            .any(|r| matches!(r, Remedy::JaxPreallocation { .. })),
        "{:?}",
        a.remedies
    );
}
