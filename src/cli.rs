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
        (with host call stacks) and kernel of every CUDA process the program started.",
    after_help = "Exit codes: `record` exits with the program's own exit code (128+N if it \
        died of signal N); 2 means gmem-prof itself failed or the input was bad."
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
    /// Print a trace's records, one per line (the format's debugging view).
    Dump(DumpArgs),
    /// Merge per-process trace files (written with no CLI in front, by setting
    /// the collector's environment variables) into one trace and resolve its
    /// stacks. Run it on the machine that recorded them.
    Symbolize(SymbolizeArgs),
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gmem-prof record -- ./my_cuda_app --its --args\n  \
    gmem-prof record -o run.bin -- python3 train.py\n  \
    gmem-prof record --no-kernels --stack-depth 32 -- ./server\n\n\
    The program's stdin, stdout, stderr and exit code pass through unchanged; Ctrl-C \
    reaches it as usual and the trace is still written. Children it starts that use \
    CUDA (exec'ed programs, multiprocessing spawn workers) are recorded into the same trace.")]
pub struct RecordArgs {
    /// Trace file to write. Default: trace.bin, or trace.1.bin, trace.2.bin, …
    /// when that exists (an existing file is never replaced without --force).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace the output file if it exists.
    #[arg(short, long)]
    pub force: bool,
    /// Do not trace kernels (lowest overhead; the report cannot name the
    /// kernel running at the peak).
    #[arg(long)]
    pub no_kernels: bool,
    /// Native frames kept per allocation stack; 0 turns stacks off.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub stack_depth: usize,
    /// Also capture stacks of frees (off by default: frees are attributed to
    /// the allocation's site).
    #[arg(long)]
    pub free_stacks: bool,
    /// The libcupti.so.13 to load (default: the CUDA toolkit's, from CUDA_HOME,
    /// /usr/local/cuda or the linker path, else pip's nvidia wheels).
    #[arg(long, value_name = "PATH", env = "GMEM_PROF_CUPTI")]
    pub cupti: Option<PathBuf>,
    /// The collector library (default: libgmem_prof_collector.so next to this
    /// executable).
    #[arg(long, value_name = "PATH", env = "GMEM_PROF_COLLECTOR")]
    pub collector: Option<PathBuf>,
    /// How often each process hands its data to the file, in milliseconds
    /// (bounds what a SIGKILL can lose).
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub flush_ms: u64,
    /// Keep the per-process files the trace was merged from (in
    /// `<output>.parts-<pid>/`).
    #[arg(long)]
    pub keep_parts: bool,
    /// The program to run, and its arguments.
    #[arg(required = true, last = true, value_name = "PROGRAM")]
    pub program: Vec<std::ffi::OsString>,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gmem-prof report trace.bin              # trace.html, trace.json, trace-*.svg here\n  \
    gmem-prof report trace.bin -o out/      # the same files in out/\n  \
    gmem-prof report gmem-traces/           # per-process files written without the CLI\n\n\
    The summary answers: peak per device and what was live then, leaks (apart from \
    memory an allocator cache holds at exit), sites that keep growing, fragmentation \
    and out-of-memory failures. The HTML file needs no network. A damaged or cut-short \
    trace gives a partial report with a warning; a file that is not a trace exits with 2.")]
pub struct ReportArgs {
    /// Trace files, or directories of per-process trace files, analyzed together.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Directory to write the report files into (created if missing).
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Print nothing (no summary, no progress).
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    gmem-prof check trace.bin --max-peak 8GiB --max-leaked 0\n  \
    gmem-prof check trace.bin --max-fragmentation 0.3 --max-growth 64MiB --max-ooms 0\n\n\
    Sizes take B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB). Exit codes: 0 every budget \
    holds, 1 a budget is exceeded (each printed with its figure and the sites \
    responsible), 2 bad input or no budget given.")]
pub struct CheckArgs {
    /// Trace files, or directories of per-process trace files.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Highest live bytes allowed on any device.
    #[arg(long, value_name = "SIZE")]
    pub max_peak: Option<crate::check::ByteSize>,
    /// Bytes allowed to stay allocated at exit (memory an allocator cache
    /// holds is not counted).
    #[arg(long, value_name = "SIZE")]
    pub max_leaked: Option<crate::check::ByteSize>,
    /// Growth allowed for any one site after the warm-up.
    #[arg(long, value_name = "SIZE")]
    pub max_growth: Option<crate::check::ByteSize>,
    /// Highest fragmentation allowed in pools and VMM reservations (0 to 1).
    #[arg(long, value_name = "F")]
    pub max_fragmentation: Option<f64>,
    /// Out-of-memory failures allowed to reach the program.
    #[arg(long, value_name = "N")]
    pub max_ooms: Option<u64>,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Trace files, or directories of per-process trace files.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// One JSON object per line instead of text.
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
