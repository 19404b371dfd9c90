//! Steps with no code change (PyTorch's optimizer, through the bootstrap's
//! hook) and marked by the program (`gmem_prof.step()`): over the fake
//! CUPTI and driver, fake_app.py's `steps` scenario, whose allocations per
//! step are known by construction.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

const MIB: i64 = 1 << 20;
/// fake_app.py's STEPS: steps marked by the optimizer.
const OPTIMIZER_STEPS: u64 = 50;
const PROGRAM_STEPS: u64 = 5;

/// The line (fake_app.py's `line:` mark) of a site of `table` ("sites" or
/// "tensor_sites").
fn line_of(a: &Value, table: &str, site: &Value) -> u64 {
    let label = a[table][site.as_u64().unwrap() as usize]["label"]
        .as_str()
        .unwrap();
    let (_, line) = label.rsplit_once("fake_app.py:").unwrap_or(("", "0"));
    line.trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or(0)
}

/// (line, bytes) of what a step kept, by site.
fn kept(a: &Value, table: &str, rows: &Value) -> Vec<(u64, i64)> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|k| (line_of(a, table, &k["site"]), k["bytes"].as_i64().unwrap()))
        .collect()
}

#[test]
fn each_step_keeps_what_the_program_kept_in_it() {
    let lines = marked_lines(&repo().join("tests/fake_cupti/fake_app.py"));
    let dir = scratch("steps");
    let out = run(&mut record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[OsStr::new("steps"), fake_torch().as_os_str()],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // gmem_prof.step() returns each step's number in the process.
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("program steps 51 52 53 54 55"),
        "{printed}"
    );

    let recs = dump_json(&dir.join("t.bin"));
    let marks = of_type(&recs, "Step");
    let sources: Vec<u64> = marks
        .iter()
        .map(|s| s["source"].as_u64().unwrap())
        .collect();
    let mut expected = vec![1; OPTIMIZER_STEPS as usize];
    expected.extend([2; PROGRAM_STEPS as usize]);
    assert_eq!(
        sources, expected,
        "one step per iteration, whoever marked it"
    );

    let a = export_json(&dir.join("t.bin"), &dir);
    let steps = &a["steps"][0];
    assert_eq!(steps["marked_by"], "optimizer and program");
    assert_eq!(steps["count"], OPTIMIZER_STEPS + PROGRAM_STEPS);
    let list = steps["steps"].as_array().unwrap();
    assert_eq!(list.len() as u64, OPTIMIZER_STEPS + PROGRAM_STEPS);

    // Step 1 keeps its tensor and the optimizer's state, made in its
    // optimizer step; its activation was freed.
    let first = &list[0]["tensors"];
    assert_eq!(first["kept_bytes"], 18 * MIB);
    assert_eq!(
        kept(&a, "tensor_sites", &first["kept_by_site"]),
        vec![
            (lines["optimizer_state"], 16 * MIB),
            (lines["kept_tensor"], 2 * MIB)
        ]
    );
    // Every later optimizer step keeps exactly its 2 MiB tensor, and goes
    // as high as everything kept before it plus its activation and tensor.
    for (i, s) in list[1..OPTIMIZER_STEPS as usize].iter().enumerate() {
        let n = i as i64 + 2;
        let t = &s["tensors"];
        assert_eq!(t["kept_bytes"], 2 * MIB, "step {n}");
        assert_eq!(
            kept(&a, "tensor_sites", &t["kept_by_site"]),
            vec![(lines["kept_tensor"], 2 * MIB)],
            "step {n}"
        );
        assert_eq!(t["allocated_peak"], (16 + 2 * n + 4) * MIB, "step {n}");
    }
    // The program's steps keep 1 MiB of driver memory each, and no tensor.
    for s in &list[OPTIMIZER_STEPS as usize..] {
        assert_eq!(s["kept_bytes"], MIB, "{s}");
        assert_eq!(
            kept(&a, "sites", &s["kept_by_site"]),
            vec![(lines["allocate"], MIB)]
        );
        assert_eq!(s["tensors"]["kept_bytes"], 0, "{s}");
    }
    // The steady state: the median step after the first keeps 2 MiB of
    // tensors.
    assert_eq!(steps["steady"]["from_step"], 2);
    assert_eq!(steps["steady"]["tensors_kept_bytes"], 2 * MIB);

    // The remedy comes from the steps, in the process's tensors: the kept
    // tensor's line, per step (no growth over time for this process).
    let remedies: Vec<&Value> = a["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "growing_per_step" || r["kind"] == "growing_line")
        .collect();
    assert_eq!(remedies.len(), 1, "{remedies:?}");
    assert_eq!(remedies[0]["kind"], "growing_per_step");
    assert!(remedies[0]["site"]
        .as_str()
        .unwrap()
        .ends_with(&format!("fake_app.py:{}", lines["kept_tensor"])));

    // The error came in the step under way when the program ended.
    assert_eq!(a["frameworks"][0]["ooms"][0]["step"], 56);

    said_in_words(&dir, &lines);
}

/// The fake-driver steps run of `each_step_keeps_what_the_program_kept_in_it`
/// in words: the summary, the page (its section and its answer) and
/// Perfetto's slices.
fn said_in_words(dir: &Path, lines: &std::collections::HashMap<String, u64>) {
    // The summary and the page say it in words.
    let summary = report_summary(&dir.join("t.bin"), &dir.join("report"));
    let state = format!(
        "+16.0 MiB  steps.<locals>.update at fake_app.py:{}",
        lines["optimizer_state"]
    );
    assert!(summary.contains("steps of pid"), "{summary}");
    // In step 56, in the forward the bootstrap opened as step 50's
    // optimizer step ended (no backward came after it).
    assert!(
        summary.contains(", in step 56, inside forward (PyTorch))"),
        "{summary}"
    );
    assert!(summary.contains(&state), "{summary}");
    // After the warm-up (the first 11 of 55 steps), 2 MiB of tensors in
    // 39 of the 44 steps judged: 1.77 MiB a step.
    assert!(
        summary.contains(
            "kept step after step: +1.77 MiB/step on average over steps 12 to 55 (after the warm-up), of tensors"
        ),
        "{summary}"
    );
    let per_step = format!(
        "+1.77 MiB/step  steps at fake_app.py:{}",
        lines["kept_tensor"]
    );
    assert!(summary.contains(&per_step), "{summary}");
    // The growth section points at it, beside the growth over time.
    assert!(
        summary.contains(
            "marks steps: +1.77 MiB of tensors kept per step on average from step 12 on (44 steps)"
        ),
        "{summary}"
    );
    let page = std::fs::read_to_string(dir.join("report/t.html")).unwrap();
    assert!(page.contains("<h2 id=\"steps\">Steps</h2>"));
    // The answers at the top say it in a line, linked to the section.
    assert!(
        page.contains(">Steps</a> of pid ")
            && page.contains(
                "MiB per step</b> of tensors after the warm-up, most at steps at fake_app.py:"
            ),
        "no answer on steps"
    );

    // Perfetto: a slice per step on a track of the process's steps.
    let out = std::process::Command::new(gmem())
        .args(["export", "-q", "--format", "perfetto", "-o"])
        .arg(dir.join("p.json"))
        .arg(dir.join("t.bin"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let p: Value = serde_json::from_slice(&std::fs::read(dir.join("p.json")).unwrap()).unwrap();
    let slices: Vec<&Value> = p["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "step")
        .collect();
    assert_eq!(slices.len() as u64, OPTIMIZER_STEPS + PROGRAM_STEPS);
    assert_eq!(slices[1]["name"], "step 2");
    assert_eq!(slices[1]["args"]["tensors_kept_bytes"], 2 * MIB);
}

/// A C program marks its steps through collector/include/gmem_prof.h:
/// each keeps 1 MiB at site_alpha and frees what it made at site_beta.
#[test]
fn a_c_program_marks_its_steps_with_the_header() {
    let dir = scratch("steps-c");
    let out = run(&mut record_cmd(&dir, "t.bin", &["steps"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("1 2 3 4 5 6 7 8 9 10"), "{printed}");
    let a = export_json(&dir.join("t.bin"), &dir);
    let steps = &a["steps"][0];
    assert_eq!(steps["marked_by"], "program");
    assert_eq!(steps["count"], 10);
    for s in steps["steps"].as_array().unwrap() {
        assert_eq!(s["kept_bytes"], MIB, "{s}");
        let kept = s["kept_by_site"].as_array().unwrap();
        assert_eq!(kept.len(), 1, "{s}");
        let label = a["sites"][kept[0]["site"].as_u64().unwrap() as usize]["label"]
            .as_str()
            .unwrap();
        assert!(label.starts_with("site_alpha"), "{label}");
        assert!(s.get("tensors").is_none(), "{s}");
    }
    // Step n went as high as the n − 1 MiB kept before it, its 4 MiB
    // temporary and its 1 MiB.
    assert_eq!(a["ooms"][0]["step"], 5, "the failed request of step 5");
    let peaks: Vec<i64> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["peak_bytes"].as_i64().unwrap())
        .collect();
    let expected: Vec<i64> = (1..=10).map(|n| (n - 1 + 4 + 1) * MIB).collect();
    assert_eq!(peaks, expected);
}

/// Unrecorded, the header's call does nothing and says 0.
#[test]
fn the_header_does_nothing_when_not_recorded() {
    let out = std::process::Command::new(&fake().app)
        .arg("steps")
        .env_remove("CUDA_INJECTION64_PATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("0 0 0"));
}

/// `gmem-prof check` with the step budgets on the real steps sample
/// (traces/samples/torch_steps.bin): the figures are the report's, judged
/// against limits on either side of them; a run with no steps fails them.
#[test]
fn step_budgets_judge_growth_per_step_and_the_highest_step() {
    let dir = scratch("step-budgets");
    let trace = sample("torch_steps.bin");
    let truth: Value =
        serde_json::from_slice(&std::fs::read(sample("torch_steps.truth.json")).unwrap()).unwrap();
    // PyTorch's figures: the tensors kept by steps 7 to 30 (the first 6 of
    // 30 are the warm-up), on average.
    let allocated: Vec<i64> = truth["allocated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let per_step = (allocated[29] - allocated[5]) / 24;
    let check = |flags: &[&str], trace: &Path| {
        let out = std::process::Command::new(gmem())
            .arg("check")
            .args(flags)
            .arg("--json")
            .arg(dir.join("c.json"))
            .arg(trace)
            .output()
            .unwrap();
        let json: Value =
            serde_json::from_slice(&std::fs::read(dir.join("c.json")).unwrap_or_default())
                .unwrap_or(Value::Null);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            json,
        )
    };
    let mib = |n: i64| n.to_string();
    let (code, text, json) = check(&["--max-step-growth", &mib(per_step)], &trace);
    assert_eq!(code, Some(0), "{text}");
    let outcome = &json["budgets"][0];
    assert_eq!(outcome["budget"], "max_step_growth", "{json}");
    assert_eq!(outcome["figure"], per_step, "{json}");
    let (code, text, _) = check(&["--max-step-growth", &mib(per_step - 1)], &trace);
    assert_eq!(code, Some(1), "{text}");
    let kept_line = format!("torch_steps.py:{}", truth["lines"]["kept"]);
    assert!(text.contains("steps 7 to 30 (after the warm-up)"), "{text}");
    assert!(text.contains(&kept_line), "{text}");

    // The highest step: the report's figure, a byte under it fails.
    let a = export_json(&trace, &dir);
    let (number, peak) = a["steps"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["number"].as_u64().unwrap(),
                s["peak_bytes"].as_i64().unwrap(),
            )
        })
        .max_by_key(|&(n, p)| (p, std::cmp::Reverse(n)))
        .unwrap();
    let (code, text, _) = check(&["--max-step-peak", &mib(peak)], &trace);
    assert_eq!(code, Some(0), "{text}");
    let (code, text, _) = check(&["--max-step-peak", &mib(peak - 1)], &trace);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("step {number} of process")),
        "{text}"
    );

    // A run that marked no step cannot pass a step budget.
    let (code, text, _) = check(&["--max-step-growth", "1GiB"], &sample("kinds.bin"));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("marked steps"), "{text}");
}

/// `gmem-prof diff` compares the runs' steady-state steps and judges them
/// with --fail-on step_peak,step_growth.
#[test]
fn diff_compares_steady_state_steps() {
    let dir = scratch("steps-diff");
    let steps = sample("torch_steps.bin");
    let a = export_json(&steps, &dir);
    let p = &a["steps"][0];
    let diff = |base: &Path, new: &Path| {
        let out = std::process::Command::new(gmem())
            .arg("diff")
            .arg(base)
            .arg(new)
            .args([
                "--fail-above",
                "0%",
                "--fail-on",
                "step_peak,step_growth",
                "--json",
            ])
            .arg(dir.join("d.json"))
            .output()
            .unwrap();
        let json: Value =
            serde_json::from_slice(&std::fs::read(dir.join("d.json")).unwrap()).unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            json,
        )
    };
    // The same run: its figures on both sides, nothing above.
    let (code, text, json) = diff(&steps, &steps);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        json["new"]["steps"]["peak_bytes"],
        p["steady"]["peak_bytes"]
    );
    assert_eq!(
        json["new"]["steps"]["bytes_per_step"],
        p["growth"]["bytes_per_step"]
    );
    let verdicts = json["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2, "{json}");
    assert_eq!(
        verdicts[1]["new"].as_f64(),
        p["growth"]["bytes_per_step"].as_f64()
    );
    assert!(text.contains("training steps: steps 30 → 30"), "{text}");
    // From a run with no steps: steps that keep memory are new, above.
    let (code, text, _) = diff(&sample("kinds.bin"), &steps);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("training steps: steps – → 30"), "{text}");
}

/// A run of more steps than the analysis measures one by one: the count is
/// whole, the steady state and the growth are judged on the first
/// 1,000,000 steps (memory stays bounded whatever the trace holds).
#[test]
fn more_steps_than_measured_are_counted_and_judged_on_the_first() {
    let dir = scratch("steps-many");
    let out = run(&mut record_cmd(&dir, "t.bin", &["step_bench", "1100000"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a = export_json(&dir.join("t.bin"), &dir);
    let p = &a["steps"][0];
    assert_eq!(p["count"], 1_100_000);
    assert_eq!(p["steps"].as_array().unwrap().len(), 1000);
    // The warm-up is the first 20% of the measured steps.
    assert_eq!(p["growth"]["from_step"], 200_001);
    assert_eq!(p["growth"]["steps"], 800_000);
    assert_eq!(p["growth"]["bytes_per_step"], 0);
}
