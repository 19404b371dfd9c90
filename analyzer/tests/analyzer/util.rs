//! Helpers: building traces with the real writer, and running the analyzer.

use std::path::PathBuf;

use gmem_prof_analyzer::{analyze, analyze_files, Options};
use gmem_prof_model::Analysis;
use gmem_prof_traces::record::{Bytes, DeviceInfo, MemoryEvent, Nanos, ProcessInfo};
use gmem_prof_traces::{Record, TraceWriter};

pub const MIB: u64 = 1 << 20;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn sample(name: &str) -> Analysis {
    let path = repo().join("traces/samples").join(name);
    analyze_files(&[path], &Options::default()).expect("sample analyzes")
}

pub fn analyze_bytes(data: &[u8]) -> Analysis {
    analyze(&[data], &["test.bin".into()], &Options::default()).expect("analyzes")
}

/// A one-process trace of the given records, written by the real writer.
pub fn trace(records: &[Record]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.push(&Record::Process(ProcessInfo {
        pid: 42,
        kernels_traced: true,
        ..Default::default()
    }))
    .unwrap();
    w.push(&Record::Device(DeviceInfo {
        device: 0,
        name: "test GPU".into(),
        total_memory: Bytes(80 << 30),
        ..Default::default()
    }))
    .unwrap();
    for (i, r) in records.iter().enumerate() {
        w.push(r).unwrap();
        if i % 97 == 96 {
            w.flush_chunk().unwrap();
        }
    }
    w.finish().unwrap()
}

pub fn mem(time: u64, alloc: bool, address: u64, bytes: u64, pool: Option<(u64, u64)>) -> Record {
    Record::Memory(MemoryEvent {
        time: Nanos(time),
        alloc,
        kind: 3,
        address,
        bytes: Bytes(bytes),
        device: 0,
        context: 1,
        pool_type: u8::from(pool.is_some()),
        pool_address: pool.map_or(0, |p| p.0),
        pool_size: pool.map_or(0, |p| p.1),
        ..Default::default()
    })
}
