//! A PyTorch memory snapshot written from a trace's events, for PyTorch's
//! own viewers (pytorch.org/memory_viz, `python -m torch.cuda._memory_viz`).
//!
//! The caller hands over events in time order ([`History::event`]); the
//! snapshot's history is them, and its final state (segments and their
//! blocks) is what is live after the last. Per device:
//!
//! - where the trace saw PyTorch's allocator from the inside, its tensors
//!   are the snapshot's blocks (`alloc`, `free_requested` and
//!   `free_completed`) and its device allocations the segments
//!   (`segment_alloc`, `segment_free`); the device's other allocations
//!   (CUDA libraries' own) are not PyTorch's and stay out, as in
//!   PyTorch's snapshots;
//! - elsewhere (any other CUDA program) each device allocation is a
//!   segment holding one block of its size, so the viewers' timelines show
//!   the program's allocations.
//!
//! PyTorch's out-of-memory errors are `oom` events, and so are failed
//! device allocations where PyTorch's tensors are not known. Times are microseconds from the
//! trace's start. Memory still live when a process ended stays live: the
//! snapshot is taken at the trace's end.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use crate::pickle::Writer;

/// One frame, innermost first in a stack, as snapshots spell frames.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapFrame {
    pub filename: String,
    pub line: u32,
    pub name: String,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A device allocation (a segment, or the block of one elsewhere).
    DriverAlloc,
    DriverFree,
    /// A tensor of PyTorch's allocator.
    TensorAlloc,
    TensorFree,
    /// A device allocation that failed for want of memory.
    DriverFailed,
    /// PyTorch's out-of-memory error (the driver's failures behind it are
    /// its own business: where tensors are known, only this is an `oom`).
    TensorOom,
}

/// One event of the trace; `stack` is the caller's id for its frames
/// (0 for none).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub time_ns: u64,
    pub device: u32,
    pub action: Action,
    pub address: u64,
    pub bytes: u64,
    pub stream: u64,
    pub stack: u32,
    /// `DriverFailed`, `TensorOom`: free device memory then, when known
    /// (else 0).
    pub device_free: u64,
    /// `DriverAlloc`, `DriverFree`: a segment of PyTorch's caching
    /// allocator (the rest of the device's memory is not PyTorch's, and
    /// where its tensors are known a snapshot leaves that out).
    pub segment: bool,
}

#[derive(Clone, Copy)]
struct Live {
    bytes: u64,
    stack: u32,
    stream: u64,
    /// A device allocation of PyTorch's allocator (`Event::segment`).
    segment: bool,
}

#[derive(Default)]
struct Device {
    events: Vec<Event>,
    tensors_seen: bool,
    /// Every device allocation live.
    driver: BTreeMap<u64, Live>,
    blocks: BTreeMap<u64, Live>,
}

/// The snapshot being gathered.
#[derive(Default)]
pub struct History {
    devices: BTreeMap<u32, Device>,
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Written {
    pub devices: usize,
    pub events: u64,
    pub segments: u64,
    pub blocks: u64,
}

impl History {
    pub fn event(&mut self, e: Event) {
        let d = self.devices.entry(e.device).or_default();
        let live = Live {
            bytes: e.bytes,
            stack: e.stack,
            stream: e.stream,
            segment: e.segment,
        };
        match e.action {
            Action::DriverAlloc => {
                d.driver.insert(e.address, live);
            }
            Action::DriverFree => {
                d.driver.remove(&e.address);
            }
            Action::TensorAlloc => {
                d.tensors_seen = true;
                d.blocks.insert(e.address, live);
            }
            Action::TensorFree => {
                d.tensors_seen = true;
                d.blocks.remove(&e.address);
            }
            Action::DriverFailed | Action::TensorOom => {}
        }
        d.events.push(e);
    }

    /// Writes the snapshot; `frames(stack)` gives a stack's frames.
    pub fn write<W: Write>(
        self,
        out: W,
        frames: &dyn Fn(u32) -> Vec<SnapFrame>,
    ) -> io::Result<(W, Written)> {
        let mut s = Emitter {
            w: Writer::new(out)?,
            frames,
            stacks: HashMap::new(),
            written: Written::default(),
        };
        s.w.begin_dict()?;
        s.w.str("segments")?;
        s.w.begin_list()?;
        for (&device, d) in &self.devices {
            s.segments(device, d)?;
        }
        s.w.end_list()?;
        s.w.str("device_traces")?;
        s.w.begin_list()?;
        let last = self.devices.keys().next_back().copied();
        for device in 0..last.map_or(0, |l| l + 1) {
            s.w.begin_list()?;
            if let Some(d) = self.devices.get(&device) {
                for e in &d.events {
                    s.history_event(e, d.tensors_seen)?;
                }
            }
            s.w.end_list()?;
        }
        s.w.end_list()?;
        s.w.end_dict()?;
        s.written.devices = self.devices.len();
        let written = s.written.clone();
        Ok((s.w.finish()?, written))
    }
}

struct Emitter<'f, W: Write> {
    w: Writer<W>,
    frames: &'f dyn Fn(u32) -> Vec<SnapFrame>,
    /// Memo index of each stack's frame list once written.
    stacks: HashMap<u32, u32>,
    written: Written,
}

/// A block of a segment: its address, bytes, frames; or free space.
struct Piece {
    address: u64,
    bytes: u64,
    stack: Option<u32>,
}

impl<W: Write> Emitter<'_, W> {
    fn frames(&mut self, stack: u32) -> io::Result<()> {
        if let Some(&i) = self.stacks.get(&stack) {
            return self.w.shared(i);
        }
        self.w.begin_list()?;
        let frames = if stack == 0 {
            Vec::new()
        } else {
            (self.frames)(stack)
        };
        for f in &frames {
            self.w.begin_dict()?;
            self.w.key_str("filename", &f.filename)?;
            self.w.key_int("line", f.line.into())?;
            self.w.key_str("name", &f.name)?;
            self.w.end_dict()?;
        }
        let i = self.w.end_list_shared()?;
        self.stacks.insert(stack, i);
        Ok(())
    }

    /// The device's segments at the end with their blocks. Tensors outside
    /// every live segment get one of their own.
    fn segments(&mut self, device: u32, d: &Device) -> io::Result<()> {
        if !d.tensors_seen {
            for (&a, s) in &d.driver {
                let block = Piece {
                    address: a,
                    bytes: s.bytes,
                    stack: Some(s.stack),
                };
                self.segment(device, a, s, &[block])?;
            }
            return Ok(());
        }
        let mut placed = 0usize;
        for (&a, s) in d.driver.iter().filter(|(_, s)| s.segment) {
            let end = a.saturating_add(s.bytes);
            let mut pieces = Vec::new();
            let mut at = a;
            for (&b, blk) in d.blocks.range(a..end) {
                if b < at || b.saturating_add(blk.bytes) > end {
                    continue;
                }
                if b > at {
                    pieces.push(Piece {
                        address: at,
                        bytes: b - at,
                        stack: None,
                    });
                }
                pieces.push(Piece {
                    address: b,
                    bytes: blk.bytes,
                    stack: Some(blk.stack),
                });
                placed += 1;
                at = b + blk.bytes;
            }
            if at < end {
                pieces.push(Piece {
                    address: at,
                    bytes: end - at,
                    stack: None,
                });
            }
            self.segment(device, a, s, &pieces)?;
        }
        if placed < d.blocks.len() {
            for (&b, blk) in &d.blocks {
                let inside = d
                    .driver
                    .range(..=b)
                    .rev()
                    .find(|(_, s)| s.segment)
                    .is_some_and(|(&a, s)| b + blk.bytes <= a + s.bytes);
                if !inside {
                    let block = Piece {
                        address: b,
                        bytes: blk.bytes,
                        stack: Some(blk.stack),
                    };
                    self.segment(device, b, blk, &[block])?;
                }
            }
        }
        Ok(())
    }

    fn segment(&mut self, device: u32, address: u64, s: &Live, pieces: &[Piece]) -> io::Result<()> {
        let allocated: u64 = pieces
            .iter()
            .filter(|p| p.stack.is_some())
            .map(|p| p.bytes)
            .sum();
        let w = &mut self.w;
        w.begin_dict()?;
        w.key_int("device", device.into())?;
        w.str("address")?;
        w.uint(address)?;
        w.str("total_size")?;
        w.uint(s.bytes)?;
        for k in ["allocated_size", "active_size", "requested_size"] {
            w.str(k)?;
            w.uint(allocated)?;
        }
        w.str("stream")?;
        w.uint(s.stream)?;
        w.key_str(
            "segment_type",
            if s.bytes <= 2 << 20 { "small" } else { "large" },
        )?;
        w.str("is_expandable")?;
        w.bool(false)?;
        w.str("frames")?;
        self.frames(s.stack)?;
        self.w.str("blocks")?;
        self.w.begin_list()?;
        for p in pieces {
            self.w.begin_dict()?;
            self.w.str("address")?;
            self.w.uint(p.address)?;
            self.w.str("size")?;
            self.w.uint(p.bytes)?;
            self.w.str("requested_size")?;
            self.w.uint(if p.stack.is_some() { p.bytes } else { 0 })?;
            self.w.key_str(
                "state",
                if p.stack.is_some() {
                    "active_allocated"
                } else {
                    "inactive"
                },
            )?;
            self.w.str("frames")?;
            self.frames(p.stack.unwrap_or(0))?;
            self.w.end_dict()?;
            self.written.blocks += u64::from(p.stack.is_some());
        }
        self.w.end_list()?;
        self.w.end_dict()?;
        self.written.segments += 1;
        Ok(())
    }

    /// One trace event as the history entries PyTorch would have written.
    fn history_event(&mut self, e: &Event, tensors: bool) -> io::Result<()> {
        let skipped = match e.action {
            Action::DriverAlloc | Action::DriverFree => tensors && !e.segment,
            Action::DriverFailed => tensors,
            _ => false,
        };
        if skipped {
            return Ok(());
        }
        let actions: &[&str] = match (e.action, tensors) {
            (Action::DriverAlloc, true) => &["segment_alloc"],
            (Action::DriverFree, true) => &["segment_free"],
            (Action::DriverAlloc, false) => &["segment_alloc", "alloc"],
            (Action::DriverFree, false) => &["free_requested", "free_completed", "segment_free"],
            (Action::TensorAlloc, _) => &["alloc"],
            (Action::TensorFree, _) => &["free_requested", "free_completed"],
            (Action::DriverFailed | Action::TensorOom, _) => &["oom"],
        };
        for action in actions {
            self.w.begin_dict()?;
            self.w.key_str("action", action)?;
            self.w.str("addr")?;
            self.w.uint(e.address)?;
            self.w.str("size")?;
            self.w.uint(e.bytes)?;
            self.w.str("stream")?;
            self.w.uint(e.stream)?;
            self.w.str("time_us")?;
            self.w.uint(e.time_ns / 1000)?;
            if *action == "oom" {
                self.w.str("device_free")?;
                self.w.uint(e.device_free)?;
            }
            self.w.str("frames")?;
            self.frames(e.stack)?;
            self.w.end_dict()?;
            self.written.events += 1;
        }
        Ok(())
    }
}
