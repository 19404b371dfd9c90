//! Native stack capture inside the process, through code built without frame
//! pointers (libtorch, libcudart), using the DWARF CFI (`.eh_frame`) every
//! x86-64 ELF module carries, via framehop with a per-thread rule cache.
//!
//! The modules come from `modules.rs`, which follows the loader; framehop
//! reads each module's `.eh_frame_hdr`/`.eh_frame` directly from the mapped
//! image (no copies). Before a walk first evaluates an unwind rule the
//! loader is asked whether modules came or went (one cheap call), so no walk
//! ever reads the unwind tables of a module the program unloaded.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, Unwinder};

use crate::clock::{EventTimer, Sample};
pub use crate::stacks::modules::ModuleDesc;
use crate::stacks::modules::{self, Registry};

pub struct Stacks {
    registry: RwLock<Registry>,
    /// Bumped whenever modules are added, so the writer emits them.
    generation: AtomicU64,
    depth: usize,
    /// Leave out frames of the module holding this code (the collector).
    skip_self: bool,
    counters: Counters,
}

/// `StackStats`, counted as captures happen.
#[derive(Default)]
struct Counters {
    /// Walks, and their time: one walk in `TIMED_EVERY` is timed (two clock
    /// reads were a fifth of a walk reused whole).
    walks: EventTimer,
    unwound: AtomicU64,
    reused: AtomicU64,
    rule_misses: AtomicU64,
    unknown: AtomicU64,
}

impl Counters {
    /// Adds `n`, skipping the shared line when there is nothing to add
    /// (a walk reused whole unwinds nothing and misses no rule).
    fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// What stack capture did over a process's life (written into the trace at
/// exit): how its cost divides between unwinding by CFI rules and reusing
/// the outer frames of the thread's earlier walks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Stack walks.
    pub captures: u64,
    /// Frames unwound by evaluating unwind rules (framehop).
    pub unwound: u64,
    /// Frames taken from an earlier walk on the same thread after checking
    /// their return addresses.
    pub reused: u64,
    /// Unwound frames whose rule was not in framehop's per-thread rule cache
    /// (each one looks the address up in `.eh_frame_hdr` and evaluates its
    /// CFI program).
    pub rule_misses: u64,
    /// Walks that met a return address outside every known module (each one
    /// asks the loader whether modules changed).
    pub unknown: u64,
    /// Time spent in `capture`, in nanoseconds, estimated from the walks
    /// timed (see `Counters::walks`).
    pub nanos: u64,
    /// The timed walks' median, 99th percentile and tail
    /// (`EventTimer::describe_spread`).
    pub spread: String,
}

/// Rule caches per thread. framehop's cache is direct-mapped with 509 slots:
/// a PyTorch program's allocation stacks pass through more return addresses
/// than that, and colliding ones evict each other on every walk (measured on
/// the H200: 2.9 misses in 25 frames per walk, each miss a binary search of a
/// large `.eh_frame_hdr` and a CFI evaluation). Choosing one of several caches
/// by the address bits above the slot makes them one direct-mapped cache of
/// `509 * RULE_CACHES` slots.
const RULE_CACHES: usize = 16;
const RULE_CACHE_SLOTS: u64 = 509;

/// The cache of the bank that holds `address`'s rule.
fn rule_cache_for(
    bank: &mut [CacheX86_64; RULE_CACHES],
    address: FrameAddress,
) -> &mut CacheX86_64 {
    // framehop looks rules up by this address and takes its slot modulo 509.
    let lookup = address.address_for_lookup();
    &mut bank[((lookup / RULE_CACHE_SLOTS) % RULE_CACHES as u64) as usize]
}

/// One earlier walk: its frames as (code address, stack pointer) pairs,
/// innermost first.
struct Walk {
    frames: [(u64, u64); WALK_LIMIT],
    len: usize,
    /// Leading frames that were the collector's or CUPTI's.
    skip: usize,
    truncated: bool,
    /// Its outermost frame was in no known module.
    unknown: bool,
}

/// Earlier walks kept per thread. A program allocates from a few call paths
/// in turn (a training step's layers): the walk before this one is often
/// from another path, but one of the last few is from this one, and reusing
/// its outer frames spares unwinding most of the stack.
const HISTORY: usize = 16;

/// Per-thread unwinding state: framehop's rule caches, the walk in progress
/// and the last `HISTORY` walks.
struct ThreadUnwind {
    cache: Option<Box<[CacheX86_64; RULE_CACHES]>>,
    /// Each kept walk's first frame (the collector's own, where the walk
    /// started): `history[i].frames[0]`, or zeros for an empty slot. A walk
    /// reused whole is found here (four cache lines) instead of in the
    /// walks themselves (a line on a page of its own each).
    heads: [(u64, u64); HISTORY],
    frames: [(u64, u64); WALK_LIMIT],
    history: Option<Box<[Walk; HISTORY]>>,
    /// The history slot the next new walk replaces.
    next_slot: usize,
    /// The rule caches' miss count when last read, to count misses per walk.
    rule_misses_seen: u64,
}

/// Frames walked at most: the recorded ones plus the collector's and
/// CUPTI's own at the top.
const WALK_LIMIT: usize = crate::config::MAX_STACK_DEPTH + 32;

thread_local! {
    static THREAD: RefCell<ThreadUnwind> = const {
        RefCell::new(ThreadUnwind {
            cache: None,
            heads: [(0, 0); HISTORY],
            frames: [(0, 0); WALK_LIMIT],
            history: None,
            next_slot: 0,
            rule_misses_seen: 0,
        })
    };
    static STACK_END: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

struct Reused {
    walked: usize,
    skip: usize,
    truncated: bool,
}

/// The frame just walked (the walk's `walked`-th) equals `prev.frames[at]`.
/// Checks that every outer frame of that earlier walk the walk would take
/// is still on the stack (the return address into frame i sits just below
/// its stack pointer: x86-64's CFA - 8). If so, the walk continues with
/// `prev.frames[at + 1..]`, up to `Reused::walked` frames in all.
fn reuse_callers(
    prev: &Walk,
    at: usize,
    walked: usize,
    skip: Option<usize>,
    max_recorded: usize,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<Reused> {
    // Frames the earlier walk skipped at the top are skipped now too: from
    // the match on, both walks see the same frames.
    let skip = match skip {
        Some(k) => k,
        None => walked - 1 + prev.skip.saturating_sub(at),
    };
    let rest = prev.len - (at + 1);
    let room = (skip + max_recorded).saturating_sub(walked);
    let take = rest.min(room);
    for &(pc, sp) in &prev.frames[at + 1..at + 1 + take] {
        if read_stack(sp.checked_sub(8)?).ok()? != pc {
            return None;
        }
    }
    Some(Reused {
        walked: walked + take,
        skip,
        truncated: prev.truncated || rest > room,
    })
}

/// A walk reused whole: what `capture_once` needs of it.
struct Whole {
    slot: usize,
    recorded: usize,
    reused: usize,
    truncated: bool,
}

/// The usual walk: its first frame (the collector's own code at the same
/// stack position) is a kept walk's first frame and every return address
/// that walk saw is still on the stack, so this walk is that one. Found
/// through `heads`, checked, and written straight to `out` (the general
/// loop reaches the same result through a frame buffer of its own). The
/// earlier walk's count of skipped frames holds for this one: the same
/// frames from the first on (0 when nothing is skipped, `skip_self` off).
fn reuse_whole(
    heads: &[(u64, u64); HISTORY],
    history: &[Walk; HISTORY],
    first: (u64, u64),
    out: &mut [u64],
    sps: &mut [u64],
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<Whole> {
    // Several kept walks can start at the same place (callers of the same
    // shape on different paths): the first whose callers all hold wins.
    (0..HISTORY)
        .filter(|&slot| heads[slot] == first)
        .find_map(|slot| reuse_from(slot, &history[slot], first, out, sps, read_stack))
}

fn reuse_from(
    slot: usize,
    prev: &Walk,
    first: (u64, u64),
    out: &mut [u64],
    sps: &mut [u64],
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<Whole> {
    if prev.len == 0 || prev.frames[0] != first {
        return None;
    }
    // The general loop's check at its first frame, which it skips when
    // `skip_self` is on (and the earlier walk then skipped as many).
    let r = reuse_callers(prev, 0, 1, None, out.len(), read_stack)?;
    for (o, f) in out.iter_mut().zip(&prev.frames[r.skip..r.walked]) {
        *o = f.0;
    }
    for (o, f) in sps.iter_mut().zip(&prev.frames[r.skip..r.walked]) {
        *o = f.1;
    }
    Some(Whole {
        slot,
        recorded: r.walked.saturating_sub(r.skip),
        reused: r.walked - 1,
        truncated: r.truncated,
    })
}

impl Stacks {
    /// `skip_self`: leave out the collector's own frames (off in unit tests,
    /// where the collector's code lives in the test executable).
    pub fn new(depth: usize, skip_self: bool) -> Stacks {
        let s = Stacks {
            registry: RwLock::new(Registry::new()),
            generation: AtomicU64::new(0),
            depth,
            skip_self,
            counters: Counters::default(),
        };
        s.refresh(true);
        s
    }

    pub fn stats(&self) -> StackStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (captures, nanos) = c.walks.totals();
        StackStats {
            captures,
            unwound: get(&c.unwound),
            reused: get(&c.reused),
            rule_misses: get(&c.rule_misses),
            unknown: get(&c.unknown),
            nanos,
            spread: c.walks.describe_spread(),
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Modules with id greater than `after`.
    pub fn modules_after(&self, after: u32) -> Vec<ModuleDesc> {
        match self.registry.read() {
            Ok(r) => r.modules.iter().filter(|m| m.id > after).cloned().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The end of the loaded module whose mapped span holds `addr` (None:
    /// no module does), for reading what a pointer into it names.
    pub fn module_end(&self, addr: u64) -> Option<u64> {
        self.refresh(false);
        let registry = self.registry.read().ok()?;
        registry.find(addr).map(|m| m.range.end)
    }

    /// Captures the calling thread's return addresses, innermost first,
    /// leaving out the collector's and CUPTI's own frames. Returns the number
    /// of frames and whether the depth limit cut the stack.
    #[inline(never)]
    pub fn capture(&self, out: &mut [u64]) -> (usize, bool) {
        self.capture_with_sps(out, &mut [])
    }

    /// `capture`, and each recorded frame's stack pointer into `sps` (as
    /// many as it holds): frame `i` owns the stack from `sps[i]` up to
    /// `sps[i + 1]`, which places objects that live on the stack (Python's
    /// entry frames, `python::interleave`).
    #[inline(never)]
    pub fn capture_with_sps(&self, out: &mut [u64], sps: &mut [u64]) -> (usize, bool) {
        let timed = self.counters.walks.count() == Sample::Timed;
        let started = timed.then(std::time::Instant::now);
        let out_len = out.len().min(self.depth);
        let out = &mut out[..out_len];
        let (n, truncated, unknown) = self.capture_once(out, sps);
        if unknown {
            Counters::add(&self.counters.unknown, 1);
        }
        if let Some(started) = started {
            self.counters
                .walks
                .timed(0, started.elapsed().as_nanos() as u64);
        }
        (n, truncated)
    }

    /// The module registry, read-locked, for a walk about to evaluate
    /// unwind rules: modules the program unloaded must be gone from the
    /// unwinder before it reads anything (their tables are unmapped), and
    /// ones it loaded since the last walk may be on this stack. A walk that
    /// reuses an earlier one whole reads no unwind table and never asks
    /// (without the loader's lock and the registry's, such walks took 0.23
    /// µs instead of 0.29 on the stand-in, 0.83-0.87 instead of 1.00-1.14 on
    /// the H200). `held` keeps the lock for the rest of the walk.
    fn hold<'a, 'h>(
        &'a self,
        held: &'h mut Option<RwLockReadGuard<'a, Registry>>,
    ) -> Option<&'h Registry> {
        if held.is_none() {
            self.refresh(false);
            *held = self.registry.read().ok();
        }
        held.as_deref()
    }

    #[inline(always)]
    #[expect(
        clippy::too_many_lines,
        reason = "the native walk's hot loop with its cache, kept whole so that nothing in it is a call"
    )]
    fn capture_once(&self, out: &mut [u64], sps: &mut [u64]) -> (usize, bool, bool) {
        let (rip, rsp, rbp) = current_regs();
        let stack_end = thread_stack_end();
        let mut held: Option<RwLockReadGuard<Registry>> = None;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            if addr < rsp
                || !addr.is_multiple_of(8)
                || addr.checked_add(8).is_none_or(|e| e > stack_end)
            {
                return Err(());
            }
            // SAFETY: addr is 8-aligned and inside [rsp, stack_end), the live
            // part of this thread's stack, which stays mapped while we run.
            Ok(unsafe { std::ptr::read(addr as *const u64) })
        };
        THREAD.with(|t| {
            let mut t = t.borrow_mut();
            let t = &mut *t;
            let mut bank = t
                .cache
                .take()
                .unwrap_or_else(|| Box::new(std::array::from_fn(|_| CacheX86_64::new())));
            let mut history = t.history.take().unwrap_or_else(|| {
                Box::new(std::array::from_fn(|_| Walk {
                    frames: [(0, 0); WALK_LIMIT],
                    len: 0,
                    skip: 0,
                    truncated: false,
                    unknown: false,
                }))
            });
            let mut address = FrameAddress::from_instruction_pointer(rip);
            let first = (address.address(), rsp);
            if let Some(w) = reuse_whole(&t.heads, &history, first, out, sps, &mut read_stack) {
                let unknown = history[w.slot].unknown;
                t.cache = Some(bank);
                t.history = Some(history);
                Counters::add(&self.counters.reused, w.reused as u64);
                return (w.recorded, w.truncated, unknown);
            }
            let mut regs = UnwindRegsX86_64::new(rip, rsp, rbp);
            // Frames walked (skipped ones included) go to t.frames; recorded
            // ones (after the collector's and CUPTI's) to `out`.
            let mut walked = 0;
            let mut skip = None;
            let mut truncated = false;
            // Per earlier walk, the first of its frames not inner to the
            // current one (frames run from low to high stack addresses).
            let mut cursors = [0usize; HISTORY];
            // The earlier walk this one equals from its first frame on.
            let mut same_as = None;
            let (mut unwound, mut reused) = (0u64, 0u64);
            'walk: while walked < t.frames.len() {
                let pc = address.address();
                let sp = regs.sp();
                if skip.is_none() {
                    // The first frame is this function's own: the
                    // collector's code (skipped unless `skip_self` is off).
                    let ours = if walked == 0 {
                        self.skip_self
                    } else {
                        self.hold(&mut held)
                            .is_some_and(|r| r.skip.iter().any(|r| r.contains(&pc)))
                    };
                    if !ours {
                        skip = Some(walked);
                    }
                }
                if skip.is_some_and(|k| walked - k == out.len()) {
                    truncated = true;
                    break;
                }
                t.frames[walked] = (pc, sp);
                walked += 1;
                // Same frame (code address and stack position) as in an
                // earlier walk on this thread: its callers are the same too
                // if each saved return address still holds what it held
                // then. Checking that costs one read per frame instead of
                // evaluating unwind rules.
                for (slot, (prev, at)) in history.iter().zip(cursors.iter_mut()).enumerate() {
                    while *at < prev.len && prev.frames[*at].1 < sp {
                        *at += 1;
                    }
                    if *at < prev.len && prev.frames[*at] == (pc, sp) {
                        let found =
                            reuse_callers(prev, *at, walked, skip, out.len(), &mut read_stack);
                        if let Some(v) = found {
                            let from = *at + 1;
                            t.frames[walked..v.walked]
                                .copy_from_slice(&prev.frames[from..from + v.walked - walked]);
                            if walked == 1 {
                                same_as = Some(slot);
                            }
                            reused = (v.walked - walked) as u64;
                            walked = v.walked;
                            skip = Some(v.skip);
                            truncated = v.truncated;
                            break 'walk;
                        }
                    }
                }
                unwound += 1;
                let Some(reg) = self.hold(&mut held) else {
                    break;
                };
                let cache = rule_cache_for(&mut bank, address);
                match reg
                    .unwinder
                    .unwind_frame(address, &mut regs, cache, &mut read_stack)
                {
                    Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                        Some(a) => address = a,
                        None => break,
                    },
                    _ => break,
                }
            }
            // Only unwinding looks rules up: a walk reused whole (the usual
            // case) need not read the caches' counts.
            let mut rule_misses = 0;
            if unwound > 0 {
                let misses = bank.iter().map(|c| c.stats().misses()).sum::<u64>();
                rule_misses = misses.saturating_sub(t.rule_misses_seen);
                t.rule_misses_seen = misses;
            }
            t.cache = Some(bank);
            let k = skip.unwrap_or(walked);
            let n = walked - k;
            // framehop stops at the first address outside its modules, so
            // only the outermost frame can be one the module list lacks. A
            // walk reused whole ends where the earlier one did.
            let unknown = match same_as {
                Some(slot) => history[slot].unknown,
                None => {
                    n > 0
                        && self
                            .hold(&mut held)
                            .is_some_and(|r| r.find(t.frames[walked - 1].0).is_none())
                }
            };
            for (o, f) in out.iter_mut().zip(&t.frames[k..walked]) {
                *o = f.0;
            }
            for (o, f) in sps.iter_mut().zip(&t.frames[k..walked]) {
                *o = f.1;
            }
            // Keep this walk, unless it equals one kept already, in the
            // slots in turn (the oldest kept walk goes).
            if same_as.is_none() {
                let keep = &mut history[t.next_slot];
                t.heads[t.next_slot] = if walked > 0 { t.frames[0] } else { (0, 0) };
                t.next_slot = (t.next_slot + 1) % HISTORY;
                keep.frames[..walked].copy_from_slice(&t.frames[..walked]);
                keep.len = walked;
                keep.skip = k;
                keep.truncated = truncated;
                keep.unknown = unknown;
            }
            t.history = Some(history);
            let c = &self.counters;
            Counters::add(&c.unwound, unwound);
            Counters::add(&c.reused, reused);
            Counters::add(&c.rule_misses, rule_misses);
            (n, truncated, unknown)
        })
    }

    /// Re-reads the loaded modules if the loader reports a change (or if
    /// `force`): drops the ones unloaded, adds the new ones.
    fn refresh(&self, force: bool) {
        let changes = modules::loader_changes();
        if !force {
            match self.registry.read() {
                Ok(r) if r.loader_changes == changes => return,
                Ok(_) => {}
                Err(_) => return,
            }
        }
        let found = modules::list_modules();
        let Ok(mut reg) = self.registry.write() else {
            return;
        };
        let update = reg.update(found, changes, self.skip_self);
        if update.added > 0 {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }
}

#[inline(always)]
fn current_regs() -> (u64, u64, u64) {
    let rip: u64;
    let rsp: u64;
    let rbp: u64;
    // SAFETY: reads the instruction pointer, stack pointer and frame pointer
    // into registers; touches no memory and no flags.
    unsafe {
        std::arch::asm!(
            "lea {rip}, [rip]",
            "mov {rsp}, rsp",
            "mov {rbp}, rbp",
            rip = out(reg) rip,
            rsp = out(reg) rsp,
            rbp = out(reg) rbp,
            options(nomem, nostack, preserves_flags)
        );
    }
    (rip, rsp, rbp)
}

/// The top (highest address) of the calling thread's stack, cached per thread.
pub fn thread_stack_end() -> u64 {
    STACK_END.with(|c| {
        if c.get() == 0 {
            c.set(query_stack_end());
        }
        c.get()
    })
}

fn query_stack_end() -> u64 {
    // SAFETY: pthread_attr_t is plain data; pthread_getattr_np fills it for
    // the calling thread and pthread_attr_destroy releases it.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return 0;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            return 0;
        }
        addr as u64 + size as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_int;

    #[inline(never)]
    fn level3(s: &Stacks, out: &mut [u64]) -> usize {
        let (n, _) = s.capture(out);
        std::hint::black_box(n)
    }
    #[inline(never)]
    fn level2(s: &Stacks, out: &mut [u64]) -> usize {
        std::hint::black_box(level3(s, out))
    }

    fn in_fn(addr: u64, f: usize) -> bool {
        // A return address lies a little after the function's start.
        (f as u64..f as u64 + 512).contains(&addr)
    }

    #[test]
    fn captures_the_callers_of_the_capturing_function() {
        let s = Stacks::new(64, false);
        let mut out = [0u64; 64];
        let n = level2(&s, &mut out);
        let frames = &out[..n];
        assert!(
            frames
                .iter()
                .any(|a| in_fn(*a, level3 as *const () as usize)),
            "{frames:x?}"
        );
        assert!(
            frames
                .iter()
                .any(|a| in_fn(*a, level2 as *const () as usize)),
            "{frames:x?}"
        );
        let reg = s.registry.read().unwrap();
        for a in frames {
            assert!(reg.find(*a).is_some(), "{a:#x} in no module");
        }
    }

    // glibc is built without frame pointers: a stack captured inside qsort's
    // comparator must walk through qsort (DWARF CFI) back into this test.
    static QSORT_STACK: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
    static QSORT_STACKS: std::sync::OnceLock<Stacks> = std::sync::OnceLock::new();

    extern "C" fn compare(a: *const c_void, b: *const c_void) -> c_int {
        let mut out = [0u64; 64];
        let (n, _) = QSORT_STACKS.get().unwrap().capture(&mut out);
        *QSORT_STACK.lock().unwrap() = out[..n].to_vec();
        // SAFETY: qsort passes pointers to two elements of our i32 array.
        unsafe { (*(a as *const i32)).cmp(&*(b as *const i32)) as c_int }
    }

    #[inline(never)]
    fn sort_with_libc() {
        let mut v = [3i32, 1, 2];
        // SAFETY: v is a valid array of 3 i32 and compare matches qsort's contract.
        unsafe { libc::qsort(v.as_mut_ptr().cast(), 3, 4, Some(compare)) };
        assert_eq!(v, [1, 2, 3]);
    }

    #[test]
    fn unwinds_through_libc_built_without_frame_pointers() {
        QSORT_STACKS.get_or_init(|| Stacks::new(64, false));
        sort_with_libc();
        let frames = QSORT_STACK.lock().unwrap().clone();
        let reg = QSORT_STACKS.get().unwrap().registry.read().unwrap();
        let module = |a: u64| reg.find(a).map(|m| m.path.clone()).unwrap_or_default();
        let libc_at = frames.iter().position(|a| module(*a).contains("libc.so"));
        let caller_at = frames
            .iter()
            .position(|a| in_fn(*a, sort_with_libc as *const () as usize));
        assert!(libc_at.is_some(), "no libc frame in {frames:x?}");
        assert!(caller_at > libc_at, "did not get past libc: {frames:x?}");
    }

    /// Makes the calling thread's next capture a full unwind.
    fn forget_walks() {
        THREAD.with(|t| {
            if let Some(h) = &mut t.borrow_mut().history {
                h.iter_mut().for_each(|w| w.len = 0);
            }
        });
    }

    /// Call paths taken in turn (here: recursion depths) each reuse their
    /// own earlier walk, not just the previous one, and give the frames a
    /// full unwind gives.
    #[test]
    fn alternating_call_paths_reuse_their_own_earlier_walks() {
        let s = Stacks::new(64, false);
        let depths = [4u32, 9, 6, 13];
        let mut out = [0u64; 64];
        let mut full: Vec<Vec<u64>> = Vec::new();
        for round in 0..4 {
            for (i, &d) in depths.iter().enumerate() {
                if round == 0 {
                    forget_walks();
                }
                let before = s.stats();
                let n = recurse(&s, d, &mut out);
                let after = s.stats();
                if round == 0 {
                    full.push(out[..n].to_vec());
                    continue;
                }
                assert_eq!(out[..n], full[i][..], "depth {d}");
                // From the third round on (round 0 kept only its last walk),
                // the earlier walk at this depth matches from the innermost
                // frame: nothing is unwound.
                if round >= 2 {
                    assert_eq!(after.unwound - before.unwound, 0, "depth {d}: {after:?}");
                }
            }
        }
    }

    #[inline(never)]
    fn recurse(s: &Stacks, depth: u32, out: &mut [u64]) -> usize {
        if depth == 0 {
            s.capture(out).0
        } else {
            std::hint::black_box(recurse(s, depth - 1, out))
        }
    }

    /// Captures that reuse the previous capture's outer frames give exactly
    /// what a full unwind gives, at every depth, in any order.
    #[test]
    fn reusing_the_previous_stack_gives_the_same_frames() {
        let s = Stacks::new(64, false);
        let depths = [5u32, 7, 5, 3, 9, 3];
        let mut rounds: Vec<Vec<Vec<u64>>> = Vec::new();
        for round in 0..3 {
            let mut got = Vec::new();
            for d in depths {
                if round == 0 {
                    forget_walks(); // full unwind
                }
                let mut out = [0u64; 64];
                let n = recurse(&s, d, &mut out);
                got.push(out[..n].to_vec());
            }
            rounds.push(got);
        }
        assert_eq!(rounds[0], rounds[1]);
        assert_eq!(rounds[0], rounds[2]);
        assert!(
            rounds[0][1].len() == rounds[0][0].len() + 2,
            "{:?}",
            rounds[0]
        );
        let stats = s.stats();
        assert!(stats.captures >= 18, "{stats:?}");
        assert!(stats.reused > 0, "the shortcut was never taken: {stats:?}");
        assert!(stats.unwound > 0, "{stats:?}");
        // The first walk finds no rules cached; later ones find most of them.
        assert!(
            stats.rule_misses > 0 && stats.rule_misses < stats.unwound,
            "{stats:?}"
        );
        assert!(stats.nanos > 0, "{stats:?}");
    }

    #[inline(never)]
    fn path_a(s: &Stacks, out: &mut [u64]) -> usize {
        std::hint::black_box(recurse(s, 0, out))
    }

    #[inline(never)]
    fn path_b(s: &Stacks, out: &mut [u64]) -> usize {
        std::hint::black_box(recurse(s, 0, out))
    }

    /// Both paths in turn, from the same call sites each time.
    #[inline(never)]
    fn both_paths(s: &Stacks, out: &mut [u64], forget: bool) -> (Vec<u64>, Vec<u64>) {
        if forget {
            forget_walks();
        }
        let n = path_a(s, out);
        let a = out[..n].to_vec();
        if forget {
            forget_walks();
        }
        let n = path_b(s, out);
        (a, out[..n].to_vec())
    }

    /// Two call paths that reach the capture at the same stack position
    /// (same-shaped callers): the walk's first frame matches both paths'
    /// kept walks, whose callers differ; each path gets its own frames, as
    /// a full unwind gives them.
    #[test]
    fn walks_starting_alike_on_other_paths_are_told_apart() {
        let s = Stacks::new(64, false);
        let mut out = [0u64; 64];
        // One call site for every round: round 0 unwinds in full.
        let mut rounds = Vec::new();
        let mut unwound = Vec::new();
        for round in 0..4 {
            let before = s.stats().unwound;
            rounds.push(both_paths(&s, &mut out, round == 0));
            unwound.push(s.stats().unwound - before);
        }
        let (a, b) = &rounds[0];
        assert!(
            a.iter().any(|f| in_fn(*f, path_a as *const () as usize)),
            "{a:x?}"
        );
        assert!(
            b.iter().any(|f| in_fn(*f, path_b as *const () as usize)),
            "{b:x?}"
        );
        assert_ne!(a, b);
        assert!(rounds.iter().all(|r| r == &rounds[0]), "{rounds:x?}");
        // Once both paths have a kept walk (round 0 kept only path b's),
        // each walk is taken whole from its own.
        assert!(
            unwound[0] > 0 && unwound[2..].iter().all(|&u| u == 0),
            "{unwound:?}"
        );
    }

    #[test]
    fn depth_limit_truncates() {
        let s = Stacks::new(2, false);
        let mut out = [0u64; 64];
        let (n, truncated) = s.capture(&mut out);
        assert_eq!(n, 2);
        assert!(truncated);
    }

    #[test]
    fn addresses_that_share_a_slot_get_different_caches() {
        let mut bank: Box<[CacheX86_64; RULE_CACHES]> =
            Box::new(std::array::from_fn(|_| CacheX86_64::new()));
        let slot_of = |bank: &mut [CacheX86_64; RULE_CACHES], a: u64| {
            let c = rule_cache_for(bank, FrameAddress::from_instruction_pointer(a));
            c as *const CacheX86_64 as usize
        };
        let base = 0x7f00_0000_1234;
        let caches: std::collections::HashSet<usize> = (0..RULE_CACHES as u64)
            .map(|i| slot_of(&mut bank, base + i * RULE_CACHE_SLOTS))
            .collect();
        assert_eq!(caches.len(), RULE_CACHES);
    }

    /// The cost of a capture, full unwind and reused, on a 41-frame stack:
    /// `cargo test --release -p gmem-prof-collector capture_cost -- --ignored --nocapture`
    /// (a measurement, so not part of the suite; it still checks that
    /// repeated full unwinds of one stack find every rule cached).
    #[test]
    #[ignore]
    fn capture_cost() {
        let s = Stacks::new(64, false);
        let mut out = [0u64; 64];
        let walks = 200_000;
        let mut walk = |reuse: bool| {
            if !reuse {
                forget_walks();
            }
            recurse(&s, 30, &mut out);
        };
        for reuse in [false, true] {
            let mut before = s.stats();
            let mut started = std::time::Instant::now();
            for i in 0..=walks {
                walk(reuse);
                if i == 0 {
                    // The first walk warmed the rule caches.
                    before = s.stats();
                    started = std::time::Instant::now();
                }
            }
            let ns = started.elapsed().as_nanos() as f64 / walks as f64;
            let after = s.stats();
            let per = |a: u64, b: u64| (a - b) as f64 / walks as f64;
            eprintln!(
                "{}: {ns:.0} ns per capture, {:.1} frames unwound, {:.1} reused, {:.2} rule-cache misses",
                if reuse { "reusing the previous walk" } else { "full unwind" },
                per(after.unwound, before.unwound),
                per(after.reused, before.reused),
                per(after.rule_misses, before.rule_misses),
            );
            if !reuse {
                assert_eq!(after.rule_misses, before.rule_misses);
            }
        }
    }
}
