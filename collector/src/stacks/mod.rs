//! The stack recorded with an event: the native return addresses
//! (`unwind.rs`, over the loaded `modules` and their `elf` symbols) with
//! the Python frames (`python.rs`) put where the interpreter ran them.
//!
//! Events inside a framework allocator come by the thousand per training
//! step, and unwinding the native part of their stacks (PyTorch's
//! dispatcher: a different path per operator and module depth, so the
//! earlier walks a thread keeps rarely match) cost 1-3 µs each on the H200,
//! against 0.2 µs for the Python part. So those events take only the
//! Python frames when the thread runs Python (what
//! `torch.cuda.memory._record_memory_history(stacks="python")` records too);
//! on PyTorch's autograd threads, which run none, the node of the autograd
//! graph being evaluated (`torch/autograd.rs`), and on any other thread the
//! native stack. `GMEM_PROF_TENSOR_STACKS` (`record --tensor-stacks`)
//! changes that: `python` takes no native stack (tensors of threads that
//! run neither Python nor an autograd node then carry none), `all` takes
//! native and Python frames, interleaved, for every event.

pub mod elf;
pub mod modules;
pub mod unwind;

use std::cell::RefCell;

use gmem_prof_traces::record::AUTOGRAD_NODE_FILE;
use gmem_prof_traces::Record;

use crate::config::{TensorStacks, MAX_STACK_DEPTH};
use crate::python::{encode_frame, interleave, PyFrame, Python, MAX_PYTHON_FRAMES};
use crate::state::Collector;
use crate::torch::autograd;

/// Values a recorded stack holds at most: native frames and Python ones.
pub const MAX_FRAMES: usize = MAX_STACK_DEPTH + MAX_PYTHON_FRAMES;

thread_local! {
    static PYTHON_FRAMES: RefCell<Vec<PyFrame>> = const { RefCell::new(Vec::new()) };
}

impl Collector {
    /// The calling thread's stack into `out`, innermost first: returns how
    /// many values it holds and whether a depth limit cut it. Python frames
    /// are tagged values (`python::encode_frame`); the `PyCode` records they
    /// name go to the sink first.
    pub fn capture_stack(&self, out: &mut [u64; MAX_FRAMES]) -> (usize, bool) {
        let Some(stacks) = &self.stacks else {
            return (0, false);
        };
        let Some(python) = &self.python else {
            // Nothing to interleave: the native frames straight into `out`.
            return stacks.capture(&mut out[..MAX_STACK_DEPTH]);
        };
        let mut native = [0u64; MAX_STACK_DEPTH];
        let mut sps = [0u64; MAX_STACK_DEPTH];
        let (n, native_cut) = stacks.capture_with_sps(&mut native, &mut sps);
        PYTHON_FRAMES.with(|frames| {
            let Ok(mut frames) = frames.try_borrow_mut() else {
                out[..n].copy_from_slice(&native[..n]);
                return (n, native_cut);
            };
            let python_cut = python.walk(&mut frames, |code| self.sink.push(Record::PyCode(code)));
            // A group of Python frames ran in the native frame that holds
            // its loop's entry frame on its part of the stack (3.12+): what
            // places them in any build. Else (3.10, 3.11) in the next
            // frame of `_PyEval_EvalFrameDefault`, which is where the loop
            // runs in those versions' builds (in Debian's 3.14 it is not:
            // the loop is a part GCC split off, with no symbol).
            let runs = |i: usize, entry: u64| {
                if entry != 0 {
                    let end = if i + 1 < n { sps[i + 1] } else { u64::MAX };
                    (sps[i]..end).contains(&entry)
                } else {
                    python.is_eval_loop(native[i])
                }
            };
            let total = interleave(&native[..n], runs, &frames, out);
            (total, native_cut || python_cut)
        })
    }

    /// The stack of an event inside a framework allocator, as
    /// `--tensor-stacks` asks (see the module's docs): by default the
    /// Python frames alone when the thread runs Python, else the autograd
    /// node it evaluates, else the native frames.
    pub fn capture_framework_stack(&self, out: &mut [u64; MAX_FRAMES]) -> (usize, bool) {
        let mode = self.config.tensor_stacks;
        let python = match &self.python {
            Some(python) if mode != TensorStacks::All => python,
            // No Python frames to take: none at all, as asked.
            None if mode == TensorStacks::Python => return (0, false),
            _ => return self.capture_stack(out),
        };
        let Some(stacks) = &self.stacks else {
            return (0, false);
        };
        let python_only = PYTHON_FRAMES.with(|frames| {
            let mut frames = frames.try_borrow_mut().ok()?;
            let cut = python.walk(&mut frames, |code| self.sink.push(Record::PyCode(code)));
            if frames.is_empty() {
                return None;
            }
            let n = interleave(&[], |_, _| false, &frames, out);
            Some((n, cut))
        });
        if let Some(frames) = python_only {
            return frames;
        }
        // No Python frames on this thread: the autograd node it evaluates,
        // else its native stack alone, straight into `out`
        // (`capture_stack` would read the Python frames again and copy the
        // native ones through a buffer of its own), unless only Python
        // frames were asked for.
        if let Some(node) = self.autograd_node_frame(python) {
            out[0] = node;
            return (1, false);
        }
        match mode {
            TensorStacks::Python => (0, false),
            _ => stacks.capture(&mut out[..MAX_STACK_DEPTH]),
        }
    }

    /// The frame naming the autograd node this thread evaluates, when it
    /// evaluates one (`torch/autograd.rs`).
    fn autograd_node_frame(&self, python: &Python) -> Option<u64> {
        let autograd = self.torch.autograd.get()?.as_ref()?;
        let vtable = autograd.current_vtable()?;
        let id = autograd::cached_class_id(vtable, || {
            let stacks = self.stacks.as_ref()?;
            let name = autograd::class_name(vtable, |a| stacks.module_end(a))?;
            python.named_frame_id(vtable, AUTOGRAD_NODE_FILE, &name, |code| {
                self.sink.push(Record::PyCode(code))
            })
        })?;
        Some(encode_frame(id, 0))
    }
}
