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
//! address ranges: a few hundred loads and compares. A block whose stack
//! holds one gets its whole stack walked, native and Python frames, as
//! `--tensor-stacks all` would record it: the walk places the function for
//! the analyzer (`sites::is_cuda_library` there). A word that only looked
//! like one (left in a frame's unused slot by an earlier call) is found out
//! by that walk, and the block keeps its Python stack.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::stacks::elf::{self, MappedFile, SYMBOL_FUNCTION};
use crate::stacks::modules;

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
    /// What the scans found: blocks whose stack held a workspace function's
    /// address, those a walk then confirmed, and the farthest such address
    /// above the trace entry, in bytes (for the trace's notes).
    pub candidates: AtomicU64,
    pub confirmed: AtomicU64,
    pub farthest: AtomicU64,
}

impl Workspaces {
    /// The functions in the loaded libtorch_cuda.so, from its symbol
    /// tables. Err: why not (not loaded, unreadable, none of them there).
    pub fn find() -> Result<Workspaces, String> {
        let loaded = modules::find_loaded(LIBRARY).ok_or(format!("{LIBRARY} is not loaded"))?;
        let file = MappedFile::open(&loaded.path)?;
        let mut ranges = Vec::new();
        elf::each_symbol(&file, |name, kind, symbol| {
            if kind == SYMBOL_FUNCTION
                && symbol.size > 0
                && WORKSPACE_FUNCTIONS
                    .iter()
                    .any(|f| name.windows(f.len()).any(|w| w == *f))
            {
                let start = loaded.bias.wrapping_add(symbol.value);
                ranges.push(start..start + symbol.size);
            }
        })
        .map_err(|e| format!("{}: {e}", loaded.path))?;
        Workspaces::from_ranges(ranges)
            .ok_or_else(|| format!("{} names none of the workspace functions", loaded.path))
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

    /// Whether the stack from `from` up `SCAN_BYTES` (no further than
    /// `stack_end`, the top of the calling thread's stack) holds an address
    /// in one of the functions. `from` must be a place on the calling
    /// thread's stack at or above the caller's own frames: anything else
    /// (a trace entry that is not on the stack) is not read.
    pub fn on_stack(&self, from: u64, stack_end: u64) -> bool {
        let here = &from as *const u64 as u64;
        if from < here || from >= stack_end {
            return false;
        }
        let start = from.next_multiple_of(8);
        let end = stack_end.min(start.saturating_add(SCAN_BYTES));
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
        (candidates > 0).then(|| {
            format!(
                "CUDA library workspaces among PyTorch's blocks: {} found by their stack \
                 ({candidates} {} held a workspace function's address within {SCAN_BYTES} \
                 bytes above the allocator's frame, the farthest {} bytes up; the others' \
                 were left there by earlier calls)",
                self.confirmed.load(Ordering::Relaxed),
                if candidates == 1 { "block" } else { "blocks" },
                self.farthest.load(Ordering::Relaxed),
            )
        })
    }
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
}
