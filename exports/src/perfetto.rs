//! Chrome trace-event JSON, which Perfetto's UI (ui.perfetto.dev) and
//! chrome://tracing load as is.
//!
//! Layout: one track group per GPU ("pid" = device number + 1, named
//! "GPU n: name") holding
//! - a counter "memory" with two series, `live` and `reserved` bytes, updated
//!   at every allocation, free and process exit;
//! - one thread per CUDA stream with the kernels as slices;
//! - a counter "tensors of pid N" per process whose framework allocator the
//!   trace sees from the inside (PyTorch's), with two series, `allocated`
//!   (its tensors: `memory_allocated`) and `reserved` (its segments or
//!   pool: `memory_reserved`), updated at every tensor allocated and freed;
//! - an instant per failed allocation ("OOM …"), with its outcome and site,
//!   one per out-of-memory error a framework allocator raised ("OOM raised
//!   by …", with its limit, site and figures), and one at each device's
//!   peak.
//!
//! Times are microseconds (the format's unit) with nanosecond decimals,
//! since the first event of the trace.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use gmem_prof_analyzer::events::{EventKind, EventRow};
use gmem_prof_model::Analysis;

/// Streams rows into trace-event JSON; `finish` adds what only the whole
/// analysis knows (names, OOM outcomes, peaks) and closes the document.
pub struct PerfettoWriter<W: Write> {
    out: W,
    first: bool,
    /// Last (live, reserved) written per device: unchanged values are not
    /// repeated.
    counters: BTreeMap<u32, (u64, u64)>,
    /// The same per (device, pid) for tensors (allocated, reserved).
    tensor_counters: BTreeMap<(u32, u32), (u64, u64)>,
    streams: BTreeSet<(u32, u32)>,
    pub events_written: u64,
}

/// The trace-event "pid" of a device's track group (0 is avoided: some
/// viewers treat it specially).
fn track(device: u32) -> u64 {
    u64::from(device) + 1
}

/// The track of the steps of the `n`th process that marked steps, apart
/// from the devices' tracks.
fn steps_track(n: usize) -> u64 {
    1_000_000 + n as u64
}

/// The track of the NVTX ranges of the `n`th process that made any (one
/// row per thread, as the program's threads pushed them).
fn ranges_track(n: usize) -> u64 {
    2_000_000 + n as u64
}

/// Nanoseconds written as the format's microseconds, exactly.
struct Micros(u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serializes")
}

impl<W: Write> PerfettoWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        Ok(PerfettoWriter {
            out,
            first: true,
            counters: BTreeMap::new(),
            tensor_counters: BTreeMap::new(),
            streams: BTreeSet::new(),
            events_written: 0,
        })
    }

    fn event(&mut self, json: &str) -> io::Result<()> {
        self.separator()?;
        self.out.write_all(json.as_bytes())
    }

    /// Starts the next event (the hot path writes its fields straight into
    /// the output, without an intermediate string).
    fn separator(&mut self) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.events_written += 1;
        Ok(())
    }

    /// Writes a batch of rows (in time order, as the analyzer hands them).
    pub fn rows(&mut self, rows: &[EventRow]) -> io::Result<()> {
        for r in rows {
            match r.what {
                EventKind::Kernel => {
                    self.streams.insert((r.device, r.cuda_stream));
                    let name = r.name.as_deref().unwrap_or("kernel");
                    // A kernel traced as its launch has no duration (its
                    // end is its start, the launch): an instant on its
                    // stream's track; a run is a slice.
                    let launch = r.end_ns == r.time_ns;
                    let shape = if launch {
                        "\"cat\":\"kernel launch\",\"ph\":\"i\",\"s\":\"t\""
                    } else {
                        "\"cat\":\"kernel\",\"ph\":\"X\""
                    };
                    self.separator()?;
                    write!(
                        self.out,
                        "{{\"name\":{},{shape},\"ts\":{}",
                        json_str(name),
                        Micros(r.time_ns)
                    )?;
                    if !launch {
                        write!(self.out, ",\"dur\":{}", Micros(r.end_ns - r.time_ns))?;
                    }
                    write!(
                        self.out,
                        ",\"pid\":{},\"tid\":{},\"args\":{{\"process\":{}}}}}",
                        track(r.device),
                        r.cuda_stream,
                        r.pid
                    )?;
                }
                EventKind::Alloc | EventKind::Free | EventKind::Exit => {
                    let now = (r.device_live, r.device_reserved);
                    if self.counters.insert(r.device, now) == Some(now) {
                        continue;
                    }
                    self.separator()?;
                    write!(
                        self.out,
                        "{{\"name\":\"memory\",\"ph\":\"C\",\"ts\":{},\"pid\":{},\"args\":{{\"live\":{},\"reserved\":{}}}}}",
                        Micros(r.time_ns),
                        track(r.device),
                        r.device_live,
                        r.device_reserved
                    )?;
                }
                EventKind::TensorAlloc | EventKind::TensorFree => {
                    let now = (r.allocated.unwrap_or(0), r.reserved.unwrap_or(0));
                    if self.tensor_counters.insert((r.device, r.pid), now) == Some(now) {
                        continue;
                    }
                    self.separator()?;
                    write!(
                        self.out,
                        "{{\"name\":\"tensors of pid {}\",\"ph\":\"C\",\"ts\":{},\"pid\":{},\"args\":{{\"allocated\":{},\"reserved\":{}}}}}",
                        r.pid,
                        Micros(r.time_ns),
                        track(r.device),
                        now.0,
                        now.1
                    )?;
                }
                // Written by `finish`, which knows each failure's outcome.
                EventKind::Failed => {}
            }
        }
        Ok(())
    }

    /// Adds track names, OOM instants and peak markers, closes the JSON and
    /// returns the writer.
    pub fn finish(mut self, a: &Analysis) -> io::Result<W> {
        let mut devices: BTreeSet<u32> = self.counters.keys().copied().collect();
        devices.extend(a.devices.iter().map(|d| d.device));
        devices.extend(self.streams.iter().map(|&(d, _)| d));
        for d in devices {
            let name = a
                .devices
                .iter()
                .find(|x| x.device == d)
                .map_or_else(|| format!("GPU {d}"), |x| format!("GPU {d}: {}", x.name));
            let line = format!(
                "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":{}}}}}",
                track(d),
                json_str(&name)
            );
            self.event(&line)?;
        }
        let streams: Vec<(u32, u32)> = self.streams.iter().copied().collect();
        for (d, s) in streams {
            let line = format!(
                "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"stream {}\"}}}}",
                track(d),
                s,
                s
            );
            self.event(&line)?;
        }
        for d in &a.devices {
            let line = format!(
                "{{\"name\":\"peak\",\"cat\":\"memory\",\"ph\":\"i\",\"s\":\"p\",\"ts\":{},\"pid\":{},\"tid\":0,\"args\":{{\"live_bytes\":{}}}}}",
                Micros(d.peak_time_ns),
                track(d.device),
                d.peak_bytes
            );
            self.event(&line)?;
        }
        for o in &a.ooms {
            let title = format!("OOM {} {} B ({})", o.function, o.requested_bytes, o.outcome);
            let line = format!(
                "{{\"name\":{},\"cat\":\"oom\",\"ph\":\"i\",\"s\":\"p\",\"ts\":{},\"pid\":{},\"tid\":0,\"args\":{{\"requested_bytes\":{},\"outcome\":{},\"site\":{},\"process\":{},\"device_live_bytes\":{}}}}}",
                json_str(&title),
                Micros(o.time_ns),
                track(o.device),
                o.requested_bytes,
                json_str(o.outcome.as_str()),
                json_str(&a.site_label(o.site)),
                o.pid,
                o.device_live_bytes
            );
            self.event(&line)?;
        }
        for v in &a.frameworks {
            for o in &v.ooms {
                let title = format!(
                    "OOM raised by {}: {} B ({})",
                    v.allocator, o.requested_bytes, o.limit
                );
                let site = o
                    .site
                    .map_or_else(|| "unknown".to_string(), |s| a.tensor_site_label(s));
                let line = format!(
                    "{{\"name\":{},\"cat\":\"oom\",\"ph\":\"i\",\"s\":\"p\",\"ts\":{},\"pid\":{},\"tid\":0,\"args\":{{\"requested_bytes\":{},\"request_seen\":{},\"limit\":{},\"limit_bytes\":{},\"site\":{},\"process\":{},\"allocated_bytes\":{},\"reserved_bytes\":{},\"largest_free_block\":{}}}}}",
                    json_str(&title),
                    Micros(o.time_ns),
                    track(o.device),
                    o.requested_bytes,
                    o.request_seen,
                    json_str(o.limit.as_str()),
                    o.limit_bytes.map_or_else(|| "null".to_string(), |b| b.to_string()),
                    json_str(&site),
                    o.pid,
                    o.allocated_bytes,
                    o.reserved_bytes,
                    o.largest_free_block
                );
                self.event(&line)?;
            }
        }
        self.steps(a)?;
        self.ranges(a)?;
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Each process's steps (as many as the analysis lists) as slices on a
    /// track of their own, with their figures.
    fn steps(&mut self, a: &Analysis) -> io::Result<()> {
        for (n, p) in a.steps.iter().enumerate() {
            let line = format!(
                "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"steps of pid {}\"}}}}",
                steps_track(n),
                p.pid
            );
            self.event(&line)?;
            for s in &p.steps {
                let tensors = s.tensors.as_ref().map_or_else(String::new, |t| {
                    format!(
                        ",\"tensors_allocated_peak\":{},\"tensors_kept_bytes\":{}",
                        t.allocated_peak, t.kept_bytes
                    )
                });
                let line = format!(
                    "{{\"name\":\"step {}\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":0,\"args\":{{\"peak_bytes\":{},\"kept_bytes\":{}{tensors}}}}}",
                    s.number,
                    Micros(s.start_ns),
                    Micros(s.end_ns.saturating_sub(s.start_ns)),
                    steps_track(n),
                    s.peak_bytes,
                    s.kept_bytes
                );
                self.event(&line)?;
            }
        }
        Ok(())
    }

    /// Each process's NVTX ranges (the instances the analysis lists) as
    /// slices on a track of their own, a row per thread, nested as pushed;
    /// its marks as instants.
    fn ranges(&mut self, a: &Analysis) -> io::Result<()> {
        for (n, p) in a.ranges.iter().enumerate() {
            let line = format!(
                "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"NVTX ranges of pid {}\"}}}}",
                ranges_track(n),
                p.pid
            );
            self.event(&line)?;
            for i in &p.instances {
                // Still open when the trace ended: to the trace's end.
                let end = i.end_ns.unwrap_or(a.timeline.end_ns);
                let name = i
                    .range
                    .and_then(|r| p.ranges.get(r as usize))
                    .map_or_else(|| "(not measured)".to_string(), |r| r.full_name());
                let line = format!(
                    "{{\"name\":{},\"cat\":\"nvtx\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},\"args\":{{\"kept_bytes\":{},\"depth\":{},\"ended\":{}}}}}",
                    json_str(&name),
                    Micros(i.start_ns),
                    Micros(end.saturating_sub(i.start_ns)),
                    ranges_track(n),
                    i.tid,
                    i.kept_bytes,
                    i.depth,
                    i.end_ns.is_some()
                );
                self.event(&line)?;
            }
            for m in &p.marks {
                let name = m.full_name();
                let line = format!(
                    "{{\"name\":{},\"cat\":\"nvtx\",\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{},\"tid\":{}}}",
                    json_str(&name),
                    Micros(m.time_ns),
                    ranges_track(n),
                    m.tid
                );
                self.event(&line)?;
            }
        }
        Ok(())
    }
}
