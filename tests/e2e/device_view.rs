//! The device's own view: the collector samples NVML (here the stand-in
//! tests/fake_cupti/fake_nvml.c, which reports what its environment says)
//! and the report takes each sample apart beside what the trace tracked.
//! fake_app's `device_view` scenario keeps 3 MiB live and then fails a
//! 2 TiB request.

use serde_json::Value;

use crate::util::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Records the scenario with the stand-in NVML set by `env`, and returns
/// the analysis (`export --format json`) and the summary `report` prints.
fn recorded(name: &str, env: &[(&str, String)]) -> (Value, String) {
    let dir = scratch(name);
    let mut cmd = record_cmd(&dir, "t.bin", &["device_view"]);
    cmd.env("GMEM_PROF_NVML", fake_nvml());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a = export_json(&dir.join("t.bin"), &dir);
    let summary = report_summary(&dir.join("t.bin"), &dir.join("report"));
    // The memory chart draws what nvidia-smi showed beside the live bytes.
    let chart = std::fs::read_to_string(dir.join("report/t-device0-memory.svg")).unwrap();
    assert!(chart.contains("used on the device (nvidia-smi)"));
    (a, summary)
}

#[test]
fn nvidia_smi_taken_apart_into_tracked_contexts_others_and_the_driver() {
    // 6 GiB used: 1 GiB charged to this process (3 MiB of it tracked),
    // 4 GiB to one other process, so 1 GiB to none; the driver keeps
    // 512 MiB apart (neither used nor free).
    let (a, summary) = recorded(
        "device-view",
        &[
            ("FAKE_NVML_USED", (6 * GIB).to_string()),
            ("FAKE_NVML_PROCESS", GIB.to_string()),
            ("FAKE_NVML_OTHERS", (4 * GIB).to_string()),
        ],
    );
    let v = &a["devices"][0]["device_view"];
    assert!(v["samples"].as_u64().unwrap() >= 3, "{v}");
    let h = &v["highest"];
    assert_eq!(h["used_bytes"], 6 * GIB);
    assert_eq!(h["total_bytes"], 80 * GIB);
    assert_eq!(h["free_bytes"], 74 * GIB - 512 * MIB);
    assert_eq!(h["driver_reserved_bytes"], 512 * MIB);
    assert_eq!(h["tracked_bytes"], 3 * MIB);
    assert_eq!(h["run_processes_bytes"], GIB);
    assert_eq!(h["context_and_untracked_bytes"], GIB - 3 * MIB);
    assert_eq!(h["other_processes_bytes"], 4 * GIB);
    assert_eq!(h["other_processes"], 1);
    assert_eq!(h["unattributed_bytes"], GIB);
    assert_eq!(v["last"]["reason"], "exit");
    // The failed 2 TiB request has the sample taken right after it.
    let oom = &a["ooms"][0];
    assert_eq!(oom["requested_bytes"], 2048 * GIB);
    assert_eq!(oom["device_view"]["reason"], "failed allocation");
    assert_eq!(oom["device_view"]["free_bytes"], 74 * GIB - 512 * MIB);
    assert_eq!(oom["device_view"]["tracked_bytes"], 3 * MIB);
    assert!(
        summary.contains("nvidia-smi showed 6.00 GiB used of 80.0 GiB (73.5 GiB free) at ")
            && summary.contains(
                "3.00 MiB in allocations the trace tracked, 1021 MiB in this run's CUDA contexts"
            )
            && summary.contains("4.00 GiB used by 1 other process, 1.00 GiB charged to no process; the driver keeps another 512 MiB"),
        "{summary}"
    );
}

#[test]
fn a_process_nvml_does_not_list_is_said_not_guessed() {
    // In a container NVML lists the host's pids: the process's share is
    // unknown, and no split is made up.
    let (a, summary) = recorded(
        "device-view-container",
        &[
            ("FAKE_NVML_PROCESS", "none".into()),
            ("FAKE_NVML_OTHERS", "0".into()),
        ],
    );
    let h = &a["devices"][0]["device_view"]["highest"];
    assert_eq!(h["tracked_bytes"], 3 * MIB);
    assert!(h["run_processes_bytes"].is_null(), "{h}");
    assert!(h["context_and_untracked_bytes"].is_null(), "{h}");
    assert_eq!(h["other_processes"], 0);
    assert!(
        summary.contains("NVML did not list this run's processes"),
        "{summary}"
    );
}

#[test]
fn without_nvml_there_is_no_device_view_and_the_trace_says_why() {
    let dir = scratch("device-view-none");
    let mut cmd = record_cmd(&dir, "t.bin", &["device_view"]);
    cmd.env("GMEM_PROF_NVML", dir.join("no-such-libnvidia-ml.so"));
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = dump_json(&dir.join("t.bin"));
    assert!(of_type(&recs, "DeviceMemory").is_empty());
    assert!(
        of_type(&recs, "Message")
            .iter()
            .any(|m| m["text"].as_str().unwrap().contains("no device view")),
        "{recs:?}"
    );
    let a = export_json(&dir.join("t.bin"), &dir);
    assert!(a["devices"][0].get("device_view").is_none());
}
