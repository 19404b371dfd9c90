//! PyTorch memory snapshot pickles: `export --format torch-snapshot` of the
//! real samples, read back by `report` with the allocator's figures of the
//! recorded trace; Python's own pickle module reads the export, whose
//! segments add up as PyTorch's `_memory_viz` requires; hostile and broken
//! pickles are refused with a clear error.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::util::*;

fn export_snapshot(trace: &Path, out: &Path) -> String {
    let o = run(Command::new(gmem())
        .args(["export", "--format", "torch-snapshot", "-o"])
        .arg(out)
        .arg(trace));
    assert!(o.status.success(), "export failed: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The framework view of an analysis: per device, the allocated peak, the
/// reserved peak, tensors and their bytes at the end (a CUDA library's
/// workspaces among them: a snapshot does not tell them apart), OOMs.
fn allocator_figures(a: &Value) -> Vec<(u64, u64, u64, u64, u64, usize)> {
    a["frameworks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["device"].as_u64().unwrap(),
                f["allocated_peak"].as_u64().unwrap(),
                f["reserved_peak"].as_u64().unwrap(),
                f["at_exit"]["live_tensors"].as_u64().unwrap()
                    + f["at_exit"]["library_tensors"].as_u64().unwrap(),
                f["at_exit"]["live_tensor_bytes"].as_u64().unwrap()
                    + f["at_exit"]["library_bytes"].as_u64().unwrap(),
                f["ooms"].as_array().map_or(0, Vec::len),
            )
        })
        .collect()
}

/// The tensor sites, largest at the allocated peak first: their program
/// line (a CUDA library's workspace by the line it was made under: which
/// of the library's inlined functions names it may differ, as the
/// snapshot keeps one frame per function) and bytes.
fn tensor_sites(a: &Value) -> Vec<(String, u64)> {
    a["tensor_sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["label"]
                    .as_str()
                    .unwrap()
                    .rsplit(" under ")
                    .next()
                    .unwrap()
                    .to_string(),
                s["total_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn exported_snapshots_read_back_with_the_traces_allocator_figures() {
    let dir = scratch("snapshot-roundtrip");
    for name in [
        "torch_leak",
        "torch_fragment",
        "torch_oom",
        "torch_private_pools",
    ] {
        let trace = sample(&format!("{name}.bin"));
        let pickle = dir.join(format!("{name}.pickle"));
        let said = export_snapshot(&trace, &pickle);
        assert!(said.contains("PyTorch memory snapshot of pid"), "{said}");
        let before = export_json(&trace, &dir);
        let after = export_json(&pickle, &dir);
        assert_eq!(
            allocator_figures(&after),
            allocator_figures(&before),
            "{name}: the allocator's figures"
        );
        assert_eq!(tensor_sites(&after), tensor_sites(&before), "{name}: sites");
    }
}

/// Python's pickle reads the export, and its segments add up as
/// `torch.cuda._memory_viz.segsum` asserts (each segment's blocks tile it;
/// allocated and free make the total); replaying the history from the
/// blocks live at its start ends in the blocks the segments hold.
#[test]
fn python_reads_the_export_and_its_state_matches_its_history() {
    let dir = scratch("snapshot-python");
    let pickle = dir.join("torch_leak.pickle");
    export_snapshot(&sample("torch_leak.bin"), &pickle);
    let check = r#"
import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
reserved = allocated = 0
live_end = {}
for seg in s["segments"]:
    at = seg["address"]
    for b in seg["blocks"]:
        assert b["address"] == at, (hex(at), b)
        at += b["size"]
        if b["state"] == "active_allocated":
            allocated += b["size"]
            live_end[b["address"]] = b["size"]
    assert at == seg["address"] + seg["total_size"]
    reserved += seg["total_size"]
live = {}
segs = {}
for e in s["device_traces"][0]:
    a = e["action"]
    if a == "alloc": live[e["addr"]] = e["size"]
    elif a == "free_completed": live.pop(e["addr"])
    elif a == "segment_alloc": segs[e["addr"]] = e["size"]
    elif a == "segment_free": segs.pop(e["addr"])
assert set(live) == set(live_end), (len(live), len(live_end))
assert sum(segs.values()) == reserved
frames = s["device_traces"][0][1]["frames"]
print(len(s["device_traces"][0]), reserved, allocated, len(live), frames[0]["filename"], frames[0]["line"])
"#;
    let o = run(Command::new("python3").arg("-c").arg(check).arg(&pickle));
    assert!(o.status.success(), "python: {}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let f: Vec<&str> = out.split_whitespace().collect();
    let truth: Value =
        serde_json::from_slice(&std::fs::read(sample("torch_leak.truth.json")).unwrap()).unwrap();
    // What torch_leak.py left live and reserved at its end, as PyTorch said.
    let torch = &truth["torch"];
    assert_eq!(
        f[1].parse::<u64>().unwrap(),
        torch["reserved_bytes.all.current"].as_u64().unwrap(),
        "{out}"
    );
    assert!(f[4].ends_with(".py"), "a Python frame first: {out}");
}

#[test]
fn pickles_that_are_not_snapshots_are_refused_clearly() {
    let dir = scratch("snapshot-bad");
    let cases: [(&str, &[u8], &str); 4] = [
        // pickle.dumps(os.system): it would import and call.
        (
            "code.pickle",
            b"\x80\x02cposix\nsystem\nq\x00.",
            "builds Python objects (GLOBAL)",
        ),
        // pickle.dumps([1, 2, 3]) cut short.
        (
            "cut.pickle",
            b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K",
            "ends in the middle",
        ),
        // pickle.dumps({"a": 1}): a pickle, not a snapshot.
        (
            "dict.pickle",
            b"\x80\x04\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.",
            "no \"segments\"",
        ),
        // pickle.dumps(3).
        ("int.pickle", b"\x80\x04K\x03.", "neither a dict nor a list"),
    ];
    for (name, bytes, why) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let o = run(Command::new(gmem())
            .arg("report")
            .arg("-o")
            .arg(&*dir)
            .arg(&path));
        assert_eq!(o.status.code(), Some(2), "{name}");
        let e = stderr(&o);
        assert!(e.contains("as a PyTorch memory snapshot"), "{name}: {e}");
        assert!(e.contains(why), "{name}: {e}");
    }
}

#[test]
fn export_never_overwrites_its_input() {
    let dir = scratch("snapshot-self");
    let pickle = dir.join("run.pickle");
    export_snapshot(&sample("torch_fragment.bin"), &pickle);
    let before = std::fs::read(&pickle).unwrap();
    let o = run(Command::new(gmem())
        .args(["export", "--format", "torch-snapshot", "-o"])
        .arg(&pickle)
        .arg(&pickle));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is the input"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&pickle).unwrap(), before);
}
