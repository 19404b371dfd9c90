//! gmem-prof's analyzer: turns traces into the analysis model (`model`).
//!
//! # Design constraints
//! - Streaming: chunks are decoded in parallel batches (rayon) and events are
//!   applied in time order by one sweep (`engine`); memory is bounded by what
//!   is live, by sites and by processes, not by the trace's length.
//! - Deterministic: the same trace gives the same model whatever the thread
//!   count; nothing is ordered by hash-map order.
//! - Never panics on a bad trace: damage becomes warnings in
//!   `Analysis.input.warnings`; only a file that is not a trace at all is an
//!   error.
//! - The definitions (live set, reserved, fragmentation, leaks, growth,
//!   temporaries, OOM outcomes) are those of DESIGN.md and are documented on
//!   the model's fields.
//!
//! # Example
//! ```no_run
//! let analysis = gmem_prof_analyzer::analyze_files(
//!     &["trace.bin".into()],
//!     &gmem_prof_analyzer::Options::default(),
//! ).unwrap();
//! for d in &analysis.devices {
//!     println!("device {}: peak {} bytes", d.device, d.peak_bytes);
//! }
//! ```

pub mod diff;
mod engine;
pub mod events;
mod input;
pub mod model;
mod regions;
mod sites;
pub mod synth;
mod timeline;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use gmem_prof_traces::TraceError;

use engine::{Engine, SiteClass, KINDS};
use events::{EventRow, SiteIds};
use input::{key, ChunkRef, TimedEvent};
use model::*;

pub use regions::Extents;

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("cannot read {file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: {source}")]
    Trace { file: String, source: TraceError },
    #[error("internal analysis error: {0}")]
    Internal(String),
}

/// How to analyze.
#[derive(Default)]
pub struct Options<'a> {
    /// Called now and then with (bytes of trace done, bytes in all).
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
}

/// Sites whose live bytes rise by at least this much after the warm-up are
/// reported as growing.
pub const GROWTH_MIN_BYTES: u64 = 1 << 20;
/// The warm-up: this share of each process's lifetime is not judged.
pub const WARM_UP: f64 = 0.2;
/// The end of the judged window (process teardown frees are not judged).
const JUDGED_UNTIL: f64 = 0.95;

/// Analyzes trace files (or per-process files of one run) together.
pub fn analyze_files(paths: &[PathBuf], opts: &Options) -> Result<Analysis, AnalyzeError> {
    with_files(paths, |datas, names, done| {
        analyze_inner(datas, names, opts, None, done).map(|(a, _)| a)
    })
}

/// Like `analyze_files`, and hands every event to `sink` in time order, in
/// batches, as the sweep applies them (for exporters).
pub fn analyze_files_with_events(
    paths: &[PathBuf],
    opts: &Options,
    sink: &mut dyn FnMut(&[EventRow]),
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    with_files(paths, |datas, names, done| {
        analyze_inner(datas, names, opts, Some(sink), done)
    })
}

/// Like `analyze_files`, and also returns the final id of every raw site,
/// to map the rows of a later `analyze_files_with_events` pass (no rows are
/// built in this one).
pub fn analyze_files_with_site_ids(
    paths: &[PathBuf],
    opts: &Options,
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    with_files(paths, |datas, names, done| {
        analyze_inner(datas, names, opts, None, done)
    })
}

/// Maps the files and runs `f` over their bytes; `f` calls the function
/// it is given (`DoneReading`) once it reads them no more.
fn with_files<T>(
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
type DoneReading<'f> = &'f (dyn Fn() + Sync);

/// Analyzes traces held in memory; `names` label them in messages.
pub fn analyze(
    datas: &[&[u8]],
    names: &[String],
    opts: &Options,
) -> Result<Analysis, AnalyzeError> {
    analyze_inner(datas, names, opts, None, &|| {}).map(|(a, _)| a)
}

/// Where the sweep hands event rows, for exporters.
type RowSink<'s> = &'s mut dyn FnMut(&[EventRow]);

fn analyze_inner(
    datas: &[&[u8]],
    names: &[String],
    opts: &Options,
    mut sink: Option<RowSink>,
    done_reading: DoneReading,
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    let (chunks, streams, mut warnings) = input::frame(datas, names)?;
    let total_bytes: u64 = datas.iter().map(|d| d.len() as u64).sum();
    let mut schedule = Schedule::new(&chunks, streams);
    let mut cursors: Vec<Cursor> = schedule
        .streams
        .iter()
        .map(|s| Cursor {
            unread: s.chunks.len(),
            ..Cursor::default()
        })
        .collect();
    let mut engine = Engine::new(streams);
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
        stream: s,
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
                warnings.push(format!(
                    "skipped the rest of a damaged chunk at byte {offset}: {why}"
                ));
            }
            engine.apply_defs(d.stream, d.defs);
            cursors[s].insert(d.events);
        }
        // Events are safe to apply once every stream still being read has
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
    build(engine, summary)
}

/// A decoded batch of one stream's chunks.
struct Batch {
    stream: usize,
    /// The latest event time in it.
    latest: u64,
    /// Its chunks, decoded, in file order.
    decoded: Vec<input::Decoded>,
}

/// Decoded batches waiting for the sweep, at most.
const AHEAD: usize = 3;

/// Which chunks are decoded next, and their decoding ahead of the sweep.
///
/// A batch is `input::BATCH` chunks of the stream that has read least, so
/// that every stream's window can be released. The schedule learns how far
/// a stream has read only from whole batches, in the order it chose them,
/// so that order is the same however far ahead decoding runs: the analysis
/// stays deterministic.
struct Schedule<'c, 'a> {
    chunks: &'c [ChunkRef<'a>],
    streams: Vec<StreamSchedule>,
    /// The batch being decoded: its stream, its chunks, those decoded.
    current: Option<(usize, Vec<&'c ChunkRef<'a>>, Vec<input::Decoded>)>,
    /// Stored bytes of the chunks taken so far (for progress).
    done_bytes: u64,
}

#[derive(Default)]
struct StreamSchedule {
    chunks: Vec<usize>,
    next: usize,
    read_up_to: u64,
}

impl<'c, 'a> Schedule<'c, 'a> {
    fn new(chunks: &'c [ChunkRef<'a>], streams: u32) -> Self {
        let mut s: Vec<StreamSchedule> = (0..streams).map(|_| StreamSchedule::default()).collect();
        for (i, c) in chunks.iter().enumerate() {
            s[c.stream as usize].chunks.push(i);
        }
        Schedule {
            chunks,
            streams: s,
            current: None,
            done_bytes: 0,
        }
    }

    /// Whether every chunk has been decoded.
    fn all_taken(&self) -> bool {
        self.current.is_none() && self.streams.iter().all(|s| s.next == s.chunks.len())
    }

    /// Starts the next batch; false when every chunk has been taken.
    fn start_batch(&mut self) -> bool {
        let Some(s) = self
            .streams
            .iter()
            .enumerate()
            .filter(|(_, c)| c.next < c.chunks.len())
            .min_by_key(|(i, c)| (c.read_up_to, *i))
            .map(|(i, _)| i)
        else {
            return false;
        };
        let cur = &mut self.streams[s];
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
                let (stream, decoded) = (*s, std::mem::take(decoded));
                self.current = None;
                // Each chunk's events are sorted: the last is its latest.
                let latest = decoded
                    .iter()
                    .filter_map(|d| d.events.last().map(|e| e.time))
                    .max()
                    .unwrap_or(0);
                let cur = &mut self.streams[stream];
                cur.read_up_to = cur.read_up_to.max(latest);
                ready.push_back(Batch {
                    stream,
                    latest,
                    decoded,
                });
            }
        }
    }
}

/// A stream's state in the sweep: how far it has been read, and decoded
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
        // Drain this stream while it stays ahead of every other stream.
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

fn kinds_of(mask: u8) -> Vec<String> {
    (0..KINDS)
        .filter(|k| mask & (1 << k) != 0)
        .map(|k| events::kind_name(k as u8).to_string())
        .collect()
}

/// Assembles the model from the finished sweep.
/// Assembles the model from the finished sweep; also returns the final id
/// of every raw site.
fn build(
    mut engine: Engine,
    mut summary: InputSummary,
) -> Result<(Analysis, SiteIds), AnalyzeError> {
    let Some(axis) = engine.axis.clone() else {
        summary.warnings.push("the trace holds no events".into());
        let analysis = Analysis {
            schema_version: SCHEMA_VERSION,
            input: summary,
            timeline: Timeline::default(),
            devices: Vec::new(),
            processes: process_reports(&mut engine, None, &[], 0),
            sites: Vec::new(),
            growth: Vec::new(),
            ooms: Vec::new(),
        };
        return Ok((analysis, SiteIds::default()));
    };
    let buckets = axis.buckets();
    let start = axis.start;
    let rel = |t: u64| t.saturating_sub(start);
    let defs: Vec<&sites::StreamDefs> = engine.streams.iter().map(|s| &s.defs).collect();
    let (merged, of_raw) = sites::merge_sites(&engine.sites, &defs);
    let categories: Vec<&str> = of_raw.iter().map(|&m| merged[m].category).collect();
    let leaked: Vec<bool> = categories
        .iter()
        .map(|c| matches!(*c, "program" | "unknown"))
        .collect();
    let cached: Vec<bool> = categories.iter().map(|c| *c == "allocator cache").collect();
    let ranked = sites::rank(&engine.sites, &of_raw, merged.len(), &leaked, &cached)
        .map_err(|e| AnalyzeError::Internal(e.to_string()))?;
    // Final site id = rank position.
    let mut id_of_merged = vec![0u32; merged.len()];
    for (rank, &m) in ranked.order.iter().enumerate() {
        id_of_merged[m] = rank as u32;
    }
    let site_id = |raw: u32| id_of_merged[of_raw[raw as usize]];
    let column = |name: &str, rank: usize| ranked.columns[name][rank];
    let mut site_list: Vec<Site> = Vec::with_capacity(merged.len());
    for (rank, &m) in ranked.order.iter().enumerate() {
        let ms = &merged[m];
        site_list.push(Site {
            id: rank as u32,
            label: ms.label.clone(),
            category: ms.category.to_string(),
            frames: ms.frames.clone(),
            truncated: ms.truncated,
            pids: ms.pids.clone(),
            kinds: kinds_of(ms.kinds),
            count: column("count", rank),
            total_bytes: column("total_bytes", rank),
            live_at_peak: column("live_at_peak", rank),
            max_live: column("max_live", rank),
            leaked_bytes: column("leaked_bytes", rank),
            leaked_count: column("leaked_count", rank),
            cached_at_exit_bytes: column("cached_at_exit_bytes", rank),
            temporaries: column("temporaries", rank),
            failed: column("failed", rank),
        });
    }

    let kernel_ref = |k: &engine::KernelSnap, streams: &[engine::StreamState]| {
        let st = &streams[k.stream_of_process as usize];
        KernelRef {
            name: st
                .defs
                .strings
                .get(&k.name)
                .cloned()
                .unwrap_or_else(|| format!("kernel#{}", k.name)),
            pid: st.pid(),
            start_ns: rel(k.start),
            end_ns: rel(k.end),
            stream: k.cuda_stream,
        }
    };
    let by_site = |list: &[(u32, u64, u64)]| -> Vec<SiteBytes> {
        let mut acc: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
        for &(raw, b, c) in list {
            let e = acc.entry(site_id(raw)).or_default();
            e.0 += b;
            e.1 += c;
        }
        let mut v: Vec<SiteBytes> = acc
            .into_iter()
            .map(|(site, (bytes, count))| SiteBytes { site, bytes, count })
            .collect();
        v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
        v
    };

    let mut devices = Vec::new();
    let device_ids = engine.devices.ids();
    for d in device_ids {
        let info = engine
            .streams
            .iter()
            .flat_map(|s| s.defs.devices.iter())
            .find(|x| x.device == d)
            .cloned();
        let kernels_traced = engine
            .streams
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                engine
                    .sites
                    .iter()
                    .any(|x| x.stream as usize == *i && x.device == d)
            })
            .all(|(_, s)| s.defs.process.as_ref().is_some_and(|p| p.kernels_traced));
        let has_cache_sites = engine
            .sites
            .iter()
            .enumerate()
            .any(|(i, s)| s.device == d && categories[i] == "allocator cache");
        let regions: Vec<RegionSummary> = engine
            .regions
            .pools_sorted()
            .into_iter()
            .filter(|p| p.device == d)
            .map(|p| RegionSummary {
                kind: "pool".into(),
                pid: p.pid,
                address: p.address,
                max_size: p.max_size,
                estimated: true,
            })
            .chain(
                engine
                    .regions
                    .reservations
                    .values()
                    .filter(|r| r.device == Some(d))
                    .map(|r| RegionSummary {
                        kind: "vmm reservation".into(),
                        pid: r.pid,
                        address: r.base,
                        max_size: r.size,
                        estimated: false,
                    }),
            )
            .collect();
        let streams = &engine.streams;
        let dev = engine.devices.get_mut(d).expect("device listed");
        let mut blind_spots = Vec::new();
        if has_cache_sites {
            blind_spots.push(
                "A caching allocator (PyTorch's default, CuPy's pool or XLA's BFC) sub-allocates \
                 inside blocks the trace sees whole: how fragmented those blocks are is not visible. \
                 With PyTorch, record with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync to see \
                 tensor-level allocations and pool fragmentation."
                    .to_string(),
            );
        }
        if regions.is_empty() {
            blind_spots.push(
                "No stream-ordered pool or VMM reservation was used on this device: there is no \
                 reserved region whose inside the trace sees, so no fragmentation figure."
                    .to_string(),
            );
        }
        let worst = dev.frag_worst.map(|(t, f, free, largest)| FragmentationAt {
            time_ns: rel(t),
            fragmentation: f,
            free_bytes: free,
            largest_free_bytes: largest,
        });
        let live_by_kind: Vec<KindCurve> = (0..KINDS)
            .filter(|&k| dev.kind_peaks[k] > 0)
            .map(|k| KindCurve {
                kind: events::kind_name(k as u8).to_string(),
                points: dev.kind_curves[k].finish(&axis, buckets),
                peak: dev.kind_peaks[k],
            })
            .collect();
        devices.push(DeviceReport {
            device: d,
            name: info
                .as_ref()
                .map_or_else(|| format!("device {d}"), |i| i.name.clone()),
            total_memory: info.as_ref().map_or(0, |i| i.total_memory.0),
            peak_bytes: dev.peak,
            peak_time_ns: rel(dev.peak_time),
            peak_by_kind: (0..KINDS)
                .filter(|&k| dev.peak_by_kind[k] > 0)
                .map(|k| KindBytes {
                    kind: events::kind_name(k as u8).to_string(),
                    bytes: dev.peak_by_kind[k],
                })
                .collect(),
            peak_sites: by_site(&dev.peak_sites),
            kernels_at_peak: dev
                .kernels_at_peak
                .iter()
                .map(|k| kernel_ref(k, streams))
                .collect(),
            next_kernel_after_peak: dev.next_kernel.as_ref().map(|k| kernel_ref(k, streams)),
            kernels_traced,
            live: dev.curve.finish(&axis, buckets),
            live_by_kind,
            reserved: dev.reserved_curve.finish(&axis, buckets),
            reserved_peak: dev.reserved_peak,
            fragmentation: Fragmentation {
                regions,
                curve: dev.frag.finish(&axis, buckets),
                largest_free: dev
                    .largest_free
                    .finish(&axis, buckets)
                    .into_iter()
                    .map(|v| v.unwrap_or(0))
                    .collect(),
                worst,
                blind_spots,
            },
        });
    }

    // Growth: per raw site of the program, judged after the warm-up.
    let mut growth = Vec::new();
    for (i, s) in engine.sites.iter_mut().enumerate() {
        if s.class != SiteClass::Call
            || categories[i] == "allocator cache"
            || s.max_live < GROWTH_MIN_BYTES
        {
            continue;
        }
        let st = &engine.streams[s.stream as usize];
        // Judged against the process's allocation count, not time: programs
        // spend their start-up allocating little, and a loop's leak shows
        // as a rise per allocation.
        let n = st.allocations;
        if n == 0 {
            continue;
        }
        let count_buckets = st.count_axis.buckets();
        let by_count: Vec<u64> = s
            .count_curve
            .finish(&st.count_axis, count_buckets)
            .iter()
            .map(|p| p.last)
            .collect();
        let bucket_at = |share: f64| {
            let c = (n as f64 * share) as u64;
            (c / st.count_axis.width).min(count_buckets as u64 - 1) as usize
        };
        let curve: Vec<u64> = s
            .curve
            .finish(&axis, buckets)
            .iter()
            .map(|p| p.last)
            .collect();
        let marks: Vec<u64> = (0..=4)
            .map(|q| by_count[bucket_at(WARM_UP + (JUDGED_UNTIL - WARM_UP) * f64::from(q) / 4.0)])
            .collect();
        let rising = marks.windows(2).all(|w| w[1] >= w[0])
            && marks.windows(2).filter(|w| w[1] > w[0]).count() >= 3;
        let (from, to) = (marks[0], marks[4]);
        if rising && to >= from + GROWTH_MIN_BYTES {
            growth.push(Growth {
                site: site_id(i as u32),
                pid: st.pid(),
                from_bytes: from,
                to_bytes: to,
                growth_bytes: to - from,
                curve,
            });
        }
    }
    growth.sort_by(|a, b| {
        b.growth_bytes
            .cmp(&a.growth_bytes)
            .then(a.site.cmp(&b.site))
    });

    let device_total = |d: u32| {
        devices
            .iter()
            .find(|x| x.device == d)
            .map_or(0, |x| x.total_memory)
    };
    let ooms: Vec<Oom> = engine
        .ooms
        .iter()
        .map(|o| {
            let st = &engine.streams[o.stream as usize];
            Oom {
                time_ns: rel(o.time),
                pid: st.pid(),
                tid: o.tid,
                device: o.device,
                function: o.func.name().unwrap_or("?").to_string(),
                requested_bytes: o.bytes,
                result: o.result,
                site: site_id(o.site),
                outcome: o.outcome.to_string(),
                device_live_bytes: o.device_live,
                device_total_bytes: device_total(o.device),
                largest_free_extent: o.largest_free,
                live_by_site: by_site(&o.live_by_site).into_iter().take(10).collect(),
            }
        })
        .collect();

    let processes = process_reports(&mut engine, Some(&axis), &categories, buckets);
    summary.dropped_records = processes.iter().map(|p| p.dropped_records).sum();
    if summary.dropped_records > 0 {
        summary.warnings.push(format!(
            "{} records were lost while recording (CUPTI or the collector could not keep up): \
             figures may be incomplete",
            summary.dropped_records
        ));
    }
    if summary.late_events > 0 {
        summary.warnings.push(format!(
            "{} events arrived more than {} s out of order and were applied late",
            summary.late_events,
            input::WINDOW_NS / 1_000_000_000
        ));
    }
    let unmatched: u64 = engine.streams.iter().map(|s| s.unmatched_frees).sum();
    if unmatched > 0 {
        summary.warnings.push(format!(
            "{unmatched} frees had no matching allocation in the trace (allocated before recording \
             started, or their allocation record was lost)"
        ));
    }
    let unknown: u64 = engine.streams.iter().map(|s| s.defs.unknown_records).sum();
    if unknown > 0 {
        summary.warnings.push(format!(
            "{unknown} records of a newer format version were skipped: use a newer gmem-prof to see them"
        ));
    }
    let site_ids = SiteIds((0..engine.sites.len() as u32).map(site_id).collect());
    let analysis = Analysis {
        schema_version: SCHEMA_VERSION,
        input: summary,
        timeline: Timeline {
            start_ns: start,
            end_ns: engine.now.saturating_sub(start),
            bucket_ns: axis.width,
            buckets,
        },
        devices,
        processes,
        sites: site_list,
        growth,
        ooms,
    };
    Ok((analysis, site_ids))
}

fn process_reports(
    engine: &mut Engine,
    axis: Option<&timeline::Axis>,
    categories: &[&str],
    buckets: usize,
) -> Vec<ProcessReport> {
    let start = axis.map_or(0, |a| a.start);
    let mut out = Vec::new();
    for (si, st) in engine.streams.iter_mut().enumerate() {
        let mut at_exit = AtExit::default();
        let mut view = "direct";
        let mut cache_sites = false;
        for (i, s) in engine.sites.iter().enumerate() {
            if s.stream as usize != si {
                continue;
            }
            match categories.get(i).copied().unwrap_or("unknown") {
                "allocator cache" => {
                    cache_sites = true;
                    at_exit.cached_bytes += s.at_exit;
                    at_exit.cached_count += s.at_exit_count;
                }
                "runtime" => {
                    at_exit.runtime_bytes += s.at_exit;
                    at_exit.runtime_count += s.at_exit_count;
                }
                "profiler" => at_exit.profiler_bytes += s.at_exit,
                _ => {
                    at_exit.leaked_bytes += s.at_exit;
                    at_exit.leaked_count += s.at_exit_count;
                }
            }
        }
        let per_tensor = || {
            st.defs.symbols.values().any(|sym| {
                sym.frames
                    .iter()
                    .any(|f| f.function.contains(sites::PER_TENSOR_ALLOCATOR))
            })
        };
        if cache_sites {
            view = "segments";
        } else if per_tensor() {
            view = "tensors";
        }
        let p = st.defs.process.clone().unwrap_or_default();
        let live = match axis {
            Some(a) => st.curve.finish(a, buckets),
            None => Vec::new(),
        };
        let mut messages: Vec<String> = st
            .defs
            .messages
            .iter()
            .map(|(level, text)| {
                let l = match level {
                    0 => "info",
                    1 => "warning",
                    _ => "error",
                };
                format!("{l}: {text}")
            })
            .collect();
        if st.ended.is_none() {
            messages.push(
                "warning: the process did not end cleanly (killed, crashed or still running): \
                 what it held is shown as live when the trace ends"
                    .into(),
            );
        }
        out.push(ProcessReport {
            pid: p.pid,
            ppid: p.ppid,
            exe: p.exe.clone(),
            cmdline: p.cmdline.clone(),
            hostname: p.hostname.clone(),
            start_ns: st.first_time.unwrap_or(start).saturating_sub(start),
            end_ns: st.ended.unwrap_or(st.last_time).saturating_sub(start),
            clean_exit: st.ended.is_some(),
            kernels_traced: p.kernels_traced,
            stacks_captured: p.stacks_captured,
            allocations: st.allocations,
            frees: st.frees,
            failed_allocations: st.failed_calls,
            peak_bytes: st.peak,
            peak_time_ns: st.peak_time.saturating_sub(start),
            live,
            at_exit,
            allocator_view: view.into(),
            dropped_records: st.defs.dropped.0 + st.defs.dropped.1,
            messages,
        });
    }
    out
}

/// For benchmarks: frames and decodes every chunk of a trace into events,
/// as the analysis does, without the sweep. Returns the number of events.
#[doc(hidden)]
pub fn decode_only(data: &[u8]) -> Result<u64, AnalyzeError> {
    let (chunks, _, _) = input::frame(&[data], &["trace".to_string()])?;
    let refs: Vec<&input::ChunkRef> = chunks.iter().collect();
    Ok(refs
        .chunks(input::BATCH)
        .map(|b| {
            input::decode_batch(b)
                .into_iter()
                .map(|d| {
                    let n = d.events.len() as u64;
                    input::recycle(d.events);
                    n
                })
                .sum::<u64>()
        })
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(time: u64, seq: u64) -> TimedEvent {
        TimedEvent {
            time,
            seq,
            event: input::Event::End,
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
