//! What each tensor is, with no code change: fake_app.py's `roles`
//! scenario, a training loop over the stand-in torch (its phases, its
//! `Module._apply`, a Trainer's `_prepare_input`) and a generation loop
//! with a KV cache, whose tensors' roles and sizes are known by
//! construction (see the scenario's docstring for the arithmetic).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::util::*;

const MIB: u64 = 1 << 20;

/// Bytes by role as the JSON writes them, from (role, MiB).
fn roles(pairs: &[(&str, u64)]) -> Value {
    let mut m = serde_json::Map::new();
    for &(role, mib) in pairs {
        m.insert(role.into(), json!(mib * MIB));
    }
    Value::Object(m)
}

/// The roles of the tensor sites whose label names `at` (a file and
/// line, or a file and ":" for any line), with what tells them apart (""
/// for one site).
fn roles_at(a: &Value, at: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = a["tensor_sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| {
            let label = s["label"].as_str().unwrap();
            let (_, mut rest) = label.split_once(&format!(" at {at}"))?;
            if at.ends_with(':') {
                rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
            } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
                return None;
            }
            let role = s["role"].as_str().unwrap_or("none").to_string();
            Some((rest.trim_start_matches(", ").to_string(), role))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_tensor_of_a_training_loop_gets_its_role() {
    roles_of_scenario("roles");
}

/// The same loop with its forward and backward in a closure the
/// optimizer's step calls (Lightning's training step): the step's part
/// before its backward is a forward, and the same roles come out.
#[test]
fn a_closure_step_gives_the_same_roles() {
    roles_of_scenario("roles_closure");
}

/// Records fake_app.py's `scenario` into `dir/name`, its activation
/// `activation_mib` MiB.
fn record_roles(dir: &Path, name: &str, scenario: &str, activation_mib: u64) -> PathBuf {
    let out = run(record_python(
        dir,
        name,
        &[],
        Path::new("python3"),
        &[OsStr::new(scenario), fake_torch().as_os_str()],
    )
    .env("FAKE_ROLES_ACTIVATION_MIB", activation_mib.to_string()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    dir.join(name)
}

fn roles_of_scenario(scenario: &str) {
    let lines = marked_lines(&repo().join("tests/fake_cupti/fake_app.py"));
    let dir = scratch(scenario);
    let trace = record_roles(&dir, "t.bin", scenario, 4);
    let a = export_json(&trace, &dir);
    let view = &a["frameworks"][0];
    assert_eq!(view["allocated_peak"].as_u64(), Some(46 * MIB));
    // The second iteration's backward temporary set the peak.
    assert_eq!(
        view["roles_at_peak"]["roles"],
        roles(&[
            ("parameters", 8),
            ("gradients", 8),
            ("optimizer state", 16),
            ("activations", 6),
            ("temporaries", 4),
            ("inputs", 2),
            ("unknown", 2),
        ])
    );
    // Each step's peak: the first before its optimizer state existed
    // (at the update's temporary), the later ones as the run's.
    let steps = &a["steps"][0]["steps"];
    assert_eq!(
        steps[0]["tensors"]["roles_at_peak"],
        roles(&[
            ("parameters", 8),
            ("gradients", 8),
            ("optimizer state", 16),
            ("temporaries", 2),
            ("inputs", 2),
            ("unknown", 2),
        ])
    );
    for s in 1..3 {
        assert_eq!(
            steps[s]["tensors"]["roles_at_peak"],
            view["roles_at_peak"]["roles"],
            "step {}",
            s + 1
        );
    }
    // Each line's role; the stand-ins' lines by their frames.
    let one = |role: &str| vec![(String::new(), role.to_string())];
    assert_eq!(roles_at(&a, "module.py:"), one("parameters"));
    assert_eq!(roles_at(&a, "trainer.py:"), one("inputs"));
    for (mark, role) in [
        ("role_activation", "activations"),
        ("role_forward_temporary", "temporaries"),
        // Freed before the first phase: the first forward's temporaries.
        ("role_sanity_hidden", "temporaries"),
        ("role_sanity_output", "temporaries"),
        ("role_loss", "unknown"),
        ("role_gradients", "gradients"),
        ("role_backward_temporary", "temporaries"),
        ("role_optimizer_state", "optimizer state"),
        ("role_update_temporary", "temporaries"),
        ("role_kv_cache", "KV cache"),
        // Moved from host memory with a plain .to("cuda"): the copy tells.
        ("role_prompt", "inputs"),
        ("role_mask", "inputs"),
        // Filled by a copy on the device: what its lifetime says.
        ("role_prompt_clone", "temporaries"),
    ] {
        let at = format!("fake_app.py:{}", lines[mark]);
        assert_eq!(roles_at(&a, &at), one(role), "line {mark}");
    }
    // The checkpointed block: its output kept for the backward when the
    // forward runs it, its recomputation's a temporary; its intermediate a
    // temporary both times.
    for (mark, forward, backward) in [
        ("role_block_output", "activations", "temporaries"),
        ("role_checkpointed", "temporaries", "temporaries"),
    ] {
        let at = format!("fake_app.py:{}", lines[mark]);
        let found = roles_at(&a, &at);
        assert_eq!(found.len(), 2, "{found:?}");
        let role = |caller: &str| {
            &found
                .iter()
                .find(|(by, _)| by.starts_with(&format!("called from {caller} ")))
                .unwrap_or_else(|| panic!("{caller} in {found:?}"))
                .1
        };
        assert_eq!(role("roles.<locals>.iteration"), forward, "{mark}");
        assert_eq!(
            role("roles.<locals>.iteration.<locals>.backward"),
            backward,
            "{mark}"
        );
    }
    // The timeline by role: the KV cache ends at its last size, with the
    // parameters beside it; nothing else is live at the end.
    let curves = view["timeline_roles"].as_array().unwrap();
    let last = |role: &str| {
        curves
            .iter()
            .find(|c| c["role"] == role)
            .and_then(|c| c["live"].as_array().unwrap().last().unwrap().as_u64())
            .unwrap_or(0)
    };
    assert_eq!(last("KV cache"), 8 * MIB);
    assert_eq!(last("parameters"), 8 * MIB);
    for role in [
        "gradients",
        "optimizer state",
        "activations",
        "inputs",
        "unknown",
    ] {
        assert_eq!(last(role), 0, "{role}");
    }
}

/// The roles in the summary, the remedy they justify, `check --max-role`
/// (flags and TOML) and `diff` by role, on the same loop with a 4 MiB and
/// an 8 MiB activation.
#[test]
fn roles_drive_the_summary_remedies_budgets_and_diff() {
    let dir = scratch("roles-cli");
    let small = record_roles(&dir, "small.bin", "roles", 4);
    let large = record_roles(&dir, "large.bin", "roles", 8);
    let summary = report_summary(&small, &dir.join("report"));
    assert!(
        summary.contains(
            "  by role: 16.0 MiB optimizer state, 8.00 MiB parameters, 8.00 MiB gradients, \
             6.00 MiB activations, 4.00 MiB temporaries, 2.00 MiB inputs, 2.00 MiB unknown"
        ),
        "{summary}"
    );
    // Optimizer state, 16 of the 46 MiB peak, is the one role worth a
    // change: two bytes of state per byte of parameters (Adam's two
    // moments); an 8-bit optimizer saves three quarters of it.
    let a = export_json(&small, &dir);
    // (The stand-in allocator never reuses a freed block: the empty_cache
    // remedy beside it is its own.)
    let remedies: Vec<&Value> = a["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "role")
        .collect();
    assert_eq!(remedies.len(), 1, "{remedies:?}");
    let r = remedies[0];
    assert_eq!(r["role"].as_str(), Some("optimizer state"));
    assert_eq!(r["bytes"].as_u64(), Some(16 * MIB));
    assert_eq!(r["saving_bytes"].as_u64(), Some(12 * MIB));
    assert!(
        summary.contains("2.0 bytes of state per byte of parameters"),
        "{summary}"
    );

    let check = |args: &[&str]| {
        let out = run(Command::new(gmem()).arg("check").arg(&small).args(args));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &stderr(&out),
        )
    };
    let (code, text) = check(&[
        "--max-role",
        "activations=4MiB",
        "--max-role",
        "optimizer_state=16MiB",
    ]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("over budget: activations were 6.00 MiB"),
        "{text}"
    );
    assert!(text.contains("ok: max_role.optimizer_state"), "{text}");
    let (code, text) = check(&["--max-role", "activations=6MiB"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = check(&["--max-role", "weights=1GiB"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("optimizer_state"), "{text}");
    let budget = dir.join("budget.toml");
    std::fs::write(&budget, "[run]\nmax_role.optimizer_state = \"15MiB\"\n").unwrap();
    let (code, text) = check(&["--budget", budget.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("optimizer state were 16.0 MiB"), "{text}");
    std::fs::write(&budget, "[run]\nmax_role.weights = \"1GiB\"\n").unwrap();
    assert_eq!(check(&["--budget", budget.to_str().unwrap()]).0, Some(2));

    // diff: the activations grew by the 4 MiB the program added, the rest
    // stayed.
    let out = run(Command::new(gmem())
        .arg("diff")
        .arg(&small)
        .arg(&large)
        .arg("--json")
        .arg(dir.join("d.json")));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("activations at that peak: 6.00 MiB → 10.0 MiB (+4.00 MiB)"),
        "{text}"
    );
    let d: Value = serde_json::from_slice(&std::fs::read(dir.join("d.json")).unwrap()).unwrap();
    assert_eq!(
        d["base"]["roles_at_peak"]["activations"].as_u64(),
        Some(6 * MIB)
    );
    assert_eq!(
        d["new"]["roles_at_peak"]["activations"].as_u64(),
        Some(10 * MIB)
    );
    assert_eq!(
        d["new"]["roles_at_peak"]["optimizer state"].as_u64(),
        Some(16 * MIB)
    );
}

/// Real PyTorch on the H100 (traces/samples/roles_*.bin, tests/gpu/run.sh
/// roles): resnet50 with SGD and momentum, a GPT-2-size model with AdamW
/// under bf16 autocast, the same with activation checkpointing, and its
/// generation loop with transformers' KV cache, each
/// recorded and then run under torch.profiler, whose memory timeline's
/// categories at its peak are the truth. They agree where the profiler
/// names a category; where it cannot (activations under autocast, CUDA
/// libraries' workspaces, a KV cache) its "none" and "input" hold ours.
/// Blocks are rounded to 512 bytes, the profiler's tensors are not: a few
/// KiB apart, parameters 0.2%.
#[test]
fn roles_on_real_pytorch_match_torch_profilers_categories() {
    let dir = scratch("roles-real");
    let mut activations = Vec::new();
    for name in [
        "roles_resnet50",
        "roles_gpt2",
        "roles_gpt2_ckpt",
        "roles_generate",
    ] {
        let t: Value =
            serde_json::from_slice(&std::fs::read(sample(&format!("{name}.truth.json"))).unwrap())
                .unwrap();
        let a = export_json(&sample(&format!("{name}.bin")), &dir);
        let v = &a["frameworks"][0];
        assert_eq!(v["allocated_peak"], t["max_memory_allocated"], "{name}");
        let ours = |role: &str| v["roles_at_peak"]["roles"][role].as_u64().unwrap_or(0);
        let theirs = |cat: &str| t["profiler"]["categories"][cat].as_u64().unwrap_or(0);
        let near = |a: u64, b: u64, within: u64, what: &str| {
            assert!(a.abs_diff(b) <= within, "{name} {what}: {a} vs {b}");
        };
        assert_eq!(ours("optimizer state"), theirs("optimizer_state"), "{name}");
        assert_eq!(ours("gradients"), theirs("gradient"), "{name}");
        near(
            ours("temporaries"),
            theirs("autograd_detail"),
            4096,
            "temporaries",
        );
        near(
            ours("parameters"),
            theirs("parameter"),
            theirs("parameter") / 500,
            "parameters",
        );
        let rest =
            ours("activations") + ours("library workspaces") + ours("KV cache") + ours("unknown");
        let theirs_rest = theirs("activation") + theirs("none") + theirs("input");
        near(
            rest,
            theirs_rest,
            8192,
            "activations, workspaces, cache and the rest",
        );
        if theirs("activation") > 1 << 30 {
            near(
                ours("activations"),
                theirs("activation"),
                4096,
                "activations",
            );
        }
        if name == "roles_generate" {
            // transformers' cache (16 sequences of the 128-token prompt, 12
            // layers' keys and values, 12 heads of 64 float32s each) is
            // its "input", with the prompt's ids; the logits and hidden
            // states it calls activations are unknown here (no phases).
            let cache = 2 * 12 * 16 * 128 * 12 * 64 * 4;
            assert_eq!(ours("KV cache"), cache, "{name}");
            near(ours("KV cache"), theirs("input"), 128 << 10, "KV cache");
            near(ours("unknown"), theirs("activation"), 128 << 10, "unknown");
        }
        activations.push(ours("activations"));
    }
    // Checkpointing kept a quarter of the activations at the peak.
    assert!(activations[2] * 4 < activations[1], "{activations:?}");
}
