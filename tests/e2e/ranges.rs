//! NVTX ranges and marks: over the fake CUPTI and driver, fake_app.c's
//! `nvtx` scenario (NVTX3's own header, as NVIDIA ships it), whose
//! allocations inside each range are known by construction, and a Python
//! program using the `nvtx` package when the machine has it.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::util::*;

const MIB: i64 = 1 << 20;

/// The line of fake_app.c that holds `text` (once).
fn c_line(text: &str) -> u64 {
    let src = std::fs::read_to_string(repo().join("tests/fake_cupti/fake_app.c")).unwrap();
    let found: Vec<usize> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(text))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(found.len(), 1, "{text:?} in fake_app.c: {found:?}");
    found[0] as u64
}

/// Records fake_app.c's `nvtx` scenario into `dir`/t.bin; returns what it
/// printed.
fn record_nvtx(dir: &Path, flags: &[&str]) -> String {
    let out = run(&mut record_cmd_with(dir, "t.bin", flags, &["nvtx"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A range's figures (by "domain:name" or "name") in an analysis' first
/// process's ranges.
fn range<'a>(a: &'a Value, name: &str) -> &'a Value {
    a["ranges"][0]["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            let d = r["domain"].as_str().unwrap();
            let n = r["name"].as_str().unwrap();
            (if d.is_empty() {
                n.to_string()
            } else {
                format!("{d}:{n}")
            }) == name
        })
        .unwrap_or_else(|| panic!("no range {name}: {}", a["ranges"]))
}

/// The label of a site id of the analysis.
fn label(a: &Value, site: &Value) -> String {
    a["sites"][site.as_u64().unwrap() as usize]["label"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn nvtx3_ranges_and_marks_are_recorded_with_their_nesting() {
    let dir = scratch("nvtx-records");
    let printed = record_nvtx(&dir, &[]);
    // NVTX's push and pop return the range's depth, as the tool says; the
    // range pushed before the collector started is popped at depth 0 too.
    assert!(printed.contains("before_cuda popped at 0"), "{printed}");
    assert!(
        printed.contains("depths: step 0, forward 1, step popped at 0"),
        "{printed}"
    );
    let recs = dump_json(&dir.join("t.bin"));
    let strings: HashMap<u64, String> = of_type(&recs, "String")
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let text = |id: &Value| {
        strings
            .get(&id.as_u64().unwrap())
            .cloned()
            .unwrap_or_default()
    };
    let begins = of_type(&recs, "RangeBegin");
    let ends = of_type(&recs, "RangeEnd");
    let count = |name: &str| begins.iter().filter(|b| text(&b["name"]) == name).count();
    // The range pushed before CUDA started, and so before the collector
    // did, is not recorded, nor is its pop.
    assert_eq!(count("before_cuda"), 0);
    assert_eq!(
        (count("step"), count("forward"), count("backward")),
        (8, 8, 8)
    );
    assert_eq!((count("epoch"), count("io")), (1, 1));
    assert_eq!(begins.len(), 26);
    assert_eq!(ends.len(), 26, "every range recorded ended");

    let main_tid = begins.iter().find(|b| text(&b["name"]) == "step").unwrap()["tid"].clone();
    for b in &begins {
        let (name, kind, depth) = (text(&b["name"]), &b["kind"], &b["depth"]);
        match name.as_str() {
            "step" => assert_eq!((kind.as_u64(), depth.as_u64()), (Some(1), Some(0))),
            "forward" | "backward" => {
                assert_eq!((kind.as_u64(), depth.as_u64()), (Some(1), Some(1)), "{b}");
            }
            // Started, in the domain "trainer", named by a registered string.
            "epoch" => {
                assert_eq!(kind, 2);
                assert_eq!(text(&b["domain"]), "trainer");
            }
            // Pushed on its own thread: the outermost there.
            "io" => {
                assert_eq!(depth, 0);
                assert_ne!(b["tid"], main_tid);
            }
            other => panic!("unexpected range {other}"),
        }
        if name != "epoch" {
            assert_eq!(b["domain"], 0, "the default domain is string 0");
        }
    }
    // "epoch" ended on the thread that ended it, not the one that began it.
    let epoch = begins.iter().find(|b| text(&b["name"]) == "epoch").unwrap();
    let end = ends.iter().find(|e| e["id"] == epoch["id"]).unwrap();
    assert_ne!(end["tid"], epoch["tid"]);
    // Every end follows its begin.
    for e in &ends {
        let b = begins.iter().find(|b| b["id"] == e["id"]).unwrap();
        assert!(e["time"].as_u64() >= b["time"].as_u64());
    }
    let marks: Vec<(String, String)> = of_type(&recs, "Mark")
        .iter()
        .map(|m| (text(&m["name"]), text(&m["domain"])))
        .collect();
    assert_eq!(
        marks,
        [
            ("begin".into(), String::new()),
            ("done".into(), "trainer".into())
        ],
        "a text mark in the default domain and a wide one in \"trainer\""
    );
}

/// The device timeline draws the ranges in lanes under its axis; pointing at
/// the first outermost instance shows that instance's figures as the
/// analysis has them.
#[test]
fn the_timeline_points_at_a_range() {
    let Some(browser) = crate::report::browser_or_skip() else {
        return;
    };
    let dir = scratch("nvtx-timeline");
    record_nvtx(&dir, &[]);
    let o = run(Command::new(gmem())
        .args(["report", "-q"])
        .arg(dir.join("t.bin"))
        .arg("-o")
        .arg(&dir));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let a: Value = serde_json::from_slice(&std::fs::read(dir.join("t.json")).unwrap()).unwrap();
    let p = &a["ranges"][0];
    let first = p["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["depth"] == 0)
        .unwrap();
    let figures = &p["ranges"][first["range"].as_u64().unwrap() as usize];
    let name = match figures["domain"].as_str().unwrap() {
        "" => figures["name"].as_str().unwrap().to_string(),
        domain => format!("{domain}: {}", figures["name"].as_str().unwrap()),
    };
    let shown = crate::report::pointed(
        &browser,
        &crate::report::BROWSER_FLAGS,
        &dir.join("t.html"),
        "#selftest-0-ranges",
    );
    let head = format!(
        "{name} (pid {}, thread {}, depth 0): ",
        p["pid"], first["tid"]
    );
    assert!(shown.starts_with(&head), "{shown:?} is not {head:?}");
    let kept = first["kept_bytes"].as_i64().unwrap();
    let sign = if kept < 0 { "-" } else { "+" };
    let kept = format!("{sign}{}", script_bytes(kept.unsigned_abs()));
    assert!(
        shown.ends_with(&format!("CUDA memory kept {kept}")),
        "{shown:?}: kept {kept}"
    );
}

/// Bytes as the timeline's script (`bytes` in reports/src/timeline.js)
/// words them.
fn script_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut i) = (b as f64, 0);
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    let digits = match (i, v) {
        (0, _) => 0,
        (_, v) if v >= 100.0 => 0,
        (_, v) if v >= 10.0 => 1,
        _ => 2,
    };
    format!("{v:.digits$} {}", units[i])
}

#[test]
fn each_range_takes_and_keeps_what_the_program_did_in_it() {
    let dir = scratch("nvtx-figures");
    record_nvtx(&dir, &[]);
    let a = export_json(&dir.join("t.bin"), &dir);
    let p = &a["ranges"][0];
    assert_eq!(p["unfinished"], 0);
    assert_eq!(p["mark_count"], 2);
    assert_eq!(p["instances"].as_array().unwrap().len(), 26);
    let activation = c_line("uint64_t activation = site_alpha(2 << 20);");
    let kept_line = c_line("site_beta(1 << 20); /* kept for good */");

    // forward: 2 MiB kept (the activation) and a 1 MiB temporary on top.
    let f = &range(&a, "forward")["driver"];
    assert_eq!(range(&a, "forward")["instances"], 8);
    assert_eq!(f["rise_bytes"].as_i64(), Some(3 * MIB));
    assert_eq!(f["kept_median"].as_i64(), Some(2 * MIB));
    assert_eq!(f["kept_bytes"].as_i64(), Some(16 * MIB));
    let top = &f["kept_by_site"][0];
    assert_eq!(top["bytes"].as_i64(), Some(16 * MIB));
    assert!(label(&a, &top["site"]).ends_with(&format!("fake_app.c:{activation}")));

    // backward: frees the activation, keeps 1 MiB for good; rises nowhere.
    let b = &range(&a, "backward")["driver"];
    assert_eq!(b["rise_bytes"], 0);
    assert_eq!(b["kept_median"].as_i64(), Some(-MIB));
    let by_site: Vec<(String, i64)> = b["kept_by_site"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (label(&a, &k["site"]), k["bytes"].as_i64().unwrap()))
        .collect();
    assert_eq!(by_site.len(), 2, "{by_site:?}");
    assert!(by_site[0].0.ends_with(&format!(":{activation}")) && by_site[0].1 == -16 * MIB);
    assert!(by_site[1].0.ends_with(&format!(":{kept_line}")) && by_site[1].1 == 8 * MIB);

    // step: what its two phases left, 1 MiB each time; its peak is the
    // last step's forward on top of 7 MiB kept before it.
    let s = &range(&a, "step")["driver"];
    assert_eq!(s["kept_median"].as_i64(), Some(MIB));
    assert_eq!(s["rise_bytes"].as_i64(), Some(3 * MIB));
    assert_eq!(s["peak_bytes"].as_i64(), Some(10 * MIB));

    // The started range of "trainer" around them all.
    let e = &range(&a, "trainer:epoch")["driver"];
    assert_eq!(e["kept_bytes"].as_i64(), Some(8 * MIB));
    assert_eq!(e["rise_bytes"].as_i64(), Some(10 * MIB));
    // The other thread's range: 256 KiB made and freed inside it.
    let io = &range(&a, "io")["driver"];
    assert_eq!(
        (io["rise_bytes"].as_i64(), io["kept_bytes"].as_i64()),
        (Some(256 << 10), Some(0))
    );

    // Ordered by what they take at their highest.
    let order: Vec<&str> = p["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(order[0], "epoch");
    assert_eq!(*order.last().unwrap(), "backward");

    // Perfetto: each instance a slice on its thread's row, with what it
    // kept; the marks as instants.
    let out = Command::new(gmem())
        .args(["export", "-q", "--format", "perfetto", "-o"])
        .arg(dir.join("t.perfetto.json"))
        .arg(dir.join("t.bin"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let pf: Value =
        serde_json::from_slice(&std::fs::read(dir.join("t.perfetto.json")).unwrap()).unwrap();
    let nvtx: Vec<&Value> = pf["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "nvtx")
        .collect();
    let slices: Vec<&&Value> = nvtx.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), 26);
    assert_eq!(nvtx.iter().filter(|e| e["ph"] == "i").count(), 2);
    let forward = slices.iter().find(|e| e["name"] == "forward").unwrap();
    assert_eq!(forward["args"]["kept_bytes"].as_i64(), Some(2 * MIB));
    assert_eq!(forward["args"]["depth"], 1);
    assert!(slices.iter().any(|e| e["name"] == "trainer: epoch"));

    // The summary says it too.
    let summary = report_summary(&dir.join("t.bin"), &dir);
    assert!(summary.contains("ranges of pid"), "{summary}");
    let line = summary
        .lines()
        .find(|l| l.trim_start().starts_with("forward"))
        .unwrap();
    assert!(
        line.contains("rises    3.00 MiB") && line.contains("keeps   +2.00 MiB"),
        "{line}"
    );
}

#[test]
fn a_ranges_instances_can_be_the_steps() {
    let dir = scratch("nvtx-step-range");
    record_nvtx(&dir, &[]);
    let trace = dir.join("t.bin");
    let analysis = |flags: &[&str]| -> Value {
        let out = Command::new(gmem())
            .args(["export", "-q", "--format", "json", "-o"])
            .arg(dir.join("s.json"))
            .args(flags)
            .arg(&trace)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&std::fs::read(dir.join("s.json")).unwrap()).unwrap()
    };
    let a = analysis(&["--step-range", "step"]);
    let p = &a["steps"][0];
    assert_eq!(p["marked_by"], "NVTX range");
    assert_eq!(p["range"], "step");
    assert_eq!(p["count"], 8);
    let kept_line = c_line("site_beta(1 << 20); /* kept for good */");
    for s in p["steps"].as_array().unwrap() {
        assert_eq!(s["kept_bytes"].as_i64(), Some(MIB), "{s}");
        let k = &s["kept_by_site"][0];
        assert!(label(&a, &k["site"]).ends_with(&format!(":{kept_line}")));
    }
    assert_eq!(p["growth"]["bytes_per_step"].as_i64(), Some(MIB));
    // In one domain only: "step" is in the default one.
    assert!(analysis(&["--step-range", "trainer:step"])["steps"].is_null());
    assert_eq!(
        analysis(&["--step-range", "trainer:epoch"])["steps"][0]["count"],
        1
    );
    // Without the flag the program marked no step.
    assert!(analysis(&[])["steps"].is_null());
}

#[test]
fn range_budgets_judge_each_range_over_its_instances() {
    let dir = scratch("nvtx-budgets");
    record_nvtx(&dir, &[]);
    std::fs::write(
        dir.join("b.toml"),
        "[range.\"forward\"]\nmax_rise = \"2MiB\"\nmax_kept = \"2MiB\"\n\
         [range.\"trainer:epoch\"]\nmax_peak = \"10MiB\"\n\
         [range.\"absent\"]\nmax_peak = \"1MiB\"\n",
    )
    .unwrap();
    let out = Command::new(gmem())
        .args(["check", "--budget"])
        .arg(dir.join("b.toml"))
        .arg("--json")
        .arg(dir.join("c.json"))
        .arg(dir.join("t.bin"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&std::fs::read(dir.join("c.json")).unwrap()).unwrap();
    let outcomes: Vec<(String, String, bool, u64)> = v["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["budget"].as_str().unwrap().to_string(),
                o["target"].as_str().unwrap().to_string(),
                o["passed"].as_bool().unwrap(),
                o["figure"].as_u64().unwrap(),
            )
        })
        .collect();
    let mib = MIB as u64;
    assert!(
        outcomes.contains(&(
            "max_rise".into(),
            "range \"forward\"".into(),
            false,
            3 * mib
        )),
        "{outcomes:?}"
    );
    assert!(outcomes.contains(&("max_kept".into(), "range \"forward\"".into(), true, 2 * mib)));
    assert!(outcomes.contains(&(
        "max_peak".into(),
        "range \"trainer:epoch\"".into(),
        true,
        10 * mib
    )));
    assert_eq!(outcomes.len(), 3, "the absent range judges nothing");
    let rise = &v["budgets"][0];
    assert!(
        rise["summary"]
            .as_str()
            .unwrap()
            .contains("(8 instance(s) in process")
            && rise["details"][0].as_str().unwrap().contains("site_alpha"),
        "{rise}"
    );
    assert!(
        stderr(&out).contains("the budget for range \"absent\" checks nothing"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn no_range_is_recorded_when_nvtx_is_off_or_another_tools() {
    let dir = scratch("nvtx-off");
    let printed = record_nvtx(&dir, &["--no-nvtx"]);
    // NVTX with no tool: its calls do nothing and say so.
    assert!(printed.contains("before_cuda popped at -2"), "{printed}");
    let recs = dump_json(&dir.join("t.bin"));
    assert!(of_type(&recs, "RangeBegin").is_empty());
    assert!(of_type(&recs, "Mark").is_empty());

    // Another tool's NVTX_INJECTION64_PATH is left to it, with a note.
    let mut cmd = record_cmd_with(&dir, "u.bin", &[], &["nvtx"]);
    cmd.env("NVTX_INJECTION64_PATH", "/nonexistent/libother_tool.so");
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("NVTX ranges are left to it"),
        "{}",
        stderr(&out)
    );
    assert!(of_type(&dump_json(&dir.join("u.bin")), "RangeBegin").is_empty());
}

/// Where the `nvtx` Python package is (`python_package`).
fn nvtx_package() -> Option<Option<std::path::PathBuf>> {
    python_package("GMEM_PROF_TEST_NVTX", "nvtx")
}

#[test]
fn the_nvtx_python_packages_ranges_are_recorded() {
    let Some(package) = nvtx_package() else {
        eprintln!(
            "skipped: no `nvtx` Python package (pip install nvtx, or set GMEM_PROF_TEST_NVTX)"
        );
        return;
    };
    let lines = marked_lines(&repo().join("tests/fake_cupti/fake_app.py"));
    let dir = scratch("nvtx-python");
    let mut cmd = record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[std::ffi::OsStr::new("nvtx"), fake_torch().as_os_str()],
    );
    if let Some(p) = package {
        cmd.env("PYTHONPATH", p);
    }
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a = export_json(&dir.join("t.bin"), &dir);
    let p = &a["ranges"][0];
    assert_eq!(p["mark_count"], 6);
    assert_eq!(p["marks"][0]["name"], "iteration");
    // annotate() in the domain "train"; push_range() in the package's
    // default domain, whatever it names it.
    let step = range(&a, "train:step");
    assert_eq!(step["instances"], 6);
    let forward = p["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "forward")
        .unwrap();
    assert_eq!(forward["instances"], 6);
    // Tensors speak: 4 MiB and 2 MiB on top of where each began, 2 MiB
    // kept at the kept line.
    let t = &forward["tensors"];
    assert_eq!(t["rise_bytes"].as_i64(), Some(6 * MIB), "{forward}");
    assert_eq!(t["kept_median"].as_i64(), Some(2 * MIB));
    let top = &t["kept_by_site"][0];
    let label = a["tensor_sites"][top["site"].as_u64().unwrap() as usize]["label"]
        .as_str()
        .unwrap();
    assert!(
        label.ends_with(&format!("fake_app.py:{}", lines["range_kept"])),
        "{label}"
    );
    assert_eq!(top["bytes"].as_i64(), Some(12 * MIB));
    assert_eq!(step["tensors"]["kept_median"].as_i64(), Some(2 * MIB));
}

/// PyTorch's phases with no NVTX and no change to the program (fake_app.py
/// `phases`, over the stand-in torch): the bootstrap marks "backward"
/// around torch.autograd.backward, "optimizer step" between the
/// optimizer's global hooks and "forward" from a step's end to the next
/// backward, in the domain "PyTorch"; each phase's tensors are what the
/// program did in it.
#[test]
fn pytorchs_phases_are_ranges_with_no_code_change() {
    let lines = marked_lines(&repo().join("tests/fake_cupti/fake_app.py"));
    let dir = scratch("phases");
    let out = run(&mut record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[std::ffi::OsStr::new("phases"), fake_torch().as_os_str()],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a = export_json(&dir.join("t.bin"), &dir);
    let tensors = |name: &str| -> (u64, Value) {
        let r = range(&a, &format!("PyTorch:{name}"));
        (r["instances"].as_u64().unwrap(), r["tensors"].clone())
    };
    let tensor_line = |site: &Value| -> String {
        a["tensor_sites"][site.as_u64().unwrap() as usize]["label"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // Eight iterations: eight backwards and optimizer steps; a forward
    // after each step but the last's, which the program ends in.
    let (n, f) = tensors("forward");
    assert_eq!(n, 7);
    assert_eq!(f["kept_bytes"].as_i64(), Some(7 * 4 * MIB));
    assert_eq!(f["kept_median"].as_i64(), Some(4 * MIB));
    assert_eq!(f["rise_bytes"].as_i64(), Some(4 * MIB));
    assert!(tensor_line(&f["kept_by_site"][0]["site"])
        .ends_with(&format!("fake_app.py:{}", lines["phase_activation"])));
    assert_eq!(
        a["ranges"][0]["unfinished"], 1,
        "the forward the program ends in"
    );

    // The backward frees the activation; the first one keeps the gradient.
    let (n, b) = tensors("backward");
    assert_eq!(n, 8);
    assert_eq!(b["kept_bytes"].as_i64(), Some(MIB - 8 * 4 * MIB));
    assert_eq!(b["kept_median"].as_i64(), Some(-4 * MIB));
    assert_eq!(b["rise_bytes"].as_i64(), Some(MIB));

    // The optimizer's step: its state once, its temporary each time.
    let (n, o) = tensors("optimizer step");
    assert_eq!(n, 8);
    assert_eq!(o["kept_bytes"].as_i64(), Some(16 * MIB));
    assert_eq!(o["kept_median"].as_i64(), Some(0));
    assert_eq!(o["rise_bytes"].as_i64(), Some(18 * MIB));
    assert!(tensor_line(&o["kept_by_site"][0]["site"])
        .ends_with(&format!("fake_app.py:{}", lines["phase_state"])));
    // The steps are still the optimizer's.
    assert_eq!(a["steps"][0]["count"], 8);
    // A range of the program's own, through gmem_prof.range().
    let v = range(&a, "validation");
    assert_eq!(v["instances"], 1);
    assert_eq!(v["tensors"]["rise_bytes"].as_i64(), Some(8 * MIB));
    assert_eq!(v["tensors"]["kept_bytes"].as_i64(), Some(0));
    // The error came inside it, in the forward the last step began.
    let oom = &a["frameworks"][0]["ooms"][0];
    assert_eq!(
        oom["ranges"],
        serde_json::json!(["forward (PyTorch)", "validation"])
    );
    let summary = report_summary(&dir.join("t.bin"), &dir.join("report"));
    assert!(
        summary.contains("in step 9, inside forward (PyTorch) › validation"),
        "{summary}"
    );
}

/// A training step in a closure the optimizer's step calls (Lightning's
/// way): each "optimizer step" holds its iteration's forward and its
/// backward, which is a range of its own inside it.
#[test]
fn a_closures_backward_is_a_phase_inside_the_optimizer_step() {
    let dir = scratch("phases-closure");
    let out = run(&mut record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[
            std::ffi::OsStr::new("phases_closure"),
            fake_torch().as_os_str(),
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a = export_json(&dir.join("t.bin"), &dir);
    let o = range(&a, "PyTorch:optimizer step");
    let b = range(&a, "PyTorch:backward");
    assert_eq!(
        (o["instances"].as_u64(), b["instances"].as_u64()),
        (Some(8), Some(8))
    );
    // The step holds the activation made and freed inside it and its
    // state: highest in the first, after the backward freed the
    // activation, with the gradient, the state and the temporary.
    assert_eq!(
        o["tensors"]["rise_bytes"].as_i64(),
        Some((1 + 16 + 2) * MIB)
    );
    assert_eq!(o["tensors"]["kept_median"].as_i64(), Some(0));
    assert_eq!(b["tensors"]["kept_median"].as_i64(), Some(-4 * MIB));
    // Each backward lies inside an optimizer step.
    let p = &a["ranges"][0];
    let of = |name: &str| -> Vec<(u64, u64)> {
        let id = p["ranges"]
            .as_array()
            .unwrap()
            .iter()
            .position(|r| r["name"] == name && r["domain"] == "PyTorch")
            .unwrap();
        p["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["range"] == id)
            .map(|i| {
                (
                    i["start_ns"].as_u64().unwrap(),
                    i["end_ns"].as_u64().unwrap_or(u64::MAX),
                )
            })
            .collect()
    };
    let (steps, backwards) = (of("optimizer step"), of("backward"));
    for (s, b) in steps.iter().zip(&backwards) {
        assert!(
            s.0 <= b.0 && b.1 <= s.1,
            "backward {b:?} outside step {s:?}"
        );
    }
}
