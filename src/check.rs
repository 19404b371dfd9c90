//! `gmem-prof check`: budgets for CI. Exit 0 when every budget holds, 1 when
//! one is exceeded (each violation printed with the figure, the budget and
//! the sites responsible), 2 on bad input, 3 when part of the run was not
//! profiled.
//!
//! The budgets are applied in the analyzer (`gmem_prof_analyzer::budgets`;
//! the TOML form is documented in `gmem_prof_model::budgets`) and put in words by the reports crate
//! (`gmem_prof_reports::check`); this module reads the flags and the budget
//! file, writes the files CI asked for, and picks the exit code.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use gmem_prof_analyzer::budgets::evaluate;
use gmem_prof_model::budgets::{Budget, Budgets, Limits};
use gmem_prof_reports::check::{self, Run};

use crate::cli::CheckArgs;

/// Exit code when a budget is exceeded.
pub const EXIT_OVER_BUDGET: i32 = 1;

/// Budgets from a TOML file.
pub fn budgets_from_file(path: &Path) -> Result<Budgets> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the budget file {}", path.display()))?;
    parse_budgets(&text).with_context(|| format!("bad budget file {}", path.display()))
}

pub fn parse_budgets(text: &str) -> Result<Budgets> {
    let b: Budgets = toml::from_str(text)?;
    b.validate().map_err(anyhow::Error::msg)?;
    Ok(b)
}

pub fn run(a: CheckArgs) -> Result<i32> {
    let mut budgets = match &a.budget {
        Some(p) => budgets_from_file(p)?,
        None => Budgets::default(),
    };
    // Flags override the file's run budgets.
    budgets.run = budgets.run.overridden_by(&Limits {
        max_peak: a.max_peak,
        max_allocated: a.max_allocated,
        max_leaked: a.max_leaked,
        max_tensors_at_exit: a.max_tensors_at_exit,
        max_growth: a.max_growth,
        max_fragmentation: a.max_fragmentation,
        max_ooms: a.max_ooms,
        max_cached_at_exit: a.max_cached_at_exit,
        max_library_held: a.max_library_held,
        max_module_globals: a.max_module_globals,
        max_pinned: a.max_pinned,
        max_step_growth: a.max_step_growth,
        max_step_peak: a.max_step_peak,
        max_role: a.max_role.iter().cloned().collect(),
    });
    budgets.validate().map_err(anyhow::Error::msg)?;
    if budgets.is_empty() {
        bail!("no budget given: use --budget FILE, --max-peak, --max-pinned, --max-allocated, --max-leaked, --max-library-held, --max-cached-at-exit, --max-module-globals, --max-tensors-at-exit, --max-growth, --max-fragmentation, --max-ooms, --max-step-growth, --max-step-peak or --max-role");
    }
    let mut runs = Vec::new();
    let tty = std::io::stderr().is_terminal();
    for (i, t) in a.traces.iter().enumerate() {
        let files = crate::inputs::expand(std::slice::from_ref(t))?;
        let label = crate::progress::run_label(i, a.traces.len());
        let analysis = crate::report::analyze_with_progress(&files, tty, &label, &a.reading)?;
        for w in analysis
            .input
            .warnings
            .iter()
            .map(gmem_prof_reports::reasons::input_warning)
        {
            eprintln!("gmem-prof: warning: {}: {w}", t.display());
        }
        runs.push(Run {
            name: crate::report::report_stem(&files),
            analysis,
        });
    }
    let mut outcomes = Vec::new();
    for r in &runs {
        let (o, warnings) = evaluate(&r.name, &r.analysis, &budgets, a.allow_unprofiled);
        for w in warnings
            .iter()
            .map(gmem_prof_reports::reasons::unmatched_budget)
        {
            eprintln!("gmem-prof: warning: {}: {w}", r.name);
        }
        outcomes.extend(o);
    }
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    let not_profiled = outcomes
        .iter()
        .any(|o| o.budget == Budget::Profiled && !o.passed);

    let write = |path: &Option<PathBuf>, data: String| -> Result<()> {
        if let Some(p) = path {
            std::fs::write(p, data).with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(())
    };
    write(&a.json, check::json(&runs, &outcomes)?)?;
    write(&a.markdown, check::markdown(&runs, &outcomes))?;
    write(&a.junit, check::junit(&outcomes))?;
    // Printed after the files are written: a closed stdout (`| head`)
    // ends the command early but must not cost CI its files.
    crate::out(format_args!("{}", check::text(&outcomes, runs.len() > 1)))?;
    if not_profiled {
        crate::out(format_args!(
            "gmem-prof check: part of the run was not profiled, so its budgets prove nothing \
             (above: why); pass --allow-unprofiled if that is acceptable\n"
        ))?;
        Ok(crate::EXIT_NOT_PROFILED)
    } else if failed == 0 {
        crate::out(format_args!(
            "gmem-prof check: every budget holds ({} checked)\n",
            outcomes.len()
        ))?;
        Ok(0)
    } else {
        crate::out(format_args!(
            "gmem-prof check: {failed} of {} budget(s) exceeded\n",
            outcomes.len()
        ))?;
        Ok(EXIT_OVER_BUDGET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmem_prof_model::budgets::ByteSize;

    #[test]
    fn budget_file() {
        let b = parse_budgets(
            r#"
            [run]
            max_peak = "8GiB"
            max_leaked = 0
            [device.1]
            max_peak = 1024
            max_ooms = 2
            [process."train.py"]
            max_leaked = "16MiB"
            "#,
        )
        .unwrap();
        assert_eq!(b.run.max_peak, Some(ByteSize(8 << 30)));
        assert_eq!(b.run.max_leaked, Some(ByteSize(0)));
        assert_eq!(b.device["1"].max_peak, Some(ByteSize(1024)));
        assert_eq!(b.device["1"].max_ooms, Some(2));
        assert_eq!(b.process["train.py"].max_leaked, Some(ByteSize(16 << 20)));
    }

    #[test]
    fn bad_budget_files_say_why() {
        let e = |t: &str| format!("{:#}", parse_budgets(t).unwrap_err());
        assert!(e("[run]\nmax_peek = 1").contains("max_peek"));
        assert!(e("[run]\nmax_peak = \"8 GiBs\"").contains("unknown unit"));
        assert!(e("[device.0]\nmax_leaked = 0").contains("device budgets take"));
        assert!(e("[process.\"x\"]\nmax_fragmentation = 0.1").contains("per run or per device"));
        assert!(e("[run]\nmax_fragmentation = 3").contains("between 0 and 1"));
        assert!(e("[device.gpu0]\nmax_peak = 1").contains("device"));
    }
}
