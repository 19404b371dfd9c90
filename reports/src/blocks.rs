//! Pieces of HTML that several sections of the page share: a label that
//! expands to its frames, tables of sites by bytes and of growing sites,
//! a chart's figure.

use gmem_prof_model::{FrameText, Growth, SiteBytes};
use maud::{html, Markup};

use crate::chart::Chart;
use crate::format::{bytes, percent};

/// A label that expands to its frames.
pub(crate) fn frames_details(label: &str, frames: &[FrameText], truncated: bool) -> Markup {
    html! {
        details {
            summary { (label) }
            ol.frames {
                @for f in frames {
                    @if !f.resolved {
                        li.unresolved { (f.module) "+" (format!("{:#x}", f.offset)) " " span.cat { "(unresolved)" } }
                    } @else if f.location.is_empty() {
                        li { (f.function) " " span.cat { "(" (f.module) ")" } }
                    } @else {
                        li { (f.function) " " span.cat { (f.location) } }
                    }
                }
                @if frames.is_empty() {
                    li { "no stack recorded" }
                }
                @if truncated {
                    li { "… (stack truncated)" }
                }
            }
        }
    }
}

/// A table of sites that kept growing after the warm-up: `names` gives the
/// header of the site column and the noun before each site's number.
pub(crate) fn growth_table(
    names: (&str, &str),
    rows: &[Growth],
    link: impl Fn(u32) -> Markup,
) -> Markup {
    html! {
        table {
            tr { th { (names.0) } th { "pid" } th.n { "after warm-up" } th.n { "near the end" } th.n { "growth" } }
            @for g in rows {
                tr {
                    td { (names.1) " " (g.site) ": " (link(g.site)) }
                    td { (g.pid) }
                    td.n { (bytes(g.from_bytes)) }
                    td.n { (bytes(g.to_bytes)) }
                    td.n { "+" (bytes(g.growth_bytes)) }
                }
            }
        }
    }
}

/// A table of (site, bytes, count) rows: `columns` names the site and
/// count columns, `link` renders a site.
pub(crate) fn bytes_table(
    columns: (&str, &str),
    rows: &[SiteBytes],
    whole: u64,
    limit: usize,
    link: impl Fn(u32) -> Markup,
) -> Markup {
    // With no row, no table: a header alone reads as a broken page; the
    // sentence before says there is nothing.
    html! {
        @if !rows.is_empty() {
            table {
                tr { th { (columns.0) } th.n { "bytes" } th.n { "share" } th.n { (columns.1) } }
                @for r in rows.iter().take(limit) {
                    tr {
                        td { (link(r.site)) }
                        td.n { (bytes(r.bytes)) }
                        td.n { (percent(r.bytes, whole)) }
                        td.n { (r.count) }
                    }
                }
                @if rows.len() > limit {
                    tr { td colspan="4" { "… and " (rows.len() - limit) " more" } }
                }
            }
        }
    }
}

/// A chart, as the page shows it.
pub(crate) fn chart_html(c: &Chart) -> Markup {
    html! { figure { (c) } }
}

/// The figures of the charts named `name`.
pub(crate) fn charts_named(charts: &[Chart], name: &str) -> Markup {
    html! {
        @for c in charts.iter().filter(|c| c.name == name) {
            (chart_html(c))
        }
    }
}

/// "12, 14": the processes of a site.
pub(crate) fn pid_list(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
