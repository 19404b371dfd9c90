//! No piece of code is written twice: a run of `RUN` significant lines
//! (trimmed; blank lines and comments skipped) appears once in the sources
//! of the crates. Where the logic really is the same, one function serves;
//! where it only looks alike, it has a reason to differ in at least one line.
//! Tests and generated files (`collector/src/cuda/cupti_layouts.rs`) are
//! left out: tests repeat their set-ups on purpose.

use std::collections::HashMap;

use crate::util::*;

/// How many significant lines make a repeat. Nine holds today; below it
/// a few short repeats remain (two records' fields encoded alike, two
/// charts' legends), each a line or two from the next difference.
const RUN: usize = 9;

/// The repeats among `files` (name, text): "a:line and b:line" per run
/// of `RUN` significant lines seen before, its first line's places.
fn repeats(files: &[(String, String)]) -> Vec<String> {
    let mut seen: HashMap<Vec<&str>, (usize, usize)> = HashMap::new();
    let mut found = Vec::new();
    for (f, (name, text)) in files.iter().enumerate() {
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with("//"))
            .collect();
        let mut last_found = 0;
        for (k, w) in lines.windows(RUN).enumerate() {
            // Runs of closing braces and the like say nothing.
            if w.iter().filter(|(_, l)| l.len() > 3).count() < RUN - 1 {
                continue;
            }
            let key: Vec<&str> = w.iter().map(|(_, l)| *l).collect();
            match seen.get(&key) {
                // One line per repeat, not per overlapping window of it.
                Some(&(g, line)) if k >= last_found => {
                    found.push(format!("{}:{line} and {name}:{}", files[g].0, w[0].0));
                    last_found = k + RUN;
                }
                Some(_) => {}
                None => {
                    seen.insert(key, (f, w[0].0));
                }
            }
        }
    }
    found
}

#[test]
fn no_run_of_code_is_written_twice() {
    let files: Vec<(String, String)> = tracked_files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            let name = p.strip_prefix(repo()).unwrap().display().to_string();
            (name, p)
        })
        .filter(|(name, _)| {
            !(name.starts_with("tests/")
                || name.starts_with("fuzz/")
                || name.contains("/tests/")
                || name.ends_with("cupti_layouts.rs"))
        })
        .map(|(name, p)| (name, std::fs::read_to_string(p).unwrap()))
        .collect();
    assert!(files.len() > 50, "only {} sources read", files.len());
    let found = repeats(&files);
    assert!(
        found.is_empty(),
        "{RUN} or more lines written twice (make one function of them):\n{}",
        found.join("\n")
    );
}

/// The check finds a repeat: a block copied from one file into another,
/// with other indentation and a comment between, is named at both places.
#[test]
fn a_copied_block_is_found() {
    let block: String = (0..RUN)
        .map(|i| format!("let value_{i} = compute({i});\n"))
        .collect();
    let a = format!("fn a() {{\n{block}}}\n");
    let b = format!(
        "fn b() {{\n    // copied\n{}}}\n",
        block
            .lines()
            .map(|l| format!("        {l}\n"))
            .collect::<String>()
    );
    let found = repeats(&[("a.rs".into(), a.clone()), ("b.rs".into(), b)]);
    assert_eq!(found, ["a.rs:2 and b.rs:3"]);
    // One line fewer, then another line, is no repeat.
    let short: String = block.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let c = format!("{short}let other = 1;\n");
    assert!(repeats(&[("a.rs".into(), a), ("c.rs".into(), c)]).is_empty());
}
