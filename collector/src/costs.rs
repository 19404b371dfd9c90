//! What recording costs the program, measured as it runs: kernel launches
//! (every one counted, one in `TIMED_EVERY` timed) and where the time of a
//! launch and of a framework allocator event goes. The trace's notes give
//! the figures at exit (`Collector::finish`). (PyTorch's allocator events
//! are timed by its hook, `torch::allocator::TorchHook`.)

use crate::clock::{CostSplit, EventTimer};

#[derive(Default)]
pub struct CostMeters {
    /// The cost of recording each kernel launch, sampled.
    pub launches: EventTimer,
    /// Its parts (`callbacks::LAUNCH_PARTS`).
    pub launch_parts: CostSplit<4>,
    /// The parts of a framework allocator event's cost (`EVENT_PARTS`), on
    /// the events its hook times.
    pub event_parts: CostSplit<EVENT_PART_COUNT>,
}

/// The parts of a framework allocator event's cost (`event_parts`):
/// looking for a library's workspace on the stack (`torch/workspaces.rs`),
/// reading the allocator's entry, the stack (Python frames, or native ones
/// on a thread without Python or with none asked; an event without a stack
/// counts as native with next to nothing), queueing it.
pub const EVENT_WORKSPACE: usize = 0;
pub const EVENT_ENTRY: usize = 1;
pub const EVENT_PYTHON: usize = 2;
pub const EVENT_NATIVE: usize = 3;
pub const EVENT_QUEUE: usize = 4;
pub const EVENT_PART_COUNT: usize = 5;
pub const EVENT_PARTS: [&str; EVENT_PART_COUNT] = [
    "workspace check",
    "reading the entry",
    "Python stack",
    "native stack",
    "queueing",
];
