//! Python frames and PyTorch's caching allocator, over the fake CUPTI and
//! driver (tests/fake_cupti): Python programs that allocate through ctypes
//! from lines they mark, and the stand-in for libc10_cuda.so. What real
//! PyTorch and CUDA do is checked on the GPU machine
//! (tests/gpu/framework_check.py) and in the real samples (`samples`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::util::*;

/// The CPython interpreters this machine has, one per minor version:
/// `python3`, any 3.8 to 3.15 under pyenv or /usr/bin (3.8 and 3.9, which
/// the collector does not read, test that it says so and goes on), and
/// those `.ci/pythons.sh` fetched into `$GMEM_PROF_TEST_PYTHONS`.
fn pythons() -> Vec<(String, PathBuf)> {
    let mut candidates: Vec<PathBuf> = vec![PathBuf::from("python3")];
    let home = std::env::var("HOME").unwrap_or_default();
    let fetched = std::env::var_os("GMEM_PROF_TEST_PYTHONS").map(PathBuf::from);
    for minor in 8..=15 {
        candidates.push(PathBuf::from(format!("/usr/bin/python3.{minor}")));
        if let Some(dir) = &fetched {
            candidates.push(dir.join(format!("bin/python3.{minor}")));
        }
        if let Ok(dirs) = std::fs::read_dir(format!("{home}/.pyenv/versions")) {
            let mut found: Vec<PathBuf> = dirs
                .flatten()
                .map(|d| d.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&format!("3.{minor}.")))
                })
                .map(|p| p.join("bin/python3"))
                .collect();
            found.sort();
            candidates.extend(found);
        }
    }
    let mut by_version: Vec<(String, PathBuf)> = Vec::new();
    for c in candidates {
        let Ok(out) = Command::new(&c)
            .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            .output()
        else {
            continue;
        };
        let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !by_version.iter().any(|(x, _)| *x == v) {
            by_version.push((v, c));
        }
    }
    by_version
}

/// PyCode records by (stream, id).
fn codes(recs: &[Value]) -> HashMap<(u64, u64), &Value> {
    of_type(recs, "PyCode")
        .into_iter()
        .map(|c| {
            (
                (
                    c["trace_stream"].as_u64().unwrap(),
                    c["id"].as_u64().unwrap(),
                ),
                c,
            )
        })
        .collect()
}

/// A stack's frames: `Err(address)` for native ones, `Ok((function, file,
/// line))` for Python ones.
fn frames(recs: &[Value], stream: u64, stack: u64) -> Vec<Result<(String, String, u64), u64>> {
    let codes = codes(recs);
    let st = recs
        .iter()
        .find(|r| r["type"] == "Stack" && r["trace_stream"] == stream && r["id"] == stack)
        .unwrap_or_else(|| panic!("no stack {stack}"));
    st["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| match f.get("Python") {
            Some(p) => {
                let c = codes[&(stream, p["code"].as_u64().unwrap())];
                Ok((
                    c["function"].as_str().unwrap().to_string(),
                    c["file"].as_str().unwrap().to_string(),
                    p["line"].as_u64().unwrap(),
                ))
            }
            None => Err(f["Native"].as_u64().unwrap()),
        })
        .collect()
}

fn app() -> PathBuf {
    repo().join("tests/fake_cupti/fake_app.py")
}

/// Each interpreter's frames, innermost first, where its evaluation loop
/// ran them: for an allocation three calls deep, the functions and the
/// marked lines, with the native frames of ctypes and the fake driver
/// inside them and the interpreter's start-up outside; and a thread's own
/// frames.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario with its assertions in order"
)]
fn python_frames_name_the_marked_lines_on_every_interpreter() {
    let lines = marked_lines(&app());
    let found = pythons();
    assert!(!found.is_empty(), "no python3 on this machine");
    let versions: Vec<&str> = found.iter().map(|(v, _)| v.as_str()).collect();
    eprintln!("interpreters tested: {versions:?} (3.10 to 3.15 wherever present)");
    if std::env::var_os("GMEM_PROF_TEST_PYTHONS").is_some() {
        // Fetched to be tested (.ci/run): missing is a failure, not a skip.
        for v in ["3.14", "3.15"] {
            assert!(
                versions.contains(&v),
                "{v} not found in GMEM_PROF_TEST_PYTHONS"
            );
        }
    }
    for (version, python) in &found {
        let supported =
            ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"].contains(&version.as_str());
        let dir = scratch(&format!("py-frames-{version}"));
        let out = run(&mut record_python(
            &dir,
            "t.bin",
            &[],
            python,
            &[OsStr::new("frames")],
        ));
        assert_eq!(out.status.code(), Some(0), "{version}: {}", stderr(&out));
        let recs = dump_json(&dir.join("t.bin"));
        let calls: Vec<&Value> = of_type(&recs, "Api")
            .into_iter()
            .filter(|a| a["func"] == 1)
            .collect();
        assert_eq!(calls.len(), 2, "{version}: two allocations");
        let big = calls.iter().find(|a| a["bytes"] == 1 << 20).unwrap();
        let fr = frames(&recs, 0, big["stack"].as_u64().unwrap());
        let python: Vec<(String, u64)> = fr
            .iter()
            .filter_map(|f| f.as_ref().ok().map(|(func, _, line)| (func.clone(), *line)))
            .collect();
        if !supported {
            // A Python it cannot read: native frames and one warning.
            assert!(python.is_empty(), "{version}: {python:?}");
            let warned = of_type(&recs, "Message")
                .iter()
                .filter(|m| m["text"].as_str().unwrap().contains("native frames only"))
                .count();
            assert_eq!(warned, 1, "{version}");
            continue;
        }
        let layer = if version == "3.10" {
            "layer"
        } else {
            "Model.layer"
        };
        assert_eq!(
            python,
            vec![
                ("allocate".to_string(), lines["allocate"]),
                (layer.to_string(), lines["layer"]),
                ("main".to_string(), lines["main"]),
                ("<module>".to_string(), lines["module"]),
            ],
            "{version}"
        );
        let first_py = fr.iter().position(|f| f.is_ok()).unwrap();
        let last_py = fr.iter().rposition(|f| f.is_ok()).unwrap();
        assert!(
            first_py > 0,
            "{version}: native frames inside the Python ones"
        );
        assert!(
            last_py + 1 < fr.len(),
            "{version}: native frames outside them"
        );
        let files: Vec<&String> = fr
            .iter()
            .filter_map(|f| f.as_ref().ok().map(|p| &p.1))
            .collect();
        assert!(
            files.iter().all(|f| f.ends_with("fake_app.py")),
            "{version}: {files:?}"
        );
        // The thread's allocation: the lambda, then threading's frames.
        let small = calls.iter().find(|a| a["bytes"] == 4096).unwrap();
        let fr = frames(&recs, 0, small["stack"].as_u64().unwrap());
        let python: Vec<(String, u64)> = fr
            .iter()
            .filter_map(|f| f.as_ref().ok().map(|(func, _, line)| (func.clone(), *line)))
            .collect();
        assert_eq!(
            python[0],
            ("allocate".to_string(), lines["allocate"]),
            "{version}"
        );
        assert!(
            python[1].0.ends_with("<lambda>") && python[1].1 == lines["thread"],
            "{version}: {python:?}"
        );
        assert!(
            python.iter().any(|(f, _)| f.ends_with("_bootstrap")),
            "{version}: {python:?}"
        );
        // The report names the lines.
        let out = Command::new(gmem())
            .args(["report", "-q", "-o"])
            .arg(dir.join("r"))
            .arg(dir.join("t.bin"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let a: Value =
            serde_json::from_slice(&std::fs::read(dir.join("r/t.json")).unwrap()).unwrap();
        // `allocate` has two callers: each call path is a site of its own,
        // with its own bytes, labelled by the helper's line and its caller.
        let by_label = |label: String| {
            a["sites"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["label"] == label.as_str())
                .unwrap_or_else(|| panic!("{version}: no {label} in {}", a["sites"]))
                .clone()
        };
        let helper = format!("allocate at fake_app.py:{}", lines["allocate"]);
        let from_layer = by_label(format!(
            "{helper}, called from {layer} at fake_app.py:{}",
            lines["layer"]
        ));
        assert_eq!(from_layer["total_bytes"], 1 << 20, "{version}");
        // 3.10 has no qualified names.
        let lambda = if version == "3.10" {
            "<lambda>"
        } else {
            "main.<locals>.<lambda>"
        };
        let thread = by_label(format!(
            "{helper}, called from {lambda} at fake_app.py:{}",
            lines["thread"]
        ));
        assert_eq!(thread["total_bytes"], 4096, "{version}");
    }
}

/// Code other than plain calls, on every interpreter (fake_app.py
/// `shapes`): each allocation's Python frames, innermost first, name the
/// functions and marked lines of the program (the standard library's
/// frames of asyncio and threading left out of the comparison), and sit
/// inside the native frames, with native frames on both sides; a
/// recursion deeper than the frames a stack keeps keeps its innermost
/// ones, says it was cut, and is placed where it ran too.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario with its assertions in order"
)]
fn python_frames_of_generators_coroutines_and_deep_recursion() {
    let lines = marked_lines(&app());
    let supported: Vec<(String, PathBuf)> = pythons()
        .into_iter()
        .filter(|(v, _)| !["3.8", "3.9"].contains(&v.as_str()))
        .collect();
    assert!(!supported.is_empty(), "no python3 of 3.10 or later");
    let at = |function: &str, mark: &str| (function.to_string(), lines[mark]);
    let expected: Vec<(u64, Vec<(String, u64)>)> = vec![
        (
            1001,
            vec![
                at("allocate", "allocate"),
                at("generate", "generator"),
                at("shapes", "consumer"),
            ],
        ),
        (
            1002,
            vec![
                at("allocate", "allocate"),
                at("generate", "generator"),
                at("<lambda>", "resumed"),
            ],
        ),
        (
            1003,
            vec![
                at("allocate", "allocate"),
                at("coroutine", "coroutine"),
                at("shapes", "asyncio"),
            ],
        ),
        (
            1004,
            vec![
                at("allocate", "allocate"),
                at("comprehension", "comprehension"),
                at("shapes", "comprehend"),
            ],
        ),
        (
            1005,
            vec![
                at("allocate", "allocate"),
                at("decorated", "decorated"),
                at("wrapper", "wrapper"),
                at("shapes", "decorate"),
            ],
        ),
        (
            1006,
            vec![
                at("allocate", "allocate"),
                at("in_with", "with"),
                at("shapes", "call_with"),
            ],
        ),
        (
            1008,
            vec![
                at("allocate", "allocate"),
                at("in_handler", "except"),
                at("shapes", "handle"),
            ],
        ),
        (
            1010,
            vec![
                at("allocate", "allocate"),
                at("Body", "class"),
                at("shapes", "classdef"),
            ],
        ),
        (
            1011,
            vec![
                at("allocate", "allocate"),
                ("<module>".to_string(), 1),
                at("shapes", "exec"),
            ],
        ),
    ];
    for (version, python) in &supported {
        let dir = scratch(&format!("py-shapes-{version}"));
        let out = run(&mut record_python(
            &dir,
            "t.bin",
            &[],
            python,
            &[OsStr::new("shapes")],
        ));
        assert_eq!(out.status.code(), Some(0), "{version}: {}", stderr(&out));
        let recs = dump_json(&dir.join("t.bin"));
        let stack_of = |bytes: u64| {
            let call = of_type(&recs, "Api")
                .into_iter()
                .find(|a| a["func"] == 1 && a["bytes"] == bytes)
                .unwrap_or_else(|| panic!("{version}: no allocation of {bytes} bytes"));
            let id = call["stack"].as_u64().unwrap();
            let truncated = recs
                .iter()
                .any(|r| r["type"] == "Stack" && r["id"] == id && r["truncated"] == true);
            (frames(&recs, 0, id), truncated)
        };
        // The program's frames: its own file and exec's, by the last part
        // of their name (3.10 has no qualified names), up to `shapes`;
        // 3.10 and 3.11 run a comprehension in a frame of its own.
        let own = |fr: &[Result<(String, String, u64), u64>]| -> Vec<(String, u64)> {
            let mut own = Vec::new();
            for (function, file, line) in fr.iter().filter_map(|f| f.as_ref().ok()) {
                let name = function.rsplit('.').next().unwrap().to_string();
                if !(file.ends_with("fake_app.py") || file == "<generated>") || name == "<listcomp>"
                {
                    continue;
                }
                own.push((name.clone(), *line));
                if name == "shapes" {
                    break;
                }
            }
            own
        };
        // Native frames inside the Python ones (ctypes, the driver) and
        // outside them (the interpreter's start-up).
        let placed = |fr: &[Result<(String, String, u64), u64>], what: &str| {
            let first = fr.iter().position(|f| f.is_ok()).unwrap();
            let last = fr.iter().rposition(|f| f.is_ok()).unwrap();
            assert!(first > 0, "{version} {what}: no native frame inside");
            assert!(
                last + 1 < fr.len(),
                "{version} {what}: no native frame outside"
            );
        };
        for (bytes, want) in &expected {
            let (fr, truncated) = stack_of(*bytes);
            assert_eq!(
                &own(&fr),
                want,
                "{version}: the allocation of {bytes} bytes"
            );
            assert!(!truncated, "{version}: {bytes}");
            placed(&fr, &bytes.to_string());
        }
        // 300 calls deep: the innermost 256 Python frames (the
        // collector's MAX_PYTHON_FRAMES), cut.
        let (fr, truncated) = stack_of(1007);
        assert!(truncated, "{version}: the deep stack is not marked cut");
        let python: Vec<(String, u64)> = fr
            .iter()
            .filter_map(|f| f.as_ref().ok())
            .map(|(function, _, line)| (function.clone(), *line))
            .collect();
        assert_eq!(python.len(), 256, "{version}");
        assert_eq!(
            python[..2],
            [at("allocate", "allocate"), at("recurse", "recursed")],
            "{version}"
        );
        assert!(
            python[2..].iter().all(|f| *f == at("recurse", "recurse")),
            "{version}"
        );
        if version != "3.10" {
            // (3.10 runs each Python call in native frames of its own, so
            // there the native walk is cut inside the recursion too.)
            placed(&fr, "the deep stack");
        }
    }
}

/// A Python process that ends with `os._exit`, which runs no exit handler,
/// still completes its part of the trace (the bootstrap `record` puts on
/// the path calls the collector first): every allocation and the end are
/// there and the exit code passes through; so for multiprocessing workers
/// started by fork, which end that way, each using CUDA itself.
#[test]
fn processes_ending_with_os_exit_complete_their_part() {
    let dir = scratch("os-exit");
    let out = run(&mut record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[OsStr::new("os_exit")],
    ));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    assert_eq!(of_type(&recs, "ProcessEnd").len(), 1, "{}", stderr(&out));
    let allocations = of_type(&recs, "Api")
        .into_iter()
        .filter(|a| a["func"] == 1)
        .count();
    assert_eq!(allocations, 3);

    let lines = marked_lines(&app());
    let dir = scratch("fork-workers");
    let out = run(&mut record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[OsStr::new("fork_workers")],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("exit codes 0 0"));
    let recs = dump_json(&dir.join("t.bin"));
    let processes = of_type(&recs, "Process");
    assert_eq!(processes.len(), 2, "the two workers, not the parent");
    assert_eq!(of_type(&recs, "ProcessEnd").len(), 2, "{}", stderr(&out));
    // Each worker's allocations, each named by the worker's line.
    let mut per_worker = Vec::new();
    for p in &processes {
        let stream = p["trace_stream"].as_u64().unwrap();
        let calls: Vec<&Value> = of_type(&recs, "Api")
            .into_iter()
            .filter(|a| a["trace_stream"] == stream && a["func"] == 1)
            .collect();
        for a in &calls {
            let lines_seen: Vec<u64> = frames(&recs, stream, a["stack"].as_u64().unwrap())
                .iter()
                .filter_map(|f| f.as_ref().ok().map(|p| p.2))
                .collect();
            assert!(lines_seen.contains(&lines["worker"]), "{lines_seen:?}");
        }
        per_worker.push(calls.len());
    }
    per_worker.sort();
    assert_eq!(per_worker, [1, 2]);
    // And the report does not call them cut short.
    let summary = report_summary(&dir.join("t.bin"), &dir);
    assert!(!summary.contains("NOT PROFILED"), "{summary}");
}

/// With --no-python, stacks carry no Python frame.
#[test]
fn no_python_leaves_stacks_native() {
    let dir = scratch("no-python");
    let mut cmd = record_python(
        &dir,
        "t.bin",
        &["--no-python"],
        Path::new("python3"),
        &[OsStr::new("frames")],
    );
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    assert!(of_type(&recs, "PyCode").is_empty());
    assert!(!of_type(&recs, "Stack").is_empty());
}

/// `gmem_prof_set_recording`, the hook benchmarks use to alternate
/// recorded and unrecorded steps in one process: while paused, neither the
/// driver calls' callbacks nor the caching allocator's events are recorded;
/// pausing twice or resuming twice does nothing the second time; the trace
/// says when (fake_app.py `paused`).
#[test]
fn the_program_can_pause_and_resume_recording() {
    let dir = scratch("paused");
    let out = run(&mut record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[OsStr::new("paused"), fake_torch().as_os_str()],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("answers 1 0 1 0"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let recs = dump_json(&dir.join("t.bin"));
    let calls: Vec<u64> = of_type(&recs, "Api")
        .iter()
        .filter_map(|c| c["bytes"].as_u64())
        .filter(|b| *b % (1 << 20) == 0 && *b <= 3 << 20)
        .collect();
    assert_eq!(calls, [1 << 20, 3 << 20], "driver allocations recorded");
    let tensors: Vec<u64> = of_type(&recs, "AllocatorEvent")
        .iter()
        .filter(|e| e["action"] == 1)
        .filter_map(|e| e["bytes"].as_u64())
        .collect();
    assert_eq!(tensors, [1000, 3000], "tensors recorded");
    let notes: Vec<&str> = of_type(&recs, "Message")
        .iter()
        .filter_map(|m| m["text"].as_str())
        .filter(|t| t.starts_with("recording "))
        .collect();
    assert_eq!(
        notes,
        [
            "recording paused by the program",
            "recording resumed by the program"
        ]
    );
}

/// The collector attaches to the stand-in caching allocator (symbols from
/// its file, vtable checked, std::function built by hand) and records
/// what it reports, each with the Python line that caused it; the
/// analysis rebuilds the allocator's state from that.
/// `record FLAGS -o DIR/t.bin` of fake_app.py's `torch` scenario over the
/// stand-in for PyTorch's allocator.
fn record_fake_torch(dir: &Path, flags: &[&str]) -> Command {
    record_python(
        dir,
        "t.bin",
        flags,
        Path::new("python3"),
        &[OsStr::new("torch"), fake_torch().as_os_str()],
    )
}

#[test]
fn records_and_analyzes_the_caching_allocator_of_the_stand_in() {
    let lines = marked_lines(&app());
    let dir = scratch("fake-torch");
    let out = run(&mut record_fake_torch(&dir, &[]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    let attached = of_type(&recs, "Allocator");
    assert_eq!(attached.len(), 1, "{attached:?}");
    assert_eq!(attached[0]["attached"], true, "{attached:?}");
    assert!(attached[0]["detail"]
        .as_str()
        .unwrap()
        .contains("2.11.0+fake"));
    let events = of_type(&recs, "AllocatorEvent");
    let actions: Vec<u64> = events
        .iter()
        .map(|e| e["action"].as_u64().unwrap())
        .collect();
    // segment alloc; 3 × alloc; alloc, free (requested and completed in
    // one call, one record); snapshot; oom, oom report; segment free
    // (fake_app.py `torch`).
    assert_eq!(actions, vec![4, 1, 1, 1, 1, 11, 10, 8, 9, 5], "{events:?}");
    let line_of = |e: &Value| -> Option<u64> {
        let stack = e["stack"].as_u64().unwrap();
        if stack == 0 {
            return None;
        }
        frames(&recs, 0, stack)
            .into_iter()
            .find_map(|f| f.ok())
            .map(|p| p.2)
    };
    assert_eq!(
        line_of(events[0]),
        Some(lines["tensor"]),
        "the segment's request"
    );
    assert_eq!(line_of(events[1]), Some(lines["tensor"]));
    assert_eq!(line_of(events[5]), None, "frees carry no stack");
    assert_eq!(line_of(events[7]), Some(lines["oom"]));
    assert_eq!(line_of(events[9]), Some(lines["empty_cache"]));
    assert_eq!(events[7]["device_free"], 100 << 20);
    assert_eq!(events[8]["limit"], 8u64 << 30);
    // Segments are driver allocations of the same address and size.
    assert_eq!(events[0]["address"], of_type(&recs, "Memory")[0]["address"]);

    let out = Command::new(gmem())
        .args(["export", "-q", "--format", "json", "-o"])
        .arg(dir.join("a.json"))
        .arg(dir.join("t.bin"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let a: Value = serde_json::from_slice(&std::fs::read(dir.join("a.json")).unwrap()).unwrap();
    let v = &a["frameworks"][0];
    const MIB: u64 = 1 << 20;
    assert_eq!(
        v["allocated_peak"],
        13 * MIB,
        "3 × 4 MiB kept and 1 MiB freed"
    );
    assert_eq!(v["reserved_peak"], 20 * MIB);
    assert_eq!(v["tensors_allocated"], 4);
    assert_eq!(v["tensors_freed"], 1);
    assert_eq!(v["segments"]["matched"], 1);
    assert_eq!(v["segments"]["reported"], 1);
    // At the snapshot: the segment holds 12 MiB of tensors and one 8 MiB hole.
    let snap = &v["snapshots"][0]["pools"][0];
    assert_eq!(snap["free_bytes"], 8 * MIB, "{snap}");
    assert_eq!(snap["largest_free_bytes"], 8 * MIB, "{snap}");
    let oom = &v["ooms"][0];
    assert_eq!(oom["requested_bytes"], 1u64 << 30);
    assert_eq!(oom["limit_bytes"], 8u64 << 30);
    assert_eq!(oom["allocated_bytes"], 12 * MIB);
    assert_eq!(oom["free_in_segments"], 8 * MIB);
    let label = |id: &Value| a["tensor_sites"][id.as_u64().unwrap() as usize]["label"].clone();
    assert_eq!(
        label(&oom["site"]),
        format!("torch at fake_app.py:{}", lines["oom"]).as_str()
    );
    // The helper `tensor` has two callers: its bytes go to each call path
    // (3 × 4 MiB kept from one line, 1 MiB freed from the other), each
    // labelled by the helper's line and its caller.
    let helper = format!("torch.<locals>.tensor at fake_app.py:{}", lines["tensor"]);
    let peak = &v["peak_sites"][0];
    let kept = label(&peak["site"]);
    let kept = kept.as_str().unwrap();
    assert!(
        kept.starts_with(&format!("{helper}, called from ")),
        "{kept}"
    );
    assert!(
        kept.ends_with(&format!("fake_app.py:{}", lines["kept"])),
        "{kept}"
    );
    assert_eq!(peak["bytes"], 12 * MIB);
    let temporary = a["tensor_sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["label"].as_str().unwrap().starts_with(&helper) && s["label"] != kept)
        .unwrap();
    assert_eq!(
        temporary["label"],
        format!(
            "{helper}, called from torch at fake_app.py:{}",
            lines["temporary"]
        )
        .as_str()
    );
    assert_eq!(temporary["total_bytes"], MIB);
    assert_eq!(temporary["count"], 1);
    // empty_cache gave the segment back (with the tensors still in it: the
    // stand-in does not check).
    assert_eq!(v["segments_freed"], 1);
    assert_eq!(v["at_exit"]["reserved_bytes"], 0);
    // --max-ooms counts the allocator's error.
    let out = Command::new(gmem())
        .args(["check", "--max-ooms", "0"])
        .arg(dir.join("t.bin"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `--tensor-stacks`: which frames tensor events take on a thread running
/// Python, on one without, and on one evaluating an autograd node
/// (fake_app.py `torch_threads`: a tensor from Python, two from a native
/// thread, then one from a thread inside a backward node and one from it
/// outside any node).
#[test]
fn tensor_stacks_choose_the_frames_of_each_thread() {
    let lines = marked_lines(&app());
    let lib = fake_torch();
    // (mode, Python thread's tensor: native frames?, native thread's
    // tensors: a stack?, the node's tensor: the node alone?)
    for (mode, python_thread_native, native_thread_stack, node_alone) in [
        ("auto", false, true, true),
        ("python", false, false, true),
        ("all", true, true, false),
    ] {
        let dir = scratch(&format!("tensor-stacks-{mode}"));
        let out = run(&mut record_python(
            &dir,
            "t.bin",
            &["--tensor-stacks", mode],
            Path::new("python3"),
            &[OsStr::new("torch_threads"), lib.as_os_str()],
        ));
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        // The node's references are all given back: only its owner's is
        // left after its evaluation, as without the collector.
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("node uses 1\n"),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let recs = dump_json(&dir.join("t.bin"));
        let allocs: Vec<&Value> = of_type(&recs, "AllocatorEvent")
            .into_iter()
            .filter(|e| e["action"] == 1)
            .collect();
        assert_eq!(allocs.len(), 5, "{mode}: {allocs:?}");
        let stack = |e: &Value| {
            if e["stack"] == 0 {
                vec![]
            } else {
                frames(&recs, 0, e["stack"].as_u64().unwrap())
            }
        };
        // The Python thread's tensor: its line always; native frames only
        // with `all`.
        let first = stack(allocs[0]);
        assert!(
            first
                .iter()
                .any(|f| matches!(f, Ok((_, _, l)) if *l == lines["python_thread"])),
            "{mode}: {first:?}"
        );
        assert_eq!(
            first.iter().any(|f| f.is_err()),
            python_thread_native,
            "{mode}: {first:?}"
        );
        // The native threads' tensors outside any node: their native
        // frames, or no stack at all.
        for e in [allocs[1], allocs[2], allocs[4]] {
            assert_ne!(e["tid"], allocs[0]["tid"], "{mode}");
            let frames = stack(e);
            assert_eq!(!frames.is_empty(), native_thread_stack, "{mode}: {e}");
            assert!(frames.iter().all(|f| f.is_err()), "{mode}: {frames:?}");
        }
        // The node's tensor: the node, named by its class, instead of a
        // walk; with `all`, the native frames.
        let node = stack(allocs[3]);
        let named = Ok((
            "N5torch8autograd9generated14AddmmBackward0E".to_string(),
            "<autograd>".to_string(),
            0,
        ));
        if node_alone {
            assert_eq!(node, vec![named], "{mode}");
        } else {
            assert!(
                !node.is_empty() && node.iter().all(|f| f.is_err()),
                "{mode}: {node:?}"
            );
        }
    }
}

/// A CUDA library's workspace that the caching allocator hands out on a
/// thread running Python (fake_app.py `torch_workspace`: the stand-in
/// libtorch_cuda's `getCUDABlasLtWorkspace` asks for 1 MiB once, and two
/// matmuls keep 2 MiB of output each, all from the same Python line) is
/// the library's, not a tensor left live: by default its stack is walked
/// whole because the allocator's caller holds the workspace function, and
/// only its stack; with `--tensor-stacks python` no native frame says so.
#[test]
fn a_library_workspace_from_python_is_the_librarys() {
    let lines = marked_lines(&app());
    let lib = fake_torch();
    for (mode, library_bytes) in [("auto", 1u64 << 20), ("python", 0)] {
        let dir = scratch(&format!("workspace-{mode}"));
        let out = run(&mut record_python(
            &dir,
            "t.bin",
            &["--tensor-stacks", mode],
            Path::new("python3"),
            &[OsStr::new("torch_workspace"), lib.as_os_str()],
        ));
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        let recs = dump_json(&dir.join("t.bin"));
        let allocs: Vec<&Value> = of_type(&recs, "AllocatorEvent")
            .into_iter()
            .filter(|e| e["action"] == 1)
            .collect();
        assert_eq!(allocs.len(), 3, "{mode}: {allocs:?}");
        // Every block names the program's line; only the workspace, and
        // only by default, carries native frames.
        for (i, e) in allocs.iter().enumerate() {
            let functions = stack_functions(&recs, 0, e["stack"].as_u64().unwrap());
            let stack = frames(&recs, 0, e["stack"].as_u64().unwrap());
            assert!(
                stack
                    .iter()
                    .any(|f| matches!(f, Ok((_, _, l)) if *l == lines["matmul"])),
                "{mode} {i}: {stack:?}"
            );
            let native = stack.iter().any(|f| f.is_err());
            assert_eq!(
                native,
                mode == "auto" && i == 0,
                "{mode} {i}: {functions:?}"
            );
            if native {
                assert!(
                    functions
                        .iter()
                        .any(|f| f.contains("getCUDABlasLtWorkspace")),
                    "{functions:?}"
                );
            }
        }
        let a = export_json(&dir.join("t.bin"), &dir);
        let e = &a["frameworks"][0]["at_exit"];
        assert_eq!(e["library_bytes"], library_bytes, "{mode}: {e}");
        assert_eq!(
            e["live_tensor_bytes"],
            (4u64 << 20) + (1 << 20) - library_bytes,
            "{mode}: {e}"
        );
        // The workspace is named as one; the line's own tensors are one
        // site, not numbered as call paths beside it.
        let labels: Vec<&str> = a["tensor_sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["label"].as_str().unwrap())
            .collect();
        let line = format!("fake_app.py:{}", lines["matmul"]);
        let workspace = "CUDA library workspace (at::cuda::getCUDABlasLtWorkspace) under ";
        assert_eq!(
            labels
                .iter()
                .filter(|l| l.starts_with(workspace) && l.ends_with(&line))
                .count(),
            usize::from(mode == "auto"),
            "{mode}: {labels:?}"
        );
        assert!(
            labels.iter().all(|l| !l.contains("call path")),
            "{mode}: {labels:?}"
        );
        // The collector's note says what its check found, and where it
        // looked: around the word a walk through the allocator's `allocate`
        // placed (the block's requester's return address), not the whole
        // 4 KiB above the entry.
        let notes: Vec<String> = of_type(&recs, "Message")
            .iter()
            .filter_map(|m| m["text"].as_str().map(String::from))
            .filter(|t| t.contains("CUDA library workspaces"))
            .collect();
        assert_eq!(
            notes.iter().any(|t| t.contains(": 1 found by their stack")
                && t.contains("where the caller of NativeCachingAllocator::allocate keeps")),
            mode == "auto",
            "{mode}: {notes:?}"
        );
    }
}

/// The collector attaches from a segment allocation of the caching
/// allocator itself (then its initialization is complete and no driver
/// lock is held), not from another CUDA allocation of the process.
#[test]
fn attaches_from_the_allocators_own_segment_allocation() {
    let lib = fake_torch();
    let dir = scratch("fake-torch-direct-first");
    let out = run(&mut record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[OsStr::new("torch_direct_first"), lib.as_os_str()],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    let calls = of_type(&recs, "Api");
    assert_eq!(calls.len(), 2, "the program's own 4 KiB, then the segment");
    let attached = of_type(&recs, "Allocator")[0]["time"].as_u64().unwrap();
    assert!(calls[0]["time"].as_u64().unwrap() < attached);
    assert!(attached >= calls[1]["time"].as_u64().unwrap());
    let events = of_type(&recs, "AllocatorEvent");
    assert_eq!(events[0]["action"], 4, "the first segment is still seen");
}

/// --no-frameworks leaves the allocator alone.
#[test]
fn no_frameworks_leaves_the_allocator_alone() {
    let dir = scratch("no-frameworks");
    let out = run(&mut record_fake_torch(&dir, &["--no-frameworks"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    assert!(of_type(&recs, "AllocatorEvent").is_empty());
    assert!(of_type(&recs, "Allocator").is_empty());
    assert_eq!(
        of_type(&recs, "Memory").len(),
        2,
        "the segment's alloc and free"
    );
}

/// PYTORCH_NO_CUDA_MEMORY_CACHING (set to anything) sends every tensor
/// straight to cudaMalloc, past the caching allocator and its trackers: the
/// collector leaves the allocator alone and says why, and `check` refuses to
/// pass a budget on tensors it cannot see (exit 3, as for a part of a run
/// not profiled) while the device's budgets are judged as ever.
#[test]
fn tensor_budgets_are_not_judged_where_tensors_are_unseen() {
    let dir = scratch("no-caching");
    let out = run(record_fake_torch(&dir, &[]).env("PYTORCH_NO_CUDA_MEMORY_CACHING", "0"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("PYTORCH_NO_CUDA_MEMORY_CACHING is set"),
        "{}",
        stderr(&out)
    );
    let trace = dir.join("t.bin");
    let recs = dump_json(&trace);
    let allocator = of_type(&recs, "Allocator");
    assert_eq!(allocator.len(), 1, "{allocator:?}");
    assert_eq!(allocator[0]["attached"], false);
    assert!(of_type(&recs, "AllocatorEvent").is_empty());
    let check = |args: &[&str]| run(Command::new(gmem()).arg("check").arg(&trace).args(args));
    let o = check(&["--max-allocated", "1TiB"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(3), "{text}");
    assert!(text.contains("its tensors are not seen"), "{text}");
    assert!(text.contains("PYTORCH_NO_CUDA_MEMORY_CACHING"), "{text}");
    let o = check(&["--max-tensors-at-exit", "1TiB"]);
    assert_eq!(o.status.code(), Some(3));
    let o = check(&["--max-allocated", "1TiB", "--allow-unprofiled"]);
    assert_eq!(o.status.code(), Some(0));
    let o = check(&["--max-peak", "1TiB"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // The report says so where the tensors' view would be.
    let summary = report_summary(&trace, &dir);
    assert!(
        summary
            .contains("PyTorch's caching allocator was not seen from the inside: caching is off"),
        "{summary}"
    );
    // The same program with caching on: its tensors are judged.
    let dir = scratch("caching");
    let out = run(&mut record_fake_torch(&dir, &[]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let o = run(Command::new(gmem())
        .arg("check")
        .arg(dir.join("t.bin"))
        .args(["--max-allocated", "1TiB"]));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
