//! Command-line definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "gmem-prof",
    version,
    about = "GPU memory profiler for CUDA programs",
    long_about = "GPU memory profiler for CUDA programs.\n\n\
        `gmem-prof record -- ./app args` runs a program with gmem-prof's CUPTI collector \
        injected and writes one trace holding every allocation, free, failed allocation \
        (with host call stacks) and kernel of every CUDA process the program started. \
        `report` answers what was live at the peak and who allocated it, what leaks, what \
        keeps growing, how fragmented memory is and why allocations failed; `check` and \
        `diff` gate CI on budgets and on changes; `export` hands the data to Perfetto and \
        Parquet readers.",
    after_help = "Exit codes: `record` exits with the program's own exit code (128+N if it \
        died of signal N); `check` and `diff` exit 1 when a budget or threshold is exceeded \
        and 3 when part of the run was not profiled, so that no verdict can be trusted; \
        2 means gmem-prof itself failed or the input was bad."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a program under the collector and write one trace for the whole run.
    Record(RecordArgs),
    /// Analyze traces: print a summary and write an HTML report (with SVG
    /// charts) and the analysis as JSON.
    Report(ReportArgs),
    /// Check budgets (peak, leaks, growth, fragmentation, OOMs) for CI: exit 0
    /// when all hold, 1 when one is exceeded, 2 on bad input.
    Check(CheckArgs),
    /// Compare two runs site by site (matched by stack): peak per device,
    /// leaks, totals; optionally fail when they grew above a threshold.
    Diff(DiffArgs),
    /// Write a trace for other tools: Perfetto (Chrome trace-event JSON),
    /// Parquet (one row per event) or the analysis as JSON.
    Export(ExportArgs),
    /// Print a trace's records, one per line (the format's debugging view).
    Dump(DumpArgs),
    /// Merge per-process trace files (written with no CLI in front, by setting
    /// the collector's environment variables) into one trace and resolve its
    /// stacks. Run it on the machine that recorded them.
    Symbolize(SymbolizeArgs),
}

/// `record --kernels`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelTracing {
    Launches,
    Timed,
    Off,
}

/// `record --tensor-stacks`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorStacks {
    Auto,
    Python,
    All,
}

impl TensorStacks {
    /// The collector's `GMEM_PROF_TENSOR_STACKS` value.
    pub fn env_value(self) -> &'static str {
        match self {
            TensorStacks::Auto => "auto",
            TensorStacks::Python => "python",
            TensorStacks::All => "all",
        }
    }
}

impl KernelTracing {
    /// The collector's `GMEM_PROF_KERNELS` value.
    pub fn env_value(self) -> &'static str {
        match self {
            KernelTracing::Launches => "launches",
            KernelTracing::Timed => "timed",
            KernelTracing::Off => "off",
        }
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gmem-prof record -- ./my_cuda_app --its --args\n  \
    gmem-prof record -o run.bin -- python3 train.py\n  \
    gmem-prof record --no-kernels --stack-depth 32 -- ./server\n\n\
    The program's stdin, stdout, stderr and exit code pass through unchanged; Ctrl-C \
    reaches it as usual and the trace is still written. Children it starts that use \
    CUDA (exec'ed programs, multiprocessing workers) are recorded into the same trace. A \
    Python process that ends with os._exit (fork-started multiprocessing workers do) \
    finishes its part first; a native program that calls _exit() loses what it did in \
    its last --flush-ms and reads as cut short.")]
pub struct RecordArgs {
    /// Trace file to write. Default: trace.bin, or trace.1.bin, trace.2.bin, …
    /// when that exists (an existing file is never replaced without --force).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace the output file if it exists.
    #[arg(short, long)]
    pub force: bool,
    /// How kernels are traced. `launches` (default): each launch when the
    /// program makes it (name, stream, grid), about 0.5–0.65 µs per
    /// launch on an H200 (0.3–0.45 µs in the collector, ~0.2 µs in
    /// CUPTI); the report names the last kernel launched on each stream
    /// before the peak and the first one after it (the one that uses what
    /// was just allocated). `timed`: each kernel's run on the device, start
    /// to end, from CUPTI's kernel tracing: the report names the kernels
    /// running at the peak, and Perfetto shows their durations; about
    /// 0.9 µs per launch on an H200, paid on the launching thread (~10% on
    /// a training loop of many small kernels); kernels inside CUDA graphs
    /// are seen only this way. `off`: none (lowest overhead).
    #[arg(long, value_enum, value_name = "HOW", default_value_t = KernelTracing::Launches)]
    pub kernels: KernelTracing,
    /// The same as `--kernels off`.
    #[arg(long, conflicts_with = "kernels")]
    pub no_kernels: bool,
    /// Native frames kept per allocation stack; 0 turns stacks off (and
    /// with them Python lines, and the cudaMallocAsync backend's
    /// memory-fraction errors, which are told apart by their stack).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub stack_depth: usize,
    /// Also watch free calls: record their stacks and their failures (a
    /// double free, a bad pointer), and give the frees of tensors inside
    /// PyTorch's allocator their stacks. Off by default: CUPTI's activity
    /// records already carry every release, a free is attributed to its
    /// allocation's site, and watching frees costs about a microsecond per
    /// free.
    #[arg(long)]
    pub free_stacks: bool,
    /// Do not look inside framework allocators. By default the collector
    /// attaches to PyTorch's caching allocator (its trace tracker and OOM
    /// observer) in every process that uses it, and records each tensor
    /// allocated and freed inside the segments CUDA sees; and in Python
    /// programs that import JAX or CuPy, a small module reads their pools'
    /// own figures (JAX's memory_stats(), CuPy's used/total bytes) every
    /// GMEM_PROF_POOL_MS (50 ms) and at exit, and in programs that use
    /// PyTorch's optimizers it marks a training step each time the first
    /// optimizer steps. That module is a sitecustomize put first on
    /// PYTHONPATH (with this flag too: it also lets a process ending with
    /// os._exit finish its part of the trace, and beside it the gmem_prof
    /// module whose step() a program may call); the program's own
    /// sitecustomize still runs after it.
    #[arg(long)]
    pub no_frameworks: bool,
    /// Do not record the device's own view. By default the collector reads
    /// NVML (the library nvidia-smi reads) at each flush, right after a
    /// failed allocation and at exit: used and free memory per device and
    /// what each process uses, which the report sets beside what the trace
    /// tracked (CUDA contexts, other processes, the driver's share).
    #[arg(long)]
    pub no_device_view: bool,
    /// Do not record the program's NVTX ranges and marks. By default the
    /// collector is NVTX's tool too (`NVTX_INJECTION64_PATH`): ranges
    /// pushed or started and marks made from C/C++ (NVTX3), PyTorch's
    /// `torch.cuda.nvtx` and the `nvtx` Python package are recorded, and the
    /// report gives each range's memory. When another tool already set
    /// `NVTX_INJECTION64_PATH`, that tool keeps NVTX and no range is
    /// recorded.
    #[arg(long)]
    pub no_nvtx: bool,
    /// Leave Python frames out of stacks. By default a stack taken on a
    /// thread running Python (CPython 3.10 to 3.15) holds the Python
    /// functions and lines where the interpreter ran them.
    #[arg(long)]
    pub no_python: bool,
    /// The stacks of tensor events (those inside PyTorch's caching
    /// allocator). `auto` (default): on a thread running Python its Python
    /// frames alone (as PyTorch's own memory history records them:
    /// unwinding the dispatcher's native frames costs 1-3 µs per event, and
    /// a training step has thousands); on a thread evaluating a node of
    /// autograd's graph (the backward pass) that node, asked of PyTorch's
    /// engine, not unwound ("AddmmBackward0"); on any other thread its
    /// native frames. `python`: no native frames at all, so tensors of
    /// threads that run neither Python nor an autograd node carry no
    /// stack. `all`: native and Python frames interleaved on every thread
    /// (1-3 µs more per tensor; the backward pass's tensors then show the
    /// engine's frames down to the operator).
    #[arg(long, value_enum, value_name = "WHICH", default_value_t = TensorStacks::Auto)]
    pub tensor_stacks: TensorStacks,
    /// The libcupti to load, of CUDA 12.0 to 13.5 (default: one the program
    /// already loaded, as PyTorch does; else libcupti.so.13, or .so.12 with
    /// a driver older than CUDA 13, from CUDA_HOME, /usr/local/cuda, the
    /// linker path or pip's nvidia wheels; docs/compatibility.md).
    #[arg(long, value_name = "PATH", env = gmem_prof_traces::env::CUPTI)]
    pub cupti: Option<PathBuf>,
    /// The collector library (default: libgmem_prof_collector.so next to this
    /// executable).
    #[arg(long, value_name = "PATH", env = gmem_prof_traces::env::COLLECTOR)]
    pub collector: Option<PathBuf>,
    /// How often each process hands its data to the file, in milliseconds
    /// (bounds what a SIGKILL can lose).
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub flush_ms: u64,
    /// Keep the per-process files the trace was merged from (in
    /// `<output>.parts-<pid>/`).
    #[arg(long)]
    pub keep_parts: bool,
    /// Record only steps FIRST to LAST of each process (as in `100-110`;
    /// the steps PyTorch's optimizer or gmem_prof.step() mark): the window
    /// opens as step FIRST-1 ends and closes as step LAST ends. What was
    /// live when it opened is written then, each allocation, tensor and
    /// open range with its site, so the report's figures for those steps
    /// are those of a whole recording; before the window the collector
    /// still takes the stacks (that costs as much as recording), but writes
    /// nothing of what was freed again, and after it records nothing.
    #[arg(long, value_name = "FIRST-LAST", conflicts_with_all = ["capture_range", "delay", "duration", "window_signal"])]
    pub steps: Option<String>,
    /// Record only the first instance of an NVTX range: `nvtx:NAME`, or
    /// `nvtx:DOMAIN:NAME` for one domain (a window, as with --steps).
    #[arg(long, value_name = "nvtx:NAME", conflicts_with_all = ["delay", "duration", "window_signal"])]
    pub capture_range: Option<String>,
    /// Start recording SECONDS after each process starts CUDA (a window, as
    /// with --steps).
    #[arg(
        long,
        value_name = "SECONDS",
        conflicts_with = "window_signal",
        allow_negative_numbers = true
    )]
    pub delay: Option<f64>,
    /// Stop recording SECONDS after the window opened (with --delay, or
    /// from the start).
    #[arg(
        long,
        value_name = "SECONDS",
        conflicts_with = "window_signal",
        allow_negative_numbers = true
    )]
    pub duration: Option<f64>,
    /// Record between the first and second SIGUSR2 each process receives
    /// (a window, as with --steps). Send it to the program (`kill -USR2
    /// PID`, or `pkill -USR2 -f train.py` for all its processes); one sent
    /// to gmem-prof is passed on to the program it started.
    #[arg(long)]
    pub window_signal: bool,
    /// The program to run, and its arguments.
    #[arg(required = true, last = true, value_name = "PROGRAM")]
    pub program: Vec<std::ffi::OsString>,
}

/// How a trace is read, for every command that analyzes one: which frames
/// are the program's own code (each site is named by its innermost frame of
/// the program's own code), and what marks the program's steps.
#[derive(Args, Debug, Clone, Default)]
pub struct ReadingArgs {
    /// Frames whose file (Python) or module path contains PATTERN are the
    /// program's own code, even in site-packages (a package you develop);
    /// repeatable.
    #[arg(long = "user-code", value_name = "PATTERN")]
    pub user_code: Vec<String>,
    /// Frames whose file or module path contains PATTERN are library code
    /// (a vendored framework); repeatable.
    #[arg(long = "library-code", value_name = "PATTERN")]
    pub library_code: Vec<String>,
    /// Each instance of the NVTX range NAME is a step: step N ends where
    /// the range's Nth instance ends (in any domain; "DOMAIN:NAME" for one
    /// domain). For programs that mark their iterations with NVTX; the
    /// steps PyTorch's optimizer and gmem_prof.step() marked are then left
    /// out.
    #[arg(long = "step-range", value_name = "NAME")]
    pub step_range: Option<String>,
}

impl ReadingArgs {
    /// The analyzer's options these arguments give (no progress shown).
    pub fn options(&self) -> gmem_prof_analyzer::Options<'static> {
        gmem_prof_analyzer::Options {
            progress: None,
            code: self.rules(),
            step_range: self.step_range.clone(),
        }
    }

    pub fn rules(&self) -> gmem_prof_analyzer::CodeRules {
        gmem_prof_analyzer::CodeRules {
            user: self.user_code.clone(),
            library: self.library_code.clone(),
        }
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gmem-prof report trace.bin              # trace.html, trace.json, trace-*.svg here\n  \
    gmem-prof report trace.bin -o out/      # the same files in out/\n  \
    gmem-prof report gmem-traces/           # per-process files written without the CLI\n  \
    gmem-prof report rank0.bin rank1.bin    # several runs: a report each, and runs.html\n  \
    gmem-prof report snapshot.pickle        # a PyTorch memory snapshot (_dump_snapshot)\n\n\
    The summary answers: peak per device and what was live then, leaks (apart from \
    memory an allocator cache holds at exit), sites that keep growing, fragmentation \
    and out-of-memory failures; with PyTorch's caching allocator, also its tensors: \
    allocated and reserved, the peak by Python line, fragmentation per pool, the errors it \
    raised; with training steps (PyTorch's optimizer, gmem_prof.step()), what step 1 kept, \
    the steady state and what each step keeps after the warm-up, by line; with NVTX ranges, \
    what each range name rises to inside an instance and keeps, by line. The HTML file \
    needs no network. A damaged or cut-short trace gives a partial \
    report with a warning; a file that is not a trace exits with 2.\n\n\
    Sites are named by their innermost frame of the program's own code: for a stack with \
    Python frames, the innermost Python frame whose file is not in site-packages, \
    dist-packages or the standard library (lib/pythonX.Y); for tensors made on threads that \
    run no Python (PyTorch's autograd), the backward node or operator; otherwise the first \
    native frame outside CUDA and the allocators. --user-code and --library-code change \
    which files count as the program's. A site is one call path: that frame and its callers. \
    A line reached from two callers (a helper) is two sites, each with its own bytes, \
    labelled \"helper at f.py:28, called from CALLER at f.py:36\". A caching allocator's \
    segment is labelled by the request that made it take the segment (\"segments of \
    PyTorch's caching allocator taken for …\"): what it held later is in the allocator's \
    own view.\n\n\
    A PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot, what \
    pytorch.org/memory_viz opens) is read as the trace of a PyTorch process, here and in \
    every command that reads traces: its allocation history becomes the allocator's events \
    (and the driver calls behind its segments), with their frames; what was live before the \
    history began (PyTorch keeps its last max_entries events) is put at its start. It holds \
    no kernels and no memory outside PyTorch's allocator.")]
pub struct ReportArgs {
    /// Traces, one per run: a trace file, a directory of the per-process
    /// files of one run, or a PyTorch memory snapshot pickle. With several, each run gets its own report and
    /// runs.html puts them side by side (peaks, skew, curves).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Directory to write the report files into (created if missing).
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Print nothing (no summary, no progress).
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub reading: ReadingArgs,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gmem-prof check trace.bin --max-peak 8GiB --max-leaked 0 --max-growth 0\n  \
    gmem-prof check trace.bin --max-fragmentation 0.3 --max-growth 64MiB --max-ooms 0\n  \
    gmem-prof check trace.bin --budget gmem-budget.toml --markdown summary.md --junit junit.xml\n\n\
    A budget file holds [run], [device.N] and [process.\"PART OF COMMAND LINE\"] tables \
    of max_peak, max_pinned, max_allocated, max_leaked, max_cached_at_exit, \
    max_library_held, max_module_globals, max_tensors_at_exit, max_growth, \
    max_fragmentation, max_ooms, max_step_growth, max_step_peak and max_role.ROLE \
    (docs/ci.md). \
    Flags override the file's [run] table. Sizes take B, KiB, MiB, GiB, TiB (or KB, MB, \
    GB, TB). Exit codes: 0 every budget holds, 1 a budget is exceeded (each printed with \
    its figure and the sites responsible), 2 bad input or no budget given, 3 part of the \
    run not profiled, so that no budget can be trusted (see --allow-unprofiled).")]
pub struct CheckArgs {
    /// Traces (each a file, or a directory of per-process files of one run);
    /// every budget is checked on each.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Budgets from a TOML file: for the run, per device and per process.
    #[arg(long, value_name = "FILE")]
    pub budget: Option<PathBuf>,
    /// Also write the result as JSON (schema "gmem-prof-check", docs/formats.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write a Markdown summary (for a pull-request comment, or
    /// $GITHUB_STEP_SUMMARY).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write JUnit XML, one test case per budget.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Highest live bytes allowed in any device's own memory: device,
    /// pool, VMM, array and graph-pool allocations, module globals, and
    /// managed memory in full (CUDA does not say where its pages are).
    /// Pinned host memory is host RAM: --max-pinned budgets it.
    #[arg(long, value_name = "SIZE")]
    pub max_peak: Option<gmem_prof_model::budgets::ByteSize>,
    /// Highest pinned host memory (cudaHostAlloc, cudaMallocHost,
    /// PyTorch's pin_memory) live at once, per device's contexts.
    #[arg(long, value_name = "SIZE")]
    pub max_pinned: Option<gmem_prof_model::budgets::ByteSize>,
    /// Highest bytes of tensors a framework allocator (PyTorch's) may have
    /// allocated at once on any device (its `max_memory_allocated`).
    #[arg(long, value_name = "SIZE")]
    pub max_allocated: Option<gmem_prof_model::budgets::ByteSize>,
    /// Bytes of tensors allowed to stay allocated when a process ends (a
    /// framework's live objects at exit; what its allocator caches is not
    /// counted).
    #[arg(long, value_name = "SIZE")]
    pub max_tensors_at_exit: Option<gmem_prof_model::budgets::ByteSize>,
    /// Bytes the program leaked: allocated by its own code (or a framework
    /// on its behalf) and still allocated when it ended. Memory held at
    /// exit of the other three kinds is not counted, and has its own
    /// budget: --max-cached-at-exit, --max-library-held,
    /// --max-module-globals.
    #[arg(long, value_name = "SIZE")]
    pub max_leaked: Option<gmem_prof_model::budgets::ByteSize>,
    /// Bytes a caching allocator (PyTorch's, CuPy's, XLA's) still held at
    /// exit: freed by the program, kept for reuse.
    #[arg(long, value_name = "SIZE")]
    pub max_cached_at_exit: Option<gmem_prof_model::budgets::ByteSize>,
    /// Bytes CUDA libraries held at exit for the process's life: memory
    /// allocated inside cuBLAS, cuDNN, NCCL, cuFFT, … (their frames are on
    /// the stack) or by a framework for their handles and workspaces, and
    /// CUDA graph pools. A library that keeps allocating shows as growth.
    #[arg(long, value_name = "SIZE")]
    pub max_library_held: Option<gmem_prof_model::budgets::ByteSize>,
    /// Bytes of module globals (__device__ / __managed__ variables).
    #[arg(long, value_name = "SIZE")]
    pub max_module_globals: Option<gmem_prof_model::budgets::ByteSize>,
    /// Growth allowed for any one site (CUDA allocation sites and tensor
    /// sites). A site grows when its live bytes keep rising through the
    /// judged part of its process's run (of the time buckets in which the
    /// process allocated, from 20% to 95%: the lowest level of each
    /// quarter and the level at its end never fall and end at least 1 MiB
    /// higher) and are still held when the process ends, or rise as one
    /// allocation among its loop's others and keep rising until they are
    /// freed (a Python program frees its objects at shutdown, after the
    /// run). Memory filled and then released is a peak, not growth; so is a
    /// sawtooth, and so is memory filled during set-up and held flat while
    /// the work runs. The figure is the rise over the judged part
    /// (docs/ci.md gives the rule whole). `--max-growth 0` fails on any
    /// growing site: the budget that catches a Python program's leak.
    #[arg(long, value_name = "SIZE")]
    pub max_growth: Option<gmem_prof_model::budgets::ByteSize>,
    /// Bytes a process's steps (training iterations) may keep per step,
    /// on average over the steps after the warm-up (the first 20% of them,
    /// at least one): memory that grows step after step. Counted in
    /// tensors where the trace sees the framework allocator from the inside
    /// (PyTorch's), else in the process's CUDA allocations. Steps are
    /// marked by PyTorch's optimizer with no code change, or by the
    /// program (gmem_prof.step(), gmem_prof_mark_step()); with no step
    /// marked the budget fails, since it cannot be judged.
    #[arg(long, value_name = "SIZE")]
    pub max_step_growth: Option<gmem_prof_model::budgets::ByteSize>,
    /// The highest live bytes any one step may reach: the process's CUDA
    /// allocations, the figure of --max-peak, within each of its steps
    /// (the first 1,000). With no step marked the budget fails.
    #[arg(long, value_name = "SIZE")]
    pub max_step_peak: Option<gmem_prof_model::budgets::ByteSize>,
    /// Bytes of tensors of one role allowed at a framework view's
    /// allocated peak, as ROLE=SIZE (repeat for several roles): parameters,
    /// gradients, optimizer_state, activations, temporaries, inputs,
    /// kv_cache, library_workspaces, unknown. Roles are decided from the
    /// trace's evidence with no change to the program (docs/design.md,
    /// "Roles"); the report shows them at each view's peak.
    #[arg(long, value_name = "ROLE=SIZE", value_parser = parse_role_budget)]
    pub max_role: Vec<(String, gmem_prof_model::budgets::ByteSize)>,
    /// Highest fragmentation allowed in any one pool: stream-ordered pools,
    /// VMM reservations and the pools of a framework allocator (0 to 1).
    #[arg(long, value_name = "F")]
    pub max_fragmentation: Option<f64>,
    /// Out-of-memory errors allowed to reach the program (failed CUDA
    /// allocations not recovered by a retry, and errors a framework's
    /// allocator raised, counted once).
    #[arg(long, value_name = "N")]
    pub max_ooms: Option<u64>,
    /// Check the budgets even when part of the run was not profiled. By
    /// default such a run fails with exit code 3: a process the collector
    /// could not profile (another CUPTI client held CUPTI, no usable
    /// CUPTI), one whose records were dropped, or one cut short (killed,
    /// crashed) shows less than it used, so every budget would pass on it.
    /// So does a budget on tensors (--max-allocated, --max-tensors-at-exit)
    /// where PyTorch's caching allocator was found but not seen from the
    /// inside (PYTORCH_NO_CUDA_MEMORY_CACHING set, a PyTorch build this
    /// gmem-prof does not know): its tensors would read 0 B.
    #[arg(long)]
    pub allow_unprofiled: bool,
    #[command(flatten)]
    pub reading: ReadingArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Chrome trace-event JSON: open it in https://ui.perfetto.dev or
    /// chrome://tracing. Counter tracks of live and reserved bytes per GPU,
    /// kernels as slices per CUDA stream, OOMs and peaks as instants.
    Perfetto,
    /// One row per event (alloc, free, failed, exit, kernel) with its site;
    /// DuckDB, pandas, polars and Spark read it as is. Columns: docs/formats.md.
    Parquet,
    /// The analysis (what `report` writes as NAME.json), versioned schema.
    Json,
    /// A PyTorch memory snapshot pickle of one process (--pid when the trace
    /// has several), as torch.cuda.memory._dump_snapshot writes them: open
    /// it at https://pytorch.org/memory_viz or with python -m
    /// torch.cuda._memory_viz. Tensors of PyTorch's allocator are its
    /// blocks and device allocations its segments; for other programs each
    /// device allocation is a segment of one block.
    TorchSnapshot,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gmem-prof export trace.bin --format perfetto        # trace.perfetto.json\n  \
    gmem-prof export trace.bin --format parquet -o events.parquet\n  \
    duckdb -c \"select site_label, sum(bytes) from 'events.parquet' where event = 'exit' group by 1\"\n  \
    gmem-prof export main.bin --format parquet --into runs/ --run $(git rev-parse --short HEAD)\n  \
    duckdb -c \"select run, max(device_live) from read_parquet('runs/**/*.parquet', hive_partitioning = true) group by run\"\n  \
    gmem-prof export trace.bin --format torch-snapshot  # trace.snapshot.pickle for pytorch.org/memory_viz\n\n\
    docs/queries.md holds the questions people ask across runs, in DuckDB, pandas and Spark.\n\n\
    Times are nanoseconds (Perfetto: microseconds) since the trace's first event. \
    Parquet reads the trace twice: sites get their report ids only once all of it is read.")]
pub struct ExportArgs {
    /// Trace file, a directory of per-process trace files of one run, or a
    /// PyTorch memory snapshot pickle.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    #[command(flatten)]
    pub reading: ReadingArgs,
    /// What to write.
    #[arg(short, long, value_enum)]
    pub format: ExportFormat,
    /// Output file (default: the trace's name with .perfetto.json, .parquet
    /// or .json, in the current directory). Replaced if it exists.
    #[arg(short, long, value_name = "FILE", conflicts_with = "into")]
    pub output: Option<PathBuf>,
    /// Parquet only: add the run to the folder DIR, which many runs share,
    /// in the hive layout: DIR/run=RUN/host=HOST/pid=PID/device=D/
    /// events.parquet (the path's parts are columns to DuckDB, pandas,
    /// Spark and polars; a run of the same name is replaced).
    #[arg(long, value_name = "DIR")]
    pub into: Option<PathBuf>,
    /// The run's name in --into's layout (a commit, a date, a job id).
    /// Default: the trace's name.
    #[arg(long, value_name = "NAME", requires = "into")]
    pub run: Option<String>,
    /// torch-snapshot only: the process to write (a snapshot holds one).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Print nothing on success.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gmem-prof diff main.bin pr.bin\n  \
    gmem-prof diff main.bin pr.bin --fail-above 5% --markdown diff.md --html diff.html\n\n\
    Sites are matched by their frames' function names (module+offset for unresolved \
    frames), never by address, so two builds compare. --fail-above judges each device's \
    peak and the bytes leaked at exit against the base; a figure that was 0 in the base \
    and is not now is always above. Exit codes: 0, 1 when above the threshold, 2 bad input, \
    3 with --fail-above when part of either run was not profiled (see --allow-unprofiled).")]
pub struct DiffArgs {
    /// The reference run (a trace file, or a directory of per-process files).
    #[arg(value_name = "BASE")]
    pub base: PathBuf,
    #[command(flatten)]
    pub reading: ReadingArgs,
    /// The run to compare with it.
    #[arg(value_name = "NEW")]
    pub new: PathBuf,
    /// Exit 1 when a figure judged (--fail-on) grew by more than this share
    /// of the base (e.g. 5%), or grew at all from zero.
    #[arg(long, value_name = "PERCENT")]
    pub fail_above: Option<Percent>,
    /// The figures --fail-above judges, comma-separated, of: peak (each
    /// device's), allocated (tensors' peak), leaked, library (held by CUDA
    /// libraries at exit), ooms, fragmentation (the worst pool's), growth
    /// (the largest growing site), step_peak (the steady-state step's
    /// peak: the median of the steps after the first, of the process with
    /// the most steps), step_growth (bytes kept per step after the
    /// warm-up). Default: peak,leaked,ooms.
    #[arg(
        long,
        value_name = "FIGURE",
        value_delimiter = ',',
        requires = "fail_above"
    )]
    pub fail_on: Vec<gmem_prof_model::diff::Judged>,
    /// Judge the figures even when part of a run was not profiled. By
    /// default --fail-above then exits 3: a run that shows less than it used
    /// (a process another CUPTI client kept from the collector, records
    /// dropped, a process cut short; with `allocated` judged, tensors not
    /// seen) would pass any threshold against the base.
    #[arg(long, requires = "fail_above")]
    pub allow_unprofiled: bool,
    /// Write the comparison as a self-contained HTML page, curves overlaid.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the comparison as JSON (schema "gmem-prof-diff", docs/formats.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a Markdown summary for a pull-request comment.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Print nothing but the threshold verdict.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Trace files, or directories of per-process trace files.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// One JSON object per line instead of text: the record's fields, its
    /// `type`, `trace_stream`, the process's stream of records in the
    /// trace (the text's `s0`, `s1`, …), and with several traces
    /// `trace_file`, the trace's place among them (from 0).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SymbolizeArgs {
    /// Trace files, or directories of per-process trace files.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Where to write the merged, symbolized trace.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Replace the output file if it exists.
    #[arg(short, long)]
    pub force: bool,
}

/// A percentage threshold: "5%", "5", "0.5%".
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percent(pub f64);

impl std::str::FromStr for Percent {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().trim_end_matches('%').trim();
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Percent(v)),
            _ => Err(format!(
                "{s:?} is not a percentage (examples: 5%, 0.5%, 10)"
            )),
        }
    }
}

/// `--max-role ROLE=SIZE`: a role's key and its budget.
fn parse_role_budget(s: &str) -> Result<(String, gmem_prof_model::budgets::ByteSize), String> {
    let (role, size) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: give ROLE=SIZE, as in activations=8GiB"))?;
    let known = gmem_prof_model::Role::from_key(role).ok_or_else(|| {
        format!(
            "{role:?}: no such role; the roles are {}",
            gmem_prof_model::Role::ALL
                .map(gmem_prof_model::Role::key)
                .join(", ")
        )
    })?;
    let size = size.parse().map_err(|e| format!("{size:?}: {e}"))?;
    Ok((known.key().to_string(), size))
}
