//! `gmem-prof report`: files written, summary, golden JSON/HTML/SVG, bad and
//! hostile input, and the page in a real browser when chromium is present.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gmem_prof_traces::record::{
    Bytes, KernelEvent, MemoryEvent, Nanos, ProcessEnd, ProcessInfo, StringDef, StringId,
};
use gmem_prof_traces::{Record, TraceWriter};

use crate::util::*;

fn report(traces: &[&Path], out: &Path) -> Output {
    run(Command::new(gmem())
        .arg("report")
        .args(traces)
        .arg("-o")
        .arg(out))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn report_writes_html_json_and_charts_and_prints_the_answers() {
    let dir = scratch("report-kinds");
    let o = report(&[&sample("kinds.bin")], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    // kinds.cu leaks one 1 MiB device and one 1 MiB pinned buffer.
    assert!(
        text.contains("leaks: 2.00 MiB in 2 allocations never freed"),
        "{text}"
    );
    assert!(text.contains("alloc_device_buffers at kinds.cu:"), "{text}");
    assert!(text.contains("kinds.html"), "{text}");
    for f in [
        "kinds.html",
        "kinds.json",
        "kinds-device0-memory.svg",
        "kinds-device0-peak-flame.svg",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    // The timeline's kernel strip counts every kernel once (kinds.cu
    // launches three).
    let a: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("kinds.json")).unwrap()).unwrap();
    let counted: u64 = a["devices"][0]["kernels_per_bucket"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(counted, a["input"]["kernels"].as_u64().unwrap());
    assert_eq!(counted, 3);
    // The flame graph of the peak: every site live then, by stack, as wide
    // as its bytes (kinds.cu peaks at 5 MiB: 4 MiB managed, 1 MiB device).
    let flame = std::fs::read_to_string(dir.join("kinds-device0-peak-flame.svg")).unwrap();
    assert!(
        flame.contains("<title>all: 5.00 MiB (100.0%)</title>"),
        "{flame}"
    );
    assert!(
        flame.contains("<title>main: 5.00 MiB (100.0%)</title>"),
        "{flame}"
    );
    let html = std::fs::read_to_string(dir.join("kinds.html")).unwrap();
    assert!(
        !html.contains("https://") && !html.contains("src=\"http"),
        "nothing fetched"
    );
    // Our own script (the timelines) and one data block per device: none
    // fetched from anywhere.
    assert_eq!(
        html.matches("<script").count(),
        2,
        "the timeline's script and data only"
    );
    assert!(!html.contains("<script src"), "nothing fetched");
    assert!(html.contains("<svg"), "charts inline");
}

#[test]
fn a_run_not_profiled_says_so_first() {
    // cupti_client.cu held CUPTI itself; the summary used to begin with
    // "leaks: none / out of memory: never" and say why only in the HTML.
    let dir = scratch("report-unprofiled");
    let o = report(&[&sample("cupti_client.bin")], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("NOT PROFILED: "), "{text}");
    assert!(
        text.contains("pid 944 (cupti_client): the collector did not profile"),
        "{text}"
    );
    let html = std::fs::read_to_string(dir.join("cupti_client.html")).unwrap();
    let first = html
        .find("Part of this run was not profiled")
        .expect("said in the HTML");
    assert!(
        first < html.find("class=\"answers\"").unwrap(),
        "before the answers"
    );
    let o = report(&[&sample("kinds.bin")], &dir);
    assert!(!stdout(&o).contains("NOT PROFILED"));
}

/// Golden report files of a real trace. Re-bless with GMEM_PROF_BLESS=1
/// (and review the diff).
#[test]
fn reports_of_sample_traces_match_their_golden_files() {
    for name in ["kinds", "vmm", "torch_oom"] {
        let dir = scratch(&format!("report-golden-{name}"));
        let o = report(&[&sample(&format!("{name}.bin"))], &dir);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        for ext in ["json", "html"] {
            let got = std::fs::read_to_string(dir.join(format!("{name}.{ext}"))).unwrap();
            let golden = repo().join(format!("tests/golden/report/{name}.{ext}"));
            if std::env::var_os("GMEM_PROF_BLESS").is_some() {
                std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
                std::fs::write(&golden, &got).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&golden).unwrap_or_else(|_| {
                panic!("{} missing: run with GMEM_PROF_BLESS=1", golden.display())
            });
            assert!(
                want == got,
                "{name}.{ext} differs from {}",
                golden.display()
            );
        }
    }
}

#[test]
fn report_of_a_directory_of_per_process_files() {
    let dir = scratch("report-dir");
    let traces = dir.join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    std::fs::copy(sample("kinds.bin"), traces.join("a.bin")).unwrap();
    std::fs::copy(sample("vmm.bin"), traces.join("b.bin")).unwrap();
    let o = report(&[&traces], &dir.join("out"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("2 processes"), "{}", stdout(&o));
    assert!(dir.join("out/a.html").is_file());
}

#[test]
fn bad_input_exits_2_with_a_message_and_damage_gives_a_warning() {
    let dir = scratch("report-bad");
    let garbage = dir.join("garbage.bin");
    std::fs::write(&garbage, b"this is not a trace").unwrap();
    let empty = dir.join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    for f in [&garbage, &empty, &dir.join("missing.bin")] {
        let o = report(&[f], &dir);
        assert_eq!(o.status.code(), Some(2), "{}", f.display());
        assert!(stderr(&o).starts_with("gmem-prof: "), "{}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"));
    }
    let full = std::fs::read(sample("torch_growth_leak.bin")).unwrap();
    let cut = dir.join("cut.bin");
    std::fs::write(&cut, &full[..full.len() / 2]).unwrap();
    let o = report(&[&cut], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("warning: "), "{}", stdout(&o));
    let html = std::fs::read_to_string(dir.join("cut.html")).unwrap();
    assert!(html.contains("class=\"warn\""));
}

/// Strings from a trace (kernel names, command lines) appear as text.
#[test]
fn hostile_strings_are_escaped() {
    let dir = scratch("report-hostile");
    let evil = "<script>alert('x')</script><img src=x onerror=alert(1)>";
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    let recs = [
        Record::Process(ProcessInfo {
            pid: 7,
            exe: evil.into(),
            cmdline: vec![evil.into(), "&amp;".into()],
            kernels_traced: true,
            ..Default::default()
        }),
        Record::String(StringDef {
            id: StringId(1),
            text: evil.into(),
        }),
        Record::Kernel(KernelEvent {
            start: Nanos(1_000),
            end: Nanos(900_000),
            name: StringId(1),
            ..Default::default()
        }),
        Record::Memory(MemoryEvent {
            time: Nanos(2_000),
            alloc: true,
            kind: 3,
            address: 0x7f00_0000_0000,
            bytes: Bytes(1 << 20),
            context: 1,
            ..Default::default()
        }),
        Record::ProcessEnd(ProcessEnd {
            time: Nanos(1_000_000),
        }),
    ];
    for r in &recs {
        w.push(r).unwrap();
    }
    let trace = dir.join("evil.bin");
    std::fs::write(&trace, w.finish().unwrap()).unwrap();
    let o = report(&[&trace], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let html = std::fs::read_to_string(dir.join("evil.html")).unwrap();
    // Only the page's own script and the timeline's data block: the
    // trace's markup is escaped in the HTML and cannot close the JSON's
    // script element.
    assert_eq!(
        html.matches("<script").count(),
        2,
        "markup from the trace was not escaped"
    );
    assert!(!html.contains("<script>alert"));
    assert!(!html.contains("<img"));
    assert!(html.contains("&lt;script&gt;alert('x')&lt;/script&gt;"));
    assert!(html.contains("&amp;amp;"));
}

/// Flags of every headless run of the browser.
pub(crate) const BROWSER_FLAGS: [&str; 4] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
];

/// Chromium, or `None` with the skip printed. CI (.ci/run) installs it and
/// sets GMEM_PROF_REQUIRE_BROWSER: there a browser test must run, never
/// pass by skipping.
pub(crate) fn browser_or_skip() -> Option<PathBuf> {
    let browser = chromium();
    if browser.is_none() {
        assert!(
            std::env::var_os("GMEM_PROF_REQUIRE_BROWSER").is_none(),
            "no chromium on this machine, and GMEM_PROF_REQUIRE_BROWSER is set"
        );
        eprintln!("skipped: no chromium on this machine (apt-get install chromium)");
    }
    browser
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|c| {
            let ok = Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            ok.then(|| PathBuf::from(c))
        })
}

/// What a report page's timeline showed when pointed at (`fragment`:
/// #selftest, #selftest-N, #selftest-N-strip, -steps or -ranges;
/// tests/e2e/timeline_selftest.js
/// says where each points). Shipped pages hold no test code: the self-test
/// is appended to a copy of the page, and leaves the tooltip's text in a
/// `<pre id="selftest">`.
pub(crate) fn pointed(browser: &Path, flags: &[&str], page: &Path, fragment: &str) -> String {
    let html = std::fs::read_to_string(page).unwrap();
    assert!(!html.contains("selftest"), "a shipped page holds test code");
    let copy = page.with_extension("selftest.html");
    let script = include_str!("timeline_selftest.js");
    std::fs::write(
        &copy,
        html.replace("</body>", &format!("<script>{script}</script></body>")),
    )
    .unwrap();
    let url = format!("file://{}{fragment}", copy.display());
    let dom = run(Command::new(browser)
        .args(flags)
        .arg("--virtual-time-budget=3000")
        .arg("--dump-dom")
        .arg(&url));
    // The last one: the page's own text comes before what the self-test
    // appended.
    let dom = stdout(&dom);
    dom.rsplit_once("<pre id=\"selftest\">")
        .and_then(|(_, rest)| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("no #selftest output in {url}"))
        .to_string()
}

/// The page in a real browser: its DOM after load holds the sections, and a
/// screenshot is drawn. Skipped with a printed reason without chromium,
/// except where GMEM_PROF_REQUIRE_BROWSER is set (CI: .ci/run installs it).
#[test]
fn report_renders_in_headless_chromium() {
    let Some(browser) = browser_or_skip() else {
        return;
    };
    let dir = scratch("report-chromium");
    let o = report(&[&sample("torch_oom.bin")], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let url = format!("file://{}", dir.join("torch_oom.html").display());
    let flags = BROWSER_FLAGS;
    let dom = run(Command::new(&browser)
        .args(flags)
        .arg("--dump-dom")
        .arg(&url));
    let dom = stdout(&dom);
    for text in [
        "GPU memory report",
        "Top allocation sites",
        "Out of memory",
        "reached program",
        "<svg",
    ] {
        assert!(dom.contains(text), "{text} missing from the rendered page");
    }
    // The timeline's interaction: a pointer on the largest band at the
    // peak shows that band's site, its bytes and its stack (the
    // self-test dispatches the pointer event and leaves what was shown).
    let shown = pointed(&browser, &flags, &dir.join("torch_oom.html"), "#selftest");
    let a: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("torch_oom.json")).unwrap()).unwrap();
    // The timeline draws the driver's view: the largest band at the peak is
    // its largest site then (here a caching allocator's segments, which the
    // peak list takes apart instead).
    let top = a["devices"][0]["timeline_sites"][0]["site"]
        .as_u64()
        .unwrap() as usize;
    let label = a["sites"][top]["label"].as_str().unwrap();
    assert!(
        shown.starts_with(
            &label
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        ),
        "the pointer showed {shown:?}, not the top site {label:?}"
    );
    assert!(shown.contains(" live at "), "{shown}");
    // The tensors' timeline of a PyTorch run (the page's second): at the
    // allocated peak the largest band is the leaking line, holding its 40
    // tensors of 4 MiB (torch_leak.truth.json).
    let o = report(&[&sample("torch_leak.bin")], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let leak_page = dir.join("torch_leak.html");
    let shown = pointed(&browser, &flags, &leak_page, "#selftest-1");
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sample("torch_leak.truth.json")).unwrap()).unwrap();
    let leak = format!(
        "main at torch_leak.py:{}: 160 MiB live at ",
        truth["lines"]["leak"]
    );
    assert!(
        shown.contains(&leak),
        "{leak} not shown by the tensor timeline: {shown:?}"
    );
    // The kernel strip under the device timeline's peak gives a count.
    let shown = pointed(&browser, &flags, &leak_page, "#selftest-0-strip");
    assert!(
        shown.contains(" kernels started from "),
        "the strip showed {shown:?}"
    );
    // The steps' strip under the peak of a training run gives the figures
    // of the step the peak fell in, as the report has them.
    let o = report(&[&sample("torch_steps.bin")], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let a: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("torch_steps.json")).unwrap()).unwrap();
    let p = &a["steps"][0];
    let n = p["peak_step"].as_u64().unwrap();
    let shown = pointed(
        &browser,
        &flags,
        &dir.join("torch_steps.html"),
        "#selftest-0-steps",
    );
    let expected = format!("step {n} (pid {}): ", p["pid"]);
    assert!(
        shown.starts_with(&expected),
        "the steps' strip showed {shown:?}"
    );
    assert!(shown.contains("; tensors: peak "), "{shown:?}");
    let shot = dir.join("page.png");
    let o = run(Command::new(&browser)
        .args(flags)
        .arg("--window-size=1200,2000")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url));
    assert!(o.status.success(), "{}", stderr(&o));
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "a blank page?"
    );
}

#[test]
fn several_runs_side_by_side() {
    // Two runs with the same file name get distinct reports.
    let dir = scratch("report-runs");
    for r in ["rank0", "rank1"] {
        std::fs::create_dir_all(dir.join(r)).unwrap();
    }
    std::fs::copy(sample("kinds.bin"), dir.join("rank0/trace.bin")).unwrap();
    std::fs::copy(sample("vmm.bin"), dir.join("rank1/trace.bin")).unwrap();
    let out = dir.join("out");
    let o = report(
        &[&dir.join("rank0/trace.bin"), &dir.join("rank1/trace.bin")],
        &out,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for f in [
        "trace.html",
        "trace-2.html",
        "trace.json",
        "trace-2.json",
        "runs.html",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let text = stdout(&o);
    assert!(text.contains("2 runs side by side"), "{text}");
    // kinds peaks at 5 MiB, vmm at 16 MiB: skew from 5 to 16, mean 10.5.
    assert!(
        text.contains("skew of peaks: 5.00 MiB to 16.0 MiB (mean 10.5 MiB)"),
        "{text}"
    );
    let page = std::fs::read_to_string(out.join("runs.html")).unwrap();
    assert!(page.contains("href=\"trace-2.html\""));
    assert_eq!(page.matches("<svg").count(), 1, "one chart for device 0");
}

/// No table of the page is a header alone, on any real sample (an empty
/// table reads as a broken page; the sentence before it says there is
/// nothing). torch_fraction_oom.bin had one: nothing outside PyTorch's
/// allocator at the peak.
#[test]
fn no_table_of_the_page_is_empty() {
    for path in all_samples() {
        let dir = scratch("report-tables");
        report_summary(&path, &dir);
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let html = std::fs::read_to_string(dir.join(format!("{stem}.html"))).unwrap();
        for table in html.split("<table").skip(1) {
            let table = table.split("</table>").next().unwrap();
            assert!(
                table.contains("<td"),
                "{stem}: a table with no row: {}",
                &table[..table.len().min(300)]
            );
        }
    }
}

/// In every real sample's summary, the rows of a table of sites (a device's
/// peak, what libraries held at exit) read differently unless their sites' named frames are the same too (stacks
/// that differ only in unresolved frames): one line allocating through
/// two paths (a cuBLAS handle and a caching allocator's segments,
/// torch_leak.bin; a cuBLAS handle and cudaMallocAsync's tensors,
/// torch_growth_leak.bin) says which is which.
#[test]
fn rows_of_a_site_table_read_the_same_only_for_stacks_alike() {
    let samples = all_samples();
    let mut told_apart = 0;
    for path in &samples {
        let dir = scratch("report-rows");
        let text = report_summary(path, &dir);
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{stem}.json"))).unwrap())
                .unwrap();
        // Named frames: unresolved ones differ only in their addresses.
        let frames_of = |site: u64| -> Vec<(String, String, String)> {
            json["sites"][site as usize]["frames"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["resolved"] == true && f["function"] != "??")
                .map(|f| {
                    let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
                    (s("function"), s("module"), s("location"))
                })
                .collect()
        };
        let lines: Vec<&str> = text.lines().collect();
        // The rows "… in N × TEXT" that follow line `at`.
        let rows_from = |at: usize| -> Vec<&str> {
            lines[at + 1..]
                .iter()
                .skip_while(|l| !l.contains(" × "))
                .take_while(|l| l.contains(" × "))
                .map(|l| l.split_once(" × ").unwrap().1)
                .collect()
        };
        // The rows that follow the first line starting with `head`.
        let rows_after = |head: &str| -> Vec<&str> {
            lines
                .iter()
                .position(|l| l.starts_with(head))
                .map_or_else(Vec::new, rows_from)
        };
        // (rows, their sites): each device's peak table, and what
        // libraries held at exit (largest first, then by id).
        let mut tables: Vec<(Vec<&str>, Vec<u64>)> = Vec::new();
        for d in json["devices"].as_array().unwrap() {
            // With a framework allocator seen from the inside, its segments
            // come first, taken apart into tensors; the peak's other sites
            // follow under a line of their own.
            let rows = if d["frameworks_at_peak"].is_array() {
                lines
                    .iter()
                    .position(|l| l.ends_with("outside the framework allocators:"))
                    .map_or_else(Vec::new, rows_from)
            } else {
                rows_after(&format!("device {} (", d["device"]))
            };
            let ids = d["peak_sites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["site"].as_u64().unwrap())
                .take(rows.len())
                .collect();
            tables.push((rows, ids));
        }
        let mut held: Vec<(u64, u64)> = json["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["category"] == "library" && s["held_at_exit_bytes"].as_u64() > Some(0))
            .map(|s| {
                (
                    s["held_at_exit_bytes"].as_u64().unwrap(),
                    s["id"].as_u64().unwrap(),
                )
            })
            .collect();
        held.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        let rows = rows_after("held by libraries at exit:");
        tables.push((
            rows.clone(),
            held.iter().map(|h| h.1).take(rows.len()).collect(),
        ));
        for (rows, ids) in &tables {
            assert_eq!(ids.len(), rows.len(), "{stem}: {rows:?}");
            for i in 0..rows.len() {
                for j in i + 1..rows.len() {
                    let label =
                        |k: usize| json["sites"][ids[k] as usize]["label"].as_str().unwrap();
                    if label(i) == label(j) && rows[i] != rows[j] {
                        told_apart += 1;
                    }
                    if rows[i] == rows[j] {
                        assert_eq!(
                            frames_of(ids[i]),
                            frames_of(ids[j]),
                            "{stem}: two rows read \"{}\" for stacks that differ",
                            rows[i]
                        );
                    }
                }
            }
        }
    }
    // The page's tables say the same.
    let dir = scratch("report-rows-html");
    report_summary(&sample("torch_growth_leak.bin"), &dir);
    let page = std::fs::read_to_string(dir.join("torch_growth_leak.html")).unwrap();
    let peak = page
        .split_once("Live at the peak")
        .unwrap()
        .1
        .split_once("</table>")
        .unwrap()
        .0;
    // What each row's memory went through, from all of its stacks: one
    // through cuBLAS's handle (and the workspace PyTorch gives it), the
    // other through the cudaMallocAsync backend alone.
    let rows: Vec<&str> = peak
        .split("<tr>")
        .filter(|r| r.contains("AddmmBackward0 (autograd)</a>, via "))
        .collect();
    assert_eq!(rows.len(), 2, "{peak}");
    assert!(rows
        .iter()
        .any(|r| r.contains("cublasCreate_v2 (libcublas.so.13)</td>")));
    assert!(rows.iter().any(|r| r.contains(
        "via c10::cuda::CUDACachingAllocator::CudaMallocAsync::(anonymous namespace)::mallocAsync (libc10_cuda.so)</td>"
    )));
    assert!(told_apart >= 2, "{told_apart} rows told apart");
}
