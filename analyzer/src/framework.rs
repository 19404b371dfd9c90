//! The inside of framework allocators, from their own events
//! (`AllocatorEvent` records): PyTorch's caching allocator, per process and
//! device. It keeps the segments the allocator holds from the driver and the
//! blocks (tensors) it hands out inside them, and from those: allocated and
//! reserved over time, the peak of allocated by site, what is live at exit,
//! fragmentation per pool, the out-of-memory errors the allocator raised,
//! and whether each segment is a driver allocation of the same address and
//! size.
//!
//! The allocator reports the size asked for, not the block it hands out.
//! Block sizes are worked out the way the allocator makes them: the request
//! rounded (`AllocConfig::round_size`), or the whole free block it came from
//! when the allocator does not split that block (`block_size`). Free blocks
//! are the gaps between live blocks inside a segment: the allocator merges
//! free neighbours, so each gap is one free block.
//!
//! PyTorch's cudaMallocAsync backend has no segments and reports no events:
//! each tensor is a stream-ordered CUDA allocation, and what it holds is the
//! CUDA pool's size. The sweep (`Engine`) feeds those allocations here as
//! the backend's tensors and the pool's size as its reserve
//! (`set_reserved`), so that both backends get the same view; with no
//! segments there is no free-block layout to judge fragmentation by.

use std::collections::BTreeMap;

use gmem_prof_traces::record::{allocator, AllocatorAction};

use crate::fast_map::FastMap;
use crate::holding::{sites_holding, Holding, HoldsMemory};
use crate::input::{AllocatorEv, TORCH_ASYNC};
use crate::roles::{
    is_pending, Hint, Phase, Phases, RoleLive, Snapshot, PENDING, PENDING_OPTIMIZER,
};
use crate::timeline::{Axis, Curve, Samples};
use gmem_prof_model::{Role, RoleBytes};

const MIB: u64 = 1 << 20;
/// The allocator's smallest block and rounding unit (`kMinBlockSize`).
const MIN_BLOCK: u64 = 512;
/// Largest request served from the small pool (`kSmallSize`).
const SMALL_SIZE: u64 = MIB;
/// Size of a small-pool segment (`kSmallBuffer`).
const SMALL_SEGMENT: u64 = 2 * MIB;

/// The allocator's settings that shape its blocks, from
/// `PYTORCH_CUDA_ALLOC_CONF`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocConfig {
    /// Blocks at least this large are never split (`max_split_size_mb`).
    pub max_split_size: u64,
    /// `roundup_power2_divisions` when given as one number.
    pub roundup_divisions: u64,
    /// Settings this analysis cannot follow (per-size division lists), in
    /// words: block sizes may then differ from the allocator's.
    pub unsupported: Vec<String>,
    /// `backend:cudaMallocAsync`: no caching allocator of PyTorch's own;
    /// every tensor is a stream-ordered CUDA allocation of its exact size.
    pub cuda_malloc_async: bool,
}

impl Default for AllocConfig {
    fn default() -> Self {
        AllocConfig {
            max_split_size: u64::MAX,
            roundup_divisions: 0,
            unsupported: Vec::new(),
            cuda_malloc_async: false,
        }
    }
}

impl AllocConfig {
    /// Parses `key:value,key:value` as PyTorch does for the settings that
    /// matter here; others are ignored.
    pub fn parse(settings: &str) -> AllocConfig {
        let mut c = AllocConfig::default();
        let mut rest = settings;
        while !rest.is_empty() {
            // A value may be a bracketed list holding commas.
            let (item, tail) = match (rest.find(','), rest.find('[')) {
                (Some(comma), Some(open)) if open < comma => match rest.find(']') {
                    Some(close) => {
                        let after = &rest[close + 1..];
                        (&rest[..close + 1], after.strip_prefix(',').unwrap_or(after))
                    }
                    None => (rest, ""),
                },
                (Some(comma), _) => (&rest[..comma], &rest[comma + 1..]),
                (None, _) => (rest, ""),
            };
            rest = tail;
            let Some((key, value)) = item.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "max_split_size_mb" => {
                    if let Ok(mb) = value.parse::<u64>() {
                        c.max_split_size = mb.saturating_mul(MIB);
                    }
                }
                "roundup_power2_divisions" => match value.parse::<u64>() {
                    Ok(n) => c.roundup_divisions = n,
                    Err(_) => c.unsupported.push(format!(
                        "roundup_power2_divisions:{value} (per-size divisions): block sizes are \
                         taken as multiples of 512 bytes"
                    )),
                },
                "backend" => c.cuda_malloc_async = value == "cudaMallocAsync",
                _ => {}
            }
        }
        c
    }

    /// The block size the allocator makes for a request (`round_size`);
    /// the request itself under the cudaMallocAsync backend.
    pub fn round_size(&self, size: u64) -> u64 {
        if self.cuda_malloc_async {
            return size;
        }
        if size < MIN_BLOCK {
            return MIN_BLOCK;
        }
        let divisions = self.roundup_divisions;
        if divisions > 1 && size > MIN_BLOCK * divisions {
            return roundup_power2_next_division(size, divisions);
        }
        size.div_ceil(MIN_BLOCK) * MIN_BLOCK
    }
}

/// PyTorch's `roundup_power2_next_division`: the next of `divisions` equal
/// steps between the powers of two around `size`.
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << size.ilog2();
    let step = floor >> divisions.ilog2();
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded + step
    }
}

/// Which of the allocator's pools a segment or block belongs to: blocks of
/// one pool never come from another pool's segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolKey {
    /// The CUDA stream (blocks are reused only on their stream).
    pub stream: u64,
    /// Private pool (CUDA graphs, `MemPool`: `AllocatorEv::pool`); 0 for
    /// the default pools.
    pub private: u32,
    /// The small-block pool (requests up to 1 MiB in 2 MiB segments).
    pub small: bool,
}

#[derive(Clone, Debug)]
struct Segment {
    end: u64,
    pool: Option<PoolKey>,
    stream: u64,
    private: u32,
    /// Mapped pages of an expandable segment (touching maps join).
    expandable: bool,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    site: u32,
    /// Still allocated (not yet freed by the program).
    allocated: bool,
    /// Allocations of the process before this one.
    seq: u64,
    /// A CUDA library's workspace (`Engine`'s evidence: made on a thread
    /// right after the library allocated for itself there).
    library: bool,
    /// Its role's index in `Role::ALL`, or `PENDING` while its lifetime
    /// has not decided it (`roles`).
    role: u8,
    /// The part of the run (`Phases`) it was made in, and when.
    part: u32,
    made: u64,
}

/// Figures of one site of tensors: one stack on one device.
#[derive(Clone, Debug)]
pub struct TensorSiteStats {
    pub stack: u32,
    /// Its tensors.
    pub held: Holding,
    /// Of `held.at_exit`, CUDA libraries' workspaces (`Block::library`):
    /// (bytes, count).
    pub library_at_exit: (u64, u64),
    /// Bytes of its tensors by role, once each role was known.
    pub roles: RoleBytes,
}

impl HoldsMemory for TensorSiteStats {
    fn held(&self) -> (u64, u64) {
        (self.held.live, self.held.live_count)
    }
}

/// One pool's fragmentation at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolExtent {
    pub reserved: u64,
    pub free: u64,
    pub largest: u64,
    /// Of `free`, the bytes of segments that hold no block: cache, which
    /// `empty_cache()` returns and the allocator releases before a request
    /// could fail.
    pub idle: u64,
}

impl PoolExtent {
    pub fn fragmentation(&self) -> f64 {
        if self.free == 0 {
            0.0
        } else {
            1.0 - self.largest as f64 / self.free as f64
        }
    }
}

#[derive(Debug, Default)]
pub struct PoolState {
    pub frag: Samples<u16>,
    pub largest: Samples<u64>,
    /// (time, extent) at its worst fragmentation.
    pub worst: Option<(u64, PoolExtent)>,
    pub reserved_peak: u64,
}

/// An out-of-memory error the allocator raised.
#[derive(Clone, Debug)]
pub struct FrameworkOomRaw {
    pub time: u64,
    pub device: u32,
    pub requested: u64,
    /// What it tried to obtain from the driver, and the limit it held
    /// against (from its OOM report; `None` without one).
    pub tried: Option<u64>,
    pub limit: Option<u64>,
    pub device_free: u64,
    pub site: Option<u32>,
    pub allocated: u64,
    pub reserved: u64,
    /// Free bytes inside the segments, and the largest free block, in the
    /// pool the request would have come from and over all pools.
    pub pool_free: Option<PoolExtent>,
    pub free_in_segments: u64,
    pub largest_free: u64,
    pub live_by_site: Vec<(u32, u64, u64)>,
    /// Raised by the cudaMallocAsync backend: no segments, and the request
    /// is not seen (`requested` is 0).
    pub cuda_malloc_async: bool,
}

/// The allocator of one process on one device.
#[derive(Debug)]
pub struct AllocatorOnDevice {
    pub allocator: u8,
    segments: BTreeMap<u64, Segment>,
    blocks: BTreeMap<u64, Block>,
    pub allocated: u64,
    pub reserved: u64,
    pub allocated_curve: Curve,
    pub reserved_curve: Curve,
    pub allocated_peak: u64,
    pub allocated_peak_time: u64,
    pub reserved_at_allocated_peak: u64,
    pub reserved_peak: u64,
    /// At the reserved peak, just before the segment that made it: the
    /// segments of the default pools holding no tensor (bytes, count),
    /// which `torch.cuda.empty_cache()` would have returned then.
    pub idle_at_reserved_peak: (u64, u64),
    pub reserved_peak_time: u64,
    /// Allocated once the request that took the segment was served.
    pub allocated_at_reserved_peak: u64,
    /// The tensor site whose request took that segment.
    pub reserved_peak_site: Option<u32>,
    awaiting_peak_site: bool,
    peak_dirty: bool,
    /// (site, bytes, count) at the allocated peak.
    pub peak_sites: Vec<(u32, u64, u64)>,
    /// Its tensors while the device's live set (every process's memory)
    /// stood at its highest: what its segments held at the device's peak.
    pub at_device_peak: AtDevicePeak,
    /// Sites that allocated on this device.
    pub sites: Vec<u32>,
    pub pools: BTreeMap<PoolKey, PoolState>,
    frag_dirty: bool,
    /// Worst pool's F and the largest free block of all pools, per bucket.
    pub frag: Samples<u16>,
    pub largest_free: Samples<u64>,
    pub allocations: u64,
    pub frees: u64,
    pub segment_allocs: u64,
    pub segment_frees: u64,
    pub maps: u64,
    pub unmaps: u64,
    /// Segments (and maps) seen, and those a driver allocation (or VMM
    /// mapping) of the same address and size backs.
    pub segments_seen: u64,
    pub segments_matched: u64,
    /// (address, bytes) of segments with no such driver allocation.
    pub unmatched_segments: Vec<(u64, u64)>,
    /// Frees of blocks this view never saw allocated.
    pub unknown_frees: u64,
    /// Each pool's extent when the program took a snapshot of the
    /// allocator (the first `MAX_SNAPSHOTS`).
    pub snapshots: Vec<(u64, BTreeMap<PoolKey, PoolExtent>)>,
    /// Its tensors by role over time and at its allocated peak.
    pub roles: RoleLive,
}

/// Snapshots whose pools are kept, at most.
const MAX_SNAPSHOTS: usize = 64;

/// A tensor allocated or freed by `FrameworkState::apply`: its site (raw,
/// `FrameworkState::sites`), its bytes as the allocator counts them, and
/// the view's allocated and reserved bytes just after.
#[derive(Clone, Copy, Debug)]
pub struct TensorChange {
    pub alloc: bool,
    pub site: u32,
    pub bytes: u64,
    /// The size the allocator's event gave (what the program asked for).
    pub requested: u64,
    pub allocated: u64,
    pub reserved: u64,
}

/// What a view's tensors held while the device stood at its peak. The
/// device's live set stays at a peak from the allocation that reached it
/// to the next free on the device (the segments do not change in between,
/// the tensors inside them do): the most tensors of that span are kept,
/// with their sites, settled lazily as `peak_sites` is.
#[derive(Debug, Default)]
pub struct AtDevicePeak {
    /// The device is at its highest so far (no free on it since).
    open: bool,
    dirty: bool,
    pub allocated: u64,
    pub time: u64,
    /// (site, bytes, count) then.
    pub sites: Vec<(u32, u64, u64)>,
}

impl AtDevicePeak {
    fn settle(&mut self, view_sites: &[u32], sites: &[TensorSiteStats]) {
        if self.dirty {
            self.dirty = false;
            self.sites.clear();
            self.sites.extend(sites_holding(view_sites, sites));
        }
    }

    /// A tensor was allocated: while the device is at its peak, the most
    /// allocated then is kept.
    #[inline]
    fn allocated(&mut self, t: u64, allocated: u64) {
        if self.open && allocated > self.allocated {
            self.allocated = allocated;
            self.time = t;
            self.dirty = true;
        }
    }
}

impl AllocatorOnDevice {
    /// A segment taken from CUDA, or pages mapped into an expandable one
    /// (`SEGMENT_ALLOC`, `SEGMENT_MAP`).
    fn segment_added(&mut self, t: u64, axis: &Axis, ev: &AllocatorEv, driver: &dyn DriverMemory) {
        let expandable = ev.action == AllocatorAction::SEGMENT_MAP;
        let (start, end) = (ev.address, ev.address.saturating_add(ev.bytes));
        if expandable {
            self.maps += 1;
        } else {
            self.segment_allocs += 1;
        }
        self.segments_seen += 1;
        if backed_by_driver(driver, start, ev.bytes) {
            self.segments_matched += 1;
        } else if self.unmatched_segments.len() < 16 {
            self.unmatched_segments.push((start, ev.bytes));
        }
        let small = !expandable && ev.bytes == SMALL_SEGMENT;
        let mut seg = Segment {
            end,
            pool: (!expandable).then_some(PoolKey {
                stream: ev.stream,
                private: ev.pool,
                small,
            }),
            stream: ev.stream,
            private: ev.pool,
            expandable,
        };
        let mut seg_start = start;
        if expandable {
            // Pages mapped next to mapped pages of the same segment
            // make one range: free blocks span them.
            if let Some((&s, prev)) = self.segments.range(..start).next_back() {
                if prev.expandable && prev.end == start {
                    seg_start = s;
                    seg.pool = prev.pool;
                }
            }
            if let Some(next) = self.segments.get(&end).cloned() {
                if next.expandable {
                    self.segments.remove(&end);
                    seg.end = next.end;
                    seg.pool = seg.pool.or(next.pool);
                }
            }
        }
        self.segments.insert(seg_start, seg);
        if self.set_reserved(t, axis, self.reserved + ev.bytes) {
            self.idle_at_reserved_peak = if expandable {
                (0, 0)
            } else {
                self.idle_segments(seg_start)
            };
        }
        self.frag_dirty = true;
    }

    /// A segment given back to CUDA, or pages unmapped (`SEGMENT_FREE`,
    /// `SEGMENT_UNMAP`).
    fn segment_removed(&mut self, t: u64, axis: &Axis, ev: &AllocatorEv) {
        let (start, end) = (ev.address, ev.address.saturating_add(ev.bytes));
        if ev.action == AllocatorAction::SEGMENT_UNMAP {
            self.unmaps += 1;
            // Cut [start, end) out of the mapped range holding it.
            if let Some((s, seg)) = self.segment_of(start).map(|(s, g)| (s, g.clone())) {
                self.segments.remove(&s);
                if s < start {
                    self.segments.insert(
                        s,
                        Segment {
                            end: start,
                            ..seg.clone()
                        },
                    );
                }
                if end < seg.end {
                    self.segments.insert(end, seg);
                }
            }
        } else {
            self.segment_frees += 1;
            self.segments.remove(&start);
        }
        self.set_reserved(t, axis, self.reserved.saturating_sub(ev.bytes));
        self.frag_dirty = true;
    }

    fn new(allocator: u8) -> AllocatorOnDevice {
        AllocatorOnDevice {
            allocator,
            segments: BTreeMap::new(),
            blocks: BTreeMap::new(),
            allocated: 0,
            reserved: 0,
            allocated_curve: Curve::default(),
            reserved_curve: Curve::default(),
            allocated_peak: 0,
            allocated_peak_time: 0,
            reserved_at_allocated_peak: 0,
            reserved_peak: 0,
            idle_at_reserved_peak: (0, 0),
            reserved_peak_time: 0,
            allocated_at_reserved_peak: 0,
            reserved_peak_site: None,
            awaiting_peak_site: false,
            peak_dirty: false,
            peak_sites: Vec::new(),
            at_device_peak: AtDevicePeak::default(),
            sites: Vec::new(),
            pools: BTreeMap::new(),
            frag_dirty: false,
            frag: Samples::default(),
            largest_free: Samples::default(),
            allocations: 0,
            frees: 0,
            segment_allocs: 0,
            segment_frees: 0,
            maps: 0,
            unmaps: 0,
            segments_seen: 0,
            segments_matched: 0,
            unmatched_segments: Vec::new(),
            unknown_frees: 0,
            snapshots: Vec::new(),
            roles: RoleLive::default(),
        }
    }

    /// The allocator now holds `bytes` from CUDA; at a new peak, the block
    /// allocated next is charged with it (a segment, or a pool's growth,
    /// comes just before the block it is for). Returns whether it is a new
    /// peak.
    fn set_reserved(&mut self, t: u64, axis: &Axis, bytes: u64) -> bool {
        self.reserved = bytes;
        self.reserved_curve.set(axis, bytes);
        if bytes <= self.reserved_peak {
            return false;
        }
        self.reserved_peak = bytes;
        self.reserved_peak_time = t;
        self.allocated_at_reserved_peak = self.allocated;
        self.reserved_peak_site = None;
        self.awaiting_peak_site = true;
        true
    }

    /// Segments of the default pools holding no block (bytes, count),
    /// leaving out the one starting at `except`.
    fn idle_segments(&self, except: u64) -> (u64, u64) {
        self.segments
            .iter()
            .filter(|(&start, seg)| {
                start != except
                    && !seg.expandable
                    && seg.private == 0
                    && self.blocks.range(start..seg.end).next().is_none()
            })
            .fold((0, 0), |(bytes, n), (&start, seg)| {
                (bytes + (seg.end - start), n + 1)
            })
    }

    /// Whether `addr` lies in its device memory: a segment, or a live
    /// tensor (a pool-backed view has no segments).
    fn holds(&self, addr: u64) -> bool {
        self.segment_of(addr).is_some()
            || self
                .blocks
                .range(..=addr)
                .next_back()
                .is_some_and(|(&start, b)| b.allocated && addr - start < b.size)
    }

    /// The segment holding `addr`.
    fn segment_of(&self, addr: u64) -> Option<(u64, &Segment)> {
        let (&start, seg) = self.segments.range(..=addr).next_back()?;
        (addr < seg.end).then_some((start, seg))
    }

    /// The size of the block the allocator hands out at `addr` for a block
    /// of `rounded` bytes: the whole free block when it does not split it.
    fn block_size(&self, addr: u64, rounded: u64, config: &AllocConfig) -> u64 {
        let Some((_, seg)) = self.segment_of(addr) else {
            return rounded;
        };
        let next_block = self
            .blocks
            .range(addr + 1..)
            .next()
            .map_or(seg.end, |(&a, _)| a);
        let gap = next_block.min(seg.end).saturating_sub(addr);
        if gap <= rounded {
            return rounded;
        }
        let remaining = gap - rounded;
        // The allocator's `should_split`.
        let small = rounded <= SMALL_SIZE;
        let split = if small || seg.expandable {
            remaining >= MIN_BLOCK
        } else {
            rounded < config.max_split_size && remaining > SMALL_SIZE
        };
        if split {
            rounded
        } else {
            gap
        }
    }

    /// Free bytes and the largest free block of each pool now.
    pub fn extents(&self) -> BTreeMap<PoolKey, PoolExtent> {
        let mut out: BTreeMap<PoolKey, PoolExtent> = BTreeMap::new();
        for (&start, seg) in &self.segments {
            let key = seg.pool.unwrap_or(PoolKey {
                stream: seg.stream,
                private: seg.private,
                small: false,
            });
            let e = out.entry(key).or_default();
            e.reserved += seg.end - start;
            let mut at = start;
            let gap = |from: u64, to: u64, e: &mut PoolExtent| {
                if to > from {
                    e.free += to - from;
                    e.largest = e.largest.max(to - from);
                }
            };
            let mut holds_blocks = false;
            for (&a, b) in self.blocks.range(start..seg.end) {
                gap(at, a, e);
                at = at.max(a + b.size);
                holds_blocks = true;
            }
            gap(at, seg.end, e);
            if !holds_blocks {
                e.idle += seg.end - start;
            }
        }
        out
    }

    fn sample(&mut self, axis: &Axis, now: u64) {
        if !self.frag_dirty {
            return;
        }
        self.frag_dirty = false;
        let extents = self.extents();
        let mut worst: Option<f64> = None;
        let mut largest = 0u64;
        for (key, e) in &extents {
            let p = self.pools.entry(*key).or_default();
            p.reserved_peak = p.reserved_peak.max(e.reserved);
            let f = (e.free > 0).then(|| e.fragmentation());
            p.frag
                .put(axis, axis.current, f.map(|f| (f * 1000.0).round() as u16));
            p.largest.put(axis, axis.current, Some(e.largest));
            if let Some(f) = f {
                if p.worst.is_none_or(|(_, w)| f > w.fragmentation()) {
                    p.worst = Some((now, *e));
                }
                worst = Some(worst.map_or(f, |w: f64| w.max(f)));
            }
            largest = largest.max(e.largest);
        }
        // Pools that are gone: no free space there now.
        for (key, p) in self.pools.iter_mut() {
            if !extents.contains_key(key) {
                p.frag.put(axis, axis.current, None);
                p.largest.put(axis, axis.current, Some(0));
            }
        }
        self.frag.put(
            axis,
            axis.current,
            worst.map(|f| (f * 1000.0).round() as u16),
        );
        self.largest_free.put(axis, axis.current, Some(largest));
    }
}

/// What the driver side of the trace says about an address, for matching
/// segments with driver allocations.
pub trait DriverMemory {
    /// Bytes of the live driver allocation (or VMM mapping) at `address`.
    fn live_at(&self, address: u64) -> Option<u64>;
}

/// The name of a framework allocator's view.
pub fn allocator_name(id: u8) -> &'static str {
    if id == TORCH_ASYNC {
        "PyTorch (cudaMallocAsync backend)"
    } else {
        allocator::name(id.max(1))
    }
}

/// Everything seen inside framework allocators in one process.
#[derive(Debug)]
pub struct FrameworkState {
    pub devices: BTreeMap<u32, AllocatorOnDevice>,
    pub sites: Vec<TensorSiteStats>,
    site_index: FastMap<(u32, u32), u32>,
    pub ooms: Vec<FrameworkOomRaw>,
    pub config: AllocConfig,
    /// Tensors allocated so far in the process.
    pub allocations: u64,
    /// Its tensor count over time (`ProcState::own_allocation_curve`).
    pub allocation_curve: Curve,
    /// The last block freed, with the allocation count when it was made:
    /// freed before another allocation, it was a temporary.
    last_alloc: Option<(u64, u32, u64)>,
    /// PyTorch's phases, which decide the roles of tensors whose stacks
    /// say nothing (`roles`).
    pub phases: Phases,
    /// The process's tensors by role at each step's allocated peak.
    pub step_roles: StepRoles,
    /// Before the first phase: the tensors freed, not at once, that no
    /// phase could tell yet (`EarlyFree`); `None` once a phase began, or
    /// when more than `EARLY_FREES_KEPT` were (they stay unknown).
    early_frees: Option<Vec<EarlyFree>>,
}

/// A tensor made and freed before the process's first phase, not at once:
/// unknown while the process may have no phases at all (its whole run
/// would be one part then, shutdown included); a temporary of the first
/// forward once a phase begins (the part before the first phase is that
/// forward, which the bootstrap does not mark).
#[derive(Clone, Copy, Debug)]
struct EarlyFree {
    device: u32,
    site: u32,
    /// When it was made and freed, the process's allocation counts then,
    /// and the step under way at its free.
    made: u64,
    freed: u64,
    seq: u64,
    freed_seq: u64,
    step: u64,
    bytes: u64,
}

/// The first forward of a large model frees some thousands of tensors; a
/// program with no phases would add to the list for its whole run.
const EARLY_FREES_KEPT: usize = 1 << 18;

impl EarlyFree {
    /// Whether it was live at `s`, the snapshot of step `step`: made by
    /// then, and freed after (a snapshot at its free's allocation count
    /// was taken before the free unless a later step took it).
    fn live_at(&self, step: u64, s: &Snapshot) -> bool {
        self.seq <= s.seq
            && (s.seq < self.freed_seq || s.seq == self.freed_seq && step == self.step)
    }
}

/// The process's tensors by role at its steps' allocated peaks, the peak of
/// the step under way settled lazily (at its first fall) as a view's is.
#[derive(Debug, Default)]
pub struct StepRoles {
    /// The number of the last step that ended (0 before the first).
    ended: u64,
    live: u64,
    high: u64,
    dirty: bool,
    current: Snapshot,
    /// (step number, its peak by role) of the first `STEPS_KEPT` steps.
    pub finished: Vec<(u64, Snapshot)>,
}

impl StepRoles {
    /// The step snapshots taken since the `seq`th allocation: those a
    /// tensor allocated then and live now was live at.
    fn since(&mut self, seq: u64) -> impl Iterator<Item = &mut Snapshot> {
        let kept = self.finished.iter_mut().rev().map(|(_, s)| s);
        std::iter::once(&mut self.current).chain(kept.take_while(move |s| s.seq >= seq))
    }

    fn resolved(&mut self, seq: u64, role: Role, bytes: u64) {
        for s in self.since(seq) {
            s.resolved(seq, role, bytes);
        }
    }

    /// A tensor freed before the first phase, counted as `was`, is `role`
    /// in every step snapshot it was live at.
    fn relabel_freed(&mut self, e: &EarlyFree, was: Role, role: Role) {
        let current = (self.ended + 1, &mut self.current);
        let kept = self.finished.iter_mut().map(|(n, s)| (*n, s));
        for (step, s) in kept.chain(std::iter::once(current)) {
            if e.live_at(step, s) {
                s.roles.moved(was, role, e.bytes);
            }
        }
    }
}

/// The process's tensors by role now (its views summed).
fn process_snapshot(devices: &BTreeMap<u32, AllocatorOnDevice>, seq: u64) -> Snapshot {
    let mut out = Snapshot {
        seq,
        ..Snapshot::default()
    };
    for d in devices.values() {
        out.roles = out.roles.plus(&d.roles.live);
        out.pending += d.roles.pending;
    }
    out
}

/// A live block whose role was pending turned out to be `role`.
fn resolve(
    roles: &mut RoleLive,
    steps: &mut StepRoles,
    sites: &mut [TensorSiteStats],
    axis: &Axis,
    b: &mut Block,
    role: Role,
) {
    b.role = role.index() as u8;
    roles.resolve(axis, b.made, b.seq, role, b.size);
    steps.resolved(b.seq, role, b.size);
    sites[b.site as usize].roles.add(role, b.size);
}

/// A block the program freed at `t` (`immediate`: before another was
/// allocated): a pending role is decided by when (`Phases::at_free`), then
/// its bytes leave its role and the process's live bytes. One freed before
/// the first phase that no phase could tell yet is kept in `early`.
fn freed(
    fw: (
        &mut [TensorSiteStats],
        &mut StepRoles,
        &mut Option<Vec<EarlyFree>>,
    ),
    (phases, axis, t, allocations): (&Phases, &Axis, u64, u64),
    (roles, device): (&mut RoleLive, u32),
    b: &mut Block,
    immediate: bool,
) {
    let (sites, steps, early) = fw;
    if is_pending(b.role) {
        let role = phases.at_free(b.part, immediate, b.role == PENDING_OPTIMIZER);
        resolve(roles, steps, sites, axis, b, role);
        if role == Role::Unknown && !phases.seen {
            if let Some(list) = early {
                if list.len() == EARLY_FREES_KEPT {
                    *early = None;
                } else {
                    list.push(EarlyFree {
                        device,
                        site: b.site,
                        made: b.made,
                        freed: t,
                        seq: b.seq,
                        freed_seq: allocations,
                        step: steps.ended + 1,
                        bytes: b.size,
                    });
                }
            }
        }
    }
    released(roles, steps, axis, b);
}

/// A block is no longer allocated: its bytes leave its role (or the
/// pending ones) and the process's live bytes.
fn released(roles: &mut RoleLive, steps: &mut StepRoles, axis: &Axis, b: &Block) {
    if is_pending(b.role) {
        roles.pending = roles.pending.saturating_sub(b.size);
    } else {
        roles.change(axis, Role::ALL[b.role as usize], b.size, false);
    }
    steps.live = steps.live.saturating_sub(b.size);
}

/// The view of an event's device, made on its first event, taking the
/// event's allocator: one lookup per event. It borrows the map alone, so the
/// rest of the state stays free to use beside the view.
fn view_of<'a>(
    devices: &'a mut BTreeMap<u32, AllocatorOnDevice>,
    ev: &AllocatorEv,
) -> &'a mut AllocatorOnDevice {
    let dev = devices
        .entry(ev.device())
        .or_insert_with(|| AllocatorOnDevice::new(ev.allocator));
    dev.allocator = ev.allocator;
    dev
}

impl FrameworkState {
    pub fn new(config: AllocConfig) -> FrameworkState {
        FrameworkState {
            devices: BTreeMap::new(),
            sites: Vec::new(),
            site_index: FastMap::default(),
            ooms: Vec::new(),
            config,
            allocations: 0,
            allocation_curve: Curve::default(),
            last_alloc: None,
            phases: Phases::default(),
            step_roles: StepRoles::default(),
            early_frees: Some(Vec::new()),
        }
    }

    /// A phase of PyTorch's loop began (`Phases::begin`). The first one
    /// tells that what was made and freed before it was the first
    /// forward's temporaries (`EarlyFree`).
    pub fn phase_begin(&mut self, axis: &Axis, id: u64, phase: Phase) {
        if let Some(early) = self.early_frees.take() {
            for e in &early {
                self.relabel_freed(axis, e, Role::Unknown, Role::Temporary);
            }
        }
        self.phases.begin(id, phase);
    }

    /// A tensor already freed, counted as `was`, is `role` in every figure
    /// it was live for.
    fn relabel_freed(&mut self, axis: &Axis, e: &EarlyFree, was: Role, role: Role) {
        if let Some(dev) = self.devices.get_mut(&e.device) {
            let roles = &mut dev.roles;
            let b = e.bytes as i64;
            roles.curves[was.index()].shift_between(axis, e.made, e.freed, -b);
            roles.curves[role.index()].shift_between(axis, e.made, e.freed, b);
            // A view's peak is taken at its first fall after it: one at
            // this free's allocation count was taken before the free.
            if e.live_at(e.step, &roles.at_peak) {
                roles.at_peak.roles.moved(was, role, e.bytes);
            }
        }
        self.step_roles.relabel_freed(e, was, role);
        self.sites[e.site as usize].roles.moved(was, role, e.bytes);
    }

    /// The program copied `bytes` from `src` to `dst` (`from_host`: the
    /// call says the source is host memory; else it is unless it lies in
    /// the allocator's segments, its device memory). Data moved from the
    /// host into a live tensor whose role its lifetime was to tell makes
    /// it an input: a batch moved with `.to("cuda")`, which no frame
    /// names.
    pub fn copied(&mut self, axis: &Axis, dst: u64, src: u64, bytes: u64, from_host: bool) {
        if bytes == 0 || !from_host && self.devices.values().any(|d| d.holds(src)) {
            return;
        }
        for dev in self.devices.values_mut() {
            let Some((&start, b)) = dev.blocks.range_mut(..=dst).next_back() else {
                continue;
            };
            if dst - start >= b.size || !b.allocated {
                continue;
            }
            if b.role == PENDING {
                resolve(
                    &mut dev.roles,
                    &mut self.step_roles,
                    &mut self.sites,
                    axis,
                    b,
                    Role::Input,
                );
            }
            return;
        }
    }

    /// A range ended; if it was a backward or an optimizer's step, what
    /// it made and kept is decided.
    pub fn phase_end(&mut self, axis: &Axis, id: u64) {
        if let Some(phase) = self.phases.end(id) {
            if phase != Phase::Forward {
                self.settle_pending(axis, |phases, part, optimizer| {
                    phases.at_phase_end(part, phase, optimizer)
                });
            }
        }
    }

    /// Decides the pending blocks `decide` has a role for. It walks the
    /// live blocks: a phase's end is rare beside the tensors of a phase,
    /// and a list of the pending ones would cost every tensor a push.
    fn settle_pending(&mut self, axis: &Axis, decide: impl Fn(&Phases, u32, bool) -> Option<Role>) {
        for dev in self.devices.values_mut() {
            if dev.roles.pending == 0 {
                continue;
            }
            for b in dev.blocks.values_mut() {
                if !b.allocated || !is_pending(b.role) {
                    continue;
                }
                if let Some(role) = decide(&self.phases, b.part, b.role == PENDING_OPTIMIZER) {
                    resolve(
                        &mut dev.roles,
                        &mut self.step_roles,
                        &mut self.sites,
                        axis,
                        b,
                        role,
                    );
                }
            }
        }
    }

    /// After the sweep, once stacks are symbolized: the live blocks of the
    /// sites `library` names (their stacks run through a CUDA library or
    /// the framework's code that keeps a library's workspace), and those
    /// made right after a library's own allocation and kept to the end
    /// (`Hint::AfterLibrary`), are workspaces, in every figure they were
    /// live for (kept to the end, they were live at every snapshot since
    /// they were made).
    pub fn workspace_sites(&mut self, axis: &Axis, library: impl Fn(u32) -> bool) {
        for dev in self.devices.values_mut() {
            for b in dev.blocks.values_mut() {
                let site_is_library = library(b.site);
                if !b.allocated || is_pending(b.role) || !(b.library || site_is_library) {
                    continue;
                }
                let was = Role::ALL[b.role as usize];
                if was == Role::Workspace {
                    continue;
                }
                b.role = Role::Workspace.index() as u8;
                b.library = true;
                dev.roles
                    .reclassify(axis, b.made, b.seq, was, Role::Workspace, b.size);
                for s in self.step_roles.since(b.seq) {
                    s.moved(b.seq, was, Role::Workspace, b.size);
                }
                if !site_is_library {
                    self.sites[b.site as usize]
                        .roles
                        .moved(was, Role::Workspace, b.size);
                }
            }
        }
        // The site is the library's whole: each of its tensors was.
        for (i, s) in self.sites.iter_mut().enumerate() {
            if library(i as u32) {
                let all = s.roles.total();
                s.roles = RoleBytes::default();
                s.roles.add(Role::Workspace, all);
            }
        }
    }

    /// Leaving a step's highest so far: its tensors by role are taken now.
    fn settle_step(&mut self) {
        if self.step_roles.dirty {
            self.step_roles.dirty = false;
            self.step_roles.current = process_snapshot(&self.devices, self.allocations);
        }
    }

    /// The process finished step `number`: its peak by role is kept, and
    /// the next step starts from what is live.
    pub fn end_step(&mut self, number: u64) {
        self.settle_step();
        let steps = &mut self.step_roles;
        steps.ended = number;
        if steps.finished.len() < gmem_prof_model::STEPS_KEPT {
            steps.finished.push((number, steps.current));
        }
        steps.high = steps.live;
        steps.current = process_snapshot(&self.devices, self.allocations);
    }

    fn site(&mut self, stack: u32, device: u32) -> u32 {
        if let Some(&i) = self.site_index.get(&(stack, device)) {
            return i;
        }
        let i = self.sites.len() as u32;
        self.sites.push(TensorSiteStats {
            stack,
            held: Holding::default(),
            library_at_exit: (0, 0),
            roles: RoleBytes::default(),
        });
        self.site_index.insert((stack, device), i);
        self.devices
            .entry(device)
            .or_insert_with(|| AllocatorOnDevice::new(0))
            .sites
            .push(i);
        i
    }

    /// Applies one event at time `t`; returns the tensor it allocated or
    /// freed, if it did. `hint`: what the block an `ALLOC` hands out is,
    /// when its stack or the moment says (a CUDA library's workspace:
    /// `Block::library`).
    pub fn apply(
        &mut self,
        t: u64,
        axis: &Axis,
        ev: &AllocatorEv,
        hint: Hint,
        driver: &dyn DriverMemory,
    ) -> Option<TensorChange> {
        if ev.action == AllocatorAction::FREE {
            let freed = self.apply(
                t,
                axis,
                &AllocatorEv {
                    action: AllocatorAction::FREE_REQUESTED,
                    ..*ev
                },
                Hint::Lifetime,
                driver,
            );
            let completed = self.apply(
                t,
                axis,
                &AllocatorEv {
                    action: AllocatorAction::FREE_COMPLETED,
                    ..*ev
                },
                Hint::Lifetime,
                driver,
            );
            return freed.or(completed);
        }
        let site = match ev.action {
            AllocatorAction::ALLOC | AllocatorAction::OOM => Some(self.site(ev.stack, ev.device())),
            _ => None,
        };
        match ev.action {
            AllocatorAction::ALLOC => {
                return Some(self.alloc(t, axis, ev, site.unwrap_or(0), hint));
            }
            AllocatorAction::FREE_REQUESTED => {
                self.settle_step();
                return self.free_requested(t, axis, ev);
            }
            AllocatorAction::FREE_COMPLETED => {
                self.settle_step();
                return self.free_completed(t, axis, ev);
            }
            AllocatorAction::SEGMENT_ALLOC | AllocatorAction::SEGMENT_MAP => {
                view_of(&mut self.devices, ev).segment_added(t, axis, ev, driver);
            }
            AllocatorAction::SEGMENT_FREE | AllocatorAction::SEGMENT_UNMAP => {
                view_of(&mut self.devices, ev).segment_removed(t, axis, ev);
            }
            AllocatorAction::OOM => self.oom(t, ev, site),
            AllocatorAction::SNAPSHOT => {
                let dev = view_of(&mut self.devices, ev);
                if dev.snapshots.len() < MAX_SNAPSHOTS {
                    let extents = dev.extents();
                    dev.snapshots.push((t, extents));
                }
            }
            AllocatorAction::OOM_REPORT => self.oom_report(t, ev),
            _ => {
                view_of(&mut self.devices, ev);
            }
        }
        None
    }

    /// A tensor handed out (`ALLOC`) by site `site`.
    fn alloc(
        &mut self,
        t: u64,
        axis: &Axis,
        ev: &AllocatorEv,
        site: u32,
        hint: Hint,
    ) -> TensorChange {
        let role = match hint {
            Hint::Known(role) => Some(role),
            Hint::Lifetime | Hint::Optimizer | Hint::AfterLibrary => None,
        };
        let part = self.phases.current();
        let dev = view_of(&mut self.devices, ev);
        let rounded = self.config.round_size(ev.bytes);
        let size = dev.block_size(ev.address, rounded, &self.config);
        let key = PoolKey {
            stream: ev.stream,
            private: ev.pool,
            small: rounded <= SMALL_SIZE,
        };
        if let Some((start, seg)) = dev.segment_of(ev.address) {
            if seg.pool.is_none() {
                if let Some(s) = dev.segments.get_mut(&start) {
                    s.pool = Some(key);
                }
            }
        }
        self.allocations += 1;
        self.allocation_curve.set(axis, self.allocations);
        if let Some(old) = dev.blocks.insert(
            ev.address,
            Block {
                size,
                site,
                allocated: true,
                seq: self.allocations,
                library: matches!(hint, Hint::Known(Role::Workspace) | Hint::AfterLibrary),
                role: hint.role_byte(),
                part,
                made: t,
            },
        ) {
            // A free we never saw: take the old block out.
            if old.allocated {
                dev.allocated = dev.allocated.saturating_sub(old.size);
                self.sites[old.site as usize].held.release(old.size, axis);
                released(&mut dev.roles, &mut self.step_roles, axis, &old);
            }
        }
        match role {
            Some(r) => {
                dev.roles.change(axis, r, size, true);
                self.sites[site as usize].roles.add(r, size);
            }
            None => {
                dev.roles.pending += size;
            }
        }
        let steps = &mut self.step_roles;
        steps.live += size;
        if steps.live > steps.high {
            steps.high = steps.live;
            steps.dirty = true;
        }
        self.last_alloc = Some((ev.address, ev.device(), self.allocations));
        dev.allocations += 1;
        dev.allocated += size;
        if dev.awaiting_peak_site {
            dev.reserved_peak_site = Some(site);
            dev.allocated_at_reserved_peak = dev.allocated;
            dev.awaiting_peak_site = false;
        }
        dev.allocated_curve.set(axis, dev.allocated);
        dev.frag_dirty = true;
        self.sites[site as usize].held.alloc(size, axis);
        if dev.allocated > dev.allocated_peak {
            dev.allocated_peak = dev.allocated;
            dev.allocated_peak_time = t;
            dev.reserved_at_allocated_peak = dev.reserved;
            dev.peak_dirty = true;
        }
        dev.at_device_peak.allocated(t, dev.allocated);
        TensorChange {
            alloc: true,
            site,
            bytes: size,
            requested: ev.bytes,
            allocated: dev.allocated,
            reserved: dev.reserved,
        }
    }

    /// The program freed a tensor (`FREE_REQUESTED`): it is no longer
    /// allocated, though its block may wait for its stream's work.
    fn free_requested(&mut self, t: u64, axis: &Axis, ev: &AllocatorEv) -> Option<TensorChange> {
        let dev = view_of(&mut self.devices, ev);
        // Leaving a peak: what was live at it is settled now.
        settle_peak(dev, &self.sites, self.allocations);
        dev.at_device_peak.settle(&dev.sites, &self.sites);
        match dev.blocks.get_mut(&ev.address) {
            Some(b) if b.allocated => {
                let immediate = self.last_alloc == Some((ev.address, ev.device(), b.seq));
                freed(
                    (&mut self.sites, &mut self.step_roles, &mut self.early_frees),
                    (&self.phases, axis, t, self.allocations),
                    (&mut dev.roles, ev.device()),
                    b,
                    immediate,
                );
                b.allocated = false;
                let (size, site, seq) = (b.size, b.site, b.seq);
                dev.frees += 1;
                dev.allocated = dev.allocated.saturating_sub(size);
                dev.allocated_curve.set(axis, dev.allocated);
                let s = &mut self.sites[site as usize].held;
                s.release(size, axis);
                if self.last_alloc == Some((ev.address, ev.device(), seq)) {
                    s.temporaries += 1;
                }
                return Some(TensorChange {
                    alloc: false,
                    site,
                    bytes: size,
                    requested: ev.bytes,
                    allocated: dev.allocated,
                    reserved: dev.reserved,
                });
            }
            Some(_) => {}
            None => dev.unknown_frees += 1,
        }
        None
    }

    /// A freed block's memory is free again (`FREE_COMPLETED`).
    fn free_completed(&mut self, t: u64, axis: &Axis, ev: &AllocatorEv) -> Option<TensorChange> {
        let dev = view_of(&mut self.devices, ev);
        if let Some(mut b) = dev.blocks.remove(&ev.address) {
            if b.allocated {
                // Completed without a request seen: both at once.
                settle_peak(dev, &self.sites, self.allocations);
                dev.at_device_peak.settle(&dev.sites, &self.sites);
                let immediate = self.last_alloc == Some((ev.address, ev.device(), b.seq));
                freed(
                    (&mut self.sites, &mut self.step_roles, &mut self.early_frees),
                    (&self.phases, axis, t, self.allocations),
                    (&mut dev.roles, ev.device()),
                    &mut b,
                    immediate,
                );
                dev.frees += 1;
                dev.allocated = dev.allocated.saturating_sub(b.size);
                dev.allocated_curve.set(axis, dev.allocated);
                self.sites[b.site as usize].held.release(b.size, axis);
                return Some(TensorChange {
                    alloc: false,
                    site: b.site,
                    bytes: b.size,
                    requested: ev.bytes,
                    allocated: dev.allocated,
                    reserved: dev.reserved,
                });
            }
            dev.frag_dirty = true;
        }
        None
    }

    /// The allocator could not serve a request (`OOM`): what it held then.
    fn oom(&mut self, t: u64, ev: &AllocatorEv, site: Option<u32>) {
        let dev = view_of(&mut self.devices, ev);
        let rounded = self.config.round_size(ev.bytes);
        let extents = dev.extents();
        let pool = PoolKey {
            stream: 0,
            private: 0,
            small: rounded <= SMALL_SIZE,
        };
        let pool_free = extents
            .iter()
            .filter(|(k, _)| k.small == pool.small && k.private == 0)
            .map(|(_, e)| *e)
            .reduce(|a, b| PoolExtent {
                reserved: a.reserved + b.reserved,
                free: a.free + b.free,
                largest: a.largest.max(b.largest),
                idle: a.idle + b.idle,
            });
        let live_by_site = sites_holding(&dev.sites, &self.sites).collect();
        self.ooms.push(FrameworkOomRaw {
            time: t,
            device: ev.device(),
            requested: ev.bytes,
            tried: None,
            limit: None,
            device_free: ev.address,
            site,
            allocated: dev.allocated,
            reserved: dev.reserved,
            pool_free,
            free_in_segments: extents.values().map(|e| e.free).sum(),
            largest_free: extents.values().map(|e| e.largest).max().unwrap_or(0),
            live_by_site,
            cuda_malloc_async: dev.allocator == TORCH_ASYNC,
        });
    }

    /// The allocator's own report of the error it raised (`OOM_REPORT`).
    fn oom_report(&mut self, t: u64, ev: &AllocatorEv) {
        let dev = view_of(&mut self.devices, ev);
        // The report of the error just raised on this device.
        let last = self
            .ooms
            .iter_mut()
            .rev()
            .find(|o| o.device == ev.device() && o.tried.is_none());
        match last {
            Some(o) => {
                o.tried = Some(ev.bytes);
                o.limit = Some(ev.stream);
                o.device_free = ev.address;
            }
            None => self.ooms.push(FrameworkOomRaw {
                time: t,
                device: ev.device(),
                requested: ev.bytes,
                tried: Some(ev.bytes),
                limit: Some(ev.stream),
                device_free: ev.address,
                site: None,
                allocated: dev.allocated,
                reserved: dev.reserved,
                pool_free: None,
                free_in_segments: 0,
                largest_free: 0,
                live_by_site: Vec::new(),
                cuda_malloc_async: dev.allocator == TORCH_ASYNC,
            }),
        }
    }

    /// The memory an allocator with no segments of its own holds from CUDA
    /// (the cudaMallocAsync backend: the size of the pools its tensors come
    /// from), set before the allocation that made it grow.
    pub fn set_reserved(&mut self, t: u64, axis: &Axis, device: u32, allocator: u8, bytes: u64) {
        let dev = self
            .devices
            .entry(device)
            .or_insert_with(|| AllocatorOnDevice::new(allocator));
        if dev.reserved != bytes {
            dev.set_reserved(t, axis, bytes);
        }
    }

    /// Records fragmentation at the end of the current bucket.
    pub fn sample(&mut self, axis: &Axis, now: u64) {
        for dev in self.devices.values_mut() {
            dev.sample(axis, now);
        }
    }

    /// The live set of `device` (every process's memory) reached a new
    /// high at `t`: what this process's tensors hold from now until it
    /// falls is what its segments held at the device's peak.
    pub fn device_peak_reached(&mut self, device: u32, t: u64) {
        if let Some(dev) = self.devices.get_mut(&device) {
            let p = &mut dev.at_device_peak;
            p.open = true;
            p.dirty = true;
            p.allocated = dev.allocated;
            p.time = t;
        }
    }

    /// The live set of `device` stands at its peak: a view that was not
    /// there when it was reached joins it now.
    pub fn device_peak_joined(&mut self, device: u32, t: u64) {
        if let Some(dev) = self.devices.get_mut(&device) {
            let p = &mut dev.at_device_peak;
            if !p.open && p.time == 0 {
                p.open = true;
                p.dirty = true;
                p.allocated = dev.allocated;
                p.time = t;
            }
        }
    }

    /// The live set of `device` fell from its peak.
    pub fn device_peak_left(&mut self, device: u32) {
        if let Some(dev) = self.devices.get_mut(&device) {
            dev.at_device_peak.settle(&dev.sites, &self.sites);
            dev.at_device_peak.open = false;
        }
    }

    /// At the end of the process (or of the trace): settles the peaks and
    /// what is live.
    pub fn finish(&mut self, axis: &Axis, now: u64) {
        // What is still pending was kept past every phase that could
        // have told.
        self.settle_pending(axis, |phases, _, optimizer| {
            Some(if optimizer && phases.seen {
                Role::OptimizerState
            } else {
                Role::Unknown
            })
        });
        self.settle_step();
        for dev in self.devices.values_mut() {
            dev.frag_dirty = true;
            dev.sample(axis, now);
            settle_peak(dev, &self.sites, self.allocations);
            dev.at_device_peak.settle(&dev.sites, &self.sites);
            for &(site, bytes, count) in &dev.peak_sites {
                let s = &mut self.sites[site as usize];
                s.held.at_peak += bytes;
                s.held.at_peak_count += count;
            }
        }
        for s in &mut self.sites {
            s.held.at_exit = s.held.live;
            s.held.at_exit_count = s.held.live_count;
            s.library_at_exit = (0, 0);
        }
        for dev in self.devices.values() {
            for b in dev.blocks.values().filter(|b| b.allocated && b.library) {
                let s = &mut self.sites[b.site as usize].library_at_exit;
                s.0 += b.size;
                s.1 += 1;
            }
        }
    }
}

/// Copies the live sites into the peak's breakdown if a new peak was
/// reached since it was last copied.
fn settle_peak(dev: &mut AllocatorOnDevice, sites: &[TensorSiteStats], seq: u64) {
    if !dev.peak_dirty {
        return;
    }
    dev.peak_dirty = false;
    dev.roles.at_peak = dev.roles.snapshot(seq);
    dev.peak_sites.clear();
    dev.peak_sites.extend(sites_holding(&dev.sites, sites));
}

/// Whether driver allocations (or VMM mappings, page by page) back
/// `[start, start + bytes)` exactly.
fn backed_by_driver(driver: &dyn DriverMemory, start: u64, bytes: u64) -> bool {
    let end = start.saturating_add(bytes);
    let mut at = start;
    // A segment is one allocation; an expandable segment's map may be
    // several mappings of one page size.
    for _ in 0..4096 {
        match driver.live_at(at) {
            Some(b) if b > 0 => at = at.saturating_add(b),
            _ => return false,
        }
        if at >= end {
            return at == end;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoDriver;
    impl DriverMemory for NoDriver {
        fn live_at(&self, _: u64) -> Option<u64> {
            None
        }
    }

    struct Driver(BTreeMap<u64, u64>);
    impl DriverMemory for Driver {
        fn live_at(&self, a: u64) -> Option<u64> {
            self.0.get(&a).copied()
        }
    }

    fn ev(action: AllocatorAction, address: u64, bytes: u64) -> AllocatorEv {
        AllocatorEv {
            allocator: 1,
            action,
            device16: 0,
            stack: 1,
            tid: 0,
            pool: 0,
            address,
            bytes,
            stream: 0,
        }
    }

    /// Tensors freed before the first phase, not at once, are unknown
    /// while the process may have no phases; once one begins they were
    /// its first forward's temporaries, at the view's peak, in its
    /// timeline and in their site's bytes.
    #[test]
    fn the_first_phase_makes_earlier_frees_temporaries() {
        for phases in [false, true] {
            let mut axis = Axis::new(0);
            let mut f = FrameworkState::new(AllocConfig::default());
            let mut at = |f: &mut FrameworkState, t: u64, action, address, bytes, stack| {
                axis.advance(t);
                let e = AllocatorEv {
                    stack,
                    ..ev(action, address, bytes)
                };
                f.apply(t, &axis, &e, Hint::Lifetime, &NoDriver);
            };
            // A 2 MiB tensor, then a 1 MiB one, freed in that order: the
            // first not at once, the second at once (a temporary either way).
            at(&mut f, 0, AllocatorAction::ALLOC, 0x1000_0000, 2 * MIB, 1);
            at(&mut f, 1_000, AllocatorAction::ALLOC, 0x2000_0000, MIB, 2);
            at(
                &mut f,
                2_000,
                AllocatorAction::FREE,
                0x1000_0000,
                2 * MIB,
                0,
            );
            at(&mut f, 3_000, AllocatorAction::FREE, 0x2000_0000, MIB, 0);
            axis.advance(1_000_000_000);
            if phases {
                f.phase_begin(&axis, 1, Phase::Backward);
            }
            f.finish(&axis, 1_000_000_000);
            let first = if phases {
                Role::Temporary
            } else {
                Role::Unknown
            };
            let site = |stack| f.sites.iter().find(|s| s.stack == stack).unwrap();
            assert_eq!(site(1).roles.get(first), 2 * MIB, "phases: {phases}");
            assert_eq!(site(2).roles.get(Role::Temporary), MIB);
            let peak = &f.devices[&0].roles.at_peak.roles;
            assert_eq!(peak.get(first), 2 * MIB + if phases { MIB } else { 0 });
            assert_eq!(peak.total(), 3 * MIB);
            // Its bucket of the timeline: 2 MiB live under its role.
            let curve = &f.devices[&0].roles.curves[first.index()];
            let points = curve.clone().finish(&axis, axis.current + 1);
            assert_eq!(points[0].max, 2 * MIB + if phases { MIB } else { 0 });
        }
    }

    #[test]
    fn rounds_requests_as_pytorch_does() {
        let c = AllocConfig::default();
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(512), 512);
        assert_eq!(c.round_size(513), 1024);
        assert_eq!(c.round_size(3 * MIB / 2), 3 * MIB / 2);
        let c = AllocConfig::parse("roundup_power2_divisions:4");
        // 1.2 MiB lies between 1 and 2 MiB: steps of 256 KiB.
        assert_eq!(c.round_size(MIB + MIB / 5), MIB + MIB / 4);
        assert_eq!(c.round_size(2 * MIB), 2 * MIB);
        assert_eq!(c.round_size(1000), 1024);
        let c = AllocConfig::parse("expandable_segments:True,max_split_size_mb:128");
        assert_eq!(c.max_split_size, 128 * MIB);
        let c = AllocConfig::parse("roundup_power2_divisions:[256:1,512:2],max_split_size_mb:64");
        assert_eq!(c.max_split_size, 64 * MIB);
        assert_eq!(c.unsupported.len(), 1);
        // cudaMallocAsync: CUDA gets each request as it is.
        let c = AllocConfig::parse("backend:cudaMallocAsync");
        assert!(c.cuda_malloc_async);
        assert_eq!(c.round_size(1000), 1000);
        assert!(!AllocConfig::parse("backend:native").cuda_malloc_async);
    }

    /// The cudaMallocAsync backend's view: tensors of exact sizes, the
    /// pool's size as the reserve, its peak charged to the tensor that made
    /// the pool grow.
    #[test]
    fn a_pool_backed_view_keeps_exact_sizes_and_the_pool_as_reserve() {
        let axis = Axis::new(0);
        let mut f = FrameworkState::new(AllocConfig::parse("backend:cudaMallocAsync"));
        let driver = Driver(Default::default());
        let tensor = |action, address, bytes, stack| AllocatorEv {
            allocator: TORCH_ASYNC,
            stack,
            ..ev(action, address, bytes)
        };
        f.set_reserved(1, &axis, 0, TORCH_ASYNC, 32 * MIB);
        f.apply(
            1,
            &axis,
            &tensor(AllocatorAction::ALLOC, 0x1000, 1000, 7),
            Hint::Lifetime,
            &driver,
        );
        f.set_reserved(2, &axis, 0, TORCH_ASYNC, 64 * MIB);
        f.apply(
            2,
            &axis,
            &tensor(AllocatorAction::ALLOC, 0x2000, 40 * MIB, 8),
            Hint::Lifetime,
            &driver,
        );
        f.apply(
            3,
            &axis,
            &tensor(AllocatorAction::FREE, 0x2000, 0, 0),
            Hint::Lifetime,
            &driver,
        );
        let d = &f.devices[&0];
        assert_eq!(d.allocator, TORCH_ASYNC);
        assert_eq!(d.allocated_peak, 40 * MIB + 1000);
        assert_eq!(d.allocated, 1000);
        assert_eq!((d.reserved, d.reserved_peak), (64 * MIB, 64 * MIB));
        assert_eq!(d.reserved_peak_site, Some(1));
        assert_eq!(
            allocator_name(d.allocator),
            "PyTorch (cudaMallocAsync backend)"
        );
        // No segments: no pools to judge.
        assert!(d.extents().is_empty());
    }

    /// A 20 MiB segment cut as the allocator cuts it: a block is split off
    /// the front of a free block unless what would remain is 1 MiB or less,
    /// which then goes with the block.
    #[test]
    fn infers_unsplit_blocks_and_fragmentation() {
        let axis = Axis::new(0);
        let mut f = FrameworkState::new(AllocConfig::default());
        let base = 0x7f00_0000_0000u64;
        let driver = Driver([(base, 20 * MIB)].into_iter().collect());
        f.apply(
            1,
            &axis,
            &ev(AllocatorAction::SEGMENT_ALLOC, base, 20 * MIB),
            Hint::Lifetime,
            &driver,
        );
        for (i, size) in [3 * MIB, 5 * MIB, 7 * MIB].into_iter().enumerate() {
            let at = base + [0, 3, 8][i] * MIB;
            f.apply(
                2,
                &axis,
                &ev(AllocatorAction::ALLOC, at, size),
                Hint::Lifetime,
                &driver,
            );
        }
        // 5 MiB left: a 4 MiB request leaves 1 MiB, too little to split off.
        f.apply(
            3,
            &axis,
            &ev(AllocatorAction::ALLOC, base + 15 * MIB, 4 * MIB),
            Hint::Lifetime,
            &driver,
        );
        let dev = &f.devices[&0];
        assert_eq!(dev.allocated, 20 * MIB);
        assert_eq!(dev.segments_matched, 1);
        // Free the 3 and 7 MiB blocks: two holes, the larger 7 MiB. The
        // first free comes as its two steps, the second as one record.
        f.apply(
            4,
            &axis,
            &ev(AllocatorAction::FREE_REQUESTED, base, 0),
            Hint::Lifetime,
            &driver,
        );
        f.apply(
            4,
            &axis,
            &ev(AllocatorAction::FREE_COMPLETED, base, 0),
            Hint::Lifetime,
            &driver,
        );
        f.apply(
            4,
            &axis,
            &ev(AllocatorAction::FREE, base + 8 * MIB, 0),
            Hint::Lifetime,
            &driver,
        );
        assert_eq!(f.devices[&0].frees, 2);
        let dev = &f.devices[&0];
        assert_eq!(dev.allocated, 10 * MIB);
        let e = dev.extents();
        let large = e.values().next().unwrap();
        assert_eq!((large.free, large.largest), (10 * MIB, 7 * MIB));
        assert!((large.fragmentation() - 0.3).abs() < 1e-9);
    }

    #[test]
    fn segments_not_backed_by_the_driver_are_named() {
        let axis = Axis::new(0);
        let mut f = FrameworkState::new(AllocConfig::default());
        f.apply(
            1,
            &axis,
            &ev(AllocatorAction::SEGMENT_ALLOC, 0x1000_0000, 2 * MIB),
            Hint::Lifetime,
            &NoDriver,
        );
        let dev = &f.devices[&0];
        assert_eq!((dev.segments_seen, dev.segments_matched), (1, 0));
        assert_eq!(dev.unmatched_segments, vec![(0x1000_0000, 2 * MIB)]);
        // Expandable segments: one map of two 20 MiB pages, mapped one by one.
        let base = 0x2000_0000u64;
        let driver = Driver(
            [(base, 20 * MIB), (base + 20 * MIB, 20 * MIB)]
                .into_iter()
                .collect(),
        );
        f.apply(
            2,
            &axis,
            &ev(AllocatorAction::SEGMENT_MAP, base, 40 * MIB),
            Hint::Lifetime,
            &driver,
        );
        assert_eq!(f.devices[&0].segments_matched, 1);
    }

    #[test]
    fn expandable_maps_that_touch_form_one_range() {
        let axis = Axis::new(0);
        let mut f = FrameworkState::new(AllocConfig::default());
        let base = 0x2000_0000u64;
        f.apply(
            1,
            &axis,
            &ev(AllocatorAction::SEGMENT_MAP, base, 20 * MIB),
            Hint::Lifetime,
            &NoDriver,
        );
        f.apply(
            1,
            &axis,
            &ev(AllocatorAction::SEGMENT_MAP, base + 20 * MIB, 20 * MIB),
            Hint::Lifetime,
            &NoDriver,
        );
        f.apply(
            2,
            &axis,
            &ev(AllocatorAction::ALLOC, base + 10 * MIB, 2 * MIB),
            Hint::Lifetime,
            &NoDriver,
        );
        let e = f.devices[&0].extents();
        let p = e.values().next().unwrap();
        assert_eq!(
            (p.reserved, p.free, p.largest),
            (40 * MIB, 38 * MIB, 28 * MIB)
        );
        f.apply(
            3,
            &axis,
            &ev(AllocatorAction::SEGMENT_UNMAP, base + 20 * MIB, 20 * MIB),
            Hint::Lifetime,
            &NoDriver,
        );
        assert_eq!(f.devices[&0].reserved, 20 * MIB);
        let e = f.devices[&0].extents();
        let p = e.values().next().unwrap();
        assert_eq!(
            (p.reserved, p.free, p.largest),
            (20 * MIB, 18 * MIB, 10 * MIB)
        );
    }
}
