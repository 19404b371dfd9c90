//! The trace reader must never panic, whatever the bytes: every chunk it
//! yields decodes to records or to an error, and the analyzer's windowed
//! decoding of the frequent records agrees with the checked one. Also feeds
//! the build-id note parser, which reads ELF headers of files on disk.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gmem_prof_traces::read_all(data);
    // The same bytes behind a valid file header reach the chunk decoder.
    let mut with_header = gmem_prof_traces::file_header().to_vec();
    with_header.extend_from_slice(data);
    let _ = gmem_prof_traces::read_all(&with_header);
    windowed_agrees(&with_header);
    let _ = gmem_prof_traces::build_id::of_elf_file(data);
    let _ = gmem_prof_traces::build_id::find_in_notes(data, 4);
});

/// Every frequent record, decoded through `WinDec` where the reader offers a
/// window, gives what `Dec` gives (the same fields, or an error); and the
/// wide decoders give the same fields for every body they take.
fn windowed_agrees(file: &[u8]) {
    use gmem_prof_traces::{record, ChunkRecords, Dec, Fields, TraceReader, WinDec};
    fn decode(tag: u8, d: &mut impl Fields, base: u64) -> Option<String> {
        Some(match tag {
            record::tag::MEMORY => format!("{:?}", record::decode_memory(d, base).ok()?),
            record::tag::API => format!("{:?}", record::decode_api(d, base).ok()?),
            record::tag::POOL => format!("{:?}", record::decode_pool(d, base).ok()?),
            record::tag::KERNEL => format!("{:?}", record::decode_kernel_span(d, base).ok()?),
            _ => format!("{:?}", record::decode_process_end(d, base).ok()?),
        })
    }
    let Ok(mut reader) = TraceReader::new(file) else {
        return;
    };
    while let Some(chunk) = reader.next_chunk() {
        let Ok(payload) = chunk.payload() else {
            continue;
        };
        let mut records = ChunkRecords::new(&payload);
        let base = records.base();
        while let Some(Ok(r)) = records.next_raw_window() {
            let Some(w) = r.window else { continue };
            let checked = decode(r.tag, &mut Dec::new(r.body), base);
            let mut d = WinDec::new(w, r.body.len());
            let windowed = decode(r.tag, &mut d, base).filter(|_| d.finish().is_ok());
            assert_eq!(checked, windowed, "tag {} body {:?}", r.tag, r.body);
            // What the wide decoders take, they decode the same.
            #[cfg(target_arch = "x86_64")]
            if gmem_prof_traces::wide::available() {
                use gmem_prof_traces::wide;
                let len = r.body.len();
                // SAFETY: the processor has what they need.
                let wide = unsafe {
                    match r.tag {
                        record::tag::MEMORY => wide::memory(w, len, base).map(|v| format!("{v:?}")),
                        record::tag::API => wide::api(w, len, base).map(|v| format!("{v:?}")),
                        record::tag::KERNEL => {
                            wide::kernel_span(w, len, base).map(|v| format!("{v:?}"))
                        }
                        _ => None,
                    }
                };
                if wide.is_some() {
                    assert_eq!(checked, wide, "wide: tag {} body {:?}", r.tag, r.body);
                }
            }
        }
    }
}
