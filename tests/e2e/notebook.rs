//! The notebook magics (`%load_ext gmem_prof`, `%%gmem_prof`,
//! collector/python/gmem_prof/notebook.py) in a real Jupyter kernel
//! (ipykernel through jupyter_client, fetched by .ci/run) over the fake
//! driver: the cell's figures are what it allocated, and its output holds
//! the report page in a frame.

use serde_json::Value;

use crate::util::*;

#[test]
fn a_notebook_cell_shows_what_it_took_and_kept() {
    let Some(package) = python_package("GMEM_PROF_TEST_JUPYTER", "jupyter_client") else {
        eprintln!("skipped: no Jupyter (pip install ipykernel jupyter_client, or set GMEM_PROF_TEST_JUPYTER)");
        return;
    };
    let dir = scratch("notebook");
    let cells = serde_json::json!([
        "%load_ext gmem_prof",
        "import ctypes, os\n\
         cuda = ctypes.CDLL(os.environ['FAKE_CUPTI'])\n\
         cuda.fake_cuMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]\n\
         cuda.fake_cuMemFree.argtypes = [ctypes.c_uint64, ctypes.c_size_t]\n\
         assert cuda.fake_cuInit() >= 0\n\
         kept = []\n\
         def allocate(n):\n    p = ctypes.c_uint64()\n    assert cuda.fake_cuMemAlloc(ctypes.byref(p), n) == 0\n    return p.value\n\
         def temporary(n):\n    cuda.fake_cuMemFree(allocate(n), n)",
        "%%gmem_prof\nkept.append(allocate(3 << 20))\ntemporary(5 << 20)",
    ]);
    let file = dir.join("cells.json");
    std::fs::write(&file, cells.to_string()).unwrap();
    let o = run(python_with_gmem_prof(&dir, package)
        .arg(repo().join("tests/fake_cupti/run_in_kernel.py"))
        .arg(&file));
    assert!(o.status.success(), "{}", stderr(&o));
    let out: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    for (i, c) in out.iter().enumerate() {
        assert_eq!(c["status"], "ok", "cell {i}: {c}");
    }
    assert!(
        out[0]["stdout"]
            .as_str()
            .unwrap()
            .contains("recording this kernel's GPU memory"),
        "{}",
        out[0]
    );
    let shown = out[2]["html"].as_str().unwrap();
    // It kept 3 MiB and, on top, made and freed 5 MiB.
    assert!(
        shown.contains(
            "took 8.00 MiB above what was live when it began, left 3.00 MiB live (CUDA allocations)"
        ),
        "{shown}"
    );
    // The line that kept it: `allocate`, called from the cell's first line.
    let row = shown
        .split("<tr>")
        .find(|r| r.contains(">3.00 MiB</td>"))
        .unwrap_or_else(|| panic!("no kept row: {shown}"));
    assert!(
        row.contains("allocate at ") && row.contains(".py:1"),
        "{row}"
    );
    // The report page, whole, in a frame.
    assert!(
        shown.contains("<iframe") && shown.contains("srcdoc=\"&lt;!DOCTYPE html&gt;"),
        "{}",
        &shown[..shown.len().min(2000)]
    );
}
