//! Recording a part of the run (`record --steps`, `--capture-range`,
//! `--window-signal`, `--delay`/`--duration`): over the fake CUPTI and
//! driver, a window's figures for its steps and ranges are those of the
//! whole run's recording of the same program, and what was live when it
//! opened is there with its sites.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

const MIB: i64 = 1 << 20;

/// Records fake_app.py's `scenario` with `flags` into `dir`/`name`; returns
/// the analysis.
fn record_steps(dir: &Path, name: &str, flags: &[&str], scenario: &str) -> Value {
    analyzed(
        dir,
        name,
        record_python(
            dir,
            name,
            flags,
            Path::new("python3"),
            &[OsStr::new(scenario), fake_torch().as_os_str()],
        ),
    )
}

/// Records fake_app.c's `scenario` with `flags` into `dir`/`name`; returns
/// the analysis.
fn record_c(dir: &Path, name: &str, flags: &[&str], scenario: &str) -> Value {
    analyzed(dir, name, record_cmd_with(dir, name, flags, &[scenario]))
}

/// Runs `record`, which must succeed, and analyzes the trace it wrote.
fn analyzed(dir: &Path, name: &str, mut record: std::process::Command) -> Value {
    let out = run(&mut record);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sub = dir.join(name.replace('.', "-"));
    std::fs::create_dir_all(&sub).unwrap();
    export_json(&dir.join(name), &sub)
}

/// A step's figures with its sites named (labels, not ids: two analyses
/// number their sites apart; sites that kept as much are then in label
/// order).
fn step_figures(a: &Value, step: &Value) -> Value {
    let named = |table: &str, rows: &Value| -> Vec<(String, i64)> {
        rows.as_array()
            .map(|rows| {
                let mut named: Vec<(String, i64)> = rows
                    .iter()
                    .map(|k| {
                        let id = k["site"].as_u64().unwrap() as usize;
                        let label = a[table][id]["label"].as_str().unwrap().to_string();
                        (label, k["bytes"].as_i64().unwrap())
                    })
                    .collect();
                named.sort_by(|x, y| y.1.abs().cmp(&x.1.abs()).then(x.0.cmp(&y.0)));
                named
            })
            .unwrap_or_default()
    };
    let t = &step["tensors"];
    serde_json::json!({
        "number": step["number"],
        "peak": step["peak_bytes"],
        "kept": step["kept_bytes"],
        "kept_by_site": named("sites", &step["kept_by_site"]),
        "tensors_peak": t["allocated_peak"],
        "tensors_kept": t["kept_bytes"],
        "tensors_kept_by_site": named("tensor_sites", &t["kept_by_site"]),
    })
}

/// The figures of steps `first` to `last` of an analysis' first process.
fn steps_of(a: &Value, first: u64, last: u64) -> Vec<Value> {
    a["steps"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| (first..=last).contains(&s["number"].as_u64().unwrap()))
        .map(|s| step_figures(a, s))
        .collect()
}

/// The sum of what steps 1 to `before` kept (CUDA's view, and the
/// tensors'): what was live when step `before + 1` began, since step 1
/// began with nothing.
fn live_before(a: &Value, before: u64) -> (i64, i64) {
    steps_of(a, 1, before).iter().fold((0, 0), |(d, t), s| {
        (
            d + s["kept"].as_i64().unwrap(),
            t + s["tensors_kept"].as_i64().unwrap(),
        )
    })
}

/// Steps 20 to 30 of fake_app.py's training loop, recorded alone: each
/// step's peaks, kept bytes and kept sites equal the whole recording's; the
/// trace begins with what steps 1 to 19 left live (the optimizer's state,
/// 19 kept tensors), each with its site; nothing after step 30 is in it.
#[test]
fn a_window_of_steps_has_the_whole_runs_figures_for_them() {
    let dir = scratch("window-steps");
    let whole = record_steps(&dir, "whole.bin", &[], "steps");
    let part = record_steps(&dir, "part.bin", &["--steps", "20-30"], "steps");
    let expected = steps_of(&whole, 20, 30);
    assert_eq!(expected.len(), 11);
    assert_eq!(steps_of(&part, 1, 1000), expected);
    assert_eq!(part["steps"][0]["count"], 11);

    let w = &part["processes"][0]["window"];
    assert_eq!(w["what"], "steps 20 to 30");
    let (live, tensors) = live_before(&whole, 19);
    assert_eq!(w["live_at_open_bytes"].as_i64(), Some(live));
    assert_eq!(w["tensors_at_open_bytes"].as_i64(), Some(tensors));
    assert_eq!(tensors, (16 + 19 * 2) * MIB);
    assert!(w["closed_ns"].as_u64().unwrap() > w["opened_ns"].as_u64().unwrap());

    // The tensors live at the opening keep their sites: at the window's
    // highest point, the optimizer's state and the kept tensors' line hold
    // what the whole run's do at step 30's.
    let lines = marked_lines(&repo().join("tests/fake_cupti/fake_app.py"));
    let held = |a: &Value, line: &str| -> i64 {
        a["tensor_sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["label"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("fake_app.py:{}", lines[line]))
            })
            .map(|s| s["at_peak_bytes"].as_i64().unwrap())
            .sum()
    };
    assert_eq!(held(&part, "optimizer_state"), 16 * MIB);
    assert_eq!(held(&part, "kept_tensor"), 30 * 2 * MIB);

    // The trace holds no step but the window's, and not the error the
    // program met after it.
    let recs = dump_json(&dir.join("part.bin"));
    let numbers: Vec<u64> = of_type(&recs, "Step")
        .iter()
        .map(|s| s["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (20..=30).collect::<Vec<_>>());
    assert!(whole["frameworks"][0]["ooms"]
        .as_array()
        .is_some_and(|o| !o.is_empty()));
    assert!(part["frameworks"][0]["ooms"]
        .as_array()
        .is_none_or(|o| o.is_empty()));
    let edges = of_type(&recs, "Window");
    assert_eq!(edges.len(), 2, "{edges:?}");

    // The summary says which part it covers.
    let summary = report_summary(&dir.join("part.bin"), &dir.join("report"));
    assert!(
        summary.contains("only steps 20 to 30 of its run were recorded"),
        "{summary}"
    );
}

/// A window from step 1 opens with the process: its steps, the first with
/// the optimizer's state, are the whole run's.
#[test]
fn a_window_from_the_first_step_opens_at_the_start() {
    let dir = scratch("window-first");
    let whole = record_steps(&dir, "whole.bin", &[], "steps");
    let part = record_steps(&dir, "part.bin", &["--steps", "1-3"], "steps");
    assert_eq!(steps_of(&part, 1, 1000), steps_of(&whole, 1, 3));
    let w = &part["processes"][0]["window"];
    assert_eq!(w["what"], "steps 1 to 3");
    assert_eq!(w["live_at_open_bytes"], 0);
}

/// Opened and closed by the SIGUSR2s the program sends itself after steps
/// 10 and 20: steps 11 to 20 are recorded, each keeping its 2 MiB tensor
/// and going as high as the program made it go.
#[test]
fn a_window_opens_and_closes_on_signals() {
    let dir = scratch("window-signal");
    let a = record_steps(
        &dir,
        "t.bin",
        &["--window-signal", "--flush-ms", "20"],
        "steps_signalled",
    );
    let steps = steps_of(&a, 1, 1000);
    let numbers: Vec<u64> = steps
        .iter()
        .map(|s| s["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (11..=20).collect::<Vec<_>>());
    for s in &steps {
        let n = s["number"].as_i64().unwrap();
        assert_eq!(s["tensors_kept"], 2 * MIB, "step {n}");
        assert_eq!(s["tensors_peak"], (16 + 2 * n + 4) * MIB, "step {n}");
    }
    let w = &a["processes"][0]["window"];
    assert_eq!(w["what"], "between the first and second SIGUSR2");
    assert_eq!(w["tensors_at_open_bytes"], (16 + 10 * 2) * MIB);
}

/// `--capture-range nvtx:step`: the first instance of fake_app.c's `step`
/// range; the ranges inside it have the whole run's figures for it, the
/// trainer's epoch (started before) is open at the start and unfinished.
#[test]
fn a_window_is_the_first_instance_of_an_nvtx_range() {
    let dir = scratch("window-nvtx");
    let whole = record_c(&dir, "whole.bin", &[], "nvtx");
    let part = record_c(&dir, "part.bin", &["--capture-range", "nvtx:step"], "nvtx");
    let first_of = |a: &Value, name: &str| -> Value {
        let p = &a["ranges"][0];
        let id = p["ranges"]
            .as_array()
            .unwrap()
            .iter()
            .position(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {p}"));
        let i = p["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["range"] == id)
            .unwrap();
        serde_json::json!({"kept": i["kept_bytes"], "rise": i["rise_bytes"], "depth": i["depth"]})
    };
    for name in ["step", "forward", "backward"] {
        assert_eq!(first_of(&part, name), first_of(&whole, name), "{name}");
    }
    let names: Vec<&str> = part["ranges"][0]["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| ["step", "forward", "backward", "epoch"].contains(n)),
        "{names:?}"
    );
    let step = part["ranges"][0]["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "step")
        .unwrap()
        .clone();
    assert_eq!(step["instances"], 1);
    assert_eq!(part["ranges"][0]["unfinished"], 1, "the epoch");
    assert_eq!(
        part["processes"][0]["window"]["what"],
        "the first NVTX range \"step\""
    );
}

/// Windows the CLI refuses, with the reason.
#[test]
fn bad_windows_are_refused_with_their_reason() {
    let dir = scratch("window-bad");
    for (flags, says) in [
        (&["--steps", "5-2"][..], "the last comes after the first"),
        (&["--steps", "x"][..], "not a range of steps"),
        (&["--capture-range", "step"][..], "give nvtx:NAME"),
        (&["--duration", "0"][..], "records nothing"),
        (&["--delay", "-1"][..], "0 or more"),
    ] {
        let out = run(&mut record_cmd_with(&dir, "t.bin", flags, &["steps"]));
        assert_ne!(out.status.code(), Some(0), "{flags:?}");
        assert!(stderr(&out).contains(says), "{flags:?}: {}", stderr(&out));
        assert!(!dir.join("t.bin").exists());
    }
    let out = run(&mut record_cmd_with(
        &dir,
        "t.bin",
        &["--steps", "1-2", "--delay", "1"],
        &["steps"],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// On the clock, over fake_app.c's ten quick steps: `--duration 60` opens
/// at the start and runs to the end (every step, as recorded whole);
/// `--delay 60` never opens, which the trace says.
#[test]
fn a_window_on_the_clock_opens_after_its_delay() {
    let dir = scratch("window-clock");
    let whole = record_c(&dir, "whole.bin", &[], "steps");
    let timed = record_c(&dir, "timed.bin", &["--duration", "60"], "steps");
    assert_eq!(steps_of(&timed, 1, 1000), steps_of(&whole, 1, 1000));
    assert_eq!(steps_of(&timed, 1, 1000).len(), 10);
    let w = &timed["processes"][0]["window"];
    assert_eq!(w["what"], "60 s from 0 s after the start");
    assert!(w.get("closed_ns").is_none(), "{w}");

    let late = record_c(&dir, "late.bin", &["--delay", "60"], "steps");
    assert!(
        late["steps"].as_array().is_none_or(|s| s.is_empty()),
        "{}",
        late["steps"]
    );
    let said = late["processes"][0]["messages"].to_string();
    assert!(
        said.contains("the recorded window (from 60 s after the start to the end) never opened"),
        "{said}"
    );
}
