//! The repository stands alone: what the code and its documents rely on is
//! written in the repository (docs/design.md holds the definitions), and no
//! file cites a document outside it.

use crate::util::*;

#[test]
fn no_file_cites_a_document_outside_the_repository() {
    // Spelled in two pieces, so that this file does not cite them itself.
    let (design, shared) = (concat!("DESIGN", ".md"), concat!("../", "shared/"));
    let mut cited = Vec::new();
    for path in tracked_files() {
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
/// collector's layouts (collector/src/cuda/cupti_layouts.rs) are what the
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

/// Every relative link of the repository's Markdown files leads to a file
/// or folder that exists (anchors aside; web addresses are not followed).
#[test]
fn every_relative_link_in_the_docs_leads_somewhere() {
    let mut broken = Vec::new();
    for path in tracked_files() {
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a tracked Markdown file reads");
        let dir = path.parent().expect("a file has a folder");
        for (i, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                rest = &rest[at + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = rest[..end].split('#').next().unwrap_or_default().trim();
                rest = &rest[end..];
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                if !dir.join(target).exists() {
                    broken.push(format!("{}:{}: {target}", path.display(), i + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}

/// Each crate's README says what it may depend on ("May depend on: …"):
/// every dependency its Cargo.toml lists is named there, and every
/// gmem-prof crate named there is one it depends on (the layers' arrows,
/// held against the manifests).
#[test]
fn each_crate_readme_names_what_its_manifest_depends_on() {
    let mut wrong = Vec::new();
    for krate in [
        "traces",
        "model",
        "collector",
        "analyzer",
        "reports",
        "exports",
        "torch-snapshot",
    ] {
        let dir = repo().join(krate);
        let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml"))
            .expect("the crate has a manifest")
            .parse()
            .expect("the manifest is TOML");
        let names = |table: &str| -> Vec<String> {
            manifest
                .get(table)
                .and_then(|t| t.as_table())
                .map(|t| t.keys().cloned().collect())
                .unwrap_or_default()
        };
        let deps = names("dependencies");
        let all: Vec<String> = deps
            .iter()
            .cloned()
            .chain(names("dev-dependencies"))
            .collect();
        let readme =
            std::fs::read_to_string(dir.join("README.md")).expect("the crate has a README");
        let Some(start) = readme.find("May depend on:") else {
            wrong.push(format!(
                "{krate}/README.md says nothing of what it may depend on"
            ));
            continue;
        };
        // The paragraph, up to what it says of the crates that use this one.
        let said = readme[start..].split("\n\n").next().unwrap_or_default();
        let said = said.split("Used by").next().unwrap_or_default();
        // Names as a README writes them: `lz4_flex` or lz4-sys alike.
        let norm = |s: &str| s.replace('_', "-").to_lowercase();
        let words: Vec<String> = said
            .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
            .filter(|w| !w.is_empty())
            .map(norm)
            .collect();
        for d in &deps {
            if !words.contains(&norm(d)) {
                wrong.push(format!(
                    "{krate}: depends on {d}, which its README does not name"
                ));
            }
        }
        for w in words.iter().filter(|w| w.starts_with("gmem-prof-")) {
            if !all.iter().any(|d| &norm(d) == w) {
                wrong.push(format!(
                    "{krate}: its README names {w}, which it does not depend on"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
