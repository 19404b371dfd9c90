//! The report's sections in the one order both forms follow, and the two
//! forms put together from them: the terminal summary (`summary`, of
//! `text`'s sections) and the page (`html`, of `html`'s). A section may
//! have one form only. The page has room for the tables of sites and processes, which
//! the terminal leaves to it; the terminal gives the input's warnings
//! last, where a person reading it looks, and the page in its headline.

use std::io::{self, Write};

use gmem_prof_model::Analysis;

use crate::chart::Chart;
use crate::{charts, text};

/// The terminal summary of `report`: the sections that have a text form,
/// in the outline's order; each writes nothing when it has nothing to say.
pub fn summary(a: &Analysis, w: &mut dyn Write) -> io::Result<()> {
    for section in &OUTLINE {
        if let Some(text) = section.text {
            text(a, w)?;
        }
    }
    Ok(())
}

/// The whole page: its head, the sections that have a page form in the
/// outline's order, its end.
pub fn html(a: &Analysis, title: &str, w: &mut dyn Write) -> io::Result<()> {
    let charts = charts::all(a);
    w.write_all(crate::html::page_head(a, title).0.as_bytes())?;
    for section in &OUTLINE {
        if let Some(page) = section.html {
            w.write_all(page(a, &charts).0.as_bytes())?;
        }
    }
    w.write_all(crate::html::page_end(a).0.as_bytes())
}

/// Writes a section's text form (nothing when it has nothing to say).
pub(crate) type Text = fn(&Analysis, &mut dyn Write) -> io::Result<()>;
/// A section's page form, with the report's charts at hand (written to the
/// page as soon as it is made).
pub(crate) type Html = fn(&Analysis, &[Chart]) -> maud::Markup;

pub(crate) struct Section {
    /// What it answers (for readers of this table).
    #[allow(dead_code)]
    pub name: &'static str,
    pub text: Option<Text>,
    pub html: Option<Html>,
}

pub(crate) const OUTLINE: [Section; 12] = [
    Section {
        name: "headline: not profiled, why it ran out, what to change",
        text: Some(text::headline),
        html: Some(crate::html::headline),
    },
    Section {
        name: "the answers: peaks, leaks, growth, OOMs in a line each",
        text: Some(text::overview),
        html: Some(crate::html::answers),
    },
    Section {
        name: "each device: its peak taken apart, fragmentation, timeline",
        text: Some(text::devices),
        html: Some(crate::html::devices),
    },
    Section {
        name: "inside the framework allocators (PyTorch, JAX, CuPy)",
        text: Some(text::inside_allocators),
        html: Some(crate::html::inside_allocators),
    },
    Section {
        name: "the program's steps: what the first kept, what each keeps",
        text: Some(crate::steps::text),
        html: Some(crate::steps::html),
    },
    Section {
        name: "the program's NVTX ranges: what each takes and keeps",
        text: Some(crate::ranges::text),
        html: Some(crate::ranges::html),
    },
    Section {
        name: "top allocation sites",
        text: None,
        html: Some(crate::html::sites_section),
    },
    Section {
        name: "held at exit: leaks, caches, libraries",
        text: Some(text::held_at_exit),
        html: Some(crate::html::leaks_section),
    },
    Section {
        name: "growth after the warm-up",
        text: Some(text::growth),
        html: Some(crate::html::growth_section),
    },
    Section {
        name: "out of memory",
        text: Some(text::out_of_memory),
        html: Some(crate::html::oom_section),
    },
    Section {
        name: "processes",
        text: None,
        html: Some(crate::html::processes_section),
    },
    Section {
        name: "the input's warnings (the page gives them in its headline)",
        text: Some(text::warnings),
        html: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_has_a_form_and_its_own_name() {
        for (i, s) in OUTLINE.iter().enumerate() {
            assert!(s.text.is_some() || s.html.is_some(), "{}", s.name);
            assert!(
                OUTLINE[..i].iter().all(|t| t.name != s.name),
                "{} twice",
                s.name
            );
        }
    }
}
