//! JAX's and CuPy's pools as the frameworks count them, read inside the
//! program by the Python bootstrap `record` puts on the path
//! (collector/python/sitecustomize.py). Here over stand-in `jax` and `cupy`
//! modules (tests/fake_cupti/stand_ins) whose figures the program sets.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

const MIB: u64 = 1 << 20;

/// Records fake_app.py's `pools` scenario with a sitecustomize of the
/// program's own on PYTHONPATH, which must still run.
fn record_pools(name: &str, flags: &[&str]) -> (Scratch, std::process::Output) {
    let dir = scratch(name);
    let own = dir.join("own");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("sitecustomize.py"),
        "import os\nopen(os.environ['OWN_MARK'], 'w').write('ran')\n",
    )
    .unwrap();
    let mut cmd = record_python(
        &dir,
        "t.bin",
        flags,
        Path::new("python3"),
        &[OsStr::new("pools")],
    );
    cmd.env("PYTHONPATH", &own)
        .env("OWN_MARK", dir.join("own-ran"))
        .env("GMEM_PROF_POOL_MS", "10");
    let out = run(&mut cmd);
    (dir, out)
}

fn readings(recs: &[Value], framework: u64) -> Vec<&Value> {
    of_type(recs, "PoolUsage")
        .into_iter()
        .filter(|u| u["framework"] == framework)
        .collect()
}

#[test]
fn jax_and_cupy_pools_are_read_inside_the_program() {
    let (dir, out) = record_pools("pools", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        dir.join("own-ran").exists(),
        "the program's own sitecustomize did not run"
    );
    let recs = dump_json(&dir.join("t.bin"));

    // JAX: nothing before its backend started (the stand-in counts a
    // backend started by anyone but the program: the program exits 1 then),
    // then each state once (readings repeat only when figures change),
    // and the reading at exit.
    let jax = readings(&recs, 1);
    let in_use: Vec<u64> = jax.iter().map(|u| u["in_use"].as_u64().unwrap()).collect();
    assert_eq!(in_use, [10 * MIB, 30 * MIB, 5 * MIB, 5 * MIB], "{jax:?}");
    let last = jax.last().unwrap();
    assert_eq!(last["reason"], 1, "the last reading is the exit's");
    assert_eq!(last["peak_in_use"], 50 * MIB);
    assert_eq!(last["pool"], 1u64 << 30);
    assert_eq!(last["limit"], 1u64 << 30);

    let cupy = readings(&recs, 2);
    let used: Vec<u64> = cupy.iter().map(|u| u["in_use"].as_u64().unwrap()).collect();
    assert_eq!(used, [3 * MIB, MIB, MIB], "{cupy:?}");
    assert!(cupy
        .iter()
        .all(|u| u["pool"] == 8 * MIB && u["peak_in_use"] == u64::MAX));

    // The analysis: JAX's own peak (the 50 MiB spike no reading saw),
    // CuPy's highest reading, each with its pool.
    let a = export_json(&dir.join("t.bin"), &dir);
    let pools = a["framework_pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2, "{pools:?}");
    let jax = pools
        .iter()
        .find(|p| p["framework"].as_str().unwrap().starts_with("JAX"))
        .unwrap();
    assert_eq!(jax["in_use_peak"], 50 * MIB);
    assert_eq!(jax["in_use_peak_exact"], true);
    assert_eq!(jax["pool_peak"], 1u64 << 30);
    assert_eq!(jax["last"]["in_use"], 5 * MIB);
    assert_eq!(jax["last"]["at_exit"], true);
    let curve_max = jax["in_use"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["max"].as_u64().unwrap())
        .max();
    assert_eq!(curve_max, Some(30 * MIB), "the curve holds what was read");
    let cupy = pools
        .iter()
        .find(|p| p["framework"].as_str().unwrap().starts_with("CuPy"))
        .unwrap();
    assert_eq!(cupy["in_use_peak"], 3 * MIB);
    assert_eq!(cupy["in_use_peak_exact"], false);
    assert_eq!(cupy["pool_peak"], 8 * MIB);

    let report = dir.join("report");
    let text = report_summary(&dir.join("t.bin"), &report);
    assert!(
        text.contains("JAX (XLA's BFC allocator), pid") && text.contains("its arrays used at most 50.0 MiB (the framework's own peak) of the 1.00 GiB the pool held from CUDA"),
        "{text}"
    );
    assert!(text.contains("CuPy's memory pool, pid"), "{text}");
    // Under the device's peak too, where the pool is counted whole.
    assert!(
        text.contains("holds 1.00 GiB as its pool; its arrays used at most 50.0 MiB of it"),
        "{text}"
    );
    let html = std::fs::read_to_string(report.join("t.html")).unwrap();
    assert!(html.contains("Inside JAX's and CuPy's pools"));
    assert!(report
        .join(format!("t-pid{}-device0-pool-memory.svg", jax["pid"]))
        .exists());
}

/// --no-frameworks: no bootstrap, no readings; PYTHONPATH as the user set it.
#[test]
fn no_frameworks_reads_no_pools() {
    let (dir, out) = record_pools("pools-off", &["--no-frameworks"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(dir.join("own-ran").exists());
    let recs = dump_json(&dir.join("t.bin"));
    assert!(of_type(&recs, "PoolUsage").is_empty());
}

fn pools_of(trace: &str, name: &str) -> Vec<Value> {
    let a = export_json(&sample(trace), &scratch(&format!("pools-{name}")));
    a["framework_pools"].as_array().cloned().unwrap_or_default()
}

/// jax_train.py on the H200 (traces/samples/jax.bin): JAX's pool and its
/// arrays' peak equal what the program itself read from memory_stats() at
/// its end (jax.stats.json), exactly.
#[test]
fn jax_sample_pool_and_peak_are_jaxs_own() {
    let stats: Value =
        serde_json::from_slice(&std::fs::read(sample("jax.stats.json")).unwrap()).unwrap();
    let pools = pools_of("jax.bin", "jax");
    assert_eq!(pools.len(), 1, "{pools:?}");
    let p = &pools[0];
    assert_eq!(p["framework"], "JAX (XLA's BFC allocator)");
    assert_eq!(p["in_use_peak"], stats["peak_bytes_in_use"]);
    assert_eq!(p["in_use_peak_exact"], true);
    assert_eq!(p["pool_peak"], stats["pool_bytes"]);
    assert_eq!(p["limit"], stats["bytes_limit"]);
    assert_eq!(p["last"]["at_exit"], true);
}

/// cupy_pool.py on the H200: the program read CuPy's used_bytes() and
/// total_bytes() after each step (cupy_pool.truth.json); each of those
/// states is a reading in the trace, in order, and the view's figures are
/// their highest.
#[test]
fn cupy_sample_readings_follow_the_programs_own() {
    let truth: Value =
        serde_json::from_slice(&std::fs::read(sample("cupy_pool.truth.json")).unwrap()).unwrap();
    let steps: Vec<(u64, u64)> = truth["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["used"].as_u64().unwrap(), s["total"].as_u64().unwrap()))
        .collect();
    let recs = dump_json(&sample("cupy_pool.bin"));
    let read: Vec<(u64, u64)> = readings(&recs, 2)
        .iter()
        .map(|u| (u["in_use"].as_u64().unwrap(), u["pool"].as_u64().unwrap()))
        .collect();
    let mut at = 0;
    for step in &steps {
        at += read[at..]
            .iter()
            .position(|r| r == step)
            .unwrap_or_else(|| panic!("{step:?} not read in order: {read:?}"));
    }
    let pools = pools_of("cupy_pool.bin", "cupy");
    assert_eq!(pools.len(), 1, "{pools:?}");
    let p = &pools[0];
    assert_eq!(p["in_use_peak"], steps.iter().map(|s| s.0).max().unwrap());
    assert_eq!(p["pool_peak"], steps.iter().map(|s| s.1).max().unwrap());
    assert_eq!(p["in_use_peak_exact"], false);
    assert_eq!(
        p["last"]["pool"], 0,
        "free_all_blocks() gave everything back"
    );
}

/// CuPy's pool takes a 1 MiB chunk from CUDA at each step of a loop
/// (fake_app.py `cupy_kept`, `cupy_freed`). Where the loop keeps its
/// arrays, CuPy's own count of arrays in use rises with the chunks: the
/// line keeps growing, by most of its 60 MiB. Where it frees them at once,
/// only the pool's cache grows, which is no growth of the program's.
#[test]
fn cupy_pool_growth_is_judged_on_its_own_readings() {
    let line = marked_lines(&repo().join("tests/fake_cupti/fake_app.py"))["cupy_step"];
    for (scenario, grows) in [("cupy_kept", true), ("cupy_freed", false)] {
        let dir = scratch(scenario);
        let mut cmd = record_python(
            &dir,
            "t.bin",
            &[],
            Path::new("python3"),
            &[OsStr::new(scenario)],
        );
        cmd.env("GMEM_PROF_POOL_MS", "10");
        let out = run(&mut cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let out = run(std::process::Command::new(gmem())
            .args(["export", "-q", "--format", "json", "-o"])
            .arg(dir.join("a.json"))
            .arg(dir.join("t.bin")));
        assert!(out.status.success(), "{}", stderr(&out));
        let a: Value = serde_json::from_slice(&std::fs::read(dir.join("a.json")).unwrap()).unwrap();
        let growth = a["growth"].as_array().unwrap();
        if !grows {
            assert!(growth.is_empty(), "{scenario}: {growth:?}");
            continue;
        }
        assert_eq!(growth.len(), 1, "{scenario}: {growth:?}");
        let site = &a["sites"][growth[0]["site"].as_u64().unwrap() as usize];
        assert_eq!(site["allocator"], "CuPy's memory pool");
        assert!(
            site["label"]
                .as_str()
                .unwrap()
                .starts_with("segments of CuPy's memory pool taken for "),
            "{site}"
        );
        let step = format!("fake_app.py:{line}");
        assert!(
            site["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["location"].as_str().unwrap().ends_with(&step)),
            "{site}"
        );
        let g = growth[0]["growth_bytes"].as_u64().unwrap();
        // The judged part is 75% of the time the loop allocated.
        assert!((40 * MIB..=60 * MIB).contains(&g), "{g}");
    }
}
