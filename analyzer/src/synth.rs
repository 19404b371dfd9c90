//! Large, realistic synthetic traces written with the real trace writer,
//! for benchmarks (never fixtures: they are not recordings).
//!
//! The shape follows the allocation-heavy PyTorch loop recorded on the GPU
//! machine (cudaMallocAsync backend): one process, one device, one
//! stream-ordered pool; allocations from 200 sites (stacks of 24 native
//! frames), each with its API call; frees; a kernel every third event; a few
//! hundred blocks live at any time; one site leaking.

use std::io::Write;

use gmem_prof_traces::record::{
    ApiCall, ApiFunc, Bytes, DeviceInfo, Frame, KernelEvent, MemoryEvent, Nanos, ProcessEnd,
    ProcessInfo, StackDef, StackId, StringDef, StringId,
};
use gmem_prof_traces::{Record, TraceWriter};

const SITES: u32 = 200;
const POOL: u64 = 0x7f40_0000_0000;

/// xorshift64: deterministic, dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Writes a trace of about `events` API, memory and kernel records to
/// `out`; returns how many it wrote.
#[expect(
    clippy::too_many_lines,
    reason = "a generator of test traces: one scripted program, read top to bottom"
)]
pub fn write_trace<W: Write>(out: W, events: u64) -> std::io::Result<u64> {
    let mut w = TraceWriter::new(out)?;
    let t0 = 1_800_000_000_000_000_000u64;
    w.push(&Record::Process(ProcessInfo {
        pid: 1000,
        ppid: 1,
        start: Nanos(t0),
        exe: "/usr/bin/python3".into(),
        cmdline: vec!["python3".into(), "train.py".into()],
        kernels_traced: true,
        stacks_captured: true,
        ..Default::default()
    }))?;
    w.push(&Record::Device(DeviceInfo {
        device: 0,
        name: "synthetic GPU".into(),
        total_memory: Bytes(80 << 30),
        ..Default::default()
    }))?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for s in 1..=SITES {
        let frames = (0..24)
            .map(|i| Frame::Native(0x7f00_0000_0000 + u64::from(s) * 0x1000 + i * 0x40))
            .collect();
        w.push(&Record::Stack(StackDef {
            id: StackId(s),
            frames,
            truncated: false,
        }))?;
    }
    for k in 1..=50u32 {
        w.push(&Record::String(StringDef {
            id: StringId(k),
            text: format!("void at::native::kernel_{k}<float>(int, float*)"),
        }))?;
    }
    // Live blocks: (address, bytes). Addresses are slots in the pool.
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut next_slot = 0u64;
    let mut free_slots: Vec<u64> = Vec::new();
    let mut t = t0 + 1_000_000;
    let mut corr = 0u32;
    let mut written = 0u64;
    let pool_size = 4u64 << 30;
    while written < events {
        t += 2_000 + rng.next() % 2_000;
        let r = rng.next();
        let grow = live.len() < 300 || r.is_multiple_of(2);
        if grow {
            corr += 1;
            // Site 1 leaks: its blocks are never chosen for freeing.
            let site = 1 + (rng.next() % u64::from(SITES)) as u32;
            let bytes = (1 + rng.next() % 64) << 16;
            let slot = free_slots.pop().unwrap_or_else(|| {
                next_slot += 1;
                next_slot
            });
            let address = POOL + slot * (4 << 20);
            w.push(&Record::Api(ApiCall {
                time: Nanos(t + 900),
                duration: Nanos(900),
                tid: 1000,
                func: ApiFunc::MEM_ALLOC_ASYNC,
                correlation: corr,
                bytes: Bytes(bytes),
                address,
                stack: StackId(site),
                ..Default::default()
            }))?;
            w.push(&Record::Memory(MemoryEvent {
                time: Nanos(t + 400),
                alloc: true,
                kind: 3,
                address,
                bytes: Bytes(bytes),
                context: 1,
                correlation: corr,
                is_async: true,
                pool_type: 1,
                pool_address: 0x5000,
                pool_size,
                ..Default::default()
            }))?;
            if site != 1 {
                live.push((address, bytes));
            }
            written += 2;
        } else {
            let i = (rng.next() % live.len() as u64) as usize;
            let (address, bytes) = live.swap_remove(i);
            free_slots.push((address - POOL) / (4 << 20));
            w.push(&Record::Memory(MemoryEvent {
                time: Nanos(t),
                alloc: false,
                kind: 3,
                address,
                bytes: Bytes(bytes),
                context: 1,
                is_async: true,
                pool_type: 1,
                pool_address: 0x5000,
                pool_size,
                ..Default::default()
            }))?;
            written += 1;
        }
        if r.is_multiple_of(3) {
            w.push(&Record::Kernel(KernelEvent {
                start: Nanos(t + 1_000),
                end: Nanos(t + 1_000 + r % 50_000),
                name: StringId(1 + (r % 50) as u32),
                stream: 7,
                correlation: corr,
                grid: [128, 1, 1],
                block: [256, 1, 1],
                ..Default::default()
            }))?;
            written += 1;
        }
    }
    w.push(&Record::ProcessEnd(ProcessEnd {
        time: Nanos(t + 1_000),
    }))?;
    w.finish()?;
    Ok(written)
}
