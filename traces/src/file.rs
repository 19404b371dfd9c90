//! Files and chunks: the file header, chunk framing with checksums and
//! optional LZ4 compression, a writer, and a reader that survives damage.
//!
//! ```text
//! file   := header chunk* (a chunk holding a Trailer record ends a complete file)
//! header := "GMEMPROF" version:u16le flags:u16le reserved:u32le          (16 bytes)
//! chunk  := "GCHK" stream:u32le raw_len:u32le stored_len:u32le
//!           codec:u8 reserved:[u8;3] crc32:u32le                         (24 bytes)
//!           stored:[u8; stored_len]
//! crc32  covers the first 20 header bytes and `stored`
//! payload (stored, decompressed if codec = 1) := base_time:varint record*
//! record := tag:u8 len:varint body:[u8; len]
//! ```

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};

use crate::codec::{Dec, Enc, WINDOW, WINDOW_BODY};
use crate::record::{Record, Trailer};
use crate::{DecodeError, TraceError};

pub const FILE_MAGIC: &[u8; 8] = b"GMEMPROF";
pub const CHUNK_MAGIC: &[u8; 4] = b"GCHK";
pub const FILE_HEADER_LEN: usize = 16;
pub const CHUNK_HEADER_LEN: usize = 24;
/// The format version this code writes.
pub const FORMAT_VERSION: u16 = 1;
/// The oldest format version this code reads.
pub const OLDEST_READABLE_VERSION: u16 = 1;
/// Upper bound on a chunk's decompressed size: the reader refuses larger
/// claims instead of allocating them.
pub const MAX_CHUNK_BYTES: usize = 64 << 20;

/// Payload size at which `TraceWriter` starts a new chunk: small enough for
/// many chunks to decode in parallel and to lose little to damage, large
/// enough that the 24-byte headers do not matter.
pub const DEFAULT_CHUNK_BYTES: usize = 128 << 10;

pub const CODEC_NONE: u8 = 0;
pub const CODEC_LZ4: u8 = 1;

pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(FILE_MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h
}

/// Builds the records of one chunk in memory.
pub struct ChunkEncoder {
    payload: Enc,
    body: Enc,
    base: u64,
    records: u64,
}

impl ChunkEncoder {
    /// `base` is the time the chunk's timestamps are relative to (any time
    /// close to them keeps the records small).
    pub fn new(base: u64) -> Self {
        let mut e = ChunkEncoder {
            payload: Enc::default(),
            body: Enc::default(),
            base: 0,
            records: 0,
        };
        e.reset(base);
        e
    }

    pub fn reset(&mut self, base: u64) {
        self.payload.buf.clear();
        self.base = base;
        self.records = 0;
        self.payload.var(base);
    }

    pub fn push(&mut self, r: &Record) {
        r.encode(&mut self.payload, &mut self.body, self.base);
        self.records += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Bytes of payload so far (before compression).
    pub fn len(&self) -> usize {
        self.payload.buf.len()
    }

    /// Frames the payload as a chunk (header + stored bytes) and appends it to
    /// `out`. The encoder keeps its contents; call `reset` to start over.
    pub fn finish_into(&self, stream: u32, compress: bool, out: &mut Vec<u8>) {
        frame_chunk(stream, &self.payload.buf, compress, out);
    }
}

/// Frames a raw payload as a chunk and appends it to `out`.
pub fn frame_chunk(stream: u32, raw: &[u8], compress: bool, out: &mut Vec<u8>) {
    let compressed;
    let (codec, stored): (u8, &[u8]) = if compress {
        compressed = lz4_flex::block::compress(raw);
        if compressed.len() < raw.len() {
            (CODEC_LZ4, &compressed)
        } else {
            (CODEC_NONE, raw)
        }
    } else {
        (CODEC_NONE, raw)
    };
    out.extend_from_slice(&chunk_header(stream, codec, raw.len() as u32, stored));
    out.extend_from_slice(stored);
}

/// The header (with its checksum) of a chunk whose stored bytes are
/// `stored`, `raw_len` once decompressed by `codec`.
fn chunk_header(stream: u32, codec: u8, raw_len: u32, stored: &[u8]) -> [u8; CHUNK_HEADER_LEN] {
    let mut h = [0u8; CHUNK_HEADER_LEN];
    h[..4].copy_from_slice(CHUNK_MAGIC);
    h[4..8].copy_from_slice(&stream.to_le_bytes());
    h[8..12].copy_from_slice(&raw_len.to_le_bytes());
    h[12..16].copy_from_slice(&(stored.len() as u32).to_le_bytes());
    h[16] = codec;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h[..20]);
    crc.update(stored);
    h[20..].copy_from_slice(&crc.finalize().to_le_bytes());
    h
}

/// Writes a whole trace: header, chunks, trailer.
pub struct TraceWriter<W: Write> {
    out: W,
    enc: ChunkEncoder,
    stream: u32,
    chunks: u64,
    records: u64,
    scratch: Vec<u8>,
    /// Start a new chunk once the current one holds this many bytes.
    pub chunk_target: usize,
    pub compress: bool,
}

impl<W: Write> TraceWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&file_header())?;
        Ok(TraceWriter {
            out,
            enc: ChunkEncoder::new(0),
            stream: 0,
            chunks: 0,
            records: 0,
            scratch: Vec::new(),
            chunk_target: DEFAULT_CHUNK_BYTES,
            compress: true,
        })
    }

    /// Records pushed after this go to `stream` (a process of the trace).
    pub fn set_stream(&mut self, stream: u32) -> io::Result<()> {
        if stream != self.stream {
            self.flush_chunk()?;
            self.stream = stream;
        }
        Ok(())
    }

    pub fn push(&mut self, r: &Record) -> io::Result<()> {
        if self.enc.is_empty() {
            if let Some(t) = record_time(r) {
                self.enc.reset(t);
            }
        }
        self.enc.push(r);
        self.records += 1;
        if self.enc.len() >= self.chunk_target {
            self.flush_chunk()?;
        }
        Ok(())
    }

    pub fn flush_chunk(&mut self) -> io::Result<()> {
        if self.enc.is_empty() {
            return Ok(());
        }
        self.scratch.clear();
        self.enc
            .finish_into(self.stream, self.compress, &mut self.scratch);
        self.out.write_all(&self.scratch)?;
        self.chunks += 1;
        self.enc.reset(0);
        Ok(())
    }

    /// Writes a chunk of another trace as it is, in `stream`, after what
    /// was pushed before: neither decoded nor compressed again (a chunk
    /// depends on nothing outside it but its stream). `records`: how many
    /// it holds, for the trailer's count.
    pub fn copy_chunk(&mut self, stream: u32, chunk: &RawChunk, records: u64) -> io::Result<()> {
        self.set_stream(stream)?;
        self.flush_chunk()?;
        let header = chunk_header(stream, chunk.codec, chunk.raw_len, chunk.stored);
        self.out.write_all(&header)?;
        self.out.write_all(chunk.stored)?;
        self.chunks += 1;
        self.records += records;
        Ok(())
    }

    /// Writes the trailer chunk and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_chunk()?;
        let t = Trailer {
            chunks: self.chunks + 1,
            records: self.records + 1,
        };
        self.enc.reset(0);
        self.enc.push(&Record::Trailer(t));
        self.scratch.clear();
        self.enc.finish_into(self.stream, false, &mut self.scratch);
        self.out.write_all(&self.scratch)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The time a record is about, used to pick a chunk's base time.
pub fn record_time(r: &Record) -> Option<u64> {
    Some(match r {
        Record::Process(p) => p.start.0,
        Record::Api(a) => a.time.0,
        Record::Memory(m) => m.time.0,
        Record::Pool(p) => p.time.0,
        Record::Kernel(k) => k.start.0,
        Record::KernelLaunch(k) => k.time.0,
        Record::Dropped(d) => d.time.0,
        Record::DeviceMemory(m) => m.time.0,
        Record::CallDevice(c) => c.time.0,
        Record::PoolUsage(u) => u.time.0,
        Record::Step(s) => s.time.0,
        Record::RangeBegin(r) => r.time.0,
        Record::RangeEnd(r) => r.time.0,
        Record::Mark(m) => m.time.0,
        Record::Window(w) => w.time.0,
        Record::Message(m) => m.time.0,
        Record::ProcessEnd(p) => p.time.0,
        _ => return None,
    })
}

/// Something the reader had to skip or could not confirm; the rest of the
/// trace is still usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// A damaged chunk (bad checksum, impossible sizes, undecodable payload)
    /// was skipped; reading resumed at the next chunk found after it.
    CorruptChunk { offset: u64, reason: String },
    /// The file ends in the middle of a chunk: the recording was cut short.
    CutShort { offset: u64, missing: u64 },
    /// The file has no trailer: the recording did not finish cleanly.
    NoTrailer,
    /// Bytes after the trailer were ignored.
    TrailingBytes { offset: u64, len: u64 },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::CorruptChunk { offset, reason } => {
                write!(f, "skipped a damaged chunk at byte {offset}: {reason}")
            }
            Warning::CutShort { offset, missing } => write!(
                f,
                "the file ends inside a chunk at byte {offset} ({missing} bytes missing): \
                 the recording was cut short; read up to the last whole chunk"
            ),
            Warning::NoTrailer => write!(
                f,
                "the trace has no trailer: the recording did not finish cleanly \
                 (killed or still running); everything up to the last whole chunk was read"
            ),
            Warning::TrailingBytes { offset, len } => {
                write!(f, "ignored {len} bytes after the trailer at byte {offset}")
            }
        }
    }
}

/// A chunk as found in the file; its checksum verified unless the reader
/// was told to leave that to the caller (`TraceReader::without_checksums`).
#[derive(Clone, Debug)]
pub struct RawChunk<'a> {
    pub offset: u64,
    pub stream: u32,
    pub codec: u8,
    pub raw_len: u32,
    pub stored: &'a [u8],
    /// The header bytes the checksum covers, and the checksum.
    checked_header: &'a [u8],
    crc: u32,
}

impl<'a> RawChunk<'a> {
    /// Whether the chunk's bytes match its checksum (what a careful
    /// `TraceReader` checks before it hands a chunk out).
    pub fn checksum_ok(&self) -> bool {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(self.checked_header);
        hasher.update(self.stored);
        hasher.finalize() == self.crc
    }

    /// The decompressed payload.
    pub fn payload(&self) -> Result<Cow<'a, [u8]>, DecodeError> {
        if self.codec == CODEC_NONE {
            return Ok(Cow::Borrowed(self.stored));
        }
        let mut out = Vec::new();
        let len = self.payload_in(&mut out)?.len();
        out.truncate(len);
        Ok(Cow::Owned(out))
    }

    /// The decompressed payload, decompressed into `scratch` when it must
    /// be: a reader that keeps one scratch buffer per thread allocates (and
    /// page-faults) once instead of once per chunk.
    pub fn payload_in<'s>(&'s self, scratch: &'s mut Vec<u8>) -> Result<&'s [u8], DecodeError> {
        match self.codec {
            CODEC_NONE => Ok(self.stored),
            CODEC_LZ4 => lz4_block(self.stored, self.raw_len as usize, scratch),
            c => Err(DecodeError::BadValue("chunk codec", c.into())),
        }
    }
}

/// Decompresses an LZ4 block that must expand to exactly `len` bytes, into
/// `scratch`. Any input, however damaged, gives the bytes or an error.
fn lz4_block<'s>(
    stored: &[u8],
    len: usize,
    scratch: &'s mut Vec<u8>,
) -> Result<&'s [u8], DecodeError> {
    if scratch.len() < len {
        scratch.resize(len, 0);
    }
    let out = &mut scratch[..len];
    decompress_exactly(stored, out)?;
    Ok(out)
}

/// Fills `out` from the LZ4 block `stored`, which must expand to exactly
/// `out.len()` bytes: liblz4's decoder.
#[cfg(feature = "c-lz4")]
fn decompress_exactly(stored: &[u8], out: &mut [u8]) -> Result<(), DecodeError> {
    let (Ok(stored_len), Ok(out_len)) = (i32::try_from(stored.len()), i32::try_from(out.len()))
    else {
        return Err(DecodeError::BadCompression);
    };
    // SAFETY: LZ4_decompress_safe reads at most `stored_len` bytes of
    // `stored` and writes at most `out_len` bytes to `out`, whatever the
    // input holds; both lengths are those of the slices passed.
    let n = unsafe {
        lz4_sys::LZ4_decompress_safe(
            stored.as_ptr().cast(),
            out.as_mut_ptr().cast(),
            stored_len,
            out_len,
        )
    };
    if n != out_len {
        return Err(DecodeError::BadCompression);
    }
    Ok(())
}

/// The same with lz4_flex's decoder (safe Rust), where liblz4 is not built.
#[cfg(not(feature = "c-lz4"))]
fn decompress_exactly(stored: &[u8], out: &mut [u8]) -> Result<(), DecodeError> {
    match lz4_flex::block::decompress_into(stored, out) {
        Ok(n) if n == out.len() => Ok(()),
        _ => Err(DecodeError::BadCompression),
    }
}

/// Iterates the records of a chunk payload.
pub struct ChunkRecords<'p> {
    dec: Dec<'p>,
    base: u64,
    failed: bool,
}

impl<'p> ChunkRecords<'p> {
    pub fn new(payload: &'p [u8]) -> Self {
        let mut dec = Dec::new(payload);
        let (base, failed) = match dec.var() {
            Ok(b) => (b, false),
            Err(_) => (0, true),
        };
        ChunkRecords { dec, base, failed }
    }

    /// The chunk's base time: record times are stored relative to it.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The next record's tag and body, not decoded (for readers that decode
    /// only some records, with `Record::decode`; for speed, `fast`).
    /// After an error the chunk's framing is lost and iteration ends.
    #[inline]
    pub fn next_raw(&mut self) -> Option<Result<(u8, &'p [u8]), DecodeError>> {
        self.next_raw_window().map(|r| r.map(|r| (r.tag, r.body)))
    }

    /// Like `next_raw`, and also the payload from the body's start on as a
    /// `WinDec` window (for `fast`), when the body is short enough and the payload holds
    /// a whole window from there (all records but a chunk's last few).
    // Always inlined: the fast decoding loop, compiled three ways,
    // otherwise calls it (3% more instructions).
    #[inline(always)]
    pub(crate) fn next_raw_window(&mut self) -> Option<Result<RawRecord<'p>, DecodeError>> {
        if self.failed {
            self.failed = false;
            self.dec = Dec::new(&[]);
            return Some(Err(DecodeError::Truncated));
        }
        if self.dec.is_empty() {
            return None;
        }
        let r = self.raw_record();
        if r.is_err() {
            self.dec = Dec::new(&[]);
        }
        Some(r)
    }

    #[inline(always)]
    fn raw_record(&mut self) -> Result<RawRecord<'p>, DecodeError> {
        let tag = self.dec.u8()?;
        let len = self.dec.var()?;
        let window = self.dec.window();
        let len = usize::try_from(len).map_err(|_| DecodeError::Truncated)?;
        let body = self.dec.take(len)?;
        let window = window.filter(|_| len <= WINDOW_BODY);
        Ok(RawRecord { tag, body, window })
    }
}

/// A record's tag and undecoded body, and a window for `WinDec` when there
/// is one.
pub(crate) struct RawRecord<'p> {
    pub tag: u8,
    pub body: &'p [u8],
    pub window: Option<&'p [u8; WINDOW]>,
}

impl Iterator for ChunkRecords<'_> {
    type Item = Result<Record, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let base = self.base;
        let r = self
            .next_raw()?
            .and_then(|(tag, body)| Record::decode(tag, body, base));
        if r.is_err() {
            // Framing is lost: stop this chunk.
            self.dec = Dec::new(&[]);
        }
        Some(r)
    }
}

/// Reads the chunks of a trace held in memory. Never panics, whatever the
/// bytes; damage turns into `Warning`s and the reader goes on.
pub struct TraceReader<'a> {
    data: &'a [u8],
    pos: usize,
    pub version: u16,
    pub warnings: Vec<Warning>,
    saw_trailer: bool,
    done: bool,
    verify: bool,
}

impl<'a> TraceReader<'a> {
    /// Leaves checksums to the caller (`RawChunk::checksum_ok`), who can
    /// verify chunks in parallel. Only for a first, optimistic pass: a chunk
    /// whose length field is damaged is then framed wrongly, so a caller that
    /// finds a bad checksum, or any warning, must read the file again with a
    /// careful reader.
    pub fn without_checksums(mut self) -> Self {
        self.verify = false;
        self
    }

    pub fn new(data: &'a [u8]) -> Result<Self, TraceError> {
        if data.len() < FILE_HEADER_LEN || &data[..8] != FILE_MAGIC {
            if data.is_empty() {
                return Err(TraceError::Empty);
            }
            return Err(TraceError::NotATrace);
        }
        let version = u16::from_le_bytes([data[8], data[9]]);
        if version > FORMAT_VERSION {
            return Err(TraceError::TooNew {
                found: version,
                newest: FORMAT_VERSION,
            });
        }
        if version < OLDEST_READABLE_VERSION {
            return Err(TraceError::TooOld {
                found: version,
                oldest: OLDEST_READABLE_VERSION,
            });
        }
        Ok(TraceReader {
            data,
            pos: FILE_HEADER_LEN,
            version,
            warnings: Vec::new(),
            verify: true,
            saw_trailer: false,
            done: false,
        })
    }

    /// Called by the user after reading the trailer record (the reader only
    /// frames chunks; it does not decode payloads).
    pub fn mark_trailer_seen(&mut self) {
        self.saw_trailer = true;
    }

    /// Skips to the next chunk magic after a damaged chunk.
    fn resync(&mut self, from: usize) {
        let hay = &self.data[from.min(self.data.len())..];
        match hay.windows(4).position(|w| w == CHUNK_MAGIC) {
            Some(i) => self.pos = from + i,
            None => self.pos = self.data.len(),
        }
    }

    fn finish(&mut self) {
        if !self.done {
            self.done = true;
            let cut = self
                .warnings
                .iter()
                .any(|w| matches!(w, Warning::CutShort { .. }));
            // A cut-short warning already explains a missing trailer.
            if !self.saw_trailer && !cut {
                self.warnings.push(Warning::NoTrailer);
            }
        }
    }

    /// The next whole, checksum-verified chunk, or None at the end.
    pub fn next_chunk(&mut self) -> Option<RawChunk<'a>> {
        loop {
            if self.saw_trailer && self.pos < self.data.len() {
                let len = (self.data.len() - self.pos) as u64;
                self.warnings.push(Warning::TrailingBytes {
                    offset: self.pos as u64,
                    len,
                });
                self.pos = self.data.len();
            }
            let rest = &self.data[self.pos..];
            if rest.is_empty() {
                self.finish();
                return None;
            }
            let offset = self.pos as u64;
            if rest.len() < CHUNK_HEADER_LEN {
                if rest.starts_with(&CHUNK_MAGIC[..rest.len().min(4)]) {
                    self.warnings.push(Warning::CutShort {
                        offset,
                        missing: (CHUNK_HEADER_LEN - rest.len()) as u64,
                    });
                } else {
                    self.warnings.push(Warning::CorruptChunk {
                        offset,
                        reason: format!("{} stray bytes at the end", rest.len()),
                    });
                }
                self.pos = self.data.len();
                continue;
            }
            let h = &rest[..CHUNK_HEADER_LEN];
            let le32 = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            if &h[..4] != CHUNK_MAGIC {
                self.warnings.push(Warning::CorruptChunk {
                    offset,
                    reason: "no chunk marker where a chunk should start".into(),
                });
                self.resync(self.pos + 1);
                continue;
            }
            let stream = le32(4);
            let raw_len = le32(8);
            let stored_len = le32(12) as usize;
            let codec = h[16];
            let crc = le32(20);
            if raw_len as usize > MAX_CHUNK_BYTES || stored_len > MAX_CHUNK_BYTES {
                self.warnings.push(Warning::CorruptChunk {
                    offset,
                    reason: format!("impossible chunk size {stored_len}/{raw_len}"),
                });
                self.resync(self.pos + 4);
                continue;
            }
            if rest.len() < CHUNK_HEADER_LEN + stored_len {
                // Either the file was cut inside this chunk, or the length is
                // damaged and another chunk follows: look for one.
                if !rest[4..].windows(4).any(|w| w == CHUNK_MAGIC) {
                    self.warnings.push(Warning::CutShort {
                        offset,
                        missing: (CHUNK_HEADER_LEN + stored_len - rest.len()) as u64,
                    });
                    self.pos = self.data.len();
                    continue;
                }
                self.warnings.push(Warning::CorruptChunk {
                    offset,
                    reason: "chunk length runs past the end of the file".into(),
                });
                self.resync(self.pos + 4);
                continue;
            }
            let stored = &rest[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + stored_len];
            let chunk = RawChunk {
                offset,
                stream,
                codec,
                raw_len,
                stored,
                checked_header: &h[..20],
                crc,
            };
            if self.verify && !chunk.checksum_ok() {
                self.warnings.push(Warning::CorruptChunk {
                    offset,
                    reason: "checksum mismatch".into(),
                });
                self.resync(self.pos + 4);
                continue;
            }
            if codec == CODEC_NONE && raw_len as usize != stored_len {
                self.warnings.push(Warning::CorruptChunk {
                    offset,
                    reason: "uncompressed chunk with mismatched sizes".into(),
                });
                self.pos += CHUNK_HEADER_LEN + stored_len;
                continue;
            }
            self.pos += CHUNK_HEADER_LEN + stored_len;
            return Some(chunk);
        }
    }
}

/// A chunk's records, decoded, with its stream.
#[derive(Debug)]
pub struct DecodedChunk {
    pub offset: u64,
    pub stream: u32,
    pub records: Vec<Record>,
}

/// Reads every record of a trace in file order, collecting warnings for what
/// had to be skipped. The simple way to read small traces and to test.
pub fn read_all(data: &[u8]) -> Result<(Vec<DecodedChunk>, Vec<Warning>), TraceError> {
    let mut reader = TraceReader::new(data)?;
    let mut chunks = Vec::new();
    while let Some(raw) = reader.next_chunk() {
        match decode_chunk(&raw) {
            Ok(c) => {
                if c.records.iter().any(|r| matches!(r, Record::Trailer(_))) {
                    reader.mark_trailer_seen();
                }
                chunks.push(c);
            }
            Err((c, reason)) => {
                reader.warnings.push(Warning::CorruptChunk {
                    offset: raw.offset,
                    reason,
                });
                chunks.push(c);
            }
        }
    }
    Ok((chunks, reader.warnings))
}

/// Decodes one chunk. On a decoding error, returns the records read before
/// it along with the reason.
pub fn decode_chunk(raw: &RawChunk) -> Result<DecodedChunk, (DecodedChunk, String)> {
    let mut out = DecodedChunk {
        offset: raw.offset,
        stream: raw.stream,
        records: Vec::new(),
    };
    let payload = match raw.payload() {
        Ok(p) => p,
        Err(e) => return Err((out, e.to_string())),
    };
    for r in ChunkRecords::new(&payload) {
        match r {
            Ok(r) => out.records.push(r),
            Err(e) => return Err((out, format!("undecodable record: {e}"))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The LZ4 decoder (liblz4's LZ4_decompress_safe) on damaged blocks:
        /// a block with bytes changed, cut or claiming another length gives
        /// an error or `len` bytes, never a panic; an intact one gives the
        /// original bytes.
        #[test]
        fn damaged_lz4_blocks_are_errors(
            raw in proptest::collection::vec(0u8..4, 0..3000),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
            len_delta in -40i64..40,
        ) {
            let stored = lz4_flex::block::compress(&raw);
            let mut scratch = Vec::new();
            prop_assert_eq!(lz4_block(&stored, raw.len(), &mut scratch).ok(), Some(&raw[..]));
            let mut bad = stored.clone();
            for (at, b) in edits {
                if !bad.is_empty() {
                    let i = at % bad.len();
                    bad[i] = b;
                }
            }
            bad.truncate(cut % (bad.len() + 1));
            let len = (raw.len() as i64 + len_delta).max(0) as usize;
            if let Ok(out) = lz4_block(&bad, len, &mut scratch) {
                prop_assert_eq!(out.len(), len);
            }
        }

        #[test]
        fn random_bytes_are_not_lz4_blocks_that_panic(
            stored in proptest::collection::vec(any::<u8>(), 0..200),
            len in 0usize..5000,
        ) {
            let mut scratch = Vec::new();
            if let Ok(out) = lz4_block(&stored, len, &mut scratch) {
                prop_assert_eq!(out.len(), len);
            }
        }
    }
}
