//! `gmem-prof diff`: two recorded runs of one PyTorch loop, with and without
//! a leak (traces/samples/torch_growth*.bin): the diff must name the kept
//! tensor's site, matched by stack.

use std::process::{Command, Output};

use serde_json::Value;

use crate::util::*;

fn diff(base: &str, new: &str, args: &[&str]) -> Output {
    run(Command::new(gmem())
        .arg("diff")
        .arg(sample(base))
        .arg(sample(new))
        .args(args))
}

#[test]
fn diff_of_the_leaking_loop_names_the_kept_tensor_site() {
    let dir = scratch("diff-leak");
    let json = dir.join("d.json");
    let html = dir.join("d.html");
    let md = dir.join("d.md");
    let o = diff(
        "torch_growth.bin",
        "torch_growth_leak.bin",
        &[
            "--fail-above",
            "5%",
            "--json",
            json.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ],
    );
    // The leaking run keeps 200 × 1 MiB more at its peak: far above 5%.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("above threshold: device 0 peak"), "{text}");

    let d: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(d["schema"], "gmem-prof-diff");
    let dev = &d["devices"][0];
    let top = &dev["peak_changes"][0];
    let site = &d["sites"][top["site"].as_u64().unwrap() as usize];
    let frames: Vec<&str> = site["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    assert!(
        frames.iter().any(|f| f.contains("randn")),
        "the top change is not the randn site: {frames:?}"
    );
    // What the loop kept, as the program reported it; at the peak all but
    // at most one step's tensor are live.
    let stats: Value =
        serde_json::from_slice(&std::fs::read(sample("torch_growth_leak.stats.json")).unwrap())
            .unwrap();
    let kept = stats["kept_bytes"].as_u64().unwrap();
    let delta = top["delta_bytes"].as_i64().unwrap() as u64;
    assert!((kept - (1 << 20)..=kept).contains(&delta), "{delta}");
    // The peak grew by about what the site holds.
    let grew = dev["delta_peak_bytes"].as_i64().unwrap() as u64;
    assert!(
        grew.abs_diff(delta) < 4 << 20,
        "peak +{grew}, site +{delta}"
    );

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("randn"));
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.starts_with("## gmem-prof diff: torch_growth → torch_growth_leak"),
        "{md}"
    );
}

#[test]
fn diff_of_a_run_with_itself_shows_no_change() {
    let o = diff("kinds.bin", "kinds.bin", &["--fail-above", "0%"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("no site changed"), "{text}");
    assert!(text.contains("no change above +0%"), "{text}");
}

#[test]
fn a_new_leak_is_above_any_threshold() {
    // oom.cu frees everything; kinds.cu leaks 2 MiB: from 0, always above.
    let o = diff("oom.bin", "kinds.bin", &["--fail-above", "1000%"]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("above threshold: leaked at exit 0 B → 2.00 MiB (from none)"),
        "{text}"
    );
}

#[test]
fn fail_above_judges_the_figures_it_is_told_to() {
    // torch_growth → torch_growth_leak: the leak's 1 MiB per step grows
    // (its tensors, judged after the warm-up) and fragments the pool; its
    // tensors are freed at the interpreter's shutdown, so nothing leaks.
    let (base, new) = ("torch_growth.bin", "torch_growth_leak.bin");
    let o = diff(
        base,
        new,
        &["-q", "--fail-above", "5%", "--fail-on", "growth"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    // The figure is the report's own for the growing line.
    let a = export_json(&sample(new), &scratch("diff-growth-figure"));
    let grew = a["tensor_growth"][0]["growth_bytes"].as_u64().unwrap();
    assert!(
        text.contains(&format!(
            "above threshold: largest growth 0 B → {} (from none)",
            gmem_prof_reports::format::bytes(grew)
        )),
        "{text}"
    );
    assert!(!text.contains("peak"), "only growth judged: {text}");
    let o = diff(
        base,
        new,
        &[
            "-q",
            "--fail-above",
            "5%",
            "--fail-on",
            "leaked,ooms,library",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("(3 judged)"));
    let dir = scratch("diff-verdicts");
    let json = dir.join("d.json");
    let o = diff(
        base,
        new,
        &[
            "-q",
            "--fail-above",
            "5%",
            "--fail-on",
            "fragmentation",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    // The JSON holds what was judged and the verdict.
    let d: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let v = &d["verdicts"];
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["figure"], "fragmentation");
    assert_eq!(v[0]["above"], true);
    // The leak's kept tensors sit between freed ones: the new run's pool is
    // the more fragmented; the line says the figures the JSON holds.
    let (b, n) = (
        v[0]["base"].as_f64().unwrap(),
        v[0]["new"].as_f64().unwrap(),
    );
    assert!(n > b, "{v}");
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains(&format!("worst fragmentation {b:.3} → {n:.3}")));
    // OOMs are judged by default: oom.cu's two failed requests, from none.
    let o = diff("kinds.bin", "oom.bin", &["-q", "--fail-above", "1000000%"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("out-of-memory errors 0 → 2 (from none)"));
    // --fail-on without --fail-above is bad input.
    assert_eq!(
        diff(base, new, &["--fail-on", "growth"]).status.code(),
        Some(2)
    );
}

/// A run another CUPTI client kept from the collector shows nothing: against
/// any base it "shrank", and --fail-above passed it. It exits 3 now, saying
/// which process of which run and why, unless --allow-unprofiled; the same
/// for a base cut short (killed.bin).
#[test]
fn a_run_not_profiled_is_not_judged() {
    let o = diff(
        "kinds.bin",
        "cupti_client.bin",
        &["-q", "--fail-above", "5%"],
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(3), "{text}");
    assert!(text.contains("cupti_client: pid "), "{text}");
    assert!(text.contains("another CUPTI client"), "{text}");
    let o = diff(
        "kinds.bin",
        "cupti_client.bin",
        &["-q", "--fail-above", "5%", "--allow-unprofiled"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = diff(
        "killed.bin",
        "kinds.bin",
        &["-q", "--fail-above", "1000000%"],
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(3), "{text}");
    assert!(
        text.contains("killed: pid ") && text.contains("cut short"),
        "{text}"
    );
    // Without a threshold nothing is judged: the comparison is shown, and
    // says it, in each of its forms.
    let dir = scratch("diff-not-profiled");
    let (md, json, html) = (dir.join("d.md"), dir.join("d.json"), dir.join("d.html"));
    let o = diff(
        "kinds.bin",
        "cupti_client.bin",
        &[
            "--markdown",
            md.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("NOT PROFILED: cupti_client: pid "), "{text}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("> **Not profiled**, cupti_client: pid "),
        "{md}"
    );
    let d: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(
        d["new"]["not_profiled"].as_array().map(Vec::len),
        Some(1),
        "{}",
        d["new"]
    );
    assert!(d["base"].get("not_profiled").is_none());
    assert!(std::fs::read_to_string(&html)
        .unwrap()
        .contains("<b>Not profiled</b>, cupti_client"));
}

#[test]
fn diff_bad_input_exits_2() {
    let o = run(Command::new(gmem())
        .arg("diff")
        .arg(sample("kinds.bin"))
        .arg("/nonexistent.bin"));
    assert_eq!(o.status.code(), Some(2));
    let o = diff("kinds.bin", "oom.bin", &["--fail-above", "lots"]);
    assert_eq!(o.status.code(), Some(2));
}

/// Sites of one line among the changed ones (torch_leak.py:27 through
/// cuBLAS's handle and through the caching allocator's segments) say how
/// each allocated: a segment's label says it is one.
#[test]
fn changed_sites_of_one_line_say_how_they_allocated() {
    let o = diff("torch_leak.bin", "torch_activations.bin", &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("main at torch_leak.py:27"))
        .collect();
    assert!(rows.len() >= 2, "{text}");
    assert!(rows.iter().any(|r| r
        .contains("segments of PyTorch's caching allocator taken for main at torch_leak.py:27")));
    assert!(rows.iter().any(|r| !r.contains("segments")));
}
