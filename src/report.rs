//! `gmem-prof report`: analyze traces, print the summary, write the HTML
//! report with its SVG charts and the analysis as JSON.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use gmem_prof_analyzer::{analyze_files, Options};

use crate::cli::ReportArgs;

pub fn run(a: ReportArgs) -> Result<()> {
    let files = crate::inputs::expand(&a.traces)?;
    let stem = report_stem(&files);
    let dir = a.output.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    let tty = std::io::stderr().is_terminal() && !a.quiet;
    let last_shown = AtomicU64::new(0);
    let progress = move |done: u64, total: u64| {
        let pct = done * 100 / total.max(1);
        if pct != last_shown.swap(pct, Ordering::Relaxed) {
            eprint!(
                "\ranalyzing: {pct:>3}% of {}",
                gmem_prof_reports::format::bytes(total)
            );
        }
    };
    let opts = Options {
        progress: if tty { Some(&progress) } else { None },
    };
    let analysis = analyze_files(&files, &opts)?;
    if tty {
        eprint!("\r\x1b[2K");
    }

    let html_path = dir.join(format!("{stem}.html"));
    let json_path = dir.join(format!("{stem}.json"));
    let mut html = Vec::new();
    gmem_prof_reports::html(&analysis, &stem, &mut html)?;
    write(&html_path, &html)?;
    let mut json = Vec::new();
    gmem_prof_reports::json(&analysis, &mut json)?;
    write(&json_path, &json)?;
    let mut svgs = Vec::new();
    for c in gmem_prof_reports::charts(&analysis) {
        let p = dir.join(format!("{stem}-{}", c.name));
        write(&p, c.svg.as_bytes())?;
        svgs.push(p);
    }

    if !a.quiet {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        gmem_prof_reports::summary(&analysis, &mut out)?;
        writeln!(
            out,
            "\nreport: {} ({} chart{} as SVG beside it), analysis: {}",
            html_path.display(),
            svgs.len(),
            if svgs.len() == 1 { "" } else { "s" },
            json_path.display()
        )?;
    }
    Ok(())
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    std::fs::write(path, data).with_context(|| format!("cannot write {}", path.display()))
}

/// Output files are named after the first trace: run.bin → run.html.
fn report_stem(files: &[PathBuf]) -> String {
    files
        .first()
        .and_then(|f| f.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "report".into())
}
