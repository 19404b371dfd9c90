//! Parquet of the trace's events, one row per event, for DuckDB, pandas,
//! Spark or polars. Written in row groups of `ROWS_PER_GROUP` as the
//! analyzer hands the events out, so memory stays bounded. One file
//! (`ParquetEvents`), or a folder of runs in the hive layout
//! (`PartitionedEvents`: `run=R/host=H/pid=P/device=D/events.parquet`,
//! the partition columns in the path, not in the files), which many runs
//! share.
//!
//! Columns (documented for users in docs/formats.md):
//! time_ns, end_ns (u64, since the trace's first event), event (alloc, free,
//! failed, exit, kernel, tensor alloc, tensor free), pid, device (u32),
//! kind (memory kind; null for kernels, failures and tensors), address,
//! bytes (u64), site (u32: index into the report's sites; null when
//! unknown and for tensors), site_label (text: the site's, or the tensor
//! site's), correlation, cuda_stream (u32), name (kernel name or failed
//! function), device_live, device_reserved (u64: the device's totals just
//! after the event), tensor_site (u32: index into the report's tensor
//! sites; null but for tensors), allocated, reserved (u64: the framework
//! allocator's figures for the process on the device just after a tensor
//! event; null otherwise).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use gmem_prof_analyzer::events::{kind_name, EventKind};
use gmem_prof_analyzer::events::{EventRow, SiteIds};
use gmem_prof_model::Analysis;
use polars::prelude::*;
use polars_io::parquet::write::{BatchedWriter, ParquetCompression, ParquetWriter};

/// Rows buffered before a row group is written.
pub const ROWS_PER_GROUP: usize = 1 << 20;
/// The same for each file of a partitioned export, which has one buffer
/// per process and device.
pub const ROWS_PER_PARTITION_GROUP: usize = 1 << 16;

/// Column buffers for one row group.
#[derive(Default)]
struct Columns {
    time_ns: Vec<u64>,
    end_ns: Vec<u64>,
    event: Vec<&'static str>,
    pid: Vec<u32>,
    device: Vec<u32>,
    kind: Vec<Option<&'static str>>,
    address: Vec<u64>,
    bytes: Vec<u64>,
    site: Vec<Option<u32>>,
    correlation: Vec<u32>,
    cuda_stream: Vec<u32>,
    name: Vec<Option<String>>,
    device_live: Vec<u64>,
    device_reserved: Vec<u64>,
    tensor_site: Vec<Option<u32>>,
    allocated: Vec<Option<u64>>,
    reserved: Vec<Option<u64>>,
}

impl Columns {
    fn len(&self) -> usize {
        self.time_ns.len()
    }

    /// The buffered rows as a frame; `partitioned`: without the columns a
    /// partitioned export has in its paths (pid, device).
    fn frame(&mut self, a: &Analysis, partitioned: bool) -> PolarsResult<DataFrame> {
        let c = std::mem::take(self);
        let n = c.time_ns.len();
        let labels: Vec<Option<&str>> = c
            .site
            .iter()
            .zip(&c.tensor_site)
            .map(|(s, t)| match (s, t) {
                (Some(s), _) => a.sites.get(*s as usize).map(|s| s.label.as_str()),
                (None, Some(t)) => a.tensor_sites.get(*t as usize).map(|s| s.label.as_str()),
                (None, None) => None,
            })
            .collect();
        let mut columns = vec![
            Column::new("time_ns".into(), c.time_ns),
            Column::new("end_ns".into(), c.end_ns),
            Column::new("event".into(), c.event),
        ];
        if !partitioned {
            columns.push(Column::new("pid".into(), c.pid));
            columns.push(Column::new("device".into(), c.device));
        }
        columns.extend([
            Column::new("kind".into(), c.kind),
            Column::new("address".into(), c.address),
            Column::new("bytes".into(), c.bytes),
            Column::new("site".into(), c.site),
            Column::new("site_label".into(), labels),
            Column::new("correlation".into(), c.correlation),
            Column::new("cuda_stream".into(), c.cuda_stream),
            Column::new("name".into(), c.name),
            Column::new("device_live".into(), c.device_live),
            Column::new("device_reserved".into(), c.device_reserved),
            Column::new("tensor_site".into(), c.tensor_site),
            Column::new("allocated".into(), c.allocated),
            Column::new("reserved".into(), c.reserved),
        ]);
        DataFrame::new(n, columns)
    }
}

/// Writes rows as Parquet row groups. Sites are mapped to the analysis'
/// ids with `sites`, so the analysis (a first pass) must be known.
pub struct ParquetEvents<'a, W: Write> {
    analysis: &'a Analysis,
    sites: &'a SiteIds,
    writer: Option<BatchedWriter<W>>,
    out: Option<W>,
    buf: Columns,
    pub rows_written: u64,
    /// A file of a partitioned export (`PartitionedEvents`).
    partitioned: bool,
    rows_per_group: usize,
}

impl<'a, W: Write> ParquetEvents<'a, W> {
    pub fn new(out: W, analysis: &'a Analysis, sites: &'a SiteIds) -> Self {
        ParquetEvents {
            analysis,
            sites,
            writer: None,
            out: Some(out),
            buf: Columns::default(),
            rows_written: 0,
            partitioned: false,
            rows_per_group: ROWS_PER_GROUP,
        }
    }

    pub fn rows(&mut self, rows: &[EventRow]) -> PolarsResult<()> {
        for r in rows {
            self.row(r)?;
        }
        Ok(())
    }

    fn row(&mut self, r: &EventRow) -> PolarsResult<()> {
        {
            let c = &mut self.buf;
            c.time_ns.push(r.time_ns);
            c.end_ns.push(r.end_ns);
            c.event.push(r.what.name());
            c.pid.push(r.pid);
            c.device.push(r.device);
            c.kind.push(match r.what {
                EventKind::Kernel
                | EventKind::Failed
                | EventKind::TensorAlloc
                | EventKind::TensorFree => None,
                _ => Some(kind_name(r.kind)),
            });
            c.address.push(r.address);
            c.bytes.push(r.bytes);
            c.site.push(r.site.and_then(|s| self.sites.get(s)));
            c.correlation.push(r.correlation);
            c.cuda_stream.push(r.cuda_stream);
            c.name.push(r.name.clone());
            c.device_live.push(r.device_live);
            c.device_reserved.push(r.device_reserved);
            c.tensor_site
                .push(r.tensor_site.and_then(|t| self.sites.tensor(t)));
            c.allocated.push(r.allocated);
            c.reserved.push(r.reserved);
        }
        if self.buf.len() >= self.rows_per_group {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> PolarsResult<()> {
        let mut df = self.buf.frame(self.analysis, self.partitioned)?;
        self.rows_written += df.height() as u64;
        if self.writer.is_none() {
            let out = self
                .out
                .take()
                .expect("the output is held until the first group");
            let w = ParquetWriter::new(out)
                .with_compression(ParquetCompression::Zstd(None))
                .batched(df.schema())?;
            self.writer = Some(w);
        }
        df.rechunk_mut();
        self.writer.as_mut().expect("set above").write_batch(&df)
    }

    /// Writes the last row group and the footer. A trace with no events
    /// still gives a valid file with the schema and no rows.
    pub fn finish(mut self) -> PolarsResult<u64> {
        if self.buf.len() > 0 || self.writer.is_none() {
            self.flush()?;
        }
        self.writer.expect("set by flush").finish()?;
        Ok(self.rows_written)
    }
}

/// A run's events in the hive layout many runs share:
/// `DIR/run=RUN/host=HOST/pid=PID/device=DEVICE/events.parquet`, one file
/// per process and device, written into a folder beside the run's and
/// moved into place by `finish` (a failed export leaves the run's old
/// folder as it was). DuckDB (`read_parquet('DIR/**/*.parquet',
/// hive_partitioning = true)`), pandas, Spark and polars read the path's
/// parts as columns.
pub struct PartitionedEvents<'a> {
    analysis: &'a Analysis,
    sites: &'a SiteIds,
    /// The run's folder, and the one it is written into.
    run_dir: PathBuf,
    tmp_dir: PathBuf,
    hosts: BTreeMap<u32, String>,
    parts: BTreeMap<(u32, u32), ParquetEvents<'a, BufWriter<File>>>,
}

impl<'a> PartitionedEvents<'a> {
    /// Events of the run named `run` under `dir`, which may hold other
    /// runs already; a run of that name is replaced.
    pub fn new(
        dir: &Path,
        run: &str,
        analysis: &'a Analysis,
        sites: &'a SiteIds,
    ) -> std::io::Result<Self> {
        let name = format!("run={}", partition_value(run));
        let run_dir = dir.join(&name);
        let tmp_dir = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp_dir);
        std::fs::create_dir_all(&tmp_dir)?;
        let hosts = analysis
            .processes
            .iter()
            .map(|p| (p.pid, partition_value(&p.hostname)))
            .collect();
        Ok(PartitionedEvents {
            analysis,
            sites,
            run_dir,
            tmp_dir,
            hosts,
            parts: BTreeMap::new(),
        })
    }

    pub fn rows(&mut self, rows: &[EventRow]) -> PolarsResult<()> {
        for r in rows {
            let key = (r.pid, r.device);
            if !self.parts.contains_key(&key) {
                let part = self.open(key)?;
                self.parts.insert(key, part);
            }
            if let Some(part) = self.parts.get_mut(&key) {
                part.row(r)?;
            }
        }
        Ok(())
    }

    fn open(&self, (pid, device): (u32, u32)) -> PolarsResult<ParquetEvents<'a, BufWriter<File>>> {
        let host = self.hosts.get(&pid).map_or("unknown", String::as_str);
        let dir = self
            .tmp_dir
            .join(format!("host={host}"))
            .join(format!("pid={pid}"))
            .join(format!("device={device}"));
        std::fs::create_dir_all(&dir)?;
        let file = File::create(dir.join("events.parquet"))?;
        let mut part = ParquetEvents::new(BufWriter::new(file), self.analysis, self.sites);
        part.partitioned = true;
        part.rows_per_group = ROWS_PER_PARTITION_GROUP;
        Ok(part)
    }

    /// Finishes every file and moves the run into place (replacing a run
    /// of its name). Returns the rows and files written.
    pub fn finish(self) -> PolarsResult<(u64, usize)> {
        let files = self.parts.len();
        let mut rows = 0;
        for part in self.parts.into_values() {
            rows += part.finish()?;
        }
        if self.run_dir.exists() {
            std::fs::remove_dir_all(&self.run_dir)?;
        }
        std::fs::rename(&self.tmp_dir, &self.run_dir)?;
        Ok((rows, files))
    }

    /// Removes what was written (after a failure).
    pub fn abandon(self) {
        let _ = std::fs::remove_dir_all(&self.tmp_dir);
    }
}

/// A value as a partition folder's name may hold it: letters, digits and
/// `.`, `_`, `-`, `+` kept, anything else `_` ("unknown" for nothing; dots
/// alone, which name folders of their own, become `_`).
pub fn partition_value(text: &str) -> String {
    if text.is_empty() {
        return "unknown".into();
    }
    if text.chars().all(|c| c == '.') {
        return "_".repeat(text.len());
    }
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::partition_value;

    /// A run or host name never leaves its folder: separators and other
    /// characters become `_`, and dots alone do too.
    #[test]
    fn partition_values_stay_one_folder_name() {
        assert_eq!(partition_value("a1b2c3d"), "a1b2c3d");
        assert_eq!(partition_value("2026-12-06_v1.2+rc"), "2026-12-06_v1.2+rc");
        assert_eq!(partition_value("../etc"), ".._etc");
        assert_eq!(partition_value(".."), "__");
        assert_eq!(partition_value("."), "_");
        assert_eq!(partition_value("feature/x y"), "feature_x_y");
        assert_eq!(partition_value(""), "unknown");
    }
}
