//! `gmem-prof export`: the trace in other tools' formats (Perfetto, Parquet)
//! or the analysis as JSON. Output goes to a temporary file renamed into
//! place at the end, so a failed export never leaves half a file.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use gmem_prof_analyzer::events::{EventRow, SiteIds};
use gmem_prof_analyzer::{
    analyze_files, analyze_files_with_events, analyze_files_with_site_ids, Options,
};
use gmem_prof_exports::{ParquetEvents, PartitionedEvents, PerfettoWriter, TorchSnapshotEvents};
use gmem_prof_model::Analysis;

use crate::cli::{ExportArgs, ExportFormat};

pub fn run(a: ExportArgs) -> Result<()> {
    let files = crate::inputs::expand(&a.traces)?;
    if let Some(dir) = &a.into {
        if a.format != ExportFormat::Parquet {
            bail!("--into writes Parquet: give --format parquet");
        }
        let run = a
            .run
            .clone()
            .unwrap_or_else(|| crate::report::report_stem(&files));
        let summary = into_folder(&files, dir, &run, &a.reading)?;
        if !a.quiet {
            crate::out(format_args!("{}: {summary}\n", dir.display()))?;
        }
        return Ok(());
    }
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| default_output(&files, a.format));
    if a.traces.iter().any(|t| same_file(t, &out)) {
        bail!(
            "{} is the input: give another output file with -o",
            out.display()
        );
    }
    let tmp = temp_path(&out);
    let file = File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let result = write(&files, a.format, file, &a.reading, a.pid);
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, &out)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), out.display()))?;
    if !a.quiet {
        crate::out(format_args!("{}: {summary}\n", out.display()))?;
    }
    Ok(())
}

fn write(
    files: &[PathBuf],
    format: ExportFormat,
    file: File,
    reading: &crate::cli::ReadingArgs,
    pid: Option<u32>,
) -> Result<String> {
    let opts = reading.options();
    if pid.is_some() && format != ExportFormat::TorchSnapshot {
        bail!("--pid picks the process of --format torch-snapshot");
    }
    match format {
        ExportFormat::Json => {
            let analysis = analyze_files(files, &opts)?;
            warn(&analysis.input.warnings);
            let mut w = BufWriter::new(file);
            gmem_prof_reports::json(&analysis, &mut w)?;
            w.flush()?;
            Ok(format!(
                "analysis JSON (schema version {})",
                analysis.schema_version
            ))
        }
        ExportFormat::Perfetto => {
            let mut writer = PerfettoWriter::new(BufWriter::new(file))?;
            let mut failure = None;
            let (analysis, _) = analyze_files_with_events(files, &opts, &mut |rows| {
                if failure.is_none() {
                    failure = writer.rows(rows).err();
                }
            })?;
            if let Some(e) = failure {
                return Err(anyhow!(e).context("cannot write the Perfetto trace"));
            }
            warn(&analysis.input.warnings);
            let n = writer.events_written;
            writer.finish(&analysis)?.flush()?;
            Ok(format!(
                "{n} trace events (open it at https://ui.perfetto.dev or chrome://tracing)"
            ))
        }
        ExportFormat::TorchSnapshot => torch_snapshot(files, &opts, file, pid),
        ExportFormat::Parquet => parquet(files, &opts, |analysis, sites| {
            Ok(Box::new(ParquetEvents::new(
                BufWriter::new(file),
                analysis,
                sites,
            )))
        }),
    }
}

/// Where Parquet's rows go: one file, or a run's folder of them.
trait EventSink {
    fn rows(&mut self, rows: &[EventRow]) -> Result<()>;
    /// Finishes the output; says what was written.
    fn finish(self: Box<Self>) -> Result<String>;
    /// Removes what was written, after a failure.
    fn abandon(self: Box<Self>) {}
}

impl EventSink for ParquetEvents<'_, BufWriter<File>> {
    fn rows(&mut self, rows: &[EventRow]) -> Result<()> {
        Ok(ParquetEvents::rows(self, rows)?)
    }
    fn finish(self: Box<Self>) -> Result<String> {
        Ok(format!(
            "{} event rows (Parquet)",
            ParquetEvents::finish(*self)?
        ))
    }
}

impl EventSink for PartitionedEvents<'_> {
    fn rows(&mut self, rows: &[EventRow]) -> Result<()> {
        Ok(PartitionedEvents::rows(self, rows)?)
    }
    fn finish(self: Box<Self>) -> Result<String> {
        let (rows, files) = PartitionedEvents::finish(*self)?;
        Ok(format!(
            "{rows} event rows in {files} Parquet file(s), one per process and device"
        ))
    }
    fn abandon(self: Box<Self>) {
        PartitionedEvents::abandon(*self);
    }
}

/// The trace's events as Parquet, into the sink `open` makes. Sites get
/// their final ids only once the whole trace is read: a first pass finds
/// them, the second writes the rows.
fn parquet(
    files: &[PathBuf],
    opts: &Options,
    open: impl for<'a> FnOnce(&'a Analysis, &'a SiteIds) -> Result<Box<dyn EventSink + 'a>>,
) -> Result<String> {
    let tty = std::io::stderr().is_terminal();
    if tty {
        eprint!("export: pass 1 of 2 (sites)…");
    }
    let (analysis, sites) = analyze_files_with_site_ids(files, opts)?;
    if tty {
        eprint!("\r\x1b[2Kexport: pass 2 of 2 (rows)…");
    }
    let mut sink = open(&analysis, &sites)?;
    let mut failure = None;
    let swept = analyze_files_with_events(files, opts, &mut |rows| {
        if failure.is_none() {
            failure = sink.rows(rows).err();
        }
    });
    if tty {
        eprint!("\r\x1b[2K");
    }
    if let Err(e) = swept {
        sink.abandon();
        return Err(e.into());
    }
    if let Some(e) = failure {
        sink.abandon();
        return Err(e.context("cannot write the Parquet file"));
    }
    warn(&analysis.input.warnings);
    sink.finish().context("cannot write the Parquet file")
}

/// One process's events as a PyTorch memory snapshot: a first pass finds
/// the sites (their frames), the second gathers the events.
fn torch_snapshot(
    files: &[PathBuf],
    opts: &Options,
    file: File,
    pid: Option<u32>,
) -> Result<String> {
    let (analysis, sites) = analyze_files_with_site_ids(files, opts)?;
    let pid = snapshot_pid(&analysis, pid)?;
    let mut events = TorchSnapshotEvents::new(&analysis, &sites, pid);
    analyze_files_with_events(files, opts, &mut |rows| events.rows(rows))?;
    warn(&analysis.input.warnings);
    let (mut w, written) = events
        .finish(BufWriter::new(file))
        .context("cannot write the snapshot")?;
    w.flush().context("cannot write the snapshot")?;
    Ok(format!(
        "PyTorch memory snapshot of pid {pid}: {} history events, {} segments holding {} blocks at the end \
         (open it at https://pytorch.org/memory_viz)",
        written.events, written.segments, written.blocks
    ))
}

/// The process a snapshot is written for: the one asked for, or the only
/// one that allocated.
fn snapshot_pid(analysis: &Analysis, pid: Option<u32>) -> Result<u32> {
    let allocating: Vec<u32> = analysis
        .processes
        .iter()
        .filter(|p| !p.devices.is_empty())
        .map(|p| p.pid)
        .collect();
    match pid {
        Some(p) if analysis.processes.iter().any(|x| x.pid == p) => Ok(p),
        Some(p) => bail!(
            "the trace has no process {p} (its processes: {})",
            pids(analysis.processes.iter().map(|x| x.pid))
        ),
        None => match allocating.as_slice() {
            [one] => Ok(*one),
            [] => bail!("no process of the trace allocated device memory: there is nothing to write"),
            several => bail!(
                "a snapshot holds one process and the trace has {} that allocated ({}): pick one with --pid",
                several.len(),
                pids(several.iter().copied())
            ),
        },
    }
}

fn pids(p: impl Iterator<Item = u32>) -> String {
    p.map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
}

/// `export --format parquet --into DIR`: the run's events added to DIR in
/// the hive layout (PartitionedEvents).
fn into_folder(
    files: &[PathBuf],
    dir: &Path,
    run: &str,
    reading: &crate::cli::ReadingArgs,
) -> Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let summary = parquet(files, &reading.options(), |analysis, sites| {
        let sink = PartitionedEvents::new(dir, run, analysis, sites)
            .with_context(|| format!("cannot write into {}", dir.display()))?;
        Ok(Box::new(sink))
    })?;
    Ok(format!(
        "run={} added: {summary}",
        gmem_prof_exports::parquet::partition_value(run)
    ))
}

fn warn(warnings: &[gmem_prof_model::InputWarning]) {
    for w in warnings
        .iter()
        .map(gmem_prof_reports::reasons::input_warning)
    {
        eprintln!("gmem-prof: warning: {w}");
    }
}

/// run.bin → run.perfetto.json, run.parquet, run.json,
/// run.snapshot.pickle (beside the trace's name, in the current directory).
fn default_output(files: &[PathBuf], format: ExportFormat) -> PathBuf {
    let stem = crate::report::report_stem(files);
    let ext = match format {
        ExportFormat::Perfetto => "perfetto.json",
        ExportFormat::Parquet => "parquet",
        ExportFormat::Json => "json",
        ExportFormat::TorchSnapshot => "snapshot.pickle",
    };
    PathBuf::from(format!("{stem}.{ext}"))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn temp_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    out.with_file_name(name)
}
