//! `gmem-prof check`: exit codes of budgets on the real samples, against
//! what their programs did.

use std::process::{Command, Output};

use crate::util::*;

fn check(sample_name: &str, args: &[&str]) -> Output {
    run(Command::new(gmem())
        .arg("check")
        .arg(sample(sample_name))
        .args(args))
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn leak_budget_kinds_leaks_two_mib() {
    // kinds.cu leaks one 1 MiB device buffer and one 1 MiB pinned buffer.
    let o = check("kinds.bin", &["--max-leaked", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = out(&o);
    assert!(
        text.contains("over budget: 2.00 MiB (2097152 bytes) never freed"),
        "{text}"
    );
    assert!(text.contains("alloc_device_buffers at kinds.cu:"), "{text}");
    assert!(text.contains("alloc_pinned at kinds.cu:"), "{text}");
    assert_eq!(
        check("kinds.bin", &["--max-leaked", "2MiB"]).status.code(),
        Some(0)
    );
}

#[test]
fn held_at_exit_is_split_and_each_kind_has_its_budget() {
    // torch_native.bin (PyTorch MLP, default caching allocator): what the
    // program allocated is freed or cached; cuBLAS's handles and
    // workspaces (cublasCreate_v2 on its stack) stay for the process's
    // life. --max-leaked 0 failed on every PyTorch program for them.
    let o = check("torch_native.bin", &["--max-leaked", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = check("torch_native.bin", &["--max-library-held", "64MiB"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("held by CUDA libraries"), "{}", out(&o));
    let o = check("torch_native.bin", &["--max-library-held", "129MiB"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    // The same for JAX: its cuBLAS and cuDNN handles were "leaks".
    let o = check("jax.bin", &["--max-leaked", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = check("jax.bin", &["--max-library-held", "0"]);
    assert!(
        out(&o).contains("jax_train.py:35 via cublasCreate_v2 (libcublas.so.13)"),
        "{}",
        out(&o)
    );
    // A real leak still fails: kinds.cu leaks 1 MiB of device and 1 MiB
    // of pinned memory (leak_budget_kinds_leaks_two_mib); torch_growth_leak
    // keeps tensors until the interpreter's shutdown frees them.
    assert_eq!(
        check("kinds.bin", &["--max-leaked", "0"]).status.code(),
        Some(1)
    );
    // Module globals: torch_native's 883 __device__ allocations.
    let o = check("torch_native.bin", &["--max-module-globals", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("in module globals at exit"), "{}", out(&o));
}

#[test]
fn pinned_host_memory_has_its_own_budget() {
    // kinds.cu: cudaMallocHost 2 MiB and cudaHostAlloc 1 MiB live together.
    assert_eq!(
        check("kinds.bin", &["--max-pinned", "3MiB"]).status.code(),
        Some(0)
    );
    let o = check("kinds.bin", &["--max-pinned", "2MiB"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        out(&o).contains("pinned host memory of device 0's contexts peaked at 3.00 MiB"),
        "{}",
        out(&o)
    );
    // A size that does not parse is bad input.
    let o = check("kinds.bin", &["--max-pinned", "lots"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn peak_and_oom_budgets_on_the_oom_program() {
    // oom.cu holds 8 × 16 GiB at its peak; two requests fail and reach it.
    let o = check("oom.bin", &["--max-peak", "100GiB"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(out(&o).contains("fill_device at oom.cu:"), "{}", out(&o));
    assert_eq!(
        check("oom.bin", &["--max-peak", "128GiB"]).status.code(),
        Some(0)
    );
    assert_eq!(
        check("oom.bin", &["--max-ooms", "1"]).status.code(),
        Some(1)
    );
    assert_eq!(
        check("oom.bin", &["--max-ooms", "2"]).status.code(),
        Some(0)
    );
}

#[test]
fn fragmentation_budget_on_the_vmm_program() {
    // vmm.cu: worst F = 1/7 ≈ 0.143.
    assert_eq!(
        check("vmm.bin", &["--max-fragmentation", "0.1"])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        check("vmm.bin", &["--max-fragmentation", "0.2"])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn fragmentation_budget_judges_the_worst_pool_of_two() {
    // two_pools.cu: the custom pool's 32 holes of 1 MiB give F = 0.969;
    // adding the default pool's 32 MiB in one piece read 0.50.
    let o = check("two_pools.bin", &["--max-fragmentation", "0.9"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        out(&o).contains("fragmentation reached 0.969"),
        "{}",
        out(&o)
    );
    assert!(
        out(&o)
            .contains("32.0 MiB free in the worst pool or VMM region, largest free block 1.00 MiB"),
        "{}",
        out(&o)
    );
    assert_eq!(
        check("two_pools.bin", &["--max-fragmentation", "0.97"])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn filled_in_a_set_up_phase_then_freed_is_not_growth() {
    // NVIDIA's UnifiedMemoryStreams: 40 tasks' managed buffers from three
    // allocation lines, held while the tasks run, freed at the end. An
    // earlier growth rule called it +77 MiB of growth.
    let o = check("unified_memory_streams.bin", &["--max-growth", "64MiB"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(out(&o).contains("max_growth run: 0 B"), "{}", out(&o));
}

#[test]
fn growth_budget_catches_the_leaking_loop_only() {
    let o = check("torch_growth_leak.bin", &["--max-growth", "64MiB"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    // One line keeps its tensors (under the cudaMallocAsync backend each
    // is a CUDA allocation too): one site grows, said once (it counted 2,
    // with +150 MiB as tensors and +186 MiB as CUDA allocations).
    assert!(
        out(&o).contains("1 site(s) grew by more than 64.0 MiB"),
        "{}",
        out(&o)
    );
    assert_eq!(
        check("torch_growth.bin", &["--max-growth", "64MiB"])
            .status
            .code(),
        Some(0)
    );
    // oom.cu fills the device with 8 × 16 GiB, then frees them all: a
    // peak, not growth (this read +96 GiB of growth before the growth
    // rule asked that memory be still held at the end).
    let o = check("oom.bin", &["--max-growth", "64MiB"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    // killed.cu allocates 1 MiB per step until it is killed, holding all.
    let o = check(
        "killed.bin",
        &["--max-growth", "64MiB", "--allow-unprofiled"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        out(&o).contains("alloc_forever_step at killed.cu:15"),
        "{}",
        out(&o)
    );
}

#[test]
fn a_run_not_profiled_fails_with_exit_3_unless_allowed() {
    // cupti_client.cu held CUPTI itself: the collector recorded nothing,
    // and every budget used to hold on it.
    let budgets = ["--max-peak", "1GiB", "--max-leaked", "0", "--max-ooms", "0"];
    let o = check("cupti_client.bin", &budgets);
    assert_eq!(o.status.code(), Some(3), "{}", out(&o));
    let text = out(&o);
    assert!(text.starts_with("not profiled: 1 part(s)"), "{text}");
    assert!(text.contains("another CUPTI client"), "{text}");
    assert!(text.contains("--allow-unprofiled"), "{text}");
    let mut allowed = budgets.to_vec();
    allowed.push("--allow-unprofiled");
    let o = check("cupti_client.bin", &allowed);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    // killed.cu was killed with SIGKILL: cut short.
    let o = check("killed.bin", &["--max-ooms", "0"]);
    assert_eq!(o.status.code(), Some(3), "{}", out(&o));
    assert!(
        out(&o).contains("pid 978 (killed): it was cut short"),
        "{}",
        out(&o)
    );
    // A run profiled from start to end has no such line.
    let o = check("kinds.bin", &["--max-ooms", "0"]);
    assert!(!out(&o).contains("not profiled"), "{}", out(&o));
}

#[test]
fn bad_input_and_no_budget_exit_2() {
    assert_eq!(check("kinds.bin", &[]).status.code(), Some(2));
    assert_eq!(
        check("kinds.bin", &["--max-peak", "lots"]).status.code(),
        Some(2)
    );
    assert_eq!(
        check("kinds.bin", &["--max-fragmentation", "3"])
            .status
            .code(),
        Some(2)
    );
    let dir = scratch("check-bad");
    let garbage = dir.join("g.bin");
    std::fs::write(&garbage, b"garbage").unwrap();
    let o = run(Command::new(gmem())
        .arg("check")
        .arg(&garbage)
        .args(["--max-peak", "1GiB"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).starts_with("gmem-prof: "));
}

/// A budget file, in a scratch directory that lives as long as the first
/// value returned.
fn write_budget(name: &str, text: &str) -> (Scratch, std::path::PathBuf) {
    let dir = scratch(name);
    let p = dir.join("gmem-budget.toml");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

#[test]
fn budget_file_per_device_and_per_process() {
    // oom.cu peaks at 8 × 16 GiB = 128 GiB on device 0; the process is
    // bin/oom; it frees everything; two requests fail and reach it.
    let (_ok_dir, ok) = write_budget(
        "check-budget-ok",
        r#"
        [run]
        max_peak = "100GiB"     # overridden for device 0 below
        max_leaked = 0
        [device.0]
        max_peak = "128GiB"
        max_ooms = 2
        [process."oom"]
        max_peak = "128GiB"
        max_leaked = 0
        "#,
    );
    let o = check("oom.bin", &["--budget", ok.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(
        out(&o).contains("ok: max_peak device 0: 128 GiB ≤ 128 GiB"),
        "{}",
        out(&o)
    );

    let (_tight_dir, tight) = write_budget(
        "check-budget-tight",
        r#"
        [process."oom"]
        max_peak = "127GiB"
        max_ooms = 1
        "#,
    );
    let o = check("oom.bin", &["--budget", tight.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let text = out(&o);
    assert!(text.contains("over budget: process "), "{text}");
    assert!(
        text.contains("peaked at 128 GiB (137438953472 bytes)"),
        "{text}"
    );
    assert!(
        text.contains("2 out-of-memory error(s) reached the program; budget 1"),
        "{text}"
    );
    assert!(text.contains("2 of 2 budget(s) exceeded"), "{text}");

    // A flag overrides the file's [run] table.
    let o = check(
        "oom.bin",
        &[
            "--budget",
            ok.to_str().unwrap(),
            "--max-leaked",
            "1MiB",
            "--max-ooms",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
}

/// A table for a device or a process the run does not have judges
/// nothing: said as a warning, and the run is judged on the rest.
#[test]
fn a_budget_for_what_the_run_lacks_is_named() {
    let (_dir, p) = write_budget(
        "check-budget-unmatched",
        r#"
        [device.7]
        max_peak = "1GiB"
        [process."no-such-program"]
        max_peak = "1GiB"
        "#,
    );
    let o = check("oom.bin", &["--budget", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the budget for device 7 checks nothing: the trace has no device 7"),
        "{err}"
    );
    assert!(
        err.contains(
            "the budget for process \"no-such-program\" checks nothing: no process's command \
             line contains it"
        ),
        "{err}"
    );
}

#[test]
fn bad_budget_file_exits_2_with_the_reason() {
    let (_bad_dir, bad) = write_budget("check-budget-bad", "[run]\nmax_peek = \"1GiB\"\n");
    let o = check("oom.bin", &["--budget", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("max_peek"), "{}", stderr(&o));
    let o = check("oom.bin", &["--budget", "/nonexistent/budget.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot read the budget file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn ci_outputs_json_markdown_junit() {
    let dir = scratch("check-outputs");
    let (json, md, junit) = (dir.join("c.json"), dir.join("c.md"), dir.join("c.xml"));
    // kinds.cu leaks 2 MiB (budget 0: fails); its peak is 5 MiB (holds).
    let o = check(
        "kinds.bin",
        &[
            "--max-leaked",
            "0",
            "--max-peak",
            "1GiB",
            "--json",
            json.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));

    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["schema"], "gmem-prof-check");
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["passed"], false);
    let budgets = doc["budgets"].as_array().unwrap();
    let leak = budgets
        .iter()
        .find(|b| b["budget"] == "max_leaked")
        .unwrap();
    assert_eq!(leak["figure"], 2u64 << 20);
    assert_eq!(leak["passed"], false);
    assert_eq!(doc["runs"][0]["leaked_bytes"], 2u64 << 20);

    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.starts_with("## gmem-prof check: ❌ 1 of 2 budgets exceeded"),
        "{md}"
    );
    assert!(
        md.contains("| ❌ | kinds | `max_leaked` | run | 2.00 MiB | 0 B |"),
        "{md}"
    );
    assert!(
        md.contains("| ✅ | kinds | `max_peak` | device 0 |"),
        "{md}"
    );

    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed JUnit XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("2"));
    assert_eq!(root.attribute("failures"), Some("1"));
    let cases: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 2);
    let failed: Vec<_> = cases
        .iter()
        .filter(|c| c.children().any(|n| n.has_tag_name("failure")))
        .map(|c| c.attribute("name").unwrap())
        .collect();
    assert_eq!(failed, vec!["max_leaked run"]);
}

#[test]
fn several_traces_are_each_checked() {
    // kinds leaks 2 MiB, oom leaks nothing.
    let o = run(Command::new(gmem())
        .arg("check")
        .arg(sample("kinds.bin"))
        .arg(sample("oom.bin"))
        .args(["--max-leaked", "0"]));
    assert_eq!(o.status.code(), Some(1));
    let text = out(&o);
    assert!(text.contains("over budget: kinds: 2.00 MiB"), "{text}");
    assert!(
        text.contains("ok: oom: max_leaked run: 0 B ≤ 0 B"),
        "{text}"
    );
}

/// The budget file docs/ci.md shows, as a user would copy it: it passes on
/// the shipped PyTorch and JAX programs that do not leak and fails on the
/// ones that leak, grow or die of out-of-memory errors.
#[test]
fn the_budget_of_docs_ci_md_passes_healthy_runs_and_fails_leaking_ones() {
    let doc = std::fs::read_to_string(repo().join("docs/ci.md")).unwrap();
    let start = doc.find("```toml\n").expect("a TOML block") + "```toml\n".len();
    let toml = &doc[start..start + doc[start..].find("```").unwrap()];
    let (_dir, budget) = write_budget("check-docs-budget", toml);
    let code = |name: &str| {
        let o = check(name, &["--budget", budget.to_str().unwrap()]);
        (o.status.code(), out(&o))
    };
    for healthy in [
        "torch_native.bin",
        "torch_async.bin",
        "torch_growth.bin",
        "torch_spawn.bin",
        "torch_fragment.bin",
        "jax.bin",
        "cupy.bin",
    ] {
        let (c, text) = code(healthy);
        assert_eq!(c, Some(0), "{healthy}: {text}");
    }
    for (leaking, why) in [
        ("torch_leak.bin", "grew by more than 64.0 MiB"),
        ("torch_growth_leak.bin", "grew by more than 64.0 MiB"),
        ("kinds.bin", "never freed"),
        ("ctypes_cuda.bin", "never freed"),
        (
            "torch_fraction_oom.bin",
            "out-of-memory error(s) reached the program",
        ),
    ] {
        let (c, text) = code(leaking);
        assert_eq!(c, Some(1), "{leaking}: {text}");
        assert!(text.contains(why), "{leaking}: {text}");
    }
    assert_eq!(code("killed.bin").0, Some(3), "cut short: not profiled");
}

/// The README's first CI example, as written there, catches the Python
/// leaks of the samples (a line keeping its tensors, under both of
/// PyTorch's allocators: freed only at the interpreter's shutdown, so no
/// leak budget sees them) and passes the same programs without the leak.
#[test]
fn the_readmes_ci_example_catches_a_python_leak() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let example = readme
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("gmem-prof check run.bin "))
        .expect("the README has a `check run.bin` example");
    let args: Vec<&str> = example
        .split('#')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert!(!args.is_empty(), "{example}");
    for (name, leaks) in [
        ("torch_leak.bin", true),
        ("torch_leak_async.bin", true),
        ("torch_growth_leak.bin", true),
        ("torch_native.bin", false),
        ("torch_async.bin", false),
        ("torch_growth.bin", false),
    ] {
        let o = check(name, &args);
        assert_eq!(
            o.status.code(),
            Some(if leaks { 1 } else { 0 }),
            "{name} with {args:?}: {}",
            out(&o)
        );
    }
}

/// PyTorch allocates cuBLAS's workspaces through its own allocator, as
/// blocks kept for the process's life: held by a library, not tensors the
/// program left live. The clean samples pass `--max-tensors-at-exit 0`
/// (each held 65 MiB of such workspaces at exit, which failed it), and
/// the workspaces are counted as the library's. Where the program wrote
/// what torch still held once it had dropped every object (its truth's
/// `left_allocated`: the workspaces, some made lazily on Python threads,
/// one for a side stream), that is exactly the library's count.
#[test]
fn library_workspaces_are_not_tensors_at_exit() {
    for name in [
        "torch_native",
        "torch_async",
        "torch_growth",
        "torch_leak",
        "torch_activations",
        "torch_private_pools",
    ] {
        let trace = format!("{name}.bin");
        let o = check(&trace, &["--max-tensors-at-exit", "0"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", out(&o));
        let a = export_json(&sample(&trace), &scratch("workspaces"));
        let e = &a["frameworks"][0]["at_exit"];
        assert_eq!(e["live_tensors"], 0, "{name}: {e}");
        assert!(e["library_tensors"].as_u64().unwrap() > 0, "{name}: {e}");
        if matches!(name, "torch_activations" | "torch_private_pools") {
            let t: serde_json::Value = serde_json::from_slice(
                &std::fs::read(sample(&format!("{name}.truth.json"))).unwrap(),
            )
            .unwrap();
            let left = &t["left_allocated"];
            assert_eq!(e["library_bytes"], left["bytes"], "{name}: {e}");
            assert_eq!(e["library_tensors"], left["blocks"], "{name}: {e}");
        }
    }
}
