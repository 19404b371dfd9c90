//! The pipeline from trace bytes to a finished sweep: files mapped, chunks
//! framed, decoded in parallel batches ahead of the sweep, and events
//! released to the sweep (`engine`) in global time order once every process
//! has read past them by the reordering window.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::engine::Engine;
use crate::events::{EventRow, SiteIds};
use crate::input::{self, key, ChunkRef, TimedEvent};
use crate::model::{Analysis, InputSummary};
use crate::{AnalyzeError, Options};

/// Maps the files and runs `f` over their bytes; `f` calls the function
/// it is given (`DoneReading`) once it reads them no more.
pub fn with_files<T>(
    paths: &[PathBuf],
    f: impl FnOnce(&[&[u8]], &[String], DoneReading) -> Result<T, AnalyzeError>,
) -> Result<T, AnalyzeError> {
    let mut maps = Vec::new();
    let mut names = Vec::new();
    for p in paths {
        let name = p.display().to_string();
        let f = std::fs::File::open(p).map_err(|e| AnalyzeError::Io {
            file: name.clone(),
            source: e,
        })?;
        // SAFETY: the file is mapped read-only; the reader never trusts its
        // contents, and a trace changing under us yields damage warnings,
        // not memory unsafety (the mapping stays valid until dropped).
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| AnalyzeError::Io {
            file: name.clone(),
            source: e,
        })?;
        maps.push(map);
        names.push(name);
    }
    let datas: Vec<&[u8]> = maps.iter().map(|m| &m[..]).collect();
    // Unmapping a large trace's pages takes a while (30-70 ms for 864 MB),
    // and at the end it would be done with every other core idle. Told
    // when the analysis reads the files no more, this drops the pages'
    // mappings while the sweep finishes, on a thread of its own: done on a
    // thread of the analysis, it held up the sweep's next step, whose join
    // waits for it.
    std::thread::scope(|scope| {
        let unmap_pages = || {
            scope.spawn(|| {
                for m in &maps {
                    // SAFETY: the mappings are shared and read-only:
                    // MADV_DONTNEED drops their page-table entries, and a
                    // later read, if one came, would map the file's pages
                    // again; nothing is discarded.
                    #[cfg(unix)]
                    let _ = unsafe { m.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
                }
            });
        };
        f(&datas, &names, &unmap_pages)
    })
}

/// Called once the analysis reads its input no more; returns at once.
pub type DoneReading<'f> = &'f (dyn Fn() + Sync);

/// Where the sweep hands event rows, for exporters.
pub type RowSink<'s> = &'s mut dyn FnMut(&[EventRow]);

/// Frames, decodes and sweeps the traces, then builds the model.
pub fn run(
    datas: &[&[u8]],
    names: &[String],
    opts: &Options,
    mut sink: Option<RowSink>,
    done_reading: DoneReading,
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    let (chunks, procs, mut warnings) = input::frame(datas, names)?;
    let total_bytes: u64 = datas.iter().map(|d| d.len() as u64).sum();
    let mut schedule = Schedule::new(&chunks, procs);
    let mut cursors: Vec<Cursor> = schedule
        .procs
        .iter()
        .map(|s| Cursor {
            unread: s.chunks.len(),
            ..Cursor::default()
        })
        .collect();
    let mut engine = Engine::new(procs);
    engine.step_range = opts.step_range.as_ref().map(|r| match r.split_once(':') {
        Some((domain, name)) => (Some(domain.to_string()), name.to_string()),
        None => (None, r.clone()),
    });
    if sink.is_some() {
        engine.rows = Some(Vec::new());
    }
    let mut hand_out = |engine: &mut Engine| {
        if let (Some(sink), Some(rows)) = (sink.as_mut(), engine.rows.as_mut()) {
            if !rows.is_empty() {
                sink(rows);
                rows.clear();
            }
        }
    };
    let mut records = 0u64;
    // Decoded batches, in the order the schedule chose them. Later ones are
    // decoded while the sweep applies the first (rayon::join): decoding is
    // parallel, the sweep is sequential.
    let mut ready: VecDeque<Batch> = VecDeque::new();
    let mut input_done = false;
    schedule.decode_ahead(&mut ready, &AtomicBool::new(true));
    while let Some(Batch {
        proc: s,
        latest,
        decoded,
    }) = ready.pop_front()
    {
        let cur = &mut cursors[s];
        cur.read_up_to = cur.read_up_to.max(latest);
        cur.unread -= decoded.len();
        for d in decoded {
            records += d.records;
            if let Some((offset, why)) = d.error {
                warnings.push(crate::model::InputWarning::DamagedChunk {
                    offset,
                    reason: why.to_string(),
                });
            }
            engine.apply_defs(d.proc, d.defs);
            cursors[s].insert(d.events);
        }
        // Events are safe to apply once every process still being read has
        // read past them by the window.
        let safe = cursors
            .iter()
            .filter(|c| c.unread > 0)
            .map(|c| c.read_up_to.saturating_sub(input::WINDOW_NS))
            .min()
            .unwrap_or(u64::MAX);
        let swept = AtomicBool::new(false);
        let (pending, engine_ref) = (&mut cursors, &mut engine);
        rayon::join(
            || {
                schedule.decode_ahead(&mut ready, &swept);
                // Once every chunk is decoded, the input is let go of while
                // the sweep goes through what is left.
                if !input_done && schedule.all_taken() {
                    input_done = true;
                    done_reading();
                }
            },
            || {
                release(pending, safe, engine_ref);
                swept.store(true, Ordering::Release);
            },
        );
        hand_out(&mut engine);
        if let Some(p) = opts.progress {
            p(schedule.done_bytes, total_bytes);
        }
    }
    release(&mut cursors, u64::MAX, &mut engine);
    engine.finish();
    hand_out(&mut engine);
    let summary = InputSummary {
        files: names
            .iter()
            .map(|n| {
                std::path::Path::new(n)
                    .file_name()
                    .map_or_else(|| n.clone(), |f| f.to_string_lossy().into_owned())
            })
            .collect(),
        bytes: total_bytes,
        chunks: chunks.len() as u64,
        records,
        memory_events: engine.memory_events,
        api_calls: engine.api_calls,
        kernels: engine.kernels,
        warnings,
        dropped_records: 0,
        late_events: engine.late_events,
    };
    crate::build::build(engine, summary, opts)
}

/// A decoded batch of one process's chunks.
struct Batch {
    proc: usize,
    /// The latest event time in it.
    latest: u64,
    /// Its chunks, decoded, in file order.
    decoded: Vec<input::Decoded>,
}

/// Decoded batches waiting for the sweep, at most.
const AHEAD: usize = 3;

/// Which chunks are decoded next, and their decoding ahead of the sweep.
///
/// A batch is `input::BATCH` chunks of the process that has read least, so
/// that every process's window can be released. The schedule learns how far
/// a process has read only from whole batches, in the order it chose them,
/// so that order is the same however far ahead decoding runs: the analysis
/// stays deterministic.
struct Schedule<'c, 'a> {
    chunks: &'c [ChunkRef<'a>],
    procs: Vec<ProcSchedule>,
    /// The batch being decoded: its process, its chunks, those decoded.
    current: Option<(usize, Vec<&'c ChunkRef<'a>>, Vec<input::Decoded>)>,
    /// Stored bytes of the chunks taken so far (for progress).
    done_bytes: u64,
}

#[derive(Default)]
struct ProcSchedule {
    chunks: Vec<usize>,
    next: usize,
    read_up_to: u64,
}

impl<'c, 'a> Schedule<'c, 'a> {
    fn new(chunks: &'c [ChunkRef<'a>], procs: u32) -> Self {
        let mut s: Vec<ProcSchedule> = (0..procs).map(|_| ProcSchedule::default()).collect();
        for (i, c) in chunks.iter().enumerate() {
            s[c.proc as usize].chunks.push(i);
        }
        Schedule {
            chunks,
            procs: s,
            current: None,
            done_bytes: 0,
        }
    }

    /// Whether every chunk has been decoded.
    fn all_taken(&self) -> bool {
        self.current.is_none() && self.procs.iter().all(|s| s.next == s.chunks.len())
    }

    /// Starts the next batch; false when every chunk has been taken.
    fn start_batch(&mut self) -> bool {
        let Some(s) = self
            .procs
            .iter()
            .enumerate()
            .filter(|(_, c)| c.next < c.chunks.len())
            .min_by_key(|(i, c)| (c.read_up_to, *i))
            .map(|(i, _)| i)
        else {
            return false;
        };
        let cur = &mut self.procs[s];
        let end = (cur.next + input::BATCH).min(cur.chunks.len());
        let batch: Vec<&ChunkRef> = cur.chunks[cur.next..end]
            .iter()
            .map(|&i| &self.chunks[i])
            .collect();
        cur.next = end;
        self.done_bytes += batch
            .iter()
            .map(|c| c.raw.stored.len() as u64 + 24)
            .sum::<u64>();
        let n = batch.len();
        self.current = Some((s, batch, Vec::with_capacity(n)));
        true
    }

    /// Decodes into `ready`. When nothing is ready the sweep is waiting:
    /// the current batch is finished on every thread. Otherwise chunks are
    /// decoded one at a time on this thread, up to `AHEAD` batches, until
    /// the sweep has `swept`: then it waits at most one chunk for this
    /// thread, and never for a whole batch.
    fn decode_ahead(&mut self, ready: &mut VecDeque<Batch>, swept: &AtomicBool) {
        loop {
            if self.current.is_none() && !self.start_batch() {
                return;
            }
            let needed = ready.is_empty();
            if !needed && (ready.len() >= AHEAD || swept.load(Ordering::Acquire)) {
                return;
            }
            let Some((s, batch, decoded)) = self.current.as_mut() else {
                return;
            };
            if needed {
                decoded.extend(input::decode_batch(&batch[decoded.len()..]));
            } else {
                decoded.push(input::decode(batch[decoded.len()]));
            }
            if decoded.len() == batch.len() {
                let (proc, decoded) = (*s, std::mem::take(decoded));
                self.current = None;
                // Each chunk's events are sorted: the last is its latest.
                let latest = decoded
                    .iter()
                    .filter_map(|d| d.events.last().map(|e| e.time))
                    .max()
                    .unwrap_or(0);
                let cur = &mut self.procs[proc];
                cur.read_up_to = cur.read_up_to.max(latest);
                ready.push_back(Batch {
                    proc,
                    latest,
                    decoded,
                });
            }
        }
    }
}

/// A process's state in the sweep: how far it has been read, and decoded
/// events not yet released.
#[derive(Default)]
struct Cursor {
    /// Chunks not yet inserted.
    unread: usize,
    /// The latest time of the batches inserted (`Batch::latest`; the
    /// schedule keeps its own, for the batches it decoded, which may be
    /// further on).
    read_up_to: u64,
    /// Events not yet released, as sorted runs (usually one per chunk), each
    /// starting at or after the end of the one before. Keeping a chunk's
    /// vector as it came saves copying every event once more.
    runs: VecDeque<Vec<TimedEvent>>,
    /// Events of the first run already released.
    head: usize,
}

impl Cursor {
    fn front(&self) -> Option<&TimedEvent> {
        self.runs.front().and_then(|r| r.get(self.head))
    }

    /// Hands `apply` every event from the front on while `ready` holds,
    /// in order, in place, a slice at a time. `ready` must hold for a prefix
    /// of the events in time order (each run is sorted).
    fn take_while(
        &mut self,
        ready: impl Fn(&TimedEvent) -> bool,
        mut apply: impl FnMut(&[TimedEvent]),
    ) {
        while let Some(run) = self.runs.front() {
            let waiting = &run[self.head..];
            let n = waiting.partition_point(&ready);
            if n > 0 {
                apply(&waiting[..n]);
            }
            self.head += n;
            if self.head < run.len() {
                return;
            }
            if let Some(done) = self.runs.pop_front() {
                input::recycle(done);
            }
            self.head = 0;
        }
    }

    /// Inserts a sorted run of events.
    fn insert(&mut self, events: Vec<TimedEvent>) {
        let Some(first) = events.first().map(key) else {
            input::recycle(events);
            return;
        };
        let last = self.runs.back().and_then(|r| r.last()).map(key);
        if last.is_none_or(|l| l <= first) {
            self.runs.push_back(events);
            return;
        }
        // Some events arrived late: take every pending event after the
        // first new one (whole runs from the back, then part of one) and
        // merge them with the new run.
        let mut tail: Vec<Vec<TimedEvent>> = Vec::new();
        while let Some(mut run) = self.runs.pop_back() {
            let from = if self.runs.is_empty() { self.head } else { 0 };
            let at = from + run[from..].partition_point(|e| key(e) <= first);
            if at == from && from == 0 {
                tail.push(run);
                continue;
            }
            tail.push(run.split_off(at));
            if at > from {
                self.runs.push_back(run);
            } else {
                // Only released events were left in it.
                input::recycle(run);
                self.head = 0;
            }
            break;
        }
        let older: Vec<TimedEvent> = tail.into_iter().rev().flatten().collect();
        self.runs.push_back(input::merge_sorted(older, events));
    }
}

/// Applies, in global time order, every pending event at or before `safe`.
fn release(cursors: &mut [Cursor], safe: u64, engine: &mut Engine) {
    loop {
        let mut best: Option<(usize, (u64, u64))> = None;
        for (i, c) in cursors.iter().enumerate() {
            if let Some(e) = c.front() {
                let k = key(e);
                if e.time <= safe && best.is_none_or(|(_, b)| k < b) {
                    best = Some((i, k));
                }
            }
        }
        let Some((i, _)) = best else { return };
        // Drain this process while it stays ahead of every other one.
        let limit = cursors
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .filter_map(|(_, c)| c.front().map(key))
            .min()
            .unwrap_or((u64::MAX, u64::MAX));
        cursors[i].take_while(
            |e| e.time <= safe && key(e) <= limit,
            |events| engine.apply_all(i as u32, events),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::Event;
    use proptest::prelude::*;

    fn ev(time: u64, seq: u64) -> TimedEvent {
        TimedEvent {
            time,
            seq,
            event: Event::End,
        }
    }

    proptest! {
        /// Runs that overlap (late records) come out of a cursor in one
        /// sorted sequence, none lost, with releases in between of all that
        /// no later run can precede (part of a run, or several).
        #[test]
        fn cursor_releases_overlapping_runs_in_order(
            runs in proptest::collection::vec(
                proptest::collection::vec(0u64..1000, 0..40), 1..20),
        ) {
            let mut seq = 0u64;
            let runs: Vec<Vec<TimedEvent>> = runs
                .into_iter()
                .map(|mut times| {
                    times.sort_unstable();
                    times.into_iter().map(|t| { seq += 1; ev(t, seq) }).collect()
                })
                .collect();
            let total: usize = runs.iter().map(Vec::len).sum();
            let mut c = Cursor::default();
            let mut out: Vec<(u64, u64)> = Vec::new();
            for (i, run) in runs.iter().enumerate() {
                c.insert(run.clone());
                // Release only what no later run can precede.
                let later_min = runs[i + 1..]
                    .iter()
                    .filter_map(|r| r.first().map(key))
                    .min()
                    .unwrap_or((u64::MAX, u64::MAX));
                c.take_while(|e| key(e) < later_min, |es| out.extend(es.iter().map(key)));
            }
            c.take_while(|_| true, |es| out.extend(es.iter().map(key)));
            prop_assert_eq!(out.len(), total);
            prop_assert!(out.is_sorted());
        }
    }
}
