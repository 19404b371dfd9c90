//! What to change: each remedy appears with its evidence, on the real
//! samples where one shows the case, and on no sample without it.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

const MIB: u64 = 1 << 20;

fn analysis(trace: &Path, name: &str) -> Value {
    export_json(trace, &scratch(&format!("remedies-analysis-{name}")))
}

fn remedies(a: &Value) -> Vec<Value> {
    a.get("remedies")
        .and_then(|r| r.as_array().cloned())
        .unwrap_or_default()
}

fn truth(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(sample(&format!("{name}.truth.json"))).unwrap()).unwrap()
}

fn summary(name: &str) -> String {
    let dir = scratch(&format!("remedies-report-{name}"));
    report_summary(&sample(&format!("{name}.bin")), &dir)
}

#[test]
fn an_oom_against_the_memory_fraction_names_the_fraction_that_fits() {
    // torch_fraction_oom.py: fraction 0.05, 256 MiB tensors until refused.
    let a = analysis(&sample("torch_fraction_oom.bin"), "fraction");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    let r = &r[0];
    assert_eq!(r["kind"], "memory_fraction");
    assert_eq!(r["fraction"], 0.05);
    assert_eq!(r["requested_bytes"], 256 * MIB);
    // What was allocated plus the request, as a share of the device,
    // rounded up to the hundredth: (7,247,757,312 + 268,435,456) /
    // 150,109,880,320 = 0.0501 → 0.06.
    let needed = (r["allocated_bytes"].as_u64().unwrap() + r["requested_bytes"].as_u64().unwrap())
        as f64
        / r["device_total_bytes"].as_u64().unwrap() as f64;
    assert!(r["needed_fraction"].as_f64().unwrap() >= needed);
    assert_eq!(r["needed_fraction"], 0.06);
    assert_eq!(
        r["change"],
        "torch.cuda.set_per_process_memory_fraction(0.06)"
    );
    let t = truth("torch_fraction_oom");
    let line = t["lines"]["oom"].as_u64().unwrap();
    assert_eq!(r["site"], format!("main at torch_fraction_oom.py:{line}"));
    let s = summary("torch_fraction_oom");
    // The first screen: why it ran out, then what to change.
    assert!(
        s.starts_with(&format!(
            "RAN OUT OF MEMORY: PyTorch raised OutOfMemoryError for 256 MiB at main at torch_fraction_oom.py:{line} (pid 672, device 0, at 4.3 ms): refused by the memory fraction: 6.99 GiB allowed of 140 GiB"
        )),
        "{s}"
    );
    let change = s.find("WHAT TO CHANGE").expect("what to change");
    assert!(change < s.find("1 process, 1 device").unwrap(), "{s}");
    assert!(s.contains("set_per_process_memory_fraction(0.06)"), "{s}");
}

#[test]
fn a_request_larger_than_the_device_asks_for_smaller_pieces() {
    // oom.cu asks for 1 TiB once (try_huge, line 17) on the 140 GiB H200,
    // and later fills the device in 16 GiB steps: only the first is larger
    // than the device. torch_oom.py's last request is 300 GB.
    let a = analysis(&sample("oom.bin"), "oom");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["kind"], "larger_than_device");
    assert_eq!(r[0]["requested_bytes"], 1u64 << 40);
    assert_eq!(r[0]["site"], "try_huge at oom.cu:17");
    assert!(r[0]["device_total_bytes"].as_u64().unwrap() < 1 << 40);
    let a = analysis(&sample("torch_oom.bin"), "torch-oom");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["kind"], "larger_than_device");
    assert_eq!(r[0]["requested_bytes"], 300_219_891_712u64);
    assert!(summary("oom").contains("ask for less at once at try_huge at oom.cu:17"));
}

#[test]
fn a_leaking_line_is_named_with_what_it_held() {
    // torch_leak.py keeps a 4 MiB tensor every fifth step: 40 of them.
    let a = analysis(&sample("torch_leak.bin"), "leak");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["kind"], "growing_line");
    assert_eq!(r[0]["tensors"], true);
    let t = truth("torch_leak");
    let line = t["lines"]["leak"].as_u64().unwrap();
    assert_eq!(r[0]["site"], format!("main at torch_leak.py:{line}"));
    assert_eq!(r[0]["held_most_bytes"], 40 * 4 * MIB);
    assert!(summary("torch_leak").contains("keeping its tensors alive"));
    // Allocations that keep growing: killed.cu's loop (killed while
    // holding them: CUDA allocations) and torch_growth.py --leak (one 1 MiB
    // tensor kept per step, with the cudaMallocAsync backend: tensors, the
    // framework view made from CUDA's allocations).
    let a = analysis(&sample("killed.bin"), "killed");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["site"], "alloc_forever_step at killed.cu:15");
    assert_eq!(r[0]["tensors"], false);
    assert_eq!(r[0]["held_at_end_bytes"], r[0]["held_most_bytes"]);
    let a = analysis(&sample("torch_growth_leak.bin"), "growth-leak");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["kind"], "growing_line");
    let line = marked_lines(&repo().join("tests/gpu/torch_growth.py"))["kept"];
    assert_eq!(r[0]["site"], format!("main at torch_growth.py:{line}"));
    assert_eq!(r[0]["tensors"], true);
    let stats: Value =
        serde_json::from_slice(&std::fs::read(sample("torch_growth_leak.stats.json")).unwrap())
            .unwrap();
    let kept = stats["kept_bytes"].as_u64().unwrap();
    assert_eq!(r[0]["held_most_bytes"], kept, "the list held every tensor");
    // Growth is counted from a fifth of the run to near its end: most,
    // not all, of the steps.
    assert!(r[0]["growth_bytes"].as_u64().unwrap() >= kept / 2, "{r:?}");
}

/// jax_train.py with JAX's defaults: XLA's pool is 75% of the GPU
/// (jax.stats.json: pool_bytes), but nothing ran short: no allocation
/// failed and no other process used the device. That is no remedy (there
/// is nothing to change), and the report says it as a fact, with what
/// JAX's arrays used of the pool by JAX's own count.
#[test]
fn jax_preallocation_that_hurt_nothing_is_a_fact_not_a_remedy() {
    let a = analysis(&sample("jax.bin"), "jax");
    let r = remedies(&a);
    assert!(r.is_empty(), "{r:?}");
    let stats: Value =
        serde_json::from_slice(&std::fs::read(sample("jax.stats.json")).unwrap()).unwrap();
    let pool = &a["framework_pools"][0];
    assert_eq!(pool["pool_peak"], stats["pool_bytes"]);
    assert_eq!(pool["in_use_peak"], stats["peak_bytes_in_use"]);
    let dir = scratch("jax-fact");
    let text = report_summary(&sample("jax.bin"), &dir);
    assert!(!text.contains("WHAT TO CHANGE"), "{text}");
    assert!(
        text.contains("inside it: JAX (XLA's BFC allocator) of pid 558 holds 105 GiB as its pool"),
        "{text}"
    );
}

/// torch_cache.py: sixteen 64 MiB tensors freed (their segments cached),
/// then a 2 GiB tensor in a new segment. Truth from the program: the
/// snapshot just before the request (segments with nothing allocated) and
/// memory_stats after it.
#[test]
fn segments_cached_at_the_reserved_peak_point_to_empty_cache() {
    let t = truth("torch_cache");
    let a = analysis(&sample("torch_cache.bin"), "cache");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    let r = &r[0];
    assert_eq!(r["kind"], "empty_cache");
    assert_eq!(r["idle_segment_bytes"], t["idle_bytes"]);
    assert_eq!(r["idle_segments"], t["idle_segments"]);
    // The pool's worst fragmentation came then, and all its free space was
    // in those segments: the summary says so rather than leave 0.94 to
    // read as a problem.
    let worst = &a["frameworks"][0]["worst_fragmentation"]["at"];
    assert_eq!(worst["free_in_idle_segments_bytes"], t["idle_bytes"]);
    assert_eq!(worst["free_bytes"], t["idle_bytes"]);
    let dir = scratch("cache-summary");
    assert!(report_summary(&sample("torch_cache.bin"), &dir)
        .contains("1.00 GiB free in segments (all of it in segments holding no tensor: cache)"));
    assert_eq!(
        r["reserved_peak_bytes"],
        t["torch"]["reserved_bytes.all.peak"]
    );
    assert_eq!(
        r["allocated_bytes"],
        t["torch"]["allocated_bytes.all.current"]
    );
    let line = format!("main at torch_cache.py:{}", t["lines"]["big"]);
    assert_eq!(r["site"], line.as_str());
    assert_eq!(
        r["change"],
        format!("torch.cuda.empty_cache() before {line}").as_str()
    );
}

/// torch_activations.py: a 24-layer MLP whose forward pass keeps 6 GiB of
/// ReLU outputs for the backward pass, recorded before gmem-prof marked
/// PyTorch's phases. Its parameters are known by their frames
/// (`Module.to()`): the program's own count of them. cuBLAS's and
/// cuBLASLt's workspaces by their stacks and moments: what torch held once
/// the program had dropped its objects (the truth's `left_allocated`).
/// What only the phases could tell (activations kept for the backward) is
/// unknown, and no role remedy is given without that evidence.
#[test]
fn a_sample_without_phases_knows_its_parameters_and_workspaces_only() {
    let t = truth("torch_activations");
    let a = analysis(&sample("torch_activations.bin"), "activations");
    assert_eq!(remedies(&a), Vec::<Value>::new());
    let v = &a["frameworks"][0];
    assert_eq!(v["allocated_peak"], t["allocated_peak"]);
    let roles = &v["roles_at_peak"]["roles"];
    assert_eq!(roles["parameters"], t["parameters"]);
    assert_eq!(roles["library workspaces"], t["left_allocated"]["bytes"]);
    assert_eq!(
        roles["unknown"].as_u64().unwrap(),
        t["allocated_peak"].as_u64().unwrap()
            - t["parameters"].as_u64().unwrap()
            - t["left_allocated"]["bytes"].as_u64().unwrap()
    );
    assert!(v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("no PyTorch phases")));
    // The workspaces are held at exit as the library's.
    let e = &v["at_exit"];
    assert_eq!(e["library_bytes"], t["left_allocated"]["bytes"]);
}

#[test]
fn samples_without_the_evidence_get_no_remedy() {
    for name in [
        "kinds",
        "pools",
        "two_pools",
        "vmm",
        "graph",
        "torch_native",
        "torch_async",
        "torch_growth",
        "torch_fragment",
        // A forward pass captured in a CUDA graph and no backward pass: its
        // tensors at the peak are its working set, not activations kept.
        "torch_private_pools",
        "torch_spawn",
        "cupy",
        "cupy_pool",
        "ipc",
        "ctypes_cuda",
        "device_view",
        "unified_memory_streams",
    ] {
        let a = analysis(&sample(&format!("{name}.bin")), name);
        assert_eq!(remedies(&a), Vec::<Value>::new(), "{name}");
    }
}

/// torch_fragmented_oom.py on the H200: under a 1 GiB memory fraction, 3
/// MiB tensors with every other one freed, then a 256 MiB request that
/// PyTorch refuses with 440 MiB free in its segments. Truth: the snapshot
/// the program took in its exception handler, and the error's message.
/// Only the expandable-segments remedy: the tensors and the request were
/// under the fraction. (The same program with expandable_segments:True
/// got its 256 MiB, in the same run.)
#[test]
fn a_real_fragmented_oom_points_to_expandable_segments_only() {
    let t = truth("torch_fragmented_oom");
    assert_eq!(t["succeeded"], false);
    let a = analysis(&sample("torch_fragmented_oom.bin"), "fragmented-real");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    let r = &r[0];
    assert_eq!(r["kind"], "expandable_segments");
    assert_eq!(r["requested_bytes"], t["request"]);
    let pools = t["torch"]["pools"].as_object().unwrap();
    let free: u64 = pools.values().map(|p| p["free"].as_u64().unwrap()).sum();
    let largest = pools
        .values()
        .map(|p| p["largest_free"].as_u64().unwrap())
        .max();
    assert_eq!(r["free_in_segments"], free);
    assert_eq!(r["largest_free_block"].as_u64(), largest);
    assert!(t["message"]
        .as_str()
        .unwrap()
        .contains("440.00 MiB is reserved by PyTorch but unallocated"));
    assert_eq!(
        r["site"],
        format!("main at torch_fragmented_oom.py:{}", t["lines"]["big"]).as_str()
    );
}

/// The stand-in caching allocator (fake_torch.cpp): a 4 MiB request fails
/// with 10 MiB free in the segment in 2 MiB pieces.
#[test]
fn a_fragmented_oom_points_to_expandable_segments() {
    let lines = marked_lines(&repo().join("tests/fake_cupti/fake_app.py"));
    let dir = scratch("remedies-fragmented");
    let out = run(&mut record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[OsStr::new("torch_fragmented_oom"), fake_torch().as_os_str()],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a = analysis(&dir.join("t.bin"), "fragmented");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["kind"], "expandable_segments");
    assert_eq!(r[0]["requested_bytes"], 4 * MIB);
    assert_eq!(r[0]["free_in_segments"], 10 * MIB);
    assert_eq!(r[0]["largest_free_block"], 2 * MIB);
    assert_eq!(
        r[0]["change"],
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    );
    assert_eq!(
        r[0]["site"],
        format!(
            "torch_fragmented_oom at fake_app.py:{}",
            lines["fragmented_oom"]
        )
    );
}

/// Two processes on the fake 80 GiB device at once, 30 GiB and 20 GiB:
/// together over half of it, each is given a share.
#[test]
fn processes_sharing_a_device_near_its_memory_get_a_share_each() {
    let dir = scratch("remedies-shared");
    let out = run(&mut record_cmd(&dir, "t.bin", &["shared"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a = analysis(&dir.join("t.bin"), "shared");
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["kind"], "shared_device");
    assert_eq!(r[0]["combined_peak_bytes"], 50u64 << 30);
    let peaks: Vec<u64> = r[0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap())
        .collect();
    assert_eq!(peaks.len(), 2);
    assert!(peaks.contains(&(30 << 30)) && peaks.contains(&(20 << 30)));
    assert!(r[0]["change"]
        .as_str()
        .unwrap()
        .starts_with("torch.cuda.set_per_process_memory_fraction(0.47)"));
    // One process alone, or two far from the device's size: no remedy
    // (the children sample: two processes of a few MiB).
    let a = analysis(&sample("children.bin"), "children");
    assert_eq!(remedies(&a), Vec::<Value>::new());
}

/// The stand-in's cudaMallocAsync backend under a 10 MiB memory fraction
/// refuses the third 4 MiB tensor before any CUDA allocation, asking CUDA
/// only for the free memory (as torch's does): the error is seen, with its
/// line, the fraction and the device's free memory, the request as the
/// least it could have been, and the fraction remedy.
#[test]
fn the_cuda_malloc_async_backends_fraction_error_is_seen() {
    let lines = marked_lines(&repo().join("tests/fake_cupti/fake_app.py"));
    let dir = scratch("remedies-async-fraction");
    let out = run(record_python(
        &dir,
        "t.bin",
        &[],
        Path::new("python3"),
        &[
            OsStr::new("torch_async_fraction_oom"),
            fake_torch().as_os_str(),
        ],
    )
    .env("FAKE_TORCH_BACKEND", "cudaMallocAsync"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("held 2\n"));
    let recs = dump_json(&dir.join("t.bin"));
    let backend = of_type(&recs, "Allocator");
    assert_eq!(backend.len(), 1, "{backend:?}");
    assert_eq!(backend[0]["attached"], false);
    let events = of_type(&recs, "AllocatorEvent");
    let actions: Vec<(u64, u64)> = events
        .iter()
        .map(|e| {
            (
                e["allocator"].as_u64().unwrap(),
                e["action"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(actions, [(2, 8), (2, 9)], "only the error, once");
    for e in &events {
        assert_eq!(e["limit"], 10 * MIB);
        // fake_cupti.c's cuMemGetInfo: 60 GiB free.
        assert_eq!(e["device_free"], 60u64 << 30);
    }
    let a = analysis(&dir.join("t.bin"), "async-fraction");
    let oom = &a["frameworks"][0]["ooms"][0];
    assert_eq!(oom["limit"], "memory fraction", "{oom}");
    assert_eq!(oom["request_seen"], false);
    assert_eq!(oom["cuda_malloc_async"], true);
    // The stand-in's tensors are plain allocations, not stream-ordered
    // ones: the view counts none of them.
    assert_eq!(oom["allocated_bytes"], 0);
    assert_eq!(oom["requested_bytes"], 10 * MIB + 1);
    let site = format!(
        "torch_async_fraction_oom at fake_app.py:{}",
        lines["async_oom"]
    );
    let r = remedies(&a);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["kind"], "memory_fraction");
    assert_eq!(r[0]["request_seen"], false);
    assert_eq!(r[0]["site"], site);
    let text = report_summary(
        &dir.join("t.bin"),
        &scratch("remedies-async-fraction-report"),
    );
    assert!(
        text.contains(&format!(
            "PyTorch raised OutOfMemoryError for more than 10.0 MiB at {site}"
        )),
        "{text}"
    );
}
