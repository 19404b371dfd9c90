//! `gmem-prof record` over fake CUDA programs (tests/fake_cupti): what the
//! CLI and the collector do around the program. What real CUDA reports is
//! tested on the GPU machine (tests/gpu).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn records_allocations_failures_kernels_and_stacks_and_passes_the_exit_code() {
    let dir = scratch("basic");
    let out = run(&mut record_cmd(&dir, "t.bin", &["basic", "7"]));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    assert_eq!(of_type(&recs, "Process").len(), 1);
    // fake_app.c `basic`: 3 × 1 MiB at site_alpha (2 freed), 2 × 4 KiB at
    // site_beta (both freed).
    assert_eq!(
        site_figures(&recs, 3, "site_alpha"),
        (3, 3 << 20, 2, 2 << 20)
    );
    assert_eq!(site_figures(&recs, 3, "site_beta"), (2, 8192, 2, 8192));
    let failed: Vec<_> = of_type(&recs, "Api")
        .into_iter()
        .filter(|a| a["result"] != 0)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["result"], 2);
    assert_eq!(failed[0]["bytes"], 1u64 << 41);
    let names = stack_functions(&recs, 0, failed[0]["stack"].as_u64().unwrap());
    assert!(names.iter().any(|n| n == "site_too_big"), "{names:?}");
    assert!(names.iter().any(|n| n == "main"), "{names:?}");
    // Kernels, by default as their launches.
    let kernels = of_type(&recs, "KernelLaunch");
    assert_eq!(kernels.len(), 2);
    let k_one = of_type(&recs, "String")
        .into_iter()
        .find(|s| s["text"] == "k_one")
        .unwrap();
    assert!(kernels.iter().all(|k| k["name"] == k_one["id"]));
    assert_eq!(of_type(&recs, "ProcessEnd").len(), 1);
    // One stack walk per allocation call, the failed one included; frees
    // take none. The collector says so, with what the walks cost.
    let stack_note = of_type(&recs, "Message")
        .into_iter()
        .filter_map(|m| m["text"].as_str().map(str::to_string))
        .find(|t| t.starts_with("stack capture:"));
    assert!(
        stack_note
            .as_deref()
            .is_some_and(|t| t.starts_with("stack capture: 6 walks, ")),
        "{stack_note:?}"
    );
    assert!(
        stderr(&out).contains("wrote t.bin: 1 process, 5 allocations, 1 out of memory"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn never_replaces_an_existing_trace_without_force() {
    let dir = scratch("overwrite");
    std::fs::write(dir.join("t.bin"), b"precious").unwrap();
    let out = run(&mut record_cmd(&dir, "t.bin", &["basic"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("exists"), "{}", stderr(&out));
    assert_eq!(std::fs::read(dir.join("t.bin")).unwrap(), b"precious");
    let out = run(record_cmd(&dir, "t.bin", &["basic"]).arg("--force"));
    // --force after `--` is the program's argument, not ours: still refused.
    assert_eq!(out.status.code(), Some(2));
    let f = fake();
    let out = Command::new(gmem())
        .current_dir(&dir)
        .args(["record", "--force", "-o", "t.bin", "--collector"])
        .arg(collector())
        .arg("--cupti")
        .arg(&f.cupti)
        .arg("--")
        .arg(&f.app)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_ne!(std::fs::read(dir.join("t.bin")).unwrap(), b"precious");
}

#[test]
fn default_output_names_never_collide() {
    let dir = scratch("names");
    let f = fake();
    for expected in ["trace.bin", "trace.1.bin", "trace.2.bin"] {
        let out = Command::new(gmem())
            .current_dir(&dir)
            .args(["record", "--collector"])
            .arg(collector())
            .arg("--cupti")
            .arg(&f.cupti)
            .arg("--")
            .arg(&f.app)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(dir.join(expected).is_file(), "{expected} missing");
    }
    // No leftovers: the per-process parts are removed after the merge.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn stdin_stdout_and_stderr_pass_through() {
    let dir = scratch("stdio");
    let mut child = record_cmd(&dir, "t.bin", &["echo"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello there\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "echo: hello there\n");
    assert!(stderr(&out).starts_with("to stderr\n"), "{}", stderr(&out));
}

/// Starts `record` in its own process group (as a shell's foreground job) and
/// waits until the program prints "ready".
fn start_in_own_group(dir: &std::path::Path, args: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = record_cmd(dir, "t.bin", args);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    child
}

/// Waits for a child of `start_in_own_group`; after a minute kills its group
/// and fails: a lost signal must fail the test, not hang the suite.
fn wait_or_fail(mut child: std::process::Child) -> std::process::Output {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            // SAFETY: killpg with our child's process group id.
            unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
            panic!("the program did not end within a minute of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn ctrl_c_reaches_the_program_and_the_trace_is_still_written() {
    let dir = scratch("sigint");
    let child = start_in_own_group(&dir, &["signal"]);
    // What a terminal does on Ctrl-C: SIGINT to the whole foreground group.
    // SAFETY: killpg with our child's process group id.
    unsafe { libc::killpg(child.id() as i32, libc::SIGINT) };
    let out = wait_or_fail(child);
    assert_eq!(
        out.status.code(),
        Some(40 + libc::SIGINT),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        site_figures(&dump_json(&dir.join("t.bin")), 3, "site_alpha").0,
        1
    );
}

#[test]
fn sigterm_sent_to_record_is_passed_to_the_program() {
    let dir = scratch("sigterm");
    let child = start_in_own_group(&dir, &["signal"]);
    // SAFETY: kill with our child's pid (gmem-prof itself).
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = wait_or_fail(child);
    assert_eq!(
        out.status.code(),
        Some(40 + libc::SIGTERM),
        "{}",
        stderr(&out)
    );
    assert!(dir.join("t.bin").is_file());
}

#[test]
fn sigkill_keeps_every_event_older_than_a_second() {
    let dir = scratch("sigkill");
    let log = dir.join("allocs.log");
    let child = record_cmd(&dir, "t.bin", &["forever", log.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    // The program is record's only child.
    let app = std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse::<i32>()
        .unwrap();
    let kill_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    // SAFETY: kill with the pid of record's child.
    unsafe { libc::kill(app, libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + libc::SIGKILL));
    // What the shell would have said, had gmem-prof not been between them.
    assert!(
        stderr(&out).contains("the program died of signal 9: Killed"),
        "{}",
        stderr(&out)
    );
    let recs = dump_json(&dir.join("t.bin"));
    let traced: std::collections::HashSet<u64> = of_type(&recs, "Memory")
        .iter()
        .filter(|m| m["alloc"] == true)
        .map(|m| m["address"].as_u64().unwrap())
        .collect();
    let logged: Vec<(u64, u64)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace().skip(1);
            Some((
                it.next()?.parse().ok()?,
                u64::from_str_radix(it.next()?, 16).ok()?,
            ))
        })
        .collect();
    let old: Vec<u64> = logged
        .iter()
        .filter(|(t, _)| *t + 1_000_000_000 < kill_ns)
        .map(|(_, a)| *a)
        .collect();
    assert!(old.len() > 50, "only {} old allocations", old.len());
    let missing = old.iter().filter(|a| !traced.contains(a)).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} allocations older than 1 s are missing",
        old.len()
    );
    assert!(of_type(&recs, "ProcessEnd").is_empty());
}

/// Ctrl-C while a trace is being written (here `symbolize`'s merge, as
/// `record`'s after the program ended) stops it: exit 2 with a message,
/// neither the output nor a half-written file left, the inputs kept.
#[test]
fn ctrl_c_while_writing_a_trace_leaves_nothing_half_written() {
    let dir = scratch("interrupt");
    let out = run(&mut record_cmd_with(
        &dir,
        "t.bin",
        &["--keep-parts"],
        &["bench", "300000"],
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let parts = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("t.bin.parts-"))
        .expect("the per-process files");
    let kept = crate::util::dir_bytes(&parts);
    let child = Command::new(gmem())
        .current_dir(&dir)
        .arg("symbolize")
        .arg(&parts)
        .args(["-o", "m.bin"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The merge writes m.tmp-PID first: once that is there, it is under way
    // (it takes about half a second on this input, in a debug build).
    let tmp = dir.join(format!("m.tmp-{}", child.id()));
    let started = Instant::now();
    while !tmp.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no merge started"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: kill with the pid of our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
    assert!(!tmp.exists(), "the half-written file is left");
    assert!(!dir.join("m.bin").exists());
    assert_eq!(crate::util::dir_bytes(&parts), kept, "the inputs are kept");
}

/// ApiFunc::MEM_FREE in the trace format.
const MEM_FREE: u64 = 20;

#[test]
fn free_calls_are_watched_only_with_free_stacks() {
    let dir = scratch("free_stacks");
    for (flags, free_calls, walks) in [(&[][..], 0, 6), (&["--free-stacks"][..], 4, 10)] {
        let out = run(&mut record_cmd_with(&dir, "t.bin", flags, &["basic"]));
        assert!(out.status.success(), "{flags:?}: {}", stderr(&out));
        let recs = dump_json(&dir.join("t.bin"));
        // fake_app.c `basic` frees 4 blocks with cuMemFree, all 4 released
        // in the activity records either way.
        assert_eq!(site_figures(&recs, 3, "site_alpha").2, 2, "{flags:?}");
        assert_eq!(site_figures(&recs, 3, "site_beta").2, 2, "{flags:?}");
        let frees: Vec<_> = of_type(&recs, "Api")
            .into_iter()
            .filter(|a| a["func"] == MEM_FREE)
            .collect();
        assert_eq!(frees.len(), free_calls, "{flags:?}");
        for f in &frees {
            let names = stack_functions(&recs, 0, f["stack"].as_u64().unwrap());
            assert!(names.iter().any(|n| n == "main"), "{names:?}");
        }
        let walks_note = format!("stack capture: {walks} walks, ");
        assert!(
            of_type(&recs, "Message").iter().any(|m| m["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(&walks_note))),
            "{flags:?}: no {walks_note:?}"
        );
        std::fs::remove_file(dir.join("t.bin")).unwrap();
    }
}

#[test]
fn eight_threads_lose_nothing() {
    let dir = scratch("threads");
    let out = run(&mut record_cmd(&dir, "t.bin", &["threads"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    // fake_app.c `threads`: 8 × 10,000 allocations of 256 bytes, all freed.
    assert_eq!(
        site_figures(&recs, 3, "site_alpha"),
        (80_000, 80_000 * 256, 80_000, 80_000 * 256)
    );
    // Only the allocation calls are watched: each free is in the activity
    // records (counted by site_figures above).
    let api = of_type(&recs, "Api");
    assert_eq!(api.len(), 80_000);
    let threads: std::collections::HashSet<u64> =
        api.iter().map(|a| a["tid"].as_u64().unwrap()).collect();
    assert_eq!(threads.len(), 8);
    for d in of_type(&recs, "Dropped") {
        assert_eq!(
            (d["cupti"].as_u64(), d["collector"].as_u64()),
            (Some(0), Some(0))
        );
    }
}

#[test]
fn a_fork_child_neither_hangs_nor_writes() {
    let dir = scratch("fork");
    let started = Instant::now();
    let out = run(&mut record_cmd(&dir, "t.bin", &["fork"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(30));
    let recs = dump_json(&dir.join("t.bin"));
    assert_eq!(of_type(&recs, "Process").len(), 1);
    assert_eq!(of_type(&recs, "ProcessEnd").len(), 1);
    assert_eq!(site_figures(&recs, 3, "site_alpha").0, 3);
}

#[test]
fn exec_children_are_recorded_into_the_same_trace() {
    let dir = scratch("exec");
    let out = run(&mut record_cmd(&dir, "t.bin", &["exec"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    let procs = of_type(&recs, "Process");
    assert_eq!(procs.len(), 2);
    let child = procs
        .iter()
        .find(|p| p["cmdline"][1] == "basic")
        .expect("the exec'ed child");
    let parent = procs
        .iter()
        .find(|p| p["cmdline"][1] == "exec")
        .expect("the parent");
    assert_eq!(child["ppid"], parent["pid"]);
    assert!(stderr(&out).contains("2 processes"), "{}", stderr(&out));
}

#[test]
fn another_cupti_client_is_reported_and_the_program_runs_on() {
    let dir = scratch("taken");
    let out = run(record_cmd(&dir, "t.bin", &["basic", "5"]).env("FAKE_CUPTI_TAKEN", "1"));
    assert_eq!(out.status.code(), Some(5));
    assert!(
        stderr(&out).contains("another CUPTI client"),
        "{}",
        stderr(&out)
    );
    let recs = dump_json(&dir.join("t.bin"));
    assert!(of_type(&recs, "Memory").is_empty());
    assert!(of_type(&recs, "Message")[0]["text"]
        .as_str()
        .unwrap()
        .contains("another CUPTI client"));
}

/// Activity records CUPTI could not deliver (its buffers full) are counted
/// in the trace and named by the report, and `check` will not judge such a
/// run unless told to: nothing is lost silently.
#[test]
fn records_cupti_dropped_are_counted_and_named() {
    let dir = scratch("dropped");
    let out = run(record_cmd(&dir, "t.bin", &["basic"]).env("FAKE_CUPTI_DROPPED", "7"));
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    let counts: Vec<u64> = of_type(&recs, "Dropped")
        .iter()
        .map(|d| d["cupti"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.last(), Some(&7), "{counts:?}");
    let summary = report_summary(&dir.join("t.bin"), &dir.join("r"));
    assert!(summary.starts_with("NOT PROFILED"), "{summary}");
    assert!(summary.contains("7 records were dropped"), "{summary}");
    let check = |flags: &[&str]| {
        Command::new(gmem())
            .arg("check")
            .arg(dir.join("t.bin"))
            .args(["--max-peak", "1TiB"])
            .args(flags)
            .output()
            .unwrap()
    };
    let out = check(&[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let out = check(&["--allow-unprofiled"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// A CUPTI release gmem-prof has no layouts for (a future 13.9, whose
/// records could have moved a field) is refused with its reason, the
/// releases it knows, and how to go on; nothing of it is read.
#[test]
fn a_cupti_of_an_unknown_release_is_refused_clearly() {
    let dir = scratch("version");
    let out = run(record_cmd(&dir, "t.bin", &["basic", "3"]).env("FAKE_CUPTI_VERSION", "130901"));
    assert_eq!(out.status.code(), Some(3), "the program's own exit code");
    let err = stderr(&out);
    assert!(
        err.contains("CUPTI API version 130901")
            && err.contains("12.0.146 to 13.5.25")
            && err.contains("GMEM_PROF_ALLOW_ANY_CUPTI"),
        "{err}"
    );
    let recs = dump_json(&dir.join("t.bin"));
    assert!(of_type(&recs, "Memory").is_empty(), "nothing read");
    assert!(of_type(&recs, "Api").is_empty(), "nothing read");
}

/// The same program recorded through CUPTI 12.4, 12.9, 13.0 and 13.4 (the
/// stand-in reporting each release's API version; every release puts the
/// fields read at the same offsets, collector/layouts/cupti.json) gives
/// the same analysis, and the trace says which CUPTI it met.
#[test]
fn every_known_cupti_release_gives_the_same_analysis() {
    let mut analyses = Vec::new();
    for (version, release) in [
        ("22", "12.4"),
        ("28", "12.9"),
        ("130001", "13.0"),
        ("130401", "13.4"),
    ] {
        let dir = scratch(&format!("release-{version}"));
        // A driver for CUDA 13.5, which takes every one of them.
        let out = run(record_cmd(&dir, "t.bin", &["basic"])
            .env("FAKE_CUPTI_VERSION", version)
            .env("FAKE_DRIVER_CUDA", "13050"));
        assert!(out.status.success(), "{release}: {}", stderr(&out));
        // `record` says which CUPTI it met.
        assert!(
            stderr(&out).contains(&format!("(API version {version})")),
            "{release}: {}",
            stderr(&out)
        );
        let recs = dump_json(&dir.join("t.bin"));
        let process = &of_type(&recs, "Process")[0];
        assert_eq!(
            process["cupti_api_version"].as_u64(),
            version.parse().ok(),
            "{release}"
        );
        assert!(!of_type(&recs, "Memory").is_empty(), "{release}");
        let a = export_json(&dir.join("t.bin"), &dir);
        // What the program did, whatever the release: sites, their bytes
        // and counts, the peak, failures and kernels.
        let figures = |a: &serde_json::Value| {
            let sites: Vec<(
                String,
                serde_json::Value,
                serde_json::Value,
                serde_json::Value,
            )> = a["sites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    (
                        s["label"].as_str().unwrap().to_string(),
                        s["count"].clone(),
                        s["total_bytes"].clone(),
                        s["leaked_bytes"].clone(),
                    )
                })
                .collect();
            (
                sites,
                a["devices"][0]["peak_bytes"].clone(),
                a["ooms"].as_array().map(Vec::len),
                a["input"]["kernels"].clone(),
                a["input"]["memory_events"].clone(),
            )
        };
        analyses.push((release, figures(&a)));
    }
    for (release, f) in &analyses[1..] {
        assert_eq!(f, &analyses[0].1, "{release} against {}", analyses[0].0);
    }
}

/// A CUPTI of a newer CUDA major than the driver supports (CUDA 13.4's
/// with a driver for 12.8) is refused by the driver: the report says so,
/// with what to use instead; the program runs on. A newer minor records
/// (13.4 with a driver for 13.0, as on the H100 with driver 580), alone:
/// that CUPTI refused there to share, and the trace says gmem-prof holds it.
#[test]
fn a_cupti_newer_than_the_driver_is_named_with_what_to_use() {
    let dir = scratch("newer-than-driver");
    let out = run(record_cmd(&dir, "t.bin", &["basic"])
        .env("FAKE_CUPTI_VERSION", "130401")
        .env("FAKE_DRIVER_CUDA", "12080"));
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("CUDA 13.4's and the driver supports CUDA 12.8")
            && err.contains("nvidia-cuda-cupti-cu12==12.8.*"),
        "{err}"
    );
    let recs = dump_json(&dir.join("t.bin"));
    assert!(of_type(&recs, "Memory").is_empty());
    for (driver, alone) in [("13000", true), ("13040", false)] {
        let dir = scratch(&format!("driver-{driver}"));
        let out = run(record_cmd(&dir, "t.bin", &["basic"])
            .env("FAKE_CUPTI_VERSION", "130401")
            .env("FAKE_DRIVER_CUDA", driver));
        assert!(out.status.success(), "{}", stderr(&out));
        let recs = dump_json(&dir.join("t.bin"));
        assert!(!of_type(&recs, "Memory").is_empty(), "driver {driver}");
        let says_alone = of_type(&recs, "Message").iter().any(|m| {
            m["text"].as_str().is_some_and(|t| {
                t.contains("holds CUPTI in this process alone (this CUPTI would not share it here)")
            })
        });
        assert_eq!(says_alone, alone, "driver {driver}");
    }
}

/// Where CUPTI lets several clients subscribe (13.2 and later, when the
/// other client allows it), gmem-prof asks to share it and records beside
/// the other tool; where it cannot, the report names the tool that held it.
#[test]
fn cupti_is_shared_with_another_client_where_cupti_allows_it() {
    for (version, shares) in [("130401", true), ("130001", false), ("28", false)] {
        let dir = scratch(&format!("shared-{version}"));
        let out = run(record_cmd(&dir, "t.bin", &["basic"])
            .env("FAKE_CUPTI_VERSION", version)
            .env("FAKE_CUPTI_TAKEN", "1")
            .env("FAKE_CUPTI_SHARES", "1")
            .env("FAKE_DRIVER_CUDA", "13050"));
        assert!(out.status.success(), "{version}: {}", stderr(&out));
        let recs = dump_json(&dir.join("t.bin"));
        assert_eq!(!of_type(&recs, "Memory").is_empty(), shares, "{version}");
        if !shares {
            let err = stderr(&out);
            assert!(err.contains("another CUPTI client"), "{version}: {err}");
            // cuptiSubscribe_v2 (13.0 and later) names the tool holding it.
            assert_eq!(
                err.contains("(Nsight Systems)"),
                version != "28",
                "{version}: {err}"
            );
        }
    }
}

#[test]
fn a_program_that_never_uses_cuda_runs_and_gets_no_trace() {
    let dir = scratch("nocuda");
    let out = Command::new(gmem())
        .current_dir(&dir)
        .args(["record", "--collector"])
        .arg(collector())
        .arg("--cupti")
        .arg(&fake().cupti)
        .args(["--", "sh", "-c", "echo plain; exit 4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain\n");
    assert!(stderr(&out).contains("no CUDA process"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn gmem_prof_failures_exit_2_with_a_message() {
    let dir = scratch("fail");
    let out = Command::new(gmem())
        .current_dir(&dir)
        .args([
            "record",
            "--cupti",
            "/nonexistent/libcupti.so.13",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("gmem-prof: "), "{}", stderr(&out));
    let out = Command::new(gmem())
        .current_dir(&dir)
        .args(["record", "--collector"])
        .arg(collector())
        .args(["--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot run"), "{}", stderr(&out));
    // An output that is a directory is refused before the program runs,
    // even with --force (the trace could not be written there after it).
    let marker = dir.join("ran");
    let out = Command::new(gmem())
        .current_dir(&dir)
        .args(["record", "--force", "-o", ".", "--collector"])
        .arg(collector())
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is a directory"), "{}", stderr(&out));
    assert!(!marker.exists(), "the program ran");
}

#[test]
fn environment_variables_alone_then_symbolize() {
    let dir = scratch("envonly");
    let f = fake();
    let parts = dir.join("parts");
    let status = Command::new(&f.app)
        .arg("basic")
        .env("CUDA_INJECTION64_PATH", collector())
        .env("GMEM_PROF_DIR", &parts)
        .env("GMEM_PROF_CUPTI", &f.cupti)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_dir(&parts).unwrap().count(), 1);
    let out = Command::new(gmem())
        .arg("symbolize")
        .arg(&parts)
        .arg("-o")
        .arg(dir.join("merged.bin"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // The per-process file reads directly too; only the merged one has symbols.
    let raw = dump_json(&parts);
    assert!(of_type(&raw, "Symbol").is_empty());
    let recs = dump_json(&dir.join("merged.bin"));
    assert_eq!(
        site_figures(&recs, 3, "site_alpha"),
        (3, 3 << 20, 2, 2 << 20)
    );
}

/// A launch names CUPTI's id of its stream, the id a timed kernel of that
/// stream carries. The collector keeps the ids by stream handle, so it asks
/// CUPTI once per stream, and forgets them when a stream is destroyed: the
/// driver may give the handle to the next stream created (fake_app.c
/// `streams` makes it so).
#[test]
fn launches_name_their_stream_after_its_handle_is_reused() {
    let dir = scratch("launch-streams");
    let mut by_mode = Vec::new();
    for (flags, record_type) in [
        (&[][..], "KernelLaunch"),
        (&["--kernels", "timed"][..], "Kernel"),
    ] {
        let out = run(&mut record_cmd_with(
            &dir,
            "t.bin",
            &[&["-f"][..], flags].concat(),
            &["streams"],
        ));
        assert_eq!(out.status.code(), Some(0), "{flags:?}: {}", stderr(&out));
        let recs = dump_json(&dir.join("t.bin"));
        let streams: Vec<u64> = of_type(&recs, record_type)
            .iter()
            .map(|k| k["stream"].as_u64().unwrap())
            .collect();
        let lookups = String::from_utf8_lossy(&out.stdout).into_owned();
        by_mode.push((streams, lookups));
    }
    let (launched, lookups) = &by_mode[0];
    // Two launches on each of the three streams, each stream its own id.
    assert_eq!(launched.len(), 6, "{launched:?}");
    assert!(
        launched[0] == launched[1] && launched[2] == launched[3] && launched[4] == launched[5],
        "{launched:?}"
    );
    assert!(
        launched[0] != launched[2] && launched[2] != launched[4] && launched[0] != launched[4],
        "{launched:?}"
    );
    // The same ids as the kernels' own records.
    assert_eq!(launched, &by_mode[1].0);
    // One lookup per stream, not per launch.
    assert!(lookups.contains("stream id lookups: 3"), "{lookups}");
}

/// The collector finds a launched kernel's name by the address CUPTI gives
/// it at, and checks its first bytes; it forgets the addresses when a module
/// is unloaded: a name at an address that held another is its own, whether
/// it differs early or only late (fake_app.c `renamed`).
#[test]
fn a_kernel_name_at_a_reused_address_is_read_again() {
    let names = recorded_launch_names("launch-renamed", "renamed");
    let long = |c: char| {
        let mut n = "x".repeat(300);
        n.replace_range(250..251, &c.to_string());
        n
    };
    assert_eq!(names, ["k_first", "k_second", &long('1'), &long('2')]);
}

/// A launch that names its function is known by the function and the
/// name's address together (fake_app.c `functions`): two functions whose
/// names came at one address keep their own names launch after launch, and
/// a function unloaded and replaced at its handle gets the new one's name.
#[test]
fn a_launched_function_keeps_its_own_name() {
    let names = recorded_launch_names("launch-functions", "functions");
    assert_eq!(names, ["k_alpha", "k_beta", "k_alpha", "k_beta", "k_gamma"]);
}

/// Records fake_app's `mode` (it must exit 0) and gives the names of the
/// kernels it launched, in order.
fn recorded_launch_names(scratch_name: &str, mode: &str) -> Vec<String> {
    let dir = scratch(scratch_name);
    let out = run(&mut record_cmd_with(&dir, "t.bin", &["-f"], &[mode]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    launch_names(&dump_json(&dir.join("t.bin")))
}

/// `--kernels`: launches (the default) give a `KernelLaunch` per launch at
/// the moment of the launch, `timed` CUPTI's record of each run, `off` (and
/// `--no-kernels`) neither; the process record says which.
#[test]
fn kernels_are_traced_as_launches_timed_or_not_at_all() {
    let dir = scratch("kernel-modes");
    for (flags, launches, runs, traced, timed) in [
        (&[][..], 2, 0, true, false),
        (&["--kernels", "launches"][..], 2, 0, true, false),
        (&["--kernels", "timed"][..], 0, 2, true, true),
        (&["--kernels", "off"][..], 0, 0, false, false),
        (&["--no-kernels"][..], 0, 0, false, false),
    ] {
        let out = run(&mut record_cmd_with(
            &dir,
            "t.bin",
            &[&["-f"][..], flags].concat(),
            &["basic", "0"],
        ));
        assert_eq!(out.status.code(), Some(0), "{flags:?}: {}", stderr(&out));
        let recs = dump_json(&dir.join("t.bin"));
        let launch_records = of_type(&recs, "KernelLaunch");
        assert_eq!(launch_records.len(), launches, "{flags:?}");
        // The collector says what recording them cost.
        let note = of_type(&recs, "Message")
            .into_iter()
            .filter_map(|m| m["text"].as_str().map(str::to_string))
            .find(|t| t.starts_with("kernel launches:"));
        assert_eq!(
            note.is_some_and(|t| t.starts_with(&format!("kernel launches: {launches} recorded, "))),
            launches > 0,
            "{flags:?}"
        );
        assert_eq!(of_type(&recs, "Kernel").len(), runs, "{flags:?}");
        let p = &of_type(&recs, "Process")[0];
        assert_eq!(
            (p["kernels_traced"].as_bool(), p["kernels_timed"].as_bool()),
            (Some(traced), Some(timed)),
            "{flags:?}"
        );
        // A launch is placed between the calls around it: after the
        // failed request and before the first free (fake_app.c `basic`).
        if launches > 0 {
            let failed = of_type(&recs, "Api")
                .into_iter()
                .find(|a| a["result"] != 0)
                .unwrap();
            let first_free = of_type(&recs, "Memory")
                .into_iter()
                .find(|m| m["alloc"] == false)
                .unwrap();
            for k in &launch_records {
                let t = k["time"].as_u64().unwrap();
                assert!(
                    failed["time"].as_u64().unwrap() <= t
                        && t <= first_free["time"].as_u64().unwrap(),
                    "{k}"
                );
                assert_eq!(k["grid"], serde_json::json!([1, 1, 1]));
                assert_eq!(k["block"], serde_json::json!([256, 1, 1]));
            }
            // The report names them in launch order around the peak.
            let summary = report_summary(&dir.join("t.bin"), &dir.join("report"));
            assert!(
                summary.contains("kernels launched around the peak: k_one before")
                    || summary.contains("first kernel launched after the peak: k_one"),
                "{summary}"
            );
        }
    }
    let out = run(&mut record_cmd_with(
        &dir,
        "t.bin",
        &["-f", "--kernels", "sometimes"],
        &["basic", "0"],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("launches, timed, off"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_explains_record() {
    let out = Command::new(gmem())
        .args(["record", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--no-kernels",
        "--kernels <HOW>",
        "timed",
        "--stack-depth",
        "--cupti",
        "exit code",
        "gmem-prof record -o run.bin -- python3 train.py",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}

/// One process on two devices (the fake driver's current device per
/// thread): each device has its own peak, and a failed request is charged
/// to the device it was made on, not to the one the process allocated on
/// last.
#[test]
fn two_devices_each_its_figures_and_its_own_failure() {
    let dir = scratch("two-devices");
    let out = run(&mut record_cmd(&dir, "t.bin", &["two_devices"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    let calls = of_type(&recs, "CallDevice");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["device"], 1);
    let a = export_json(&dir.join("t.bin"), &dir);
    let peak = |d: u64| {
        a["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["device"] == d)
            .map(|x| x["peak_bytes"].as_u64().unwrap())
    };
    assert_eq!(peak(0), Some(1 << 20));
    assert_eq!(peak(1), Some(2 << 20));
    let ooms = a["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1);
    assert_eq!(ooms[0]["device"], 1);
    assert_eq!(
        ooms[0]["device_live_bytes"],
        2 << 20,
        "device 1's live bytes"
    );
    assert_eq!(a["processes"][0]["devices"], serde_json::json!([0, 1]));
}

/// Memory another process shared through CUDA IPC: CUPTI writes a Memory
/// record for the mapping in the importing process, as if it allocated it
/// (on the H200, tests/programs/ipc.cu: 129 MiB for 65 MiB). With the
/// open call watched, the mapping is left out of this process's figures
/// (the exporter counts it) and said apart.
#[test]
fn memory_opened_through_ipc_counts_once() {
    let dir = scratch("ipc");
    let out = run(&mut record_cmd(&dir, "t.bin", &["ipc"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    let opens: Vec<&serde_json::Value> = of_type(&recs, "Api")
        .into_iter()
        .filter(|a| a["func"] == 40)
        .collect();
    assert_eq!(opens.len(), 1, "the open call is recorded");
    let a = export_json(&dir.join("t.bin"), &dir);
    assert_eq!(a["devices"][0]["peak_bytes"], 2 << 20, "only its own 2 MiB");
    assert_eq!(a["processes"][0]["peak_bytes"], 2 << 20);
    assert_eq!(a["processes"][0]["ipc_mapped_peak_bytes"], 64 << 20);
    assert!(a["input"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w["kind"] != "unmatched_frees"));
    let text = report_summary(&dir.join("t.bin"), &dir.join("r"));
    assert!(
        text.contains("mapped up to 64.0 MiB of another process's memory through CUDA IPC"),
        "{text}"
    );
}

/// The same on the H200 (traces/samples/ipc.bin, tests/programs/ipc.cu):
/// the parent's 64 MiB and the child's own 1 MiB, once each.
#[test]
fn ipc_sample_counts_the_shared_buffer_once() {
    let dir = scratch("ipc-sample");
    let a = export_json(&sample("ipc.bin"), &dir);
    assert_eq!(a["devices"][0]["peak_bytes"], 65 << 20);
    let mapped: Vec<u64> = a["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ipc_mapped_peak_bytes"].as_u64().unwrap_or(0))
        .collect();
    assert!(
        mapped.contains(&(64 << 20)) && mapped.contains(&0),
        "{mapped:?}"
    );
}
