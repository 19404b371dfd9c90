//! The gmem-prof trace format.
//!
//! A trace is a header followed by independently decodable, checksummed
//! chunks of length-prefixed, tagged records (FORMAT.md has the byte layout).
//! The collector writes one file per process; `gmem-prof record` merges them
//! into one trace where each process is a *stream* (the chunk header names
//! it). Interned ids (strings, stacks, modules) are scoped to their stream.
//!
//! # Design constraints
//! - The decoder never panics on any input and never allocates from an
//!   untrusted length without checking it against the bytes it has.
//! - A file cut short (the process was killed) reads up to its last whole
//!   chunk, with a warning. A damaged chunk is skipped, not fatal.
//! - Old readers skip record tags they do not know; tags are never reused.
//!
//! # Example
//! ```
//! use gmem_prof_traces::{read_all, Record, TraceWriter, record::{Bytes, MemoryEvent, Nanos}};
//! let mut w = TraceWriter::new(Vec::new()).unwrap();
//! w.push(&Record::Memory(MemoryEvent {
//!     time: Nanos(1_000), alloc: true, kind: 3, address: 0x7f00_0000_0000,
//!     bytes: Bytes(1 << 20), ..Default::default()
//! })).unwrap();
//! let bytes = w.finish().unwrap();
//! let (chunks, warnings) = read_all(&bytes).unwrap();
//! assert!(warnings.is_empty());
//! assert!(matches!(&chunks[0].records[0], Record::Memory(m) if m.bytes.0 == 1 << 20));
//! ```

pub mod build_id;
mod codec;
pub mod env;
pub mod fast;
pub mod file;
pub mod record;
mod wide;
pub mod window;

pub use codec::Enc;
pub use file::{
    decode_chunk, file_header, read_all, ChunkEncoder, ChunkRecords, DecodedChunk, RawChunk,
    TraceReader, TraceWriter, Warning, CHUNK_HEADER_LEN, FORMAT_VERSION,
};
pub use record::Record;

/// A record or chunk could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record ends early")]
    Truncated,
    #[error("malformed variable-length integer")]
    BadVarint,
    #[error("value out of range")]
    OutOfRange,
    #[error("unknown {0} {1}")]
    BadValue(&'static str, u64),
    #[error("compressed chunk does not decompress to its stated size")]
    BadCompression,
}

/// The file as a whole cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the file is empty (the recording produced no data)")]
    Empty,
    #[error("not a gmem-prof trace (no GMEMPROF header)")]
    NotATrace,
    #[error(
        "this trace uses format version {found}, newer than this gmem-prof reads \
         (up to {newest}); use a gmem-prof release that writes version {found} or later"
    )]
    TooNew { found: u16, newest: u16 },
    #[error("this trace uses format version {found}, older than any this gmem-prof reads (from {oldest})")]
    TooOld { found: u16, oldest: u16 },
}
