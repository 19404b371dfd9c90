//! End-to-end tests of the gmem-prof CLI: the real binary, run through
//! CARGO_BIN_EXE, on machines without a GPU.
//!
//! Contents:
//! - `util`: builds the fake CUPTI/driver (tests/fake_cupti) and the
//!   collector, runs the CLI, reads dumps.
//! - `record`: `gmem-prof record` over fake CUDA programs: exit codes,
//!   stdio, signals, SIGKILL, threads, fork/exec, CUPTI conflicts.
//! - `dump`: `dump` and `symbolize` on the real sample traces; golden dumps
//!   per format version; damaged and hostile input.
//! - `samples`: figures in the real GPU traces (traces/samples) checked
//!   against what the recorded programs did.
//! - `report`: `gmem-prof report`: files, summary, golden JSON/HTML, bad and
//!   hostile input, the page in headless chromium.
//! - `check`: budgets (flags and budget files), exit codes and CI outputs
//!   (JSON, Markdown, JUnit) on the real samples.
//! - `diff`: two recorded runs with a known difference.
//! - `export`: Perfetto JSON and Parquet read back and checked against the
//!   traces' own records.
//! - `frameworks`: Python frames on every interpreter present, and the
//!   stand-in for PyTorch's caching allocator, recorded and analyzed.
//! - `steps`: training steps marked by PyTorch's optimizer (the stand-in's)
//!   and by the program, each step's kept bytes against the program's.
//! - `roles`: what each tensor is (parameters, gradients, optimizer state,
//!   activations, …) in a training loop over the stand-in torch whose
//!   tensors' roles are known by construction.
//! - `ranges`: NVTX ranges and marks (NVTX3's own header, the `nvtx`
//!   package), each range's rise and kept bytes against the program's,
//!   ranges as steps, range budgets.
//! - `windows`: recording a part of the run (`--steps`, `--capture-range`,
//!   `--window-signal`): the window's figures against the whole run's.
//! - `snapshots`: PyTorch memory snapshot pickles written by `export` and
//!   read by every command, against the recorded traces' figures and
//!   PyTorch's own snapshot rules; hostile pickles refused.
//! - `wheel`: the pip package installed into a fresh virtual environment
//!   with no Rust, its command, module and collector at work.
//! - `pytest`: the pytest plugin's GPU memory limits over the fake driver.
//! - `notebook`: the notebook magics in a real Jupyter kernel.
//! - `remedies`: what to change, on the real samples that show each case.
//! - `device_view`: what nvidia-smi shows (a stand-in NVML with known
//!   figures) taken apart beside what the trace tracked.
//! - `pools`: JAX's and CuPy's pools as their own APIs count them.
//! - `mangled`: the real samples with records lost, repeated, moved, spliced
//!   from another run or with a field changed: every command gives a result
//!   or a clear error, never a panic.
//! - `docs`: the repository stands alone (no file cites a document outside
//!   it).
//! - `repeats`: no run of nine lines of code is written twice in the
//!   crates' sources.
//!
//! The GPU itself is tested by tests/gpu/run.sh on the GPU machine.

#[path = "e2e/util.rs"]
mod util;

#[path = "e2e/record.rs"]
mod record;

#[path = "e2e/dump.rs"]
mod dump;

#[path = "e2e/samples.rs"]
mod samples;

#[path = "e2e/report.rs"]
mod report;

#[path = "e2e/check.rs"]
mod check;

#[path = "e2e/diff.rs"]
mod diff;

#[path = "e2e/export.rs"]
mod export;

#[path = "e2e/steps.rs"]
mod steps;

#[path = "e2e/ranges.rs"]
mod ranges;

#[path = "e2e/roles.rs"]
mod roles;

#[path = "e2e/windows.rs"]
mod windows;

#[path = "e2e/snapshots.rs"]
mod snapshots;

#[path = "e2e/wheel.rs"]
mod wheel;

#[path = "e2e/pytest.rs"]
mod pytest;

#[path = "e2e/notebook.rs"]
mod notebook;

#[path = "e2e/frameworks.rs"]
mod frameworks;

#[path = "e2e/device_view.rs"]
mod device_view;

#[path = "e2e/remedies.rs"]
mod remedies;

#[path = "e2e/pools.rs"]
mod pools;

#[path = "e2e/mangled.rs"]
mod mangled;

#[path = "e2e/docs.rs"]
mod docs;

#[path = "e2e/repeats.rs"]
mod repeats;
