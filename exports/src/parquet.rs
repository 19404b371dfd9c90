//! Parquet of the trace's events, one row per event, for DuckDB, pandas,
//! Spark or polars. Written in row groups of `ROWS_PER_GROUP` as the
//! analyzer hands the events out, so memory stays bounded.
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

use std::io::Write;

use gmem_prof_analyzer::events::{kind_name, EventKind};
use gmem_prof_analyzer::events::{EventRow, SiteIds};
use gmem_prof_model::Analysis;
use polars::prelude::*;
use polars_io::parquet::write::{BatchedWriter, ParquetCompression, ParquetWriter};

/// Rows buffered before a row group is written.
pub const ROWS_PER_GROUP: usize = 1 << 20;

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

    fn frame(&mut self, a: &Analysis) -> PolarsResult<DataFrame> {
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
        DataFrame::new(
            n,
            vec![
                Column::new("time_ns".into(), c.time_ns),
                Column::new("end_ns".into(), c.end_ns),
                Column::new("event".into(), c.event),
                Column::new("pid".into(), c.pid),
                Column::new("device".into(), c.device),
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
            ],
        )
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
        }
    }

    pub fn rows(&mut self, rows: &[EventRow]) -> PolarsResult<()> {
        for r in rows {
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
            if c.len() >= ROWS_PER_GROUP {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> PolarsResult<()> {
        let mut df = self.buf.frame(self.analysis)?;
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
