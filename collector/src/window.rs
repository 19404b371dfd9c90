//! Recording a part of the run (`record --steps A-B`, `--capture-range`,
//! `--delay`/`--duration`, `--window-signal`): the writer's filter between
//! the records and the file.
//!
//! Before the window opens the collector records as usual (stacks are taken
//! for every allocation: the window's report must name the sites of what
//! was already live), but nothing reaches the file: `Held` keeps the records
//! that still matter and lets the rest go as soon as they stop mattering
//! (an allocation and its free, a range and its end, kernels, steps). When
//! the window opens, what is held is written, timed one nanosecond before
//! the opening, then the `Window` record: a reader applying records in time
//! order starts the window with the live set the process had. Records of
//! before the opening that reach the writer after it (CUPTI hands over its
//! activity records in buffers, later) are written with that same time, so
//! they too land before the opening. After the window closes, records of
//! later are dropped, and the process's end is timed at the close.
//!
//! Definitions (stacks, strings, code objects, modules, messages) are
//! written whenever they come: records of the window refer to them.

use std::collections::{BTreeMap, HashMap, HashSet};

use gmem_prof_traces::record::{AllocatorAction, ApiFunc, Message, Nanos, WindowEdge};
use gmem_prof_traces::window::WindowPlan;
use gmem_prof_traces::Record;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Before,
    Open { at: u64 },
    Closed { at: u64, close: u64 },
}

/// The window of one process: where it stands, and what it holds before
/// it opens.
pub struct Window {
    plan: WindowPlan,
    phase: Phase,
    held: Held,
    /// The collector's start (the writer's first moment): the time plan
    /// counts from it.
    started: u64,
    /// Range plan: the string ids whose text is the range's name, and its
    /// domain's; the id of the instance that opened the window.
    names: HashSet<u32>,
    domains: HashSet<u32>,
    opened_by: Option<u64>,
}

impl Window {
    /// A window for `plan` in a process whose collector started at `now`.
    pub fn new(plan: WindowPlan, now: u64) -> Window {
        Window {
            plan,
            phase: Phase::Before,
            held: Held::default(),
            started: now,
            names: HashSet::new(),
            domains: HashSet::new(),
            opened_by: None,
        }
    }

    /// A window that opens at the start (step 1, no delay) opens at the
    /// first event (the process's own record comes before it).
    fn open_if_at_start(&mut self, out: &mut Vec<Record>) {
        let at_start = matches!(
            self.plan,
            WindowPlan::Steps { first: 1, .. } | WindowPlan::Time { delay_ms: 0, .. }
        );
        if at_start && self.phase == Phase::Before {
            self.open(self.started, out);
        }
    }

    /// Whether the window has closed (the collector may stop recording).
    pub fn closed(&self) -> bool {
        matches!(self.phase, Phase::Closed { .. })
    }

    /// The windows that open and close on the clock or on signals:
    /// `signals` is how many SIGUSR2 the process has received.
    pub fn tick(&mut self, now: u64, signals: u32, out: &mut Vec<Record>) {
        self.open_if_at_start(out);
        match (&self.plan, self.phase) {
            (WindowPlan::Signal, Phase::Before) if signals >= 1 => self.open(now, out),
            (WindowPlan::Signal, Phase::Open { .. }) if signals >= 2 => self.close(now, out),
            (&WindowPlan::Time { delay_ms, .. }, Phase::Before)
                if now >= self.started + delay_ms * 1_000_000 =>
            {
                self.open(now, out);
            }
            (
                &WindowPlan::Time {
                    duration_ms: Some(d),
                    ..
                },
                Phase::Open { at },
            ) if now >= at + d * 1_000_000 => self.close(now, out),
            _ => {}
        }
    }

    /// One record on its way to the file: what to write goes to `out`.
    pub fn route(&mut self, r: Record, out: &mut Vec<Record>) {
        let Some(time) = event_time(&r) else {
            self.note_definition(&r);
            out.push(r);
            return;
        };
        self.open_if_at_start(out);
        match self.phase {
            Phase::Before if matches!(r, Record::ProcessEnd(_)) => {
                out.push(Record::Message(Message {
                    time: Nanos(time),
                    level: 1,
                    text: format!(
                        "the recorded window ({}) never opened in this process: nothing of \
                         its run is in the trace",
                        self.plan
                    ),
                }));
                out.push(r);
            }
            Phase::Before => {
                if self.opens_at(&r) {
                    self.open(time, out);
                    // The step that ended before the window is not one of
                    // its steps; the range that opened it is its first
                    // record.
                    if !matches!(r, Record::Step(_)) {
                        out.push(r);
                    }
                } else {
                    self.held.take(r);
                }
            }
            Phase::Open { at } if time < at => late(r, at, out),
            Phase::Open { .. } => {
                let closes = self.closes_at(&r);
                out.push(r);
                if closes {
                    self.close(time, out);
                }
            }
            Phase::Closed { at, close } => match r {
                Record::ProcessEnd(mut end) => {
                    end.time = Nanos(end.time.0.min(close));
                    out.push(Record::ProcessEnd(end));
                }
                r if time < at => late(r, at, out),
                r if time <= close => out.push(r),
                _ => {}
            },
        }
    }

    fn note_definition(&mut self, r: &Record) {
        let (Record::String(s), WindowPlan::Range { domain, name }) = (r, &self.plan) else {
            return;
        };
        if s.text == *name {
            self.names.insert(s.id.0);
        }
        if domain.as_deref() == Some(s.text.as_str()) {
            self.domains.insert(s.id.0);
        }
    }

    /// Whether `r` opens the window (it is before the window).
    fn opens_at(&mut self, r: &Record) -> bool {
        match (&self.plan, r) {
            (WindowPlan::Steps { first, .. }, Record::Step(s)) => s.number + 1 == *first,
            (WindowPlan::Range { domain, .. }, Record::RangeBegin(b)) => {
                let domain_ok = match domain {
                    None => true,
                    Some(_) => self.domains.contains(&b.domain.0),
                };
                let opens = domain_ok && self.names.contains(&b.name.0);
                if opens {
                    self.opened_by = Some(b.id);
                }
                opens
            }
            _ => false,
        }
    }

    /// Whether `r` (in the window) is its last record.
    fn closes_at(&self, r: &Record) -> bool {
        match (&self.plan, r) {
            (WindowPlan::Steps { last, .. }, Record::Step(s)) => s.number >= *last,
            (WindowPlan::Range { .. }, Record::RangeEnd(e)) => Some(e.id) == self.opened_by,
            _ => false,
        }
    }

    fn open(&mut self, at: u64, out: &mut Vec<Record>) {
        let at = at.max(1);
        for mut r in std::mem::take(&mut self.held).into_records() {
            set_time(&mut r, at - 1);
            out.push(r);
        }
        out.push(Record::Window(WindowEdge {
            time: Nanos(at),
            open: true,
            what: self.plan.to_string(),
        }));
        self.phase = Phase::Open { at };
    }

    fn close(&mut self, close: u64, out: &mut Vec<Record>) {
        let Phase::Open { at } = self.phase else {
            return;
        };
        out.push(Record::Window(WindowEdge {
            time: Nanos(close),
            open: false,
            what: self.plan.to_string(),
        }));
        self.phase = Phase::Closed { at, close };
    }
}

/// A record of before the window that reached the writer after it opened:
/// written just before the opening, unless it is of a kind the window does
/// not take from before (see `Held::take`).
fn late(mut r: Record, at: u64, out: &mut Vec<Record>) {
    if !dropped_before(&r) {
        set_time(&mut r, at - 1);
        out.push(r);
    }
}

/// The kinds of record of before the window that never matter to it:
/// kernels, steps, marks, the device's samples, failed calls (and the
/// device they failed on), frees whose allocation went with them.
fn dropped_before(r: &Record) -> bool {
    match r {
        Record::Kernel(_)
        | Record::KernelLaunch(_)
        | Record::Step(_)
        | Record::Mark(_)
        | Record::DeviceMemory(_)
        | Record::CallDevice(_) => true,
        Record::Api(a) => a.result != 0 || plain_free(a.func),
        Record::AllocatorEvent(e) => {
            matches!(
                e.action,
                AllocatorAction::OOM | AllocatorAction::OOM_REPORT | AllocatorAction::SNAPSHOT
            )
        }
        _ => false,
    }
}

/// Frees whose device-side record releases the memory (the call adds only
/// its stack, and a failure, which are of no use before the window).
fn plain_free(f: ApiFunc) -> bool {
    matches!(
        f,
        ApiFunc::MEM_FREE
            | ApiFunc::MEM_FREE_HOST
            | ApiFunc::MEM_FREE_ASYNC
            | ApiFunc::ARRAY_DESTROY
            | ApiFunc::MIPMAPPED_ARRAY_DESTROY
    )
}

/// The time of an event record; `None` for definitions, which are written
/// whenever they come.
fn event_time(r: &Record) -> Option<u64> {
    Some(match r {
        Record::Api(a) => a.time.0,
        Record::Memory(m) => m.time.0,
        Record::Pool(p) => p.time.0,
        Record::Kernel(k) => k.start.0,
        Record::KernelLaunch(k) => k.time.0,
        Record::AllocatorEvent(e) => e.time.0,
        Record::DeviceMemory(m) => m.time.0,
        Record::CallDevice(c) => c.time.0,
        Record::PoolUsage(u) => u.time.0,
        Record::Step(s) => s.time.0,
        Record::RangeBegin(b) => b.time.0,
        Record::RangeEnd(e) => e.time.0,
        Record::Mark(m) => m.time.0,
        Record::ProcessEnd(e) => e.time.0,
        _ => return None,
    })
}

fn set_time(r: &mut Record, t: u64) {
    let t = Nanos(t);
    match r {
        Record::Api(a) => a.time = t,
        Record::Memory(m) => m.time = t,
        Record::Pool(p) => p.time = t,
        Record::Kernel(k) => k.start = t,
        Record::KernelLaunch(k) => k.time = t,
        Record::AllocatorEvent(e) => e.time = t,
        Record::DeviceMemory(m) => m.time = t,
        Record::CallDevice(c) => c.time = t,
        Record::PoolUsage(u) => u.time = t,
        Record::Step(s) => s.time = t,
        Record::RangeBegin(b) => b.time = t,
        Record::RangeEnd(e) => e.time = t,
        Record::Mark(m) => m.time = t,
        Record::ProcessEnd(e) => e.time = t,
        _ => {}
    }
}

/// What is held before the window: the records of what is live (and of
/// what the reader needs to make sense of it), in the order they came.
/// Each is dropped as soon as what it made is gone.
#[derive(Default)]
struct Held {
    records: BTreeMap<u64, Record>,
    next: u64,
    /// Device-side allocations by address: (its record, its correlation).
    memory: HashMap<u64, (u64, u32)>,
    /// Allocation calls waiting for (or matched to) their device-side
    /// record, by correlation id.
    calls: HashMap<u32, u64>,
    /// A framework allocator's blocks and segments by (allocator, device,
    /// address): the allocation and, for a block, its requested free.
    blocks: HashMap<(u8, u32, u64), (u64, Option<u64>)>,
    segments: HashMap<(u8, u32, u64), u64>,
    /// Ranges still open, by id.
    ranges: HashMap<u64, u64>,
    /// The last reading of each framework pool (device, framework).
    pool_usage: HashMap<(u32, u8), u64>,
}

impl Held {
    fn keep(&mut self, r: Record) -> u64 {
        let key = self.next;
        self.next += 1;
        self.records.insert(key, r);
        key
    }

    fn forget(&mut self, key: u64) {
        self.records.remove(&key);
    }

    /// One record of before the window.
    fn take(&mut self, r: Record) {
        if dropped_before(&r) {
            return;
        }
        match &r {
            Record::Memory(m) if m.alloc => {
                let (address, correlation) = (m.address, m.correlation);
                let key = self.keep(r);
                self.memory.insert(address, (key, correlation));
            }
            Record::Memory(m) => {
                let Some(&(key, correlation)) = self.memory.get(&m.address) else {
                    return;
                };
                let allocated = self.records.get(&key).and_then(event_time);
                if allocated.is_some_and(|t| t <= m.time.0) {
                    self.memory.remove(&m.address);
                    self.forget(key);
                    self.forget_call(correlation, m.address);
                }
            }
            Record::Api(a) if a.func.allocates() && !vmm_or_registered(a.func) => {
                let correlation = a.correlation;
                let key = self.keep(r);
                self.calls.insert(correlation, key);
            }
            Record::AllocatorEvent(e) => {
                let at = (e.allocator, e.device, e.address);
                match e.action {
                    AllocatorAction::ALLOC => {
                        let key = self.keep(r);
                        self.blocks.insert(at, (key, None));
                    }
                    AllocatorAction::FREE_REQUESTED => {
                        if self.blocks.contains_key(&at) {
                            let key = self.keep(r);
                            if let Some(b) = self.blocks.get_mut(&at) {
                                b.1 = Some(key);
                            }
                        }
                    }
                    AllocatorAction::FREE | AllocatorAction::FREE_COMPLETED => {
                        if let Some((alloc, request)) = self.blocks.remove(&at) {
                            self.forget(alloc);
                            if let Some(r) = request {
                                self.forget(r);
                            }
                        }
                    }
                    AllocatorAction::SEGMENT_ALLOC => {
                        let key = self.keep(r);
                        self.segments.insert(at, key);
                    }
                    AllocatorAction::SEGMENT_FREE => {
                        if let Some(key) = self.segments.remove(&at) {
                            self.forget(key);
                        }
                    }
                    // Pages mapped into and out of expandable segments:
                    // kept (their ranges need not match one to one).
                    _ => {
                        self.keep(r);
                    }
                }
            }
            Record::RangeBegin(b) => {
                let id = b.id;
                let key = self.keep(r);
                self.ranges.insert(id, key);
            }
            Record::RangeEnd(e) => {
                if let Some(key) = self.ranges.remove(&e.id) {
                    self.forget(key);
                }
            }
            Record::PoolUsage(u) => {
                let at = (u.device, u.framework);
                let key = self.keep(r);
                if let Some(old) = self.pool_usage.insert(at, key) {
                    self.forget(old);
                }
            }
            // VMM, registrations, pools, IPC, graph memory: rare, and
            // their records tie to each other in more ways than by address;
            // all kept.
            _ => {
                self.keep(r);
            }
        }
    }

    /// The allocation call of a device-side allocation that is gone.
    fn forget_call(&mut self, correlation: u32, address: u64) {
        let Some(&key) = self.calls.get(&correlation) else {
            return;
        };
        if let Some(Record::Api(a)) = self.records.get(&key) {
            if a.address == address {
                self.calls.remove(&correlation);
                self.forget(key);
            }
        }
    }

    fn into_records(self) -> impl Iterator<Item = Record> {
        self.records.into_values()
    }
}

/// Allocation calls of the virtual memory management API, graph memory
/// nodes and host registrations: kept whole (see `Held::take`).
fn vmm_or_registered(f: ApiFunc) -> bool {
    matches!(
        f,
        ApiFunc::MEM_CREATE
            | ApiFunc::MEM_MAP
            | ApiFunc::MEM_ADDRESS_RESERVE
            | ApiFunc::MEM_HOST_REGISTER
            | ApiFunc::GRAPH_ADD_MEM_ALLOC_NODE
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmem_prof_traces::record::{
        AllocatorEvent, ApiCall, Bytes, KernelLaunch, MemoryEvent, ProcessEnd, RangeBegin,
        RangeEnd, Step, StringDef, StringId,
    };

    fn alloc(t: u64, address: u64, correlation: u32) -> [Record; 2] {
        [
            Record::Api(ApiCall {
                time: Nanos(t),
                func: ApiFunc::MEM_ALLOC,
                correlation,
                address,
                bytes: Bytes(100),
                ..Default::default()
            }),
            Record::Memory(MemoryEvent {
                time: Nanos(t),
                alloc: true,
                address,
                bytes: Bytes(100),
                correlation,
                ..Default::default()
            }),
        ]
    }

    fn free(t: u64, address: u64) -> Record {
        Record::Memory(MemoryEvent {
            time: Nanos(t),
            alloc: false,
            address,
            bytes: Bytes(100),
            ..Default::default()
        })
    }

    fn step(t: u64, number: u64) -> Record {
        Record::Step(Step {
            time: Nanos(t),
            number,
            ..Default::default()
        })
    }

    fn tensor(t: u64, action: AllocatorAction, address: u64) -> Record {
        Record::AllocatorEvent(AllocatorEvent {
            time: Nanos(t),
            action,
            address,
            bytes: Bytes(10),
            ..Default::default()
        })
    }

    /// (time, what) of each record written: "api@addr", "alloc@addr",
    /// "free@addr", "tensor/ACTION@addr", "step N", "open", "close", …
    fn written(out: &[Record]) -> Vec<(u64, String)> {
        out.iter()
            .map(|r| {
                let what = match r {
                    Record::Api(a) => format!("api@{:x}", a.address),
                    Record::Memory(m) if m.alloc => format!("alloc@{:x}", m.address),
                    Record::Memory(m) => format!("free@{:x}", m.address),
                    Record::AllocatorEvent(e) => {
                        format!("tensor/{}@{:x}", e.action.name(), e.address)
                    }
                    Record::Step(s) => format!("step {}", s.number),
                    Record::Window(w) if w.open => "open".into(),
                    Record::Window(_) => "close".into(),
                    Record::RangeBegin(b) => format!("begin {}", b.id),
                    Record::RangeEnd(e) => format!("end {}", e.id),
                    Record::ProcessEnd(_) => "end of process".into(),
                    Record::Message(m) => m.text.clone(),
                    Record::String(s) => format!("string {}", s.text),
                    other => format!("{other:?}"),
                };
                let time = match r {
                    Record::Window(w) => w.time.0,
                    r => event_time(r).unwrap_or(0),
                };
                (time, what)
            })
            .collect()
    }

    fn run(w: &mut Window, records: impl IntoIterator<Item = Record>) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        for r in records {
            w.route(r, &mut out);
        }
        written(&out)
    }

    fn w(list: &[(u64, &str)]) -> Vec<(u64, String)> {
        list.iter().map(|&(t, s)| (t, s.to_string())).collect()
    }

    /// Steps 3 to 4: before the end of step 2, an allocation freed again
    /// goes, one still live is written (with its call) just before the
    /// opening; kernels and the steps before go; the window's records
    /// pass; after step 4 nothing later is written and the end is timed at
    /// the close.
    #[test]
    fn a_steps_window_begins_with_what_was_live_and_ends_at_its_last_step() {
        let mut win = Window::new(WindowPlan::Steps { first: 3, last: 4 }, 0);
        let launch = Record::KernelLaunch(KernelLaunch {
            time: Nanos(15),
            ..Default::default()
        });
        let mut records = Vec::new();
        records.extend(alloc(10, 0xa, 1));
        records.extend(alloc(11, 0xb, 2));
        records.push(launch);
        records.push(free(12, 0xa));
        records.push(step(20, 1));
        records.push(step(30, 2));
        records.extend(alloc(40, 0xc, 3));
        records.push(free(41, 0xb));
        records.push(step(50, 3));
        records.push(step(60, 4));
        records.extend(alloc(70, 0xd, 4));
        records.push(Record::ProcessEnd(ProcessEnd { time: Nanos(80) }));
        assert_eq!(
            run(&mut win, records),
            w(&[
                (29, "api@b"),
                (29, "alloc@b"),
                (30, "open"),
                (40, "api@c"),
                (40, "alloc@c"),
                (41, "free@b"),
                (50, "step 3"),
                (60, "step 4"),
                (60, "close"),
                (60, "end of process"),
            ])
        );
    }

    /// Records of before the opening that reach the writer after it (CUPTI's
    /// activity buffers) are timed just before it; those of after the
    /// close that come late are dropped, those of before it kept.
    #[test]
    fn late_records_land_on_their_side_of_the_edges() {
        let mut win = Window::new(WindowPlan::Steps { first: 2, last: 2 }, 0);
        let [call, memory] = alloc(5, 0xa, 1);
        let records = [
            call,
            step(10, 1),
            memory,
            free(8, 0xa),
            step(20, 2),
            free(19, 0xe),
            free(21, 0xf),
        ];
        assert_eq!(
            run(&mut win, records),
            w(&[
                (9, "api@a"),
                (10, "open"),
                (9, "alloc@a"),
                (9, "free@a"),
                (20, "step 2"),
                (20, "close"),
                (19, "free@e"),
            ])
        );
    }

    /// A framework allocator's blocks: one freed (in one record, or
    /// requested then completed) goes; one requested but not completed
    /// stays with its request; segments alike.
    #[test]
    fn tensors_and_segments_live_at_the_opening_are_written() {
        use AllocatorAction as A;
        let mut win = Window::new(WindowPlan::Steps { first: 2, last: 9 }, 0);
        let records = [
            tensor(1, A::SEGMENT_ALLOC, 0x100),
            tensor(2, A::ALLOC, 0x100),
            tensor(3, A::ALLOC, 0x200),
            tensor(4, A::ALLOC, 0x300),
            tensor(5, A::FREE, 0x100),
            tensor(6, A::FREE_REQUESTED, 0x200),
            tensor(7, A::FREE_COMPLETED, 0x200),
            tensor(8, A::FREE_REQUESTED, 0x300),
            tensor(9, A::SEGMENT_ALLOC, 0x900),
            tensor(9, A::SEGMENT_FREE, 0x900),
            tensor(9, A::OOM, 0),
            step(10, 1),
        ];
        assert_eq!(
            run(&mut win, records),
            w(&[
                (9, "tensor/segment_alloc@100"),
                (9, "tensor/alloc@300"),
                (9, "tensor/free_requested@300"),
                (10, "open"),
            ])
        );
    }

    /// The first instance of a named range (in its domain) opens the
    /// window and its end closes it; ranges still open then are written
    /// before it, ranges ended before are not.
    #[test]
    fn a_range_window_is_the_first_instance_of_its_name() {
        let mut win = Window::new(
            WindowPlan::Range {
                domain: None,
                name: "train".into(),
            },
            0,
        );
        let string = |id, text: &str| {
            Record::String(StringDef {
                id: StringId(id),
                text: text.into(),
            })
        };
        let begin = |t, id, name| {
            Record::RangeBegin(RangeBegin {
                time: Nanos(t),
                id,
                name: StringId(name),
                ..Default::default()
            })
        };
        let end = |t, id| {
            Record::RangeEnd(RangeEnd {
                time: Nanos(t),
                id,
                ..Default::default()
            })
        };
        let records = [
            string(1, "epoch"),
            string(2, "train"),
            begin(1, 1, 1),
            begin(2, 2, 1),
            end(3, 2),
            begin(10, 3, 2),
            begin(11, 4, 2),
            end(12, 4),
            end(20, 3),
            begin(21, 5, 2),
        ];
        assert_eq!(
            run(&mut win, records),
            w(&[
                (0, "string epoch"),
                (0, "string train"),
                (9, "begin 1"),
                (10, "open"),
                (10, "begin 3"),
                (11, "begin 4"),
                (12, "end 4"),
                (20, "end 3"),
                (20, "close"),
            ])
        );
    }

    /// On the clock: opens at the delay after the start, closes after the
    /// duration; by signal: the first opens, the second closes.
    #[test]
    fn time_and_signal_windows_open_and_close_on_ticks() {
        let ms = 1_000_000;
        let mut win = Window::new(
            WindowPlan::Time {
                delay_ms: 2,
                duration_ms: Some(3),
            },
            100,
        );
        let mut out = Vec::new();
        win.tick(100 + ms, 0, &mut out);
        assert!(out.is_empty());
        win.tick(100 + 2 * ms, 0, &mut out);
        win.tick(100 + 4 * ms, 0, &mut out);
        win.tick(100 + 5 * ms, 0, &mut out);
        assert_eq!(
            written(&out),
            w(&[(100 + 2 * ms, "open"), (100 + 5 * ms, "close")])
        );
        let mut win = Window::new(WindowPlan::Signal, 0);
        let mut out = Vec::new();
        win.tick(5, 0, &mut out);
        win.tick(6, 1, &mut out);
        win.tick(7, 1, &mut out);
        win.tick(8, 2, &mut out);
        assert_eq!(written(&out), w(&[(6, "open"), (8, "close")]));
        assert!(win.closed());
    }

    /// A window that opens at the start opens at the first event, after
    /// the process's own record; one that never opened says so at the end.
    #[test]
    fn windows_at_the_start_and_windows_never_opened() {
        let mut win = Window::new(WindowPlan::Steps { first: 1, last: 1 }, 5);
        let got = run(&mut win, [string_record(), step(10, 1), step(20, 2)]);
        assert_eq!(
            got,
            w(&[(0, "string x"), (5, "open"), (10, "step 1"), (10, "close")])
        );
        let mut win = Window::new(WindowPlan::Steps { first: 9, last: 10 }, 0);
        let got = run(
            &mut win,
            [
                step(10, 1),
                Record::ProcessEnd(ProcessEnd { time: Nanos(20) }),
            ],
        );
        assert_eq!(got.len(), 2);
        assert!(got[0].1.contains("steps 9 to 10) never opened"), "{got:?}");
        assert_eq!(got[1], (20, "end of process".to_string()));
    }

    fn string_record() -> Record {
        Record::String(StringDef {
            id: StringId(1),
            text: "x".into(),
        })
    }
}
