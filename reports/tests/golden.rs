//! The reports crate on its own: the analyses of real sample traces, as
//! `gmem-prof report` wrote them (tests/golden/report/NAME.json, which the
//! CLI's end-to-end test holds to the analyzer), read back into the model
//! and rendered here. The JSON must come back byte for byte (nothing lost
//! reading it), and the page must be the golden one (the renderer alone,
//! with no trace and no analyzer).

use std::path::PathBuf;

use gmem_prof_model::Analysis;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden/report")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(golden(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const SAMPLES: [&str; 3] = ["kinds", "torch_oom", "vmm"];

#[test]
fn the_analysis_json_reads_back_whole() {
    for name in SAMPLES {
        let text = read(&format!("{name}.json"));
        let a: Analysis = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut again = Vec::new();
        gmem_prof_reports::json(&a, &mut again).unwrap();
        if again != text.as_bytes() {
            let out = std::env::temp_dir().join(format!("gmem-prof-golden-{name}.json"));
            std::fs::write(&out, &again).unwrap();
            panic!(
                "{name}: the JSON written again ({}) differs from the golden file",
                out.display()
            );
        }
    }
}

/// An analysis written before the reasons were typed (schema 1: warnings,
/// blind spots and messages as sentences) still reads, and renders the
/// same page as the analysis of today (schema 2: the same reasons as
/// facts, worded by this crate).
#[test]
fn a_version_1_analysis_renders_the_same_page() {
    let v1 = read("v1/torch_oom.json");
    let old: Analysis = serde_json::from_str(&v1).expect("schema 1 reads");
    assert_eq!(old.schema_version, 1);
    assert!(
        old.processes[0]
            .messages
            .iter()
            .all(|m| matches!(m, gmem_prof_model::ProcessMessage::Worded { .. })),
        "its messages are sentences"
    );
    let new: Analysis = serde_json::from_str(&read("torch_oom.json")).unwrap();
    assert_eq!(new.schema_version, gmem_prof_model::SCHEMA_VERSION);
    assert!(new.processes[0]
        .messages
        .iter()
        .all(|m| matches!(m, gmem_prof_model::ProcessMessage::Collector { .. })));
    let page = |a: &Analysis| {
        let mut page = Vec::new();
        gmem_prof_reports::html(a, "torch_oom", &mut page).unwrap();
        page
    };
    // What came after schema 1 without changing it (the tensors' roles,
    // and the note on them) left out.
    let mut without_roles = new.clone();
    for v in &mut without_roles.frameworks {
        v.roles_at_peak = None;
        v.timeline_roles.clear();
        v.notes.retain(|n| !n.contains("PyTorch phases"));
    }
    for s in &mut without_roles.tensor_sites {
        s.role = None;
    }
    assert!(
        page(&old) == page(&without_roles),
        "the same words from either schema"
    );
    assert!(page(&new) == read("torch_oom.html").as_bytes());
}

#[test]
fn pages_render_from_the_model_alone() {
    for name in SAMPLES {
        let a: Analysis = serde_json::from_str(&read(&format!("{name}.json"))).unwrap();
        let mut page = Vec::new();
        gmem_prof_reports::html(&a, name, &mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        let want = read(&format!("{name}.html"));
        assert!(
            page == want,
            "{name}: the page differs from tests/golden/report/{name}.html"
        );
        // A change that matters shows: the page depends on the figures.
        let mut changed = a.clone();
        changed.devices[0].peak_bytes += 1 << 30;
        let mut other = Vec::new();
        gmem_prof_reports::html(&changed, name, &mut other).unwrap();
        assert!(
            other != page.as_bytes(),
            "{name}: the page ignores the device's peak"
        );
    }
}
