//! No markup is written by hand: the pages and flame graphs come from
//! maud's `html!`, which escapes what is spliced in, so a string from a
//! trace cannot become markup by a forgotten `escape`. This holds the
//! sources to that: a string literal that opens or closes a tag may stand
//! only where it is wrapped as markup on purpose (`PreEscaped`, for our own
//! style, script and the page's open and close tags), and in `check.rs`,
//! whose Markdown and JUnit XML are not HTML pages and use
//! `format::escape`. Unit tests, at a file's end, are not scanned.

use std::path::PathBuf;

/// Where a line holds a string literal starting with `<` and a tag name
/// (or `/`), as hand-written markup does.
fn hand_markup(line: &str) -> bool {
    let code = line.trim_start();
    if code.starts_with("//") {
        return false;
    }
    line.match_indices("\"<").any(|(i, _)| {
        line[i + 2..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '!')
    })
}

#[test]
fn markup_is_made_by_html_macros_only() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".rs") || name == "check.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // A file's unit tests (at its end) may hold markup to look for.
        let code = text.split("\n#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            if hand_markup(line) && !line.contains("PreEscaped(") {
                found.push(format!("{name}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "markup written by hand (use html!):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_sees_hand_markup() {
    assert!(hand_markup(r#"    out.push_str("<p class=\"note\">");"#));
    assert!(hand_markup(r#"format!("</table>")"#));
    assert!(!hand_markup(r#"    // "<p>" in a comment"#));
    assert!(!hand_markup(r#"let lt = "< 5";"#));
}
