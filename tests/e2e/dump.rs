//! `dump` and `symbolize` on real traces, golden dumps, and bad input.

use std::path::Path;
use std::process::Command;

use gmem_prof_traces::record::{Nanos, ProcessEnd, StringDef, StringId};
use gmem_prof_traces::{Record, TraceWriter};

use crate::util::*;

fn dump_text(trace: &Path) -> (i32, String, String) {
    let out = Command::new(gmem())
        .arg("dump")
        .arg(trace)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr(&out),
    )
}

/// Golden dumps of real traces, one directory per format version, kept
/// forever: a later gmem-prof must read every old trace the same way.
/// Re-bless with GMEM_PROF_BLESS=1 (and review the diff).
#[test]
fn dumps_of_sample_traces_match_their_golden_files() {
    for name in ["kinds", "pools", "vmm", "oom", "children", "graph"] {
        let (code, text, err) = dump_text(&sample(&format!("{name}.bin")));
        assert_eq!(code, 0, "{err}");
        let golden = repo().join(format!("tests/golden/v1/{name}.dump"));
        if std::env::var_os("GMEM_PROF_BLESS").is_some() {
            std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
            std::fs::write(&golden, &text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden)
            .unwrap_or_else(|_| panic!("{} missing: run with GMEM_PROF_BLESS=1", golden.display()));
        assert!(
            want == text,
            "dump of {name}.bin differs from {}",
            golden.display()
        );
    }
}

#[test]
fn dump_prints_one_line_per_record() {
    let (code, text, _) = dump_text(&sample("kinds.bin"));
    assert_eq!(code, 0);
    let recs = dump_json(&sample("kinds.bin"));
    assert_eq!(text.lines().count(), recs.len());
    assert!(text.lines().all(|l| l.starts_with("s0 ")));
}

/// `--json` adds where a record sits (`trace_stream`, `trace_file`) without
/// replacing the record's own fields of the same kind: a launch's CUDA
/// stream, a Python code object's file.
#[test]
fn json_dump_keeps_the_records_own_fields() {
    let (_, text, _) = dump_text(&sample("kinds_launches.bin"));
    let text_streams: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("s0 kernel_launch "))
        .filter_map(|l| l.split(" stream=").nth(1)?.split(' ').next()?.parse().ok())
        .collect();
    let recs = dump_json(&sample("kinds_launches.bin"));
    let json_streams: Vec<u64> = of_type(&recs, "KernelLaunch")
        .iter()
        .map(|k| k["stream"].as_u64().unwrap())
        .collect();
    assert_eq!(json_streams.len(), 3);
    assert_eq!(json_streams, text_streams);
    assert!(json_streams.iter().all(|s| *s != 0), "{json_streams:?}");
    assert!(recs.iter().all(|r| r["trace_stream"] == 0));

    let out = Command::new(gmem())
        .args(["dump", "--json"])
        .arg(sample("kinds_launches.bin"))
        .arg(sample("torch_leak.bin"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let both: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let files = |recs: &[serde_json::Value]| -> Vec<String> {
        recs.iter()
            .filter(|r| r["type"] == "PyCode")
            .map(|r| r["file"].as_str().unwrap().to_string())
            .collect()
    };
    let second: Vec<_> = both
        .iter()
        .filter(|r| r["trace_file"] == 1)
        .cloned()
        .collect();
    let alone = files(&dump_json(&sample("torch_leak.bin")));
    assert!(!alone.is_empty());
    assert_eq!(files(&second), alone);
    assert_eq!(both.len() - second.len(), recs.len());
}

// torch_async.bin is written in the collector's chunks (15 of them): a
// trace to cut and to damage.

#[test]
fn a_truncated_trace_reads_up_to_its_last_whole_chunk_with_a_warning() {
    let dir = scratch("truncated");
    let whole = sample("torch_async.bin");
    let data = std::fs::read(&whole).unwrap();
    let cut = dir.join("cut.bin");
    std::fs::write(&cut, &data[..data.len() * 2 / 3]).unwrap();
    let (code, text, err) = dump_text(&cut);
    let (_, full, _) = dump_text(&whole);
    assert_eq!(code, 0);
    assert!(err.contains("cut short"), "{err}");
    assert!(!text.is_empty() && full.starts_with(&text));
}

#[test]
fn a_damaged_chunk_is_skipped_and_the_rest_is_read() {
    let dir = scratch("damaged");
    let whole = sample("torch_async.bin");
    let mut data = std::fs::read(&whole).unwrap();
    let at = data.len() / 2;
    data[at] ^= 0x55;
    let bad = dir.join("bad.bin");
    std::fs::write(&bad, &data).unwrap();
    let (code, text, err) = dump_text(&bad);
    let (_, full, _) = dump_text(&whole);
    assert_eq!(code, 0);
    assert!(err.contains("damaged chunk"), "{err}");
    // What is lost is the damaged chunk's records, one run of them: every
    // record before it and after it is read.
    let (text, full): (Vec<&str>, Vec<&str>) = (text.lines().collect(), full.lines().collect());
    assert!(text.len() < full.len(), "nothing lost");
    let before = text.iter().zip(&full).take_while(|(a, b)| a == b).count();
    let after = text[before..]
        .iter()
        .rev()
        .zip(full.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    assert_eq!(
        before + after,
        text.len(),
        "records outside the damaged chunk were lost or changed"
    );
    assert!(before > 0 && after > 0, "{before} before, {after} after");
}

#[test]
fn empty_garbage_and_future_files_are_refused_with_exit_2() {
    let dir = scratch("garbage");
    let cases: [(&str, Vec<u8>, &str); 3] = [
        ("empty.bin", vec![], "empty"),
        (
            "text.bin",
            b"this is not a trace at all".to_vec(),
            "not a gmem-prof trace",
        ),
        (
            "future.bin",
            {
                let mut h = gmem_prof_traces::file_header().to_vec();
                h[8] = 200;
                h
            },
            "version 200",
        ),
    ];
    for (name, bytes, msg) in cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let (code, _, err) = dump_text(&p);
        assert_eq!(code, 2, "{name}");
        assert!(err.contains(msg), "{name}: {err}");
    }
    let (code, _, err) = dump_text(&dir.join("missing.bin"));
    assert_eq!(code, 2);
    assert!(err.contains("missing.bin"), "{err}");
}

#[test]
fn hostile_strings_stay_on_one_quoted_line() {
    let dir = scratch("hostile");
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.push(&Record::String(StringDef {
        id: StringId(1),
        text: "k\n<script>alert(1)</script>\u{1b}[31m".into(),
    }))
    .unwrap();
    w.push(&Record::ProcessEnd(ProcessEnd { time: Nanos(1) }))
        .unwrap();
    let p = dir.join("hostile.bin");
    std::fs::write(&p, w.finish().unwrap()).unwrap();
    let (code, text, _) = dump_text(&p);
    assert_eq!(code, 0);
    assert_eq!(text.lines().count(), 3);
    assert!(
        text.contains(r#"text="k\n<script>alert(1)</script>\u{1b}[31m""#),
        "{text}"
    );
}

#[test]
fn directories_of_per_process_files_are_read_like_files() {
    let dir = scratch("dir");
    std::fs::copy(sample("kinds.bin"), dir.join("a.bin")).unwrap();
    std::fs::copy(sample("vmm.bin"), dir.join("b.bin")).unwrap();
    std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
    let (code, text, _) = dump_text(&dir);
    assert_eq!(code, 0);
    assert!(text.contains("# file 0:") && text.contains("# file 1:"));
    let merged = dir.join("merged.out");
    let out = Command::new(gmem())
        .arg("symbolize")
        .arg(&dir)
        .arg("-o")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = dump_json(&merged);
    assert_eq!(of_type(&recs, "Process").len(), 2);
    // Stacks are re-resolved here, where the GPU machine's binaries do not
    // exist: frames stay unresolved (module+offset), the merge still works.
    assert!(stderr(&out).contains("stay unresolved"), "{}", stderr(&out));
}

/// `gmem-prof … | head`: a reader that stops reading ends every command
/// quietly with exit 0 (dump used to end with "Broken pipe" and exit 2).
#[test]
fn a_closed_pipe_on_stdout_ends_every_command_quietly() {
    let dir = scratch("closed-pipe");
    let leak = sample("torch_leak.bin");
    let grown = sample("torch_growth_leak.bin");
    let json = dir.join("a.json");
    let html = dir.join("report");
    let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["dump".as_ref(), leak.as_os_str()],
        vec![
            "report".as_ref(),
            leak.as_os_str(),
            "-o".as_ref(),
            html.as_os_str(),
        ],
        vec![
            "check".as_ref(),
            leak.as_os_str(),
            "--max-ooms".as_ref(),
            "0".as_ref(),
        ],
        vec!["diff".as_ref(), leak.as_os_str(), grown.as_os_str()],
        vec![
            "export".as_ref(),
            leak.as_os_str(),
            "--format".as_ref(),
            "json".as_ref(),
            "-o".as_ref(),
            json.as_os_str(),
        ],
    ];
    for args in commands {
        let mut child = Command::new(gmem())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Close the reading end before the command writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("Broken pipe") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}
