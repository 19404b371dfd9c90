//! Edge cases of the writers: a trace with no events still gives valid
//! files, and a synthetic trace's rows all arrive.

use gmem_prof_analyzer::{analyze_files_with_events, synth, Options};
use gmem_prof_exports::{ParquetEvents, PerfettoWriter};
use polars_io::prelude::ParquetReader;
use polars_io::SerReader;

fn synthetic(events: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    synth::write_trace(std::fs::File::create(&path).unwrap(), events).unwrap();
    (dir, path)
}

fn both(events: u64) -> (serde_json::Value, polars::prelude::DataFrame, u64) {
    let (_dir, path) = synthetic(events);
    let paths = [path];
    let mut perfetto = PerfettoWriter::new(Vec::new()).unwrap();
    let mut rows = 0u64;
    let (analysis, sites) = analyze_files_with_events(&paths, &Options::default(), &mut |r| {
        rows += r.len() as u64;
        perfetto.rows(r).unwrap();
    })
    .unwrap();
    let json = perfetto.finish(&analysis).unwrap();
    // Parquet: the second pass, with the sites of the first.
    let mut bytes = Vec::new();
    let mut parquet = ParquetEvents::new(&mut bytes, &analysis, &sites);
    analyze_files_with_events(&paths, &Options::default(), &mut |r| {
        parquet.rows(r).unwrap()
    })
    .unwrap();
    assert_eq!(parquet.finish().unwrap(), rows);
    let df = ParquetReader::new(std::io::Cursor::new(bytes))
        .finish()
        .unwrap();
    (serde_json::from_slice(&json).unwrap(), df, rows)
}

#[test]
fn a_trace_without_events_gives_valid_empty_outputs() {
    let (json, df, rows) = both(0);
    assert_eq!(rows, 0);
    assert_eq!(df.height(), 0);
    // Every column of docs/formats.md's table, by name.
    let names: Vec<String> = df
        .get_column_names()
        .iter()
        .map(|n| n.to_string())
        .collect();
    let formats = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/formats.md"),
    )
    .unwrap();
    // The Parquet section, up to the next one.
    let parquet = formats.split("## Parquet").nth(1).unwrap();
    let parquet = parquet.split("\n## ").next().unwrap();
    let documented: Vec<String> = parquet
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name.to_string()))
        .collect();
    assert_eq!(names, documented, "the schema is there, as documented");
    assert!(json["traceEvents"].is_array());
}

#[test]
fn every_row_of_a_synthetic_trace_arrives() {
    let (json, df, rows) = both(200_000);
    assert!(rows > 100_000);
    assert_eq!(df.height() as u64, rows);
    let events = json["traceEvents"].as_array().unwrap();
    assert!(events.len() > 1000);
}
