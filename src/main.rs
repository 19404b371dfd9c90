//! gmem-prof: the command-line tool. Glue only: flags, processes, files and
//! exit codes; the trace format lives in `traces/`, the collector in
//! `collector/`.

mod check;
// Its doc comments are `--help` text, read in a terminal: addresses stay bare.
#[allow(rustdoc::bare_urls)]
mod cli;
mod diff;
mod dump;
mod export;
mod inputs;
mod locate;
mod merge;
mod progress;
mod record;
mod report;
mod signals;
mod symbols;

use std::io::Write;

use clap::Parser;

/// Exit code when gmem-prof itself fails or the input is bad.
pub const EXIT_FAILURE: i32 = 2;
/// Exit code of `check` and `diff` when part of a run was not profiled
/// (and that was not allowed): its figures cannot be trusted either way.
/// Not 2 (bad input, gmem-prof failed) so that CI can tell "the run proves
/// nothing" from "the job is broken".
pub const EXIT_NOT_PROFILED: i32 = 3;

fn main() {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Record(a) => record::run(a),
        cli::Command::Report(a) => report::run(a).map(|()| 0),
        cli::Command::Check(a) => check::run(a),
        cli::Command::Diff(a) => diff::run(a),
        cli::Command::Dump(a) => dump::run(a).map(|()| 0),
        cli::Command::Export(a) => export::run(a).map(|()| 0),
        cli::Command::Symbolize(a) => merge::symbolize_command(a).map(|()| 0),
    };
    inputs::remove_converted();
    match result {
        Ok(code) => std::process::exit(code),
        // A reader that stopped reading (`| head`, `| less` quit early) is
        // not an error: end quietly, as other command-line tools do.
        Err(e) if is_broken_pipe(&e) => std::process::exit(0),
        Err(e) => {
            eprintln!("gmem-prof: {e:#}");
            std::process::exit(EXIT_FAILURE);
        }
    }
}

/// Whether an error comes from writing to a closed pipe.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes `text` to stdout; unlike `print!`, a closed pipe is an error the
/// caller returns (and `main` ends quietly on), not a panic.
pub fn out(text: std::fmt::Arguments) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(text)?;
    stdout.flush()
}
