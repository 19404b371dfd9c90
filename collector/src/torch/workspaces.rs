//! Which of the caching allocator's blocks are a CUDA library's workspace.
//!
//! PyTorch gives cuBLAS and cuBLASLt their workspaces from its own
//! allocator, once per handle and stream, and keeps them for the process's
//! life (`getCurrentCUDABlasHandle`, `getCUDABlasLtWorkspace` in
//! libtorch_cuda.so). On a thread running Python a block's stack is its
//! Python frames alone (`stacks/mod.rs`), which name the user's line (the
//! first matmul on a stream), not the library: the report then counts the
//! workspace as a tensor the program left live. The evidence is on the
//! native stack, a return address inside one of those functions, and
//! unwinding every block's native stack costs 1-3 µs.
//!
//! So the words of the stack just above the allocator's trace entry (a
//! local of the allocator's own frame) are compared with those functions'
//! address ranges: a few loads and compares. Which words: the allocator's
//! frames between its entry point, `NativeCachingAllocator::allocate`, and
//! the trace entry are the same for every block, so the return address into
//! whoever asked for the block sits the same number of bytes above the
//! entry each time. One native walk through `allocate` finds that place
//! (`learn`); from then on the 17 words around it are read (`on_stack`).
//! Until then, or where no walk finds it, the whole `SCAN_BYTES`
//! above the entry are (512 words, where earlier calls leave stale
//! addresses of the functions that each cost a walk to find out: a GPT-2
//! loop's tensors took a median 2.8 µs each that way on an H100's host,
//! 0.6 µs with the learned place).
//!
//! A block whose words hold such an address gets its whole stack walked,
//! native and Python frames, as `--tensor-stacks all` would record it: the
//! walk places the function for the analyzer (`sites::is_cuda_library`
//! there). A word that only looked like one (left in a frame's unused slot
//! by an earlier call) is found out by that walk, and the block keeps its
//! Python stack.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::stacks::elf::{self, MappedFile, SYMBOL_FUNCTION};
use crate::stacks::modules;
use crate::stacks::unwind::thread_stack_end;

const LIBRARY: &str = "libtorch_cuda.so";

/// The functions of libtorch_cuda.so that allocate a library's workspace
/// from the caching allocator, as their mangled names spell them (length
/// and identifier, so `getCUDABlasLtWorkspaceSize` is not one). In torch
/// 2.11's traces the allocation sits in `setWorkspaceForHandle` (called by
/// `getCurrentCUDABlasHandle`) and in `getCUDABlasLtWorkspace`, with the
/// `getNew…` helpers inlined into them; other builds may keep those apart.
const WORKSPACE_FUNCTIONS: [&[u8]; 5] = [
    b"24getCurrentCUDABlasHandle",
    b"22getCUDABlasLtWorkspace",
    b"21setWorkspaceForHandle",
    b"15getNewWorkspace",
    b"25getNewCUDABlasLtWorkspace",
];

/// Bytes of stack read above the trace entry. Between the entry (in the
/// allocator's `malloc`) and the workspace function lie the allocator's
/// `malloc`, its `allocate` and the dispatch between them.
pub const SCAN_BYTES: u64 = 4096;

/// The caching allocator's entry point for a tensor's block, in
/// libc10_cuda.so: the frame whose caller asked for the block (torch 2.11:
/// `c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::
/// allocate(unsigned long)`; the workspace functions call it, as tensors'
/// `empty` does).
const ALLOCATE: &[u8] = b"22NativeCachingAllocator8allocateE";

/// Bytes read either side of the learned place (`on_stack`): should a
/// frame between `allocate` and the entry realign the stack, the distance
/// moves by a multiple of 16, up to 48.
const SLOT_WINDOW: u64 = 64;

/// Walks tried to learn the place before scanning for good: the first
/// blocks may come through another entry point (`raw_alloc`).
const LEARN_TRIES: u64 = 8;

/// `Workspaces::slot` before a walk placed it, and once none could.
const SLOT_UNKNOWN: u64 = 0;
const SLOT_NONE: u64 = u64::MAX;

/// Bits of `Workspaces::pages`: with a few dozen functions' pages set, a
/// return address elsewhere in libtorch_cuda shares a bit about once in a
/// hundred.
const PAGE_BITS: usize = 4096;

/// The workspace functions where they are loaded in this process.
pub struct Workspaces {
    /// Their address ranges, sorted by start.
    ranges: Vec<Range<u64>>,
    /// From the lowest start to the highest end: most words fall outside.
    span: Range<u64>,
    /// One bit per 4 KiB page the functions occupy (page number modulo
    /// `PAGE_BITS`): a word on no such page is turned away with one load.
    pages: [u64; PAGE_BITS / 64],
    /// `NativeCachingAllocator::allocate` in the loaded libc10_cuda (empty:
    /// not found; then every block is scanned).
    allocate: Vec<Range<u64>>,
    /// Bytes from the trace entry up to the word holding the return address
    /// into the caller of `allocate`, once a walk has placed it
    /// (`SLOT_UNKNOWN` before, `SLOT_NONE` once none could).
    slot: AtomicU64,
    /// Walks tried to place it.
    learn_tries: AtomicU64,
    /// What the checks found: blocks whose stack held a workspace function's
    /// address, those a walk then confirmed, and the farthest such address
    /// above the trace entry, in bytes (for the trace's notes).
    pub candidates: AtomicU64,
    pub confirmed: AtomicU64,
    pub farthest: AtomicU64,
}

impl Workspaces {
    /// The functions in the loaded libtorch_cuda.so, from its symbol
    /// tables, and `allocate` in the allocator's library (`allocator`,
    /// loaded at `bias`). Err: why not (not loaded, unreadable, none of the
    /// functions there).
    pub fn find(allocator: &str, bias: u64) -> Result<Workspaces, String> {
        let loaded = modules::find_loaded(LIBRARY).ok_or(format!("{LIBRARY} is not loaded"))?;
        let ranges = function_ranges(&loaded.path, loaded.bias, &WORKSPACE_FUNCTIONS)?;
        let mut w = Workspaces::from_ranges(ranges)
            .ok_or_else(|| format!("{} names none of the workspace functions", loaded.path))?;
        // Without it every block is scanned: slower, not wrong.
        w.allocate = function_ranges(allocator, bias, &[ALLOCATE]).unwrap_or_default();
        Ok(w)
    }

    fn from_ranges(mut ranges: Vec<Range<u64>>) -> Option<Workspaces> {
        ranges.sort_by_key(|r| r.start);
        // Aliases and overlaps merged: `holds` searches them in order.
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        let ranges = merged;
        let span = ranges.first()?.start..ranges.last()?.end;
        let mut pages = [0u64; PAGE_BITS / 64];
        for r in &ranges {
            // Few pages: a function spanning many is rare and cheap to mark.
            for page in r.start >> 12..=(r.end - 1) >> 12 {
                let bit = page as usize % PAGE_BITS;
                pages[bit / 64] |= 1 << (bit % 64);
            }
        }
        Some(Workspaces {
            ranges,
            span,
            pages,
            allocate: Vec::new(),
            slot: AtomicU64::new(SLOT_UNKNOWN),
            learn_tries: AtomicU64::new(0),
            candidates: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            farthest: AtomicU64::new(0),
        })
    }

    /// Whether `address` lies on a 4 KiB page that one of the functions
    /// occupies, or on one that shares its bit in `pages`.
    #[inline]
    fn on_a_page(&self, address: u64) -> bool {
        let bit = (address >> 12) as usize % PAGE_BITS;
        self.pages[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Whether a return address is one of a call in one of the functions
    /// (it points past the call: a call that ends a function returns to
    /// its end).
    #[inline]
    pub fn holds(&self, return_address: u64) -> bool {
        let call = return_address.wrapping_sub(1);
        // Most words of a stack fall outside the span; those inside it are
        // mostly other return addresses into libtorch_cuda: the page filter
        // turns nearly all of them away with one load, the rest are
        // searched among the ranges.
        self.span.contains(&call) && self.on_a_page(call) && {
            let i = self.ranges.partition_point(|r| r.end <= call);
            self.ranges.get(i).is_some_and(|r| r.contains(&call))
        }
    }

    /// Whether the block whose trace entry lies at `from` was asked for by
    /// one of the functions: the words around the place a walk learned
    /// (`learn`), else all `SCAN_BYTES` above `from` (no further than
    /// `stack_end`, the top of the calling thread's stack). `from` must be
    /// a place on the calling thread's stack at or above the caller's own
    /// frames: anything else (a trace entry that is not on the stack) is
    /// not read.
    pub fn on_stack(&self, from: u64, stack_end: u64) -> bool {
        match self.slot.load(Ordering::Relaxed) {
            SLOT_UNKNOWN | SLOT_NONE => {
                self.scan(from, from, from.saturating_add(SCAN_BYTES), stack_end)
            }
            slot => {
                let at = from.saturating_add(slot);
                let start = at.saturating_sub(SLOT_WINDOW).max(from);
                self.scan(from, start, at.saturating_add(SLOT_WINDOW + 8), stack_end)
            }
        }
    }

    /// Whether the place is still to be learned (`learn`).
    pub fn learning(&self) -> bool {
        self.slot.load(Ordering::Relaxed) == SLOT_UNKNOWN
    }

    /// Places the word holding the return address into the caller of
    /// `allocate`, from a walk of the calling thread's stack made inside
    /// the allocator's trace call: `walk` writes the return addresses,
    /// innermost first, and each one's stack pointer, and returns how many.
    /// `from` is the trace entry. Gives up after `LEARN_TRIES` walks that
    /// did not run through `allocate`.
    pub fn learn(&self, from: u64, walk: impl FnOnce(&mut [u64], &mut [u64]) -> usize) {
        if self.allocate.is_empty() {
            self.slot.store(SLOT_NONE, Ordering::Relaxed);
            return;
        }
        if self.learn_tries.fetch_add(1, Ordering::Relaxed) >= LEARN_TRIES {
            let _ = self.slot.compare_exchange(
                SLOT_UNKNOWN,
                SLOT_NONE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return;
        }
        let mut frames = [0u64; 64];
        let mut sps = [0u64; 64];
        let n = walk(&mut frames, &mut sps).min(frames.len());
        if let Some(slot) = self.requester_slot(from, &frames[..n], &sps[..n]) {
            let _ = self.slot.compare_exchange(
                SLOT_UNKNOWN,
                slot,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Bytes from `from` to the word holding the first return address past
    /// the frames of `allocate`, when the walk has one and the word does
    /// hold it. On x86-64 a frame's return address is the word just below
    /// its caller's stack pointer.
    fn requester_slot(&self, from: u64, frames: &[u64], sps: &[u64]) -> Option<u64> {
        let in_allocate = |f: u64| self.allocate.iter().any(|r| r.contains(&f.wrapping_sub(1)));
        let first = frames.iter().position(|&f| in_allocate(f))?;
        let caller = first + frames[first..].iter().position(|&f| !in_allocate(f))?;
        let word = sps.get(caller)?.checked_sub(8)?;
        let here = &from as *const u64 as u64;
        if word < from.max(here) || !word.is_multiple_of(8) || word >= thread_stack_end() {
            return None;
        }
        // SAFETY: `word` is 8-aligned and lies between this frame's own
        // local and the top of this thread's stack (checked above).
        let held = unsafe { std::ptr::read(word as *const u64) };
        (held == frames[caller]).then(|| word - from)
    }

    /// Whether the words from `start` up to `end` (8-aligned, no further
    /// than `stack_end`, none below this frame) hold an address in one of
    /// the functions; counts it, as found that far above `from`.
    #[inline]
    fn scan(&self, from: u64, start: u64, end: u64, stack_end: u64) -> bool {
        let here = &from as *const u64 as u64;
        if from < here || from >= stack_end {
            return false;
        }
        let start = start.max(from).next_multiple_of(8);
        let end = stack_end.min(end);
        if start >= end {
            return false;
        }
        let words = ((end - start) / 8) as usize;
        // SAFETY: [start, end) is 8-aligned and lies between this frame's
        // own local (`here`) and the top of this thread's stack: the live
        // part of the stack, mapped and readable while we run. Its words
        // may be anything; they are compared, never followed.
        let stack = unsafe { std::slice::from_raw_parts(start as *const u64, words) };
        let found = stack.iter().position(|&w| self.holds(w));
        if let Some(i) = found {
            self.candidates.fetch_add(1, Ordering::Relaxed);
            self.farthest
                .fetch_max(start + i as u64 * 8 - from, Ordering::Relaxed);
        }
        found.is_some()
    }

    /// Whether a walked stack (`capture_stack`'s values: return addresses,
    /// and tagged Python frames that never fall in a function's range)
    /// runs through one of the functions; counts it when it does.
    pub fn confirm(&self, frames: &[u64]) -> bool {
        let yes = frames.iter().any(|&f| self.holds(f));
        if yes {
            self.confirmed.fetch_add(1, Ordering::Relaxed);
        }
        yes
    }

    /// For the trace's notes, when anything was found.
    pub fn describe(&self) -> Option<String> {
        let candidates = self.candidates.load(Ordering::Relaxed);
        let place = match self.slot.load(Ordering::Relaxed) {
            SLOT_UNKNOWN | SLOT_NONE => format!(
                "within {SCAN_BYTES} bytes above the allocator's trace entry ({})",
                if self.allocate.is_empty() {
                    "NativeCachingAllocator::allocate not found in its library".to_string()
                } else {
                    format!(
                        "no walk through NativeCachingAllocator::allocate placed its caller's \
                         return address; {} tried",
                        self.learn_tries.load(Ordering::Relaxed).min(LEARN_TRIES)
                    )
                }
            ),
            slot => format!(
                "within {SLOT_WINDOW} bytes of where the caller of \
                 NativeCachingAllocator::allocate keeps its return address, {slot} bytes above \
                 the allocator's trace entry"
            ),
        };
        (candidates > 0).then(|| {
            format!(
                "CUDA library workspaces among PyTorch's blocks: {} found by their stack \
                 ({candidates} {} held a workspace function's address {place}, the farthest \
                 {} bytes up; the others' were left there by earlier calls)",
                self.confirmed.load(Ordering::Relaxed),
                if candidates == 1 { "block" } else { "blocks" },
                self.farthest.load(Ordering::Relaxed),
            )
        })
    }
}

/// Where the functions of the library at `path` (loaded at `bias`) whose
/// symbol names hold one of `names` lie in this process, from its symbol
/// tables. Err: the file could not be read.
fn function_ranges(path: &str, bias: u64, names: &[&[u8]]) -> Result<Vec<Range<u64>>, String> {
    let file = MappedFile::open(path)?;
    let mut ranges = Vec::new();
    elf::each_symbol(&file, |name, kind, symbol| {
        if kind == SYMBOL_FUNCTION
            && symbol.size > 0
            && names.iter().any(|f| name.windows(f.len()).any(|w| w == *f))
        {
            let start = bias.wrapping_add(symbol.value);
            ranges.push(start..start + symbol.size);
        }
    })
    .map_err(|e| format!("{path}: {e}"))?;
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::unwind::thread_stack_end;

    #[inline(never)]
    fn scan_with(w: &Workspaces, planted: u64) -> bool {
        // A frame of ours holding the address, as a caller's frame holds
        // its return address; the scan starts below it.
        let slots = std::hint::black_box([0u64, planted, 7]);
        let from = std::hint::black_box(&slots[0] as *const u64 as u64);
        w.on_stack(from, from + 64)
    }

    #[test]
    fn finds_an_address_of_the_functions_on_the_stack_and_nothing_else() {
        let w = Workspaces::from_ranges(vec![
            0x9000..0x9100,
            0x1000..0x1080,
            0x1000..0x1040,
            0x3000..0x3010,
        ])
        .unwrap();
        assert_eq!(w.span, 0x1000..0x9100);
        assert_eq!(w.ranges, [0x1000..0x1080, 0x3000..0x3010, 0x9000..0x9100]);
        assert!(w.holds(0x3005) && !w.holds(0x3011) && !w.holds(0x2000));
        // Return addresses: one past a call.
        assert!(w.holds(0x1001) && w.holds(0x1080) && w.holds(0x9100));
        assert!(!w.holds(0x1000) && !w.holds(0x1081) && !w.holds(0x5000));
        assert!(scan_with(&w, 0x1040));
        assert!(!scan_with(&w, 0x5000));
        assert_eq!(w.candidates.load(Ordering::Relaxed), 1);
        assert_eq!(w.farthest.load(Ordering::Relaxed), 8);
        // A place that is not on this thread's stack is not read.
        let heap = Box::new([0x1040u64; 4]);
        assert!(!w.on_stack(heap.as_ptr() as u64, thread_stack_end()));
        assert_eq!(w.candidates.load(Ordering::Relaxed), 1);
        assert!(w.confirm(&[0x5000, 0x1080]));
        assert!(!w.confirm(&[0x5000, 0x1000]));
        assert_eq!(w.confirmed.load(Ordering::Relaxed), 1);
        assert!(Workspaces::from_ranges(Vec::new()).is_none());
    }

    /// A workspace function and `allocate`, for the tests below.
    const FUNCTION: Range<u64> = 0x1000..0x1080;
    const ALLOCATE_AT: Range<u64> = 0x2000..0x2100;

    /// A walk through `allocate` (0x2000..0x2100) places the word holding
    /// its caller's return address (0x7000, one word below the caller's
    /// stack pointer); from then on the words around it are what is read.
    #[test]
    #[inline(never)]
    fn learns_where_the_requesters_return_address_lies() {
        let mut w = Workspaces::from_ranges(vec![FUNCTION]).unwrap();
        w.allocate = vec![ALLOCATE_AT];
        // [entry, the requester's return address, its stack pointer's
        // word, 29 words, a workspace function's address further up].
        let mut stack = [0u64; 33];
        stack[1] = 0x7000;
        stack[32] = 0x1040;
        let stack = std::hint::black_box(stack);
        let at = |i: usize| &stack[i] as *const u64 as u64;
        let from = at(0);
        let walk = |f: [u64; 3], s: [u64; 3]| {
            move |frames: &mut [u64], sps: &mut [u64]| {
                frames[..3].copy_from_slice(&f);
                sps[..3].copy_from_slice(&s);
                3
            }
        };
        // The scan reaches the address 256 bytes up.
        assert!(w.learning() && w.on_stack(from, thread_stack_end()));
        // A walk whose saved word does not hold the caller's address, or
        // that never ran through `allocate`, places nothing.
        w.learn(from, walk([0x2010, 0x2050, 0x7001], [0, 0, at(2)]));
        w.learn(from, walk([0x3010, 0x3050, 0x7000], [0, 0, at(2)]));
        assert!(w.learning());
        w.learn(from, walk([0x2010, 0x2050, 0x7000], [0, 0, at(2)]));
        assert!(!w.learning());
        assert_eq!(w.slot.load(Ordering::Relaxed), 8);
        // Now the words 64 bytes either side of it are read: the address
        // 256 bytes up is not, one 40 bytes past the word is.
        assert!(!w.on_stack(from, thread_stack_end()));
        let mut near = stack;
        near[6] = 0x1040;
        let near = std::hint::black_box(near);
        assert!(w.on_stack(&near[0] as *const u64 as u64, thread_stack_end()));
        let d = w.describe().unwrap();
        assert!(
            d.contains("8 bytes above the allocator's trace entry"),
            "{d}"
        );
    }

    /// Walks that never run through `allocate` leave every block scanned.
    #[test]
    fn gives_up_learning_after_a_few_walks() {
        let mut w = Workspaces::from_ranges(vec![FUNCTION]).unwrap();
        w.allocate = vec![ALLOCATE_AT];
        for _ in 0..=LEARN_TRIES {
            assert!(w.learning());
            w.learn(0, |_, _| 0);
        }
        assert!(!w.learning());
        assert_eq!(w.slot.load(Ordering::Relaxed), SLOT_NONE);
        w.candidates.store(1, Ordering::Relaxed);
        assert!(w.describe().unwrap().contains("8 tried"));
        // Without `allocate` in the library, no walk is tried.
        let w = Workspaces::from_ranges(vec![FUNCTION]).unwrap();
        w.learn(0, |_, _| unreachable!());
        assert!(!w.learning());
    }
}
