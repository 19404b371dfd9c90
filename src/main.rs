//! gmem-prof: the command-line tool. Glue only: flags, processes, files and
//! exit codes; the trace format lives in `traces/`, the collector in
//! `collector/`.

mod check;
mod cli;
mod diff;
mod dump;
mod export;
mod inputs;
mod locate;
mod merge;
mod record;
mod report;
mod symbols;

use clap::Parser;

/// Exit code when gmem-prof itself fails or the input is bad.
pub const EXIT_FAILURE: i32 = 2;

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
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("gmem-prof: {e:#}");
            std::process::exit(EXIT_FAILURE);
        }
    }
}
