//! The repository stands alone: what the code and its documents rely on is
//! written in the repository (docs/design.md holds the definitions), and no
//! file cites a document outside it.

use crate::util::*;

#[test]
fn no_file_cites_a_document_outside_the_repository() {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo())
        .output()
        .expect("git lists the repository's files");
    assert!(out.status.success());
    // Spelled in two pieces, so that this file does not cite them itself.
    let (design, shared) = (concat!("DESIGN", ".md"), concat!("../", "shared/"));
    let mut cited = Vec::new();
    for file in out.stdout.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let path = repo().join(String::from_utf8_lossy(file).as_ref());
        // Traces and other binary files hold no citations.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if line.contains(design) || line.contains(shared) {
                cited.push(format!("{}:{}: {line}", path.display(), i + 1));
            }
        }
    }
    assert!(cited.is_empty(), "{}", cited.join("\n"));
    assert!(repo().join("docs/design.md").is_file());
}

/// The CUPTI and PyTorch tables of docs/compatibility.md and the
/// collector's layouts (collector/src/cupti_layouts.rs) are what the
/// releases' extracts (collector/layouts/cupti.json, torch.json) give: the
/// scripts' offline checks, with no download.
#[test]
fn the_compatibility_table_and_the_layouts_are_the_extracts() {
    for script in ["extract.py", "torch.py"] {
        let out = std::process::Command::new("python3")
            .arg(repo().join("collector/layouts").join(script))
            .arg("--check")
            .output()
            .expect("python3 runs the layouts' check");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
