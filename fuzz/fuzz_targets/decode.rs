//! The trace reader must never panic, whatever the bytes: every chunk it
//! yields decodes to records or to an error, and the fast decoding of the
//! frequent records agrees with the checked one. Also feeds
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

/// Every frequent record, decoded each way the fast decoder has on this
/// processor (a window with no per-read checks, with `pext`, sixteen fields
/// at a time), gives what the checked reads give: the same fields, or an
/// error.
fn windowed_agrees(file: &[u8]) {
    use gmem_prof_traces::{fast, TraceReader};
    let Ok(mut reader) = TraceReader::new(file) else {
        return;
    };
    while let Some(chunk) = reader.next_chunk() {
        let Ok(payload) = chunk.payload() else {
            continue;
        };
        if let Err(e) = fast::cross_check(&payload) {
            panic!("{e}");
        }
    }
}
