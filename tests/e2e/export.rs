//! `gmem-prof export`: the Perfetto JSON checked against the trace-event
//! format and the recorded programs; the Parquet read back with polars, its
//! rows and sums equal to the trace's own records (from `dump`).

use std::path::{Path, PathBuf};
use std::process::Command;

use polars::prelude::*;
use polars_io::prelude::ParquetReader;
use polars_io::SerReader;
use serde_json::Value;

use crate::util::*;

fn export(trace: &Path, format: &str, out: &Path) {
    let o = run(Command::new(gmem())
        .arg("export")
        .arg(trace)
        .args(["--format", format, "-o"])
        .arg(out));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Exports a sample as Perfetto JSON and checks every event's fields.
fn perfetto(name: &str) -> Vec<Value> {
    let dir = scratch(&format!("export-perfetto-{name}"));
    let out = dir.join("t.json");
    export(&sample(name), "perfetto", &out);
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["displayTimeUnit"], "ns");
    let events = doc["traceEvents"]
        .as_array()
        .expect("traceEvents array")
        .clone();
    for e in &events {
        check_trace_event(e);
    }
    events
}

/// The fields the trace-event format requires for each phase we write.
fn check_trace_event(e: &Value) {
    let ph = e["ph"].as_str().expect("ph");
    assert!(e["name"].is_string(), "{e}");
    assert!(e["pid"].is_u64(), "{e}");
    match ph {
        "M" => {
            assert!(["process_name", "thread_name"].contains(&e["name"].as_str().unwrap()));
            assert!(e["args"]["name"].is_string(), "{e}");
        }
        "C" => {
            assert!(e["ts"].as_f64().unwrap() >= 0.0);
            let args = e["args"].as_object().unwrap();
            assert!(!args.is_empty() && args.values().all(Value::is_u64), "{e}");
        }
        "X" => {
            assert!(e["ts"].as_f64().unwrap() >= 0.0);
            assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
            assert!(e["tid"].is_u64(), "{e}");
        }
        "i" => {
            assert!(e["ts"].as_f64().unwrap() >= 0.0);
            assert!(["g", "p", "t"].contains(&e["s"].as_str().unwrap()), "{e}");
        }
        other => panic!("unexpected phase {other}: {e}"),
    }
}

fn phase<'a>(events: &'a [Value], ph: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["ph"] == ph).collect()
}

#[test]
fn perfetto_of_the_oom_program() {
    // oom.cu: 8 × 16 GiB live at its peak; a 1 TiB request and a ninth
    // 16 GiB request fail and reach the program; everything is freed.
    let events = perfetto("oom.bin");
    let live: Vec<u64> = phase(&events, "C")
        .iter()
        .map(|e| e["args"]["live"].as_u64().unwrap())
        .collect();
    assert_eq!(live.iter().max(), Some(&(8 * (16u64 << 30))));
    assert_eq!(live.last(), Some(&0), "all freed by the end");
    let ooms: Vec<&Value> = phase(&events, "i")
        .into_iter()
        .filter(|e| e["cat"] == "oom")
        .collect();
    let mut requested: Vec<u64> = ooms
        .iter()
        .map(|e| e["args"]["requested_bytes"].as_u64().unwrap())
        .collect();
    requested.sort_unstable();
    assert_eq!(requested, vec![16u64 << 30, 1u64 << 40]);
    assert!(ooms
        .iter()
        .all(|e| e["args"]["outcome"] == "reached program"));
    let names: Vec<&str> = phase(&events, "M")
        .iter()
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"GPU 0: NVIDIA H200"), "{names:?}");
}

#[test]
fn perfetto_kernels_are_the_traces_kernels() {
    let trace = sample("kinds.bin");
    let recs = dump_json(&trace);
    let kernels = of_type(&recs, "Kernel");
    let events = perfetto("kinds.bin");
    let slices = phase(&events, "X");
    assert_eq!(slices.len(), kernels.len());
    let mut durations: Vec<u64> = kernels
        .iter()
        .map(|k| k["end"].as_u64().unwrap() - k["start"].as_u64().unwrap())
        .collect();
    // Durations in ns, written as microseconds with three decimals.
    let mut written: Vec<u64> = slices
        .iter()
        .map(|s| (s["dur"].as_f64().unwrap() * 1000.0).round() as u64)
        .collect();
    durations.sort_unstable();
    written.sort_unstable();
    assert_eq!(written, durations);
    // The trace holds the mangled name; exports show it demangled.
    assert!(of_type(&recs, "String")
        .iter()
        .any(|s| s["text"] == "_Z12touch_kernelPcm"));
    assert!(slices.iter().all(|s| s["name"] == "touch_kernel"));
}

/// Kernels traced as their launches (`record`'s default) have no duration:
/// each is an instant on its stream's track, not a slice.
#[test]
fn perfetto_shows_kernel_launches_as_instants() {
    let dir = scratch("export-perfetto-launches");
    let out = run(&mut record_cmd(&dir, "t.bin", &["basic", "0"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json = dir.join("t.json");
    export(&dir.join("t.bin"), "perfetto", &json);
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    for e in events {
        check_trace_event(e);
    }
    let launches: Vec<&Value> = events
        .iter()
        .filter(|e| e["cat"] == "kernel launch")
        .collect();
    // fake_app.c `basic` launches k_one twice.
    assert_eq!(launches.len(), 2, "{events:?}");
    assert!(launches
        .iter()
        .all(|e| e["ph"] == "i" && e["name"] == "k_one"));
    assert!(phase(events, "X").is_empty());
}

/// Exports a sample as Parquet and reads it back; `test` keeps the scratch
/// folders of tests running in parallel apart.
fn parquet(test: &str, name: &str) -> DataFrame {
    let dir = scratch(&format!("export-parquet-{test}-{name}"));
    let out: PathBuf = dir.join("events.parquet");
    export(&sample(name), "parquet", &out);
    ParquetReader::new(std::fs::File::open(&out).unwrap())
        .finish()
        .unwrap()
}

fn column_u64(df: &DataFrame, event: &str, col: &str) -> Vec<u64> {
    let events = df.column("event").unwrap().str().unwrap();
    let values = df.column(col).unwrap().u64().unwrap();
    (0..df.height())
        .filter(|&i| events.get(i) == Some(event))
        .map(|i| values.get(i).unwrap())
        .collect()
}

#[test]
fn parquet_rows_and_sums_equal_the_trace_records() {
    for name in ["kinds.bin", "torch_oom.bin", "pools.bin", "vmm.bin"] {
        let recs = dump_json(&sample(name));
        let memory = of_type(&recs, "Memory");
        let sum = |alloc: bool| -> (usize, u64) {
            let m: Vec<&&Value> = memory
                .iter()
                .filter(|m| m["alloc"].as_bool() == Some(alloc))
                .collect();
            (
                m.len(),
                m.iter().map(|m| m["bytes"].as_u64().unwrap()).sum(),
            )
        };
        let df = parquet("sums", name);
        for (event, alloc) in [("alloc", true), ("free", false)] {
            let bytes = column_u64(&df, event, "bytes");
            assert_eq!(
                (bytes.len(), bytes.iter().sum::<u64>()),
                sum(alloc),
                "{name}: {event} rows"
            );
        }
        let kernels = column_u64(&df, "kernel", "bytes").len();
        assert_eq!(
            kernels,
            of_type(&recs, "Kernel").len(),
            "{name}: kernel rows"
        );
        // Every allocation either was freed or was still live at exit.
        let allocated: u64 = column_u64(&df, "alloc", "bytes").iter().sum();
        let freed_or_held: u64 = column_u64(&df, "free", "bytes").iter().sum::<u64>()
            + column_u64(&df, "exit", "bytes").iter().sum::<u64>();
        assert_eq!(allocated, freed_or_held, "{name}");
    }
}

#[test]
fn parquet_names_the_leaking_sites_of_kinds() {
    // kinds.cu leaks one 1 MiB device buffer and one 1 MiB pinned buffer,
    // from alloc_device_buffers and alloc_pinned.
    let df = parquet("leaks", "kinds.bin");
    let events = df.column("event").unwrap().str().unwrap();
    let labels = df.column("site_label").unwrap().str().unwrap();
    let bytes = df.column("bytes").unwrap().u64().unwrap();
    let mut leaked: Vec<(String, u64)> = Vec::new();
    for i in 0..df.height() {
        let l = labels.get(i).unwrap_or("");
        if events.get(i) == Some("exit")
            && (l.starts_with("alloc_device_buffers") || l.starts_with("alloc_pinned"))
        {
            leaked.push((
                l.split(" at ").next().unwrap().to_string(),
                bytes.get(i).unwrap(),
            ));
        }
    }
    leaked.sort();
    assert_eq!(
        leaked,
        vec![
            ("alloc_device_buffers".to_string(), 1 << 20),
            ("alloc_pinned".to_string(), 1 << 20)
        ]
    );
}

#[test]
fn export_json_is_the_versioned_analysis() {
    let dir = scratch("export-json");
    let out = dir.join("a.json");
    export(&sample("oom.bin"), "json", &out);
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["schema_version"], 2);
    assert_eq!(doc["devices"][0]["peak_bytes"], 8 * (16u64 << 30));
}

#[test]
fn export_of_bad_input_exits_2_and_leaves_no_file() {
    let dir = scratch("export-bad");
    let bad = dir.join("bad.bin");
    std::fs::write(&bad, b"not a trace at all").unwrap();
    let out = dir.join("out.parquet");
    let o = run(Command::new(gmem())
        .arg("export")
        .arg(&bad)
        .args(["--format", "parquet", "-o"])
        .arg(&out));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).starts_with("gmem-prof: "), "{}", stderr(&o));
    assert!(
        std::fs::read_dir(&dir).unwrap().count() == 1,
        "only bad.bin remains"
    );
}

/// torch_fraction_oom.py: PyTorch refused a 256 MiB tensor against its
/// memory fraction, with no CUDA call failing. Perfetto shows the error
/// the program saw, with the request and the limit of its message
/// (torch_fraction_oom.truth.json), and the process's allocated and
/// reserved bytes as counters, whose highest are torch's own peaks.
#[test]
fn perfetto_shows_the_framework_view_and_its_errors() {
    let truth: Value =
        serde_json::from_slice(&std::fs::read(sample("torch_fraction_oom.truth.json")).unwrap())
            .unwrap();
    let events = perfetto("torch_fraction_oom.bin");
    let raised: Vec<&Value> = phase(&events, "i")
        .into_iter()
        .filter(|e| {
            e["cat"] == "oom"
                && e["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("OOM raised by PyTorch")
        })
        .collect();
    assert_eq!(raised.len(), 1, "{events:?}");
    let args = &raised[0]["args"];
    assert_eq!(args["requested_bytes"], truth["request"]);
    assert_eq!(args["limit_bytes"], truth["limit"]);
    assert_eq!(args["limit"], "memory fraction");
    assert!(args["site"]
        .as_str()
        .unwrap()
        .ends_with(&format!("torch_fraction_oom.py:{}", truth["lines"]["oom"])));
    let tensors: Vec<&Value> = phase(&events, "C")
        .into_iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("tensors of pid"))
        .collect();
    let most = |series: &str| {
        tensors
            .iter()
            .map(|e| e["args"][series].as_u64().unwrap())
            .max()
    };
    assert_eq!(
        most("allocated"),
        truth["torch"]["allocated_bytes.all.peak"].as_u64()
    );
    assert_eq!(
        most("reserved"),
        truth["torch"]["reserved_bytes.all.peak"].as_u64()
    );
}

/// torch_leak.py: its tensors are rows of their own in the Parquet, each
/// with its tensor site and the allocator's figures after it: as many as
/// the allocator handed out and the program freed, the leaking line's 40
/// tensors of 4 MiB (torch_leak.truth.json), and the highest allocated
/// figure torch's own peak.
#[test]
fn parquet_has_the_tensors_of_the_framework_view() {
    let truth: Value =
        serde_json::from_slice(&std::fs::read(sample("torch_leak.truth.json")).unwrap()).unwrap();
    let a = export_json(&sample("torch_leak.bin"), &scratch("export-tensors-json"));
    let view = &a["frameworks"][0];
    let df = parquet("tensors", "torch_leak.bin");
    let allocs = column_u64(&df, "tensor alloc", "bytes");
    let frees = column_u64(&df, "tensor free", "bytes");
    assert_eq!(
        Some(allocs.len() as u64),
        view["tensors_allocated"].as_u64()
    );
    assert_eq!(Some(frees.len() as u64), view["tensors_freed"].as_u64());
    let events = df.column("event").unwrap().str().unwrap();
    let labels = df.column("site_label").unwrap().str().unwrap();
    let sites = df.column("tensor_site").unwrap().u32().unwrap();
    let bytes = df.column("bytes").unwrap().u64().unwrap();
    let leak_line = format!("main at torch_leak.py:{}", truth["lines"]["leak"]);
    let (mut kept, mut kept_bytes) = (0u64, 0u64);
    for i in 0..df.height() {
        if events.get(i) == Some("tensor alloc") {
            assert!(sites.get(i).is_some(), "row {i} has no tensor site");
            if labels.get(i) == Some(leak_line.as_str()) {
                kept += 1;
                kept_bytes += bytes.get(i).unwrap();
            }
        }
    }
    assert_eq!(Some(kept), truth["kept"].as_u64());
    assert_eq!(Some(kept_bytes), truth["kept_bytes"].as_u64());
    let allocated = df.column("allocated").unwrap().u64().unwrap();
    assert_eq!(
        allocated.max(),
        truth["torch"]["allocated_bytes.all.peak"].as_u64()
    );
}

/// The SQL blocks of docs/queries.md, by their first line's comment
/// ("-- peak per run").
fn documented_queries() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(repo().join("docs/queries.md")).unwrap();
    doc.split("```sql\n")
        .skip(1)
        .map(|block| {
            let sql = block.split("```").next().unwrap();
            let name = sql
                .lines()
                .next()
                .unwrap()
                .trim_start_matches("-- ")
                .to_string();
            (name, sql.to_string())
        })
        .collect()
}

/// Rows of `sql` run by DuckDB (Python's package from `package`), as JSON
/// arrays.
fn duckdb(package: &Option<PathBuf>, sql: &str) -> Vec<Value> {
    let script = "import duckdb, json, sys\n\
                  rows = duckdb.sql(sys.stdin.read()).fetchall()\n\
                  print(json.dumps([list(r) for r in rows]))";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(dir) = package {
        cmd.env("PYTHONPATH", dir);
    }
    let mut child = cmd.spawn().unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{sql}: {}", stderr(&out));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

/// Two runs added to one folder in the hive layout (`--into`): every
/// query of docs/queries.md runs in DuckDB and answers what each run's
/// analysis says (peaks per device, what each site held at exit and
/// allocated, failed allocations).
#[test]
fn documented_duckdb_queries_answer_what_the_analyses_say() {
    let Some(package) = python_package("GMEM_PROF_TEST_DUCKDB", "duckdb") else {
        eprintln!("skipped: no `duckdb` Python package (pip install duckdb, or set GMEM_PROF_TEST_DUCKDB)");
        return;
    };
    let dir = scratch("export-hive");
    let runs = dir.join("runs");
    let mut analyses = std::collections::BTreeMap::new();
    for (run_name, name) in [("base", "torch_leak.bin"), ("new", "oom.bin")] {
        let o = run(Command::new(gmem())
            .arg("export")
            .arg(sample(name))
            .args(["--format", "parquet", "--into"])
            .arg(&runs)
            .args(["--run", run_name]));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        analyses.insert(run_name.to_string(), export_json(&sample(name), &dir));
    }
    // The layout: one file per process and device, the parts in the path.
    let files: Vec<PathBuf> = walk(&runs);
    assert!(!files.is_empty());
    for f in &files {
        let rel = f
            .strip_prefix(&runs)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let parts: Vec<&str> = rel.split('/').collect();
        assert_eq!(parts.len(), 5, "{rel}");
        for (part, key) in parts.iter().zip(["run=", "host=", "pid=", "device="]) {
            assert!(part.starts_with(key), "{rel}");
        }
        assert_eq!(parts[4], "events.parquet");
    }
    let queries = documented_queries();
    assert_eq!(queries.len(), 4, "{queries:?}");
    let glob = format!("{}/**/*.parquet", runs.display());
    for (name, sql) in &queries {
        let rows = duckdb(&package, &sql.replace("runs/**/*.parquet", &glob));
        match name.as_str() {
            "peak per run" => {
                let want: Vec<Value> =
                    analyses
                        .iter()
                        .flat_map(|(run, a)| {
                            a["devices"].as_array().unwrap().iter().map(move |d| {
                                serde_json::json!([run, d["device"], d["peak_bytes"]])
                            })
                        })
                        .collect();
                assert_eq!(rows, want, "{name}");
            }
            "held at exit per site and run" | "allocated per site and run" => {
                let exit = name.starts_with("held");
                let mut want: std::collections::BTreeMap<(String, String), (u64, u64)> =
                    Default::default();
                for (run, a) in &analyses {
                    for s in a["sites"].as_array().unwrap() {
                        let label = s["label"].as_str().unwrap().to_string();
                        let (count, bytes) = if exit {
                            (0, s["held_at_exit_bytes"].as_u64().unwrap())
                        } else {
                            (
                                s["count"].as_u64().unwrap(),
                                s["total_bytes"].as_u64().unwrap(),
                            )
                        };
                        if bytes > 0 {
                            let e = want.entry((run.clone(), label)).or_default();
                            e.0 += count;
                            e.1 += bytes;
                        }
                    }
                }
                let got: std::collections::BTreeMap<(String, String), (u64, u64)> = rows
                    .iter()
                    .map(|r| {
                        let (run, label, count, bytes) = if exit {
                            (&r[1], &r[0], 0, r[2].as_u64().unwrap())
                        } else {
                            (&r[0], &r[1], r[2].as_u64().unwrap(), r[3].as_u64().unwrap())
                        };
                        let label = label.as_str().unwrap_or("").to_string();
                        ((run.as_str().unwrap().to_string(), label), (count, bytes))
                    })
                    .collect();
                assert_eq!(got, want, "{name}");
            }
            "failed allocations per run" => {
                let want: Vec<Value> = analyses
                    .iter()
                    .map(|(run, a)| serde_json::json!([run, a["ooms"].as_array().unwrap().len()]))
                    .collect();
                assert_eq!(rows, want, "{name}");
            }
            other => panic!("docs/queries.md has a query this test does not check: {other}"),
        }
    }
}

/// Every file under `dir`, all levels.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

/// `--into` is for Parquet, and a run's name stays one folder's name.
#[test]
fn runs_added_to_a_folder_keep_to_it() {
    let dir = scratch("export-into");
    let o = run(Command::new(gmem())
        .arg("export")
        .arg(sample("oom.bin"))
        .args(["--format", "json", "--into"])
        .arg(dir.join("runs")));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--into writes Parquet"),
        "{}",
        stderr(&o)
    );
    for _ in 0..2 {
        let o = run(Command::new(gmem())
            .arg("export")
            .arg(sample("oom.bin"))
            .args(["--format", "parquet", "--run", "../x", "--into"])
            .arg(dir.join("runs")));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    // Added twice under one name: replaced, not doubled; nothing else left.
    let names: Vec<String> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["run=.._x"]);
    assert!(!dir.join("x").exists());
}
