//! Merging per-process trace files into one trace, and resolving stacks.
//!
//! Each input stream (one per process) becomes a stream of the output; its
//! records are re-encoded as they are, without the per-file trailers, and
//! followed by the symbols of its stacks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, IsTerminal};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use gmem_prof_traces::record::tag;
use gmem_prof_traces::record::{memory_kind, ModuleInfo, ProcessInfo};
use gmem_prof_traces::{
    decode_chunk, ChunkRecords, Record, TraceReader, TraceWriter, CHUNK_HEADER_LEN,
};

use crate::cli::SymbolizeArgs;
use crate::progress::ProgressLine;
use crate::symbols;

/// What one process of the merged trace held.
#[derive(Default, Debug)]
pub struct ProcessSummary {
    pub info: Option<ProcessInfo>,
    /// Allocations, static module memory (kinds device_static and
    /// managed_static, loaded with CUDA modules and never freed) apart.
    pub allocations: u64,
    pub static_allocations: u64,
    /// Allocation calls that failed for lack of memory (CUDA_ERROR_OUT_OF_MEMORY).
    pub out_of_memory: u64,
    /// Other failed calls (probes, invalid arguments, unsupported features).
    pub failed_calls: u64,
    pub records: u64,
    pub dropped_cupti: u64,
    pub dropped_collector: u64,
    pub ended_cleanly: bool,
    /// Warnings and errors the collector wrote.
    pub messages: Vec<(u8, String)>,
    pub unresolved_modules: BTreeMap<String, String>,
}

#[derive(Default, Debug)]
pub struct MergeSummary {
    pub processes: Vec<ProcessSummary>,
    /// Problems found while reading the inputs (file: warning).
    pub warnings: Vec<String>,
    pub bytes_written: u64,
}

impl MergeSummary {
    pub fn events(&self) -> u64 {
        self.processes.iter().map(|p| p.records).sum()
    }
}

struct StreamState {
    summary: ProcessSummary,
    modules: Vec<ModuleInfo>,
    addresses: BTreeSet<u64>,
}

/// Refuses an output the trace cannot be written to: a directory, or an
/// existing file without `--force` (`record` asks before the program runs).
pub fn check_output(output: &Path, force: bool) -> Result<()> {
    if output.is_dir() {
        bail!(
            "{} is a directory; name the trace file with -o, e.g. {}",
            output.display(),
            output.join("trace.bin").display()
        );
    }
    if output.exists() && !force {
        bail!(
            "{} exists; choose another name with -o, or pass --force to replace it",
            output.display()
        );
    }
    Ok(())
}

/// Merges `inputs` into `output` (written to a temporary file first, so a
/// failure never leaves a half-written output behind) and symbolizes.
pub fn merge(inputs: &[PathBuf], output: &Path, force: bool) -> Result<MergeSummary> {
    check_output(output, force)?;
    let tmp = output.with_extension(format!("tmp-{}", std::process::id()));
    let result = merge_into(inputs, output, &tmp);
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if force {
        std::fs::rename(&tmp, output)
            .with_context(|| format!("cannot write {}", output.display()))?;
    } else {
        // hard_link refuses to replace: no race with a file created meanwhile.
        let linked = std::fs::hard_link(&tmp, output);
        let _ = std::fs::remove_file(&tmp);
        linked.with_context(|| format!("cannot write {}", output.display()))?;
    }
    Ok(summary)
}

/// How far writing the trace got, for the person waiting on it: on a
/// terminal, a progress line once the inputs are large enough to take
/// seconds (about 200 MiB a second); elsewhere (a CI log) one line before
/// the start when they are large enough to take a minute.
struct Progress {
    line: ProgressLine,
    label: String,
    total: u64,
    done: u64,
}

impl Progress {
    fn new(inputs: &[PathBuf], output: &Path) -> Progress {
        let total = inputs
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        let label = format!("gmem-prof: writing {}", output.display());
        let on_terminal = std::io::stderr().is_terminal() && total >= 256 << 20;
        if !on_terminal && total >= 8 << 30 {
            eprintln!(
                "{label} from {} of per-process files…",
                gmem_prof_reports::format::bytes(total)
            );
        }
        Progress {
            line: ProgressLine::new(format!("{label}:"), on_terminal),
            label,
            total,
            done: 0,
        }
    }

    fn add(&mut self, bytes: u64) {
        self.done += bytes;
        self.line.show(self.done, self.total);
    }

    /// The last step, symbols, which moves no bytes of the inputs.
    fn resolving(&self) {
        self.line
            .say(&format!("{}: resolving stack frames…", self.label));
    }
}

fn merge_into(inputs: &[PathBuf], output: &Path, tmp: &Path) -> Result<MergeSummary> {
    let mut progress = Progress::new(inputs, output);
    let result = merge_with(inputs, tmp, &mut progress);
    progress.line.clear();
    result
}

fn merge_with(inputs: &[PathBuf], tmp: &Path, progress: &mut Progress) -> Result<MergeSummary> {
    let file = File::create(tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut w = TraceWriter::new(BufWriter::with_capacity(1 << 20, file))?;
    let mut summary = MergeSummary::default();
    let mut streams: Vec<StreamState> = Vec::new();
    for path in inputs {
        let data = map(path)?;
        let mut reader = match TraceReader::new(&data) {
            Ok(r) => r,
            Err(e) => {
                summary
                    .warnings
                    .push(format!("{}: skipped: {e}", path.display()));
                continue;
            }
        };
        let mut ids: BTreeMap<u32, u32> = BTreeMap::new();
        let mut scratch = Vec::new();
        while let Some(raw) = reader.next_chunk() {
            if crate::signals::interrupted() {
                bail!("interrupted");
            }
            let next = streams.len() as u32;
            let id = *ids.entry(raw.stream).or_insert(next);
            if id == next {
                streams.push(StreamState {
                    summary: ProcessSummary::default(),
                    modules: Vec::new(),
                    addresses: BTreeSet::new(),
                });
            }
            w.set_stream(id)?;
            let st = &mut streams[id as usize];
            progress.add(raw.stored.len() as u64 + CHUNK_HEADER_LEN as u64);
            // Most chunks are copied whole, their records read only as far
            // as `note` needs: neither built nor encoded and compressed
            // again (the merge took 2.5 times as long that way).
            let damaged =
                |why: String| format!("{}: chunk at byte {}: {why}", path.display(), raw.offset);
            if let Ok(payload) = raw.payload_in(&mut scratch) {
                // Framing checked first: a chunk that is then written
                // record by record has not been noted already.
                if let Some(records) = copyable(payload) {
                    if let Some(why) = note_raw(st, payload) {
                        summary.warnings.push(damaged(why));
                    }
                    w.copy_chunk(id, &raw, records)?;
                    continue;
                }
            }
            // A damaged chunk, or one holding records the merged trace
            // replaces (trailer, symbols): written again record by record.
            let chunk = match decode_chunk(&raw) {
                Ok(c) => c,
                Err((c, why)) => {
                    summary.warnings.push(damaged(why));
                    c
                }
            };
            for r in &chunk.records {
                match r {
                    Record::Trailer(_) => reader.mark_trailer_seen(),
                    Record::Symbol(_) => {}
                    r => {
                        note(st, r);
                        w.push(r)?;
                    }
                }
            }
        }
        // A missing trailer is reported per process (it did not finish
        // cleanly); other damage is worth a warning of its own.
        for warning in reader
            .warnings
            .iter()
            .filter(|w| **w != gmem_prof_traces::Warning::NoTrailer)
        {
            summary
                .warnings
                .push(format!("{}: {warning}", path.display()));
        }
    }
    progress.resolving();
    for (id, st) in streams.iter_mut().enumerate() {
        if st.addresses.is_empty() {
            continue;
        }
        let resolved = symbols::resolve(&st.modules, &st.addresses);
        w.set_stream(id as u32)?;
        for s in resolved.symbols {
            w.push(&Record::Symbol(s))?;
        }
        st.summary.unresolved_modules = resolved.unresolved;
    }
    let out = w.finish()?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all().ok();
    summary.bytes_written = file.metadata().map(|m| m.len()).unwrap_or(0);
    summary.processes = streams.into_iter().map(|s| s.summary).collect();
    Ok(summary)
}

const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

/// How many records a chunk's payload holds, when it can be copied whole
/// into the merged trace: every record framed, none the merge replaces.
fn copyable(payload: &[u8]) -> Option<u64> {
    let mut records = ChunkRecords::new(payload);
    let mut n = 0;
    while let Some(r) = records.next_raw() {
        let (t, _) = r.ok()?;
        if t == tag::TRAILER || t == tag::SYMBOL {
            return None;
        }
        n += 1;
    }
    Some(n)
}

/// `note` for each record of a framed chunk, decoding only the kinds it
/// reads (its match arms: keep the two in step). Returns why it stopped
/// early: a record that does not decode (the analyzer stops there too).
fn note_raw(st: &mut StreamState, payload: &[u8]) -> Option<String> {
    let mut records = ChunkRecords::new(payload);
    let base = records.base();
    while let Some(Ok((t, body))) = records.next_raw() {
        let read = matches!(
            t,
            tag::PROCESS
                | tag::MODULE
                | tag::STACK
                | tag::MEMORY
                | tag::API
                | tag::DROPPED
                | tag::MESSAGE
                | tag::PROCESS_END
        );
        if !read {
            st.summary.records += 1;
            continue;
        }
        match Record::decode(t, body, base) {
            Ok(r) => note(st, &r),
            Err(e) => return Some(format!("undecodable record: {e}")),
        }
    }
    None
}

/// Counts a record into its process's summary. A kind matched here must be
/// in `note_raw`'s list too: it decodes nothing else.
fn note(st: &mut StreamState, r: &Record) {
    let s = &mut st.summary;
    s.records += 1;
    match r {
        Record::Process(p) => s.info = Some(p.clone()),
        Record::Module(m) => st.modules.push(m.clone()),
        Record::Stack(def) => {
            for f in &def.frames {
                if let gmem_prof_traces::record::Frame::Native(a) = f {
                    st.addresses.insert(*a);
                }
            }
        }
        Record::Memory(m) => {
            if m.alloc
                && matches!(
                    m.kind,
                    memory_kind::DEVICE_STATIC | memory_kind::MANAGED_STATIC
                )
            {
                s.static_allocations += 1;
            } else if m.alloc {
                s.allocations += 1;
            }
        }
        Record::Api(a) if a.result == CUDA_ERROR_OUT_OF_MEMORY && a.func.allocates() => {
            s.out_of_memory += 1
        }
        Record::Api(a) if a.result != 0 => s.failed_calls += 1,
        Record::Dropped(d) => {
            s.dropped_cupti = d.cupti;
            s.dropped_collector = d.collector;
        }
        Record::Message(m) => s.messages.push((m.level, m.text.clone())),
        Record::ProcessEnd(_) => s.ended_cleanly = true,
        _ => {}
    }
}

/// Maps a trace file read-only.
pub fn map(path: &Path) -> Result<memmap2::Mmap> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: the file is opened read-only; gmem-prof never writes it while
    // mapped, and the collector only appends to files (appends do not
    // invalidate an existing mapping).
    unsafe { memmap2::Mmap::map(&f) }.with_context(|| format!("cannot read {}", path.display()))
}

/// Prints what a merge produced, and anything the user must know about.
pub fn print_summary(output: &Path, s: &MergeSummary) {
    let allocs: u64 = s.processes.iter().map(|p| p.allocations).sum();
    let statics: u64 = s.processes.iter().map(|p| p.static_allocations).sum();
    let oom: u64 = s.processes.iter().map(|p| p.out_of_memory).sum();
    let failed: u64 = s.processes.iter().map(|p| p.failed_calls).sum();
    let events = s.events().max(1);
    eprintln!(
        "gmem-prof: wrote {}: {} process{}, {} allocations{}, {} out of memory, {} other failed calls, {} records, {} ({:.1} bytes/record)",
        output.display(),
        s.processes.len(),
        if s.processes.len() == 1 { "" } else { "es" },
        allocs,
        if statics > 0 { format!(" (+{statics} of static module memory)") } else { String::new() },
        oom,
        failed,
        s.events(),
        gmem_prof_reports::format::bytes(s.bytes_written),
        s.bytes_written as f64 / events as f64
    );
    // Which CUPTI the processes recorded through (users of several CUDA
    // versions need to know which one was met).
    let mut cuptis: Vec<(&str, u32)> = Vec::new();
    for i in s.processes.iter().filter_map(|p| p.info.as_ref()) {
        if !i.cupti_path.is_empty() && !cuptis.contains(&(&i.cupti_path, i.cupti_api_version)) {
            cuptis.push((&i.cupti_path, i.cupti_api_version));
        }
    }
    for (path, api) in cuptis {
        eprintln!("gmem-prof: CUPTI {path} (API version {api})");
    }
    for p in &s.processes {
        let who = match &p.info {
            Some(i) => format!("pid {} ({})", i.pid, i.cmdline.join(" ")),
            None => "a process".into(),
        };
        for (level, text) in &p.messages {
            if *level >= 1 {
                eprintln!("gmem-prof: {who}: {text}");
            }
        }
        if !p.ended_cleanly {
            eprintln!(
                "gmem-prof: {who} did not finish cleanly (killed, or exited without running exit \
                 handlers); its data up to the last flush is in the trace"
            );
        }
        if p.dropped_cupti + p.dropped_collector > 0 {
            eprintln!(
                "gmem-prof: {who}: {} records were lost ({} by CUPTI, {} by the collector's queue)",
                p.dropped_cupti + p.dropped_collector,
                p.dropped_cupti,
                p.dropped_collector
            );
        }
        for (module, why) in &p.unresolved_modules {
            eprintln!("gmem-prof: {who}: frames in {module} stay unresolved: {why}");
        }
    }
    for w in &s.warnings {
        eprintln!("gmem-prof: warning: {w}");
    }
}

pub fn symbolize_command(a: SymbolizeArgs) -> Result<()> {
    crate::signals::stop_on_interrupt();
    let inputs = crate::inputs::expand(&a.traces)?;
    let summary = merge(&inputs, &a.output, a.force)?;
    print_summary(&a.output, &summary);
    Ok(())
}
