//! `gmem-prof report`: analyze traces, print the summary, write the HTML
//! report with its SVG charts and the analysis as JSON. Several traces are
//! several runs: each gets its own report, and `runs.html` puts them side by
//! side.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gmem_prof_analyzer::{analyze_files, Options};
use gmem_prof_model::Analysis;

use crate::cli::ReportArgs;
use crate::progress::{run_label, ProgressLine};

pub fn run(a: ReportArgs) -> Result<()> {
    let dir = a.output.clone().unwrap_or_else(|| PathBuf::from("."));
    // Each argument is one run: a trace file, or a directory of the
    // per-process files of one run.
    let mut inputs = Vec::new();
    for t in &a.traces {
        inputs.push(crate::inputs::expand(std::slice::from_ref(t))?);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let stems = unique_stems(&inputs);
    let tty = std::io::stderr().is_terminal() && !a.quiet;
    let several = inputs.len() > 1;

    let mut runs: Vec<(String, Analysis)> = Vec::new();
    let mut pages = Vec::new();
    for (i, (files, stem)) in inputs.iter().zip(&stems).enumerate() {
        let label = run_label(i, inputs.len());
        let analysis = analyze_with_progress(files, tty, &label, &a.reading)?;
        let written = write_report(&analysis, stem, &dir)?;
        if !a.quiet && !several {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            gmem_prof_reports::summary(&analysis, &mut out)?;
            writeln!(
                out,
                "\nreport: {} ({} chart{} as SVG beside it), analysis: {}",
                written.html.display(),
                written.svgs,
                if written.svgs == 1 { "" } else { "s" },
                written.json.display()
            )?;
        }
        if several {
            for w in analysis
                .input
                .warnings
                .iter()
                .map(gmem_prof_reports::reasons::input_warning)
            {
                eprintln!("gmem-prof: warning: {stem}: {w}");
            }
        }
        pages.push(
            written
                .html
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        runs.push((stem.clone(), analysis));
    }
    if several {
        let side: Vec<(&str, &Analysis)> = runs.iter().map(|(n, a)| (n.as_str(), a)).collect();
        let mut page = Vec::new();
        gmem_prof_reports::runs::html(&side, &pages, &mut page)?;
        let path = dir.join("runs.html");
        write(&path, &page)?;
        if !a.quiet {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            gmem_prof_reports::runs::text(&side, &mut out)?;
            writeln!(
                out,
                "\nside by side: {}; each run's report: {}",
                path.display(),
                pages
                    .iter()
                    .map(|p| dir.join(p).display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
    }
    Ok(())
}

/// Analyzes `files`, showing how far it got on a terminal (`tty`), each
/// line led by `label`.
pub(crate) fn analyze_with_progress(
    files: &[PathBuf],
    tty: bool,
    label: &str,
    reading: &crate::cli::ReadingArgs,
) -> Result<Analysis> {
    let line = ProgressLine::new(format!("{label}analyzing:"), tty);
    let progress = |done: u64, total: u64| line.show(done, total);
    let opts = Options {
        progress: if tty { Some(&progress) } else { None },
        ..reading.options()
    };
    let analysis = analyze_files(files, &opts)?;
    line.clear();
    Ok(analysis)
}

struct Written {
    html: PathBuf,
    json: PathBuf,
    svgs: usize,
}

/// Writes STEM.html, STEM.json and STEM-*.svg into `dir`.
fn write_report(analysis: &Analysis, stem: &str, dir: &Path) -> Result<Written> {
    let html_path = dir.join(format!("{stem}.html"));
    let json_path = dir.join(format!("{stem}.json"));
    let mut html = Vec::new();
    gmem_prof_reports::html(analysis, stem, &mut html)?;
    write(&html_path, &html)?;
    let mut json = Vec::new();
    gmem_prof_reports::json(analysis, &mut json)?;
    write(&json_path, &json)?;
    let mut svgs = 0;
    for c in gmem_prof_reports::charts(analysis) {
        write(&dir.join(format!("{stem}-{}", c.name)), c.svg.as_bytes())?;
        svgs += 1;
    }
    Ok(Written {
        html: html_path,
        json: json_path,
        svgs,
    })
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    std::fs::write(path, data).with_context(|| format!("cannot write {}", path.display()))
}

/// Output files are named after the first trace: run.bin → run.html.
pub fn report_stem(files: &[PathBuf]) -> String {
    files
        .first()
        .and_then(|f| f.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "report".into())
}

/// One stem per run; runs with the same name (rank0/trace.bin and
/// rank1/trace.bin) get -2, -3, … so no report replaces another.
fn unique_stems(inputs: &[Vec<PathBuf>]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for files in inputs {
        let base = report_stem(files);
        let mut stem = base.clone();
        let mut n = 1;
        while out.contains(&stem) || stem == "runs" {
            n += 1;
            stem = format!("{base}-{n}");
        }
        out.push(stem);
    }
    out
}
