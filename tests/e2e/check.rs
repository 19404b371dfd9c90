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
fn growth_budget_catches_the_leaking_loop_only() {
    let o = check("torch_growth_leak.bin", &["--max-growth", "64MiB"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert_eq!(
        check("torch_growth.bin", &["--max-growth", "64MiB"])
            .status
            .code(),
        Some(0)
    );
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
