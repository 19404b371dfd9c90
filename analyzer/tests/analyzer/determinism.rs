//! The same analysis whatever the thread count, and however far decoding
//! runs ahead of the sweep (which depends on timing).

use crate::util::*;

/// The analysis as JSON, made on a pool of `threads` threads.
fn on_threads<F: FnOnce() -> String + Send>(threads: usize, f: F) -> String {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

#[test]
fn a_recorded_trace_gives_the_same_analysis_on_any_thread_count() {
    let path = repo().join("traces/samples/torch_async.bin");
    let run = || {
        let a = gmem_prof_analyzer::analyze_files(std::slice::from_ref(&path), &Default::default())
            .unwrap();
        serde_json::to_string(&a).unwrap()
    };
    assert_eq!(on_threads(1, run), on_threads(4, run));
}

/// Three processes read together (three files, so three streams), long
/// enough for many batches of chunks each and of different lengths, so the
/// schedule moves between streams and decoding runs ahead by different
/// amounts on one, two and four threads.
#[test]
fn several_long_streams_give_the_same_analysis_on_any_thread_count() {
    let traces: Vec<Vec<u8>> = [500_000, 300_000, 80_000]
        .iter()
        .map(|&events| {
            let mut data = Vec::new();
            gmem_prof_analyzer::synth::write_trace(&mut data, events).unwrap();
            data
        })
        .collect();
    let datas: Vec<&[u8]> = traces.iter().map(|t| &t[..]).collect();
    let names: Vec<String> = (0..datas.len()).map(|i| format!("p{i}.bin")).collect();
    let run = || {
        let a = gmem_prof_analyzer::analyze(&datas, &names, &Default::default()).unwrap();
        assert_eq!(a.processes.len(), 3);
        assert!(a.input.chunks > 12 * 16, "{} chunks", a.input.chunks);
        serde_json::to_string(&a).unwrap()
    };
    let one = on_threads(1, run);
    assert_eq!(one, on_threads(2, run));
    assert_eq!(one, on_threads(4, run));
}
