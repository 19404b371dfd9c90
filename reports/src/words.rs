//! Words several sections share, in the text summary and the page alike:
//! the sites live at a peak, a site told apart from its look-alikes, an
//! allocator's request and the limit that refused it.

use std::io::{self, Write};

use gmem_prof_model::{Analysis, Category, FrameworkOom, Site, SiteBytes};

use crate::format::{bytes, percent};

/// How many sites each list shows.
pub(crate) const TOP: usize = 5;

/// What was live at a peak, by site: the largest `TOP` and how many more.
/// `details` gives what tells apart the rows shown whose labels are alike
/// (`alike_details`), one per row.
pub(crate) fn peak_lines(
    w: &mut dyn Write,
    indent: &str,
    rows: &[SiteBytes],
    whole: u64,
    label: impl Fn(u32) -> String,
    details: impl Fn(&[u32]) -> Vec<Option<String>>,
) -> io::Result<()> {
    let shown = &rows[..rows.len().min(TOP)];
    let ids: Vec<u32> = shown.iter().map(|s| s.site).collect();
    let details = details(&ids);
    for (s, detail) in shown.iter().zip(details) {
        let l = label(s.site);
        writeln!(
            w,
            "{indent}  {:>6} {:>10} in {:>5} × {l}{}",
            percent(s.bytes, whole),
            bytes(s.bytes),
            s.count,
            detail.map_or_else(String::new, |d| format!(", {d}"))
        )?;
    }
    if rows.len() > TOP {
        writeln!(w, "{indent}  … and {} more sites", rows.len() - TOP)?;
    }
    Ok(())
}

/// What tells apart sites that share a label (one line allocating through
/// several paths), for each of `ids` (None for a site whose label is its
/// own among them): how the memory was allocated (a caching allocator's
/// segments, or the library the stack went through) and, where that is
/// alike too, the first frame in which the stacks part.
pub(crate) fn alike_details(a: &Analysis, ids: &[u32]) -> Vec<Option<String>> {
    let labels: Vec<String> = ids.iter().map(|&id| a.site_label(id)).collect();
    let paths: Vec<Option<String>> = ids.iter().map(|&id| site_path(a, id)).collect();
    (0..ids.len())
        .map(|i| {
            let alike: Vec<usize> = (0..ids.len())
                .filter(|&j| j != i && labels[j] == labels[i])
                .collect();
            if alike.is_empty() {
                return None;
            }
            let same_path: Vec<usize> = alike
                .into_iter()
                .filter(|&j| paths[j] == paths[i])
                .collect();
            let parting = if same_path.is_empty() {
                None
            } else {
                parting_frame(a, ids[i], same_path.iter().map(|&j| ids[j]))
            };
            match (&paths[i], parting) {
                (Some(p), Some(f)) => Some(format!("{p}, from {f}")),
                (Some(p), None) => Some(p.clone()),
                (None, f) => f.map(|f| format!("from {f}")),
            }
        })
        .collect()
}

/// How a site's memory was allocated (`path_words`).
pub(crate) fn site_path(a: &Analysis, site: u32) -> Option<String> {
    let s = a.sites.get(site as usize)?;
    path_words(s.category.as_str(), &s.label, &s.via)
}

/// How the memory of a site of `category` (`Category::as_str`) was
/// allocated: a caching allocator's segments, or the library its stack
/// went through (unless its label names it).
pub(crate) fn path_words(category: &str, label: &str, via: &[String]) -> Option<String> {
    if category == Category::AllocatorCache.as_str() {
        // The label says it already ("segments of … taken for …").
        return (!label.starts_with("segments of "))
            .then(|| "segments of a caching allocator".into());
    }
    crate::format::library_via(label, via).map(|entry| format!("via {entry}"))
}

/// A site's named frames (function, module, location), innermost first.
fn named_frames(s: &Site) -> Vec<(&str, &str, &str)> {
    s.frames
        .iter()
        .filter(|f| f.resolved && f.function != "??")
        .map(|f| (f.function.as_str(), f.module.as_str(), f.location.as_str()))
        .collect()
}

/// The frame that tells `site` from every one of `others`: its stack's
/// named frames (unresolved ones left out: their addresses differ where
/// their text does not) are followed outward from the allocation until
/// they part from those of the other that follows them longest.
fn parting_frame(a: &Analysis, site: u32, others: impl Iterator<Item = u32>) -> Option<String> {
    let mine = named_frames(a.sites.get(site as usize)?);
    let parts_at = others
        .filter_map(|o| a.sites.get(o as usize))
        .map(named_frames)
        // Stacks that read the same as this one cannot be told from it.
        .filter(|theirs| *theirs != mine)
        .map(|theirs| {
            mine.iter()
                .zip(&theirs)
                .position(|(x, y)| x != y)
                .unwrap_or(mine.len().min(theirs.len()))
        })
        .max()?;
    let (function, module, location) = mine.get(parts_at)?;
    let function = crate::format::without_parameters(function);
    Some(if location.is_empty() {
        format!("{function} ({module})")
    } else {
        let at = location.rsplit('/').next().unwrap_or(location);
        format!("{function} at {at}")
    })
}

/// The request behind an error, in words: "more than N" when the
/// allocator refused it before any CUDA call that would show it (the
/// cudaMallocAsync backend against its memory fraction).
pub fn oom_request(o: &FrameworkOom) -> String {
    request_words(o.request_seen, o.requested_bytes)
}

/// `requested` bytes in words; when not `seen`, it is the least the
/// request could have been.
pub fn request_words(seen: bool, requested: u64) -> String {
    match (seen, requested) {
        (true, n) => bytes(n),
        (false, 0) => "a request of unknown size".into(),
        (false, n) => format!("more than {}", bytes(n - 1)),
    }
}

/// One line saying what limit refused an allocator's request.
pub fn oom_limit(o: &FrameworkOom) -> String {
    match (o.limit.as_str(), o.limit_bytes) {
        ("memory fraction", Some(l)) => format!(
            "the memory fraction: {} allowed of {} (torch.cuda.set_per_process_memory_fraction), with {} free on the device",
            bytes(l),
            bytes(o.device_total_bytes),
            bytes(o.device_free_bytes)
        ),
        ("device full", _) => format!(
            "the device: {} free of {}",
            bytes(o.device_free_bytes),
            bytes(o.device_total_bytes)
        ),
        _ => format!("{} free on the device", bytes(o.device_free_bytes)),
    }
}

/// ", in step 12": the step of the process a moment fell in, when it
/// marked steps.
pub fn in_step(step: Option<u64>) -> String {
    step.map_or_else(String::new, |n| format!(", in step {n}"))
}

/// ", in step 5, inside iteration › backward (PyTorch)": the step and the
/// program's ranges open at a moment, when known.
pub fn in_step_and_ranges(step: Option<u64>, ranges: &[String]) -> String {
    let mut words = in_step(step);
    if !ranges.is_empty() {
        words.push_str(", inside ");
        words.push_str(&ranges.join(" › "));
    }
    words
}
