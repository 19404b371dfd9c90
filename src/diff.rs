//! `gmem-prof diff BASE NEW`: compares two runs site by site and can fail CI
//! when a figure grew by more than a threshold (the judging is the
//! analyzer's: `gmem_prof_analyzer::diff::judge`).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use gmem_prof_analyzer::diff::{diff, judge};
use gmem_prof_model::diff::Judged;
use gmem_prof_model::Analysis;
use gmem_prof_reports::format::bytes;

use crate::cli::DiffArgs;

/// Exit code when a change is above `--fail-above`.
pub const EXIT_ABOVE_THRESHOLD: i32 = 1;

/// One run's analysis; `label` leads its progress line, shown on a
/// terminal unless `quiet`.
fn load(
    path: &PathBuf,
    label: &str,
    quiet: bool,
    reading: &crate::cli::ReadingArgs,
) -> Result<(String, Analysis)> {
    let files = crate::inputs::expand(std::slice::from_ref(path))?;
    let tty = std::io::stderr().is_terminal() && !quiet;
    let a = crate::report::analyze_with_progress(&files, tty, label, reading)?;
    for w in a
        .input
        .warnings
        .iter()
        .map(gmem_prof_reports::reasons::input_warning)
    {
        eprintln!("gmem-prof: warning: {}: {w}", path.display());
    }
    Ok((crate::report::report_stem(&files), a))
}

pub fn run(a: DiffArgs) -> Result<i32> {
    let (base_name, base) = load(&a.base, "base: ", a.quiet, &a.reading)?;
    let (mut new_name, new) = load(&a.new, "new: ", a.quiet, &a.reading)?;
    if new_name == base_name {
        new_name = format!("{new_name} (new)");
    }
    let mut d = diff(&base, &new);
    // Judged first, so that the JSON holds the verdicts.
    let limit = a.fail_above;
    if let Some(limit) = limit {
        let figures = if a.fail_on.is_empty() {
            Judged::DEFAULT.to_vec()
        } else {
            a.fail_on.clone()
        };
        d.verdicts = judge(&d, &figures, limit.0 / 100.0);
    }
    let write = |path: &Option<PathBuf>, data: &[u8]| -> Result<()> {
        if let Some(p) = path {
            std::fs::write(p, data).with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(())
    };
    if a.html.is_some() {
        let mut page = Vec::new();
        gmem_prof_reports::diff::html(&d, (&base_name, &base), (&new_name, &new), &mut page)?;
        write(&a.html, &page)?;
    }
    write(
        &a.json,
        (serde_json::to_string_pretty(&d)? + "\n").as_bytes(),
    )?;
    write(
        &a.markdown,
        gmem_prof_reports::diff::markdown(&d, &base_name, &new_name).as_bytes(),
    )?;
    // Printed after the files are written: a closed stdout (`| head`)
    // ends the command early but must not cost CI its files.
    if !a.quiet {
        let stdout = std::io::stdout();
        gmem_prof_reports::diff::text(&d, &base_name, &new_name, &mut stdout.lock())?;
    }
    let Some(limit) = limit else {
        return Ok(0);
    };
    let judges_tensors = d.verdicts.iter().any(|v| v.figure == Judged::Allocated);
    // Why each run shows less than it used: its totals' reasons (as `check`
    // gives them) and, with tensors judged, processes whose tensors are unseen.
    let missing: Vec<String> = [(&base_name, &base, &d.base), (&new_name, &new, &d.new)]
        .into_iter()
        .flat_map(|(name, a, totals)| {
            let unseen = if judges_tensors {
                a.tensors_unseen_parts()
            } else {
                Vec::new()
            };
            totals
                .not_profiled
                .iter()
                .chain(&unseen)
                .map(|m| format!("{name}: {}", gmem_prof_reports::reasons::unprofiled_part(m)))
                .collect::<Vec<_>>()
        })
        .collect();
    if !missing.is_empty() {
        let allowed = if a.allow_unprofiled {
            " (allowed by --allow-unprofiled)"
        } else {
            ""
        };
        crate::out(format_args!("not profiled{allowed}:\n"))?;
        for m in &missing {
            crate::out(format_args!("    {m}\n"))?;
        }
        if !a.allow_unprofiled {
            crate::out(format_args!(
                "gmem-prof diff: part of a run was not profiled, so the comparison proves \
                 nothing (above: why); pass --allow-unprofiled if that is acceptable\n"
            ))?;
            return Ok(crate::EXIT_NOT_PROFILED);
        }
    }
    let above: Vec<_> = d.verdicts.iter().filter(|v| v.above).collect();
    if above.is_empty() {
        crate::out(format_args!(
            "gmem-prof diff: no change above +{}% ({} judged)\n",
            limit.0,
            d.verdicts.len()
        ))?;
        Ok(0)
    } else {
        for v in &above {
            let shown = |x: f64| match v.figure {
                Judged::Fragmentation => format!("{x:.3}"),
                Judged::Ooms => format!("{x}"),
                _ => bytes(x as u64),
            };
            let rise = match v.relative_change {
                Some(r) => format!("{:+.1}%", r * 100.0),
                None => "from none".into(),
            };
            crate::out(format_args!(
                "above threshold: {} {} → {} ({rise}) is above +{}%\n",
                v.what,
                shown(v.base),
                shown(v.new),
                limit.0
            ))?;
        }
        Ok(EXIT_ABOVE_THRESHOLD)
    }
}
