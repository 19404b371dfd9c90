//! The pytest plugin (`pytest --gmem-prof`, collector/python/gmem_prof/
//! pytest_plugin.py) over the fake driver: tests/fake_cupti/test_gpu_limits.py
//! holds a test within its memory limit, one over it, one that leaks past
//! its leak limit, one with no limit and one whose steps grow past its
//! growth limit; pytest, fetched by .ci/run, runs
//! them with the plugin loaded as the pip package registers it.

use crate::util::*;

#[test]
fn pytest_judges_gpu_memory_limits_and_names_the_lines() {
    let Some(package) = python_package("GMEM_PROF_TEST_PYTEST", "pytest") else {
        eprintln!("skipped: no `pytest` Python package (pip install pytest, or set GMEM_PROF_TEST_PYTEST)");
        return;
    };
    let dir = scratch("pytest");
    let tests = repo().join("tests/fake_cupti/test_gpu_limits.py");
    let lines = marked_lines(&tests);
    let o = run(python_with_gmem_prof(&dir, package)
        .args([
            "-m",
            "pytest",
            "-p",
            "gmem_prof.pytest_plugin",
            "--gmem-prof",
            "-q",
            "-p",
            "no:cacheprovider",
        ])
        .arg(&tests));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(1),
        "two tests fail: {said}{}",
        stderr(&o)
    );
    assert!(said.contains("3 failed, 2 passed"), "{said}");
    // The growing test: 1 MiB kept per step after its first, at its line.
    assert!(
        said.contains("test_grows_each_step kept per step 1.00 MiB of GPU memory (CUDA allocations), over its limit of 512.00 KiB (limit_gpu_growth)"),
        "{said}"
    );
    let growth_line = format!(
        "called from test_grows_each_step at test_gpu_limits.py:{}",
        lines["growth"]
    );
    assert!(
        said.lines()
            .any(|l| l.trim_start().starts_with("1.00 MiB") && l.ends_with(&growth_line)),
        "{said}"
    );
    // The test over its limit: what it took, the limit, its line.
    assert!(
        said.contains("test_over_its_limit took 16.00 MiB of GPU memory (CUDA allocations), over its limit of 8.00 MiB (limit_gpu_memory)"),
        "{said}"
    );
    // The leaking test: what it left live, at its line.
    assert!(
        said.contains("test_leaks left live 2.00 MiB of GPU memory (CUDA allocations), over its limit of 0 B (limit_gpu_leaks)"),
        "{said}"
    );
    let leak_line = format!(
        "called from test_leaks at test_gpu_limits.py:{}",
        lines["leak"]
    );
    assert!(
        said.lines()
            .any(|l| l.trim_start().starts_with("2.00 MiB") && l.ends_with(&leak_line)),
        "{said}"
    );
    // What the test over its limit took it freed before it ended: the
    // sites that held it at its highest are named, with its line.
    let over_line = format!("test_gpu_limits.py:{}", lines["over"]);
    assert!(
        said.contains("the sites that held most at its highest:"),
        "{said}"
    );
    assert!(
        said.lines()
            .any(|l| l.trim_start().starts_with("16.00 MiB") && l.contains(&over_line)),
        "{said}"
    );
    // The summary: every test's figures, the most first; the trace and,
    // with failures, a report.
    let summary = said
        .split("gmem-prof: GPU memory per test")
        .nth(1)
        .unwrap_or("");
    let order: Vec<&str> = summary
        .lines()
        .filter_map(|l| l.rsplit("::").next().filter(|_| l.contains(" taken, ")))
        .collect();
    assert_eq!(
        order,
        [
            "test_over_its_limit",
            "test_grows_each_step",
            "test_within_its_limit",
            "test_leaks",
            "test_without_limit"
        ],
        "{summary}"
    );
    assert!(dir.join(".gmem-prof/pytest.bin").is_file());
    assert!(dir.join(".gmem-prof/report/pytest.html").is_file());
}
