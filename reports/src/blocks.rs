//! Pieces of HTML that several sections of the page share: a label that
//! expands to its frames, tables of sites by bytes and of growing sites,
//! a chart's figure. Every string from the trace goes through `escape`.

use std::fmt::Write as _;

use gmem_prof_model::{FrameText, Growth, SiteBytes};

use crate::chart::Chart;
use crate::format::{bytes, escape, percent};

/// A label that expands to its frames.
pub(crate) fn frames_details(label: &str, frames: &[FrameText], truncated: bool) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<details><summary>{}</summary><ol class=\"frames\">",
        escape(label)
    );
    for f in frames {
        if f.resolved {
            let _ = write!(
                out,
                "<li>{}{}</li>",
                escape(&f.function),
                if f.location.is_empty() {
                    format!(" <span class=\"cat\">({})</span>", escape(&f.module))
                } else {
                    format!(" <span class=\"cat\">{}</span>", escape(&f.location))
                }
            );
        } else {
            let _ = write!(
                out,
                "<li class=\"unresolved\">{}+{:#x} <span class=\"cat\">(unresolved)</span></li>",
                escape(&f.module),
                f.offset
            );
        }
    }
    if frames.is_empty() {
        out.push_str("<li>no stack recorded</li>");
    }
    if truncated {
        out.push_str("<li>… (stack truncated)</li>");
    }
    out.push_str("</ol></details>");
    out
}

/// A table of sites that kept growing after the warm-up: `names` gives the
/// header of the site column and the noun before each site's number.
pub(crate) fn growth_table(
    names: (&str, &str),
    rows: &[Growth],
    link: impl Fn(u32) -> String,
) -> String {
    let mut out = format!(
        "<table><tr><th>{}</th><th>pid</th><th class=\"n\">after warm-up</th><th class=\"n\">near the end</th><th class=\"n\">growth</th></tr>",
        names.0
    );
    for g in rows {
        let _ = write!(
            out,
            "<tr><td>{} {}: {}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">+{}</td></tr>",
            names.1,
            g.site,
            link(g.site),
            g.pid,
            bytes(g.from_bytes),
            bytes(g.to_bytes),
            bytes(g.growth_bytes)
        );
    }
    out.push_str("</table>");
    out
}

/// A table of (site, bytes, count) rows: `columns` names the site and
/// count columns, `link` renders a site.
pub(crate) fn bytes_table(
    columns: (&str, &str),
    rows: &[SiteBytes],
    whole: u64,
    limit: usize,
    link: impl Fn(u32) -> String,
) -> String {
    if rows.is_empty() {
        // A header alone reads as a broken page; the sentence before says
        // there is nothing.
        return String::new();
    }
    let mut out = format!(
        "<table><tr><th>{}</th><th class=\"n\">bytes</th><th class=\"n\">share</th><th class=\"n\">{}</th></tr>",
        columns.0, columns.1
    );
    for r in rows.iter().take(limit) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            link(r.site),
            bytes(r.bytes),
            percent(r.bytes, whole),
            r.count
        );
    }
    if rows.len() > limit {
        let _ = write!(
            out,
            "<tr><td colspan=\"4\">… and {} more</td></tr>",
            rows.len() - limit
        );
    }
    out.push_str("</table>");
    out
}

/// A chart, as the page shows it.
pub(crate) fn chart_html(c: &Chart) -> String {
    format!("<figure>{}</figure>", c.svg)
}
