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
/// blocks live at its start ends in the blocks the segments hold; it uses
/// only the protocols (2 to 4) and opcodes PyTorch's browser viewer reads.
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
# Only opcodes the JavaScript unpickler of PyTorch's viewer
# (torch/utils/viz/MemoryViz.js) handles.
import pickletools
viewer = {"PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
          "EMPTY_LIST", "LIST", "APPEND", "APPENDS", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
          "TUPLE3", "SHORT_BINUNICODE", "BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1",
          "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET",
          "LONG_BINGET"}
used = {op.name for op, _, _ in pickletools.genops(open(sys.argv[1], "rb"))}
assert used <= viewer, used - viewer
proto = next(arg for op, arg, _ in pickletools.genops(open(sys.argv[1], "rb")) if op.name == "PROTO")
assert 2 <= proto <= 4, proto
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

/// A snapshot PyTorch itself wrote (traces/samples/torch_snapshot.pickle,
/// from tests/gpu/torch_snapshot.py on the GPU machine) reads with
/// PyTorch's own figures of that moment and run, kept beside it: the
/// allocated and reserved peaks (`memory_stats`), the tensors and
/// segments at the end (`memory_allocated`, `_memory_viz stats`), the
/// segments taken and given back, its one out-of-memory error; the kept
/// tensors at their line. The ring that kept only the last 400 events
/// ends in the same state, and says what it lost.
#[test]
fn a_snapshot_pytorch_wrote_reads_with_pytorchs_figures() {
    let dir = scratch("snapshot-torch");
    for (name, ring) in [("torch_snapshot", false), ("torch_snapshot_ring", true)] {
        let truth: Value =
            serde_json::from_slice(&std::fs::read(sample(&format!("{name}.truth.json"))).unwrap())
                .unwrap();
        let a = export_json(&sample(&format!("{name}.pickle")), &dir);
        let f = &a["frameworks"][0];
        let u = |v: &Value| v.as_u64().unwrap();
        let at_end = u(&f["at_exit"]["live_tensor_bytes"]) + u(&f["at_exit"]["library_bytes"]);
        assert_eq!(
            at_end,
            u(&truth["allocated"]),
            "{name}: memory_allocated at the end"
        );
        let reserved_at_end: u64 = a["frameworks"][0]["reserved"]
            .as_array()
            .unwrap()
            .last()
            .map(|p| u(&p["last"]))
            .unwrap();
        assert_eq!(
            reserved_at_end,
            u(&truth["reserved"]),
            "{name}: memory_reserved"
        );
        // _memory_viz's `stats` of the same snapshot: its segments.
        let stats = truth["memory_viz_stats"].as_str().unwrap();
        assert!(
            stats.contains(&format!("segments: {}", u(&truth["segments"]))),
            "{stats}"
        );
        let messages = a["processes"][0]["messages"].to_string();
        if ring {
            assert!(messages.contains("were already live"), "{messages}");
            continue;
        }
        assert!(!messages.contains("were already live"), "{messages}");
        assert_eq!(
            u(&f["allocated_peak"]),
            u(&truth["allocated_peak"]),
            "{name}"
        );
        assert_eq!(u(&f["reserved_peak"]), u(&truth["reserved_peak"]), "{name}");
        assert_eq!(
            (u(&f["segments_allocated"]), u(&f["segments_freed"])),
            (u(&truth["num_device_alloc"]), u(&truth["num_device_free"])),
            "{name}: cudaMalloc and cudaFree of segments"
        );
        // Its one out-of-memory error (1 PiB asked), at its line.
        let ooms = f["ooms"].as_array().unwrap();
        assert_eq!(ooms.len() as u64, u(&truth["num_ooms"]));
        let site = &a["tensor_sites"][ooms[0]["site"].as_u64().unwrap() as usize];
        let oom_line = format!("torch_snapshot.py:{}", truth["lines"]["oom"]);
        assert!(
            site["label"].as_str().unwrap().ends_with(&oom_line),
            "{site}"
        );
        assert_eq!(u(&ooms[0]["requested_bytes"]), 1 << 50);
        // The 12 kept 3 MiB tensors, at their line (in blocks of 3 MiB, or
        // 4 MiB where the allocator does not split one).
        let kept_line = format!("torch_snapshot.py:{}", truth["lines"]["kept"]);
        let kept = a["tensor_sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["label"].as_str().unwrap().ends_with(&kept_line))
            .unwrap_or_else(|| panic!("no site at {kept_line}"));
        assert_eq!(u(&kept["live_at_exit_count"]), u(&truth["steps"]), "{kept}");
        let bytes = u(&kept["live_at_exit_bytes"]);
        let asked = u(&truth["kept_bytes"]);
        assert!(asked <= bytes && bytes <= asked / 3 * 4, "{kept}");
    }
}
