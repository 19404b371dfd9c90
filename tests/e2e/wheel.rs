//! The pip package: a wheel built by the repository's own backend
//! (python/gmem_prof_build.py), installed into a fresh virtual environment
//! with no Rust on its PATH, runs `report` on a sample, `record` over the
//! fake driver (its collector found beside its binary), `python -m
//! gmem_prof` and `gmem_prof.analyze()`. CI hands it the release wheel
//! `pip wheel .` built (`GMEM_PROF_TEST_WHEEL`); without it the test packs
//! this build's debug binaries. With auditwheel at hand
//! (`GMEM_PROF_TEST_AUDITWHEEL`) the wheel's manylinux tag is checked.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::util::*;

/// The wheel to test: CI's, or one packed now from the debug build.
fn wheel(dir: &Path) -> PathBuf {
    if let Some(w) = std::env::var_os("GMEM_PROF_TEST_WHEEL") {
        return PathBuf::from(w);
    }
    let out = dir.join("wheels");
    let o = run(Command::new("python3")
        .args([
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "-q",
        ])
        .arg("-w")
        .arg(&out)
        .arg(repo())
        .env("GMEM_PROF_PREBUILT", gmem().parent().unwrap()));
    assert!(o.status.success(), "pip wheel: {}", stderr(&o));
    let found: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

/// A command of the virtual environment `venv` (or a path), with only it
/// and the system's folders on PATH (no cargo, no rustc).
fn in_venv(venv: &Path, program: &str) -> Command {
    let mut cmd = Command::new(venv.join("bin").join(program));
    cmd.env_clear().env("HOME", venv).env(
        "PATH",
        format!("{}:/usr/bin:/bin", venv.join("bin").display()),
    );
    cmd
}

#[test]
fn the_wheel_installs_and_runs_with_no_rust() {
    let dir = scratch("wheel");
    let wheel = wheel(&dir);
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let tag = name
        .strip_suffix(".whl")
        .and_then(|n| n.rsplit('-').next())
        .unwrap()
        .to_string();
    assert!(
        tag.starts_with("manylinux_2_") && tag.ends_with("_x86_64"),
        "{name}"
    );
    let venv = dir.join("venv");
    let o = run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    assert!(o.status.success(), "venv: {}", stderr(&o));
    let o = run(in_venv(&venv, "python")
        .args(["-m", "pip", "install", "-q", "--no-index"])
        .arg(&wheel));
    assert!(o.status.success(), "pip install: {}", stderr(&o));
    let o = run(in_venv(&venv, "/bin/sh").args(["-c", "command -v cargo || command -v rustc"]));
    assert!(!o.status.success(), "Rust is on the venv's PATH");

    // The installed command reports on a sample as the build's own does.
    let sample = sample("torch_leak.bin");
    let o = run(in_venv(&venv, "gmem-prof")
        .args(["report", "-q"])
        .arg(&sample)
        .arg("-o")
        .arg(dir.join("report")));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page: Value =
        serde_json::from_slice(&std::fs::read(dir.join("report/torch_leak.json")).unwrap())
            .unwrap();
    let ours = export_json(&sample, &dir);
    let peak = &ours["devices"][0]["peak_bytes"];
    assert_eq!(&page["devices"][0]["peak_bytes"], peak);

    // `python -m gmem_prof` is the same command; analyze() reads traces.
    let o = run(in_venv(&venv, "python").args(["-m", "gmem_prof", "--version"]));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("gmem-prof "),
        "{}",
        stderr(&o)
    );
    let o = run(in_venv(&venv, "python").args([
        "-c",
        "import gmem_prof, sys; print(gmem_prof.analyze(sys.argv[1])['devices'][0]['peak_bytes'])",
        sample.to_str().unwrap(),
    ]));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        peak.to_string(),
        "{}",
        stderr(&o)
    );

    // pytest finds its plugin through the package's entry point.
    let o = run(in_venv(&venv, "python").args([
        "-c",
        "from importlib.metadata import entry_points; \
         print([e.value for e in entry_points(group='pytest11')])",
    ]));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "['gmem_prof.pytest_plugin']",
        "{}",
        stderr(&o)
    );

    // It records, its collector found beside its binary.
    let o = run(in_venv(&venv, "gmem-prof")
        .current_dir(&dir)
        .args(["record", "-o", "t.bin", "--cupti"])
        .arg(&fake().cupti)
        .arg("--")
        .arg(&fake().app)
        .arg("steps"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        export_json(&dir.join("t.bin"), &dir)["steps"][0]["count"],
        10
    );

    // auditwheel agrees with the tag.
    if let Some(package) = python_package("GMEM_PROF_TEST_AUDITWHEEL", "auditwheel") {
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "auditwheel", "show"]).arg(&wheel);
        if let Some(p) = package {
            cmd.env("PYTHONPATH", p);
        }
        let o = run(&mut cmd);
        let said = String::from_utf8_lossy(&o.stdout).replace('\n', " ");
        assert!(
            said.contains(&format!(
                "consistent with the following platform tag: \"{tag}\""
            )),
            "{said} {}",
            stderr(&o)
        );
    } else {
        eprintln!(
            "auditwheel not checked: pip install auditwheel, or set GMEM_PROF_TEST_AUDITWHEEL"
        );
    }
}
