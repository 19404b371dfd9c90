//! Small text helpers shared by every renderer.

/// Bytes in binary units with three significant digits: "1.00 MiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {}", UNITS[u])
}

/// A duration since the start of the trace: "1.234 s", "12.3 ms".
pub fn time(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// Share of a whole, as a percentage with one decimal.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "–".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// A signed change in bytes: "+1.00 MiB", "-512 B", "0 B".
pub fn signed_bytes(d: i64) -> String {
    match d {
        0 => "0 B".into(),
        d if d > 0 => format!("+{}", bytes(d.unsigned_abs())),
        d => format!("-{}", bytes(d.unsigned_abs())),
    }
}

/// A change relative to a base: "+20.8%", "-3.0%", "new" (from zero).
pub fn change(base: u64, new: u64) -> String {
    if base == 0 {
        return if new == 0 { "0%".into() } else { "new".into() };
    }
    let r = (new as f64 - base as f64) * 100.0 / base as f64;
    format!("{}{r:.1}%", if r > 0.0 { "+" } else { "" })
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text from a trace made safe inside Markdown (tables included): HTML
/// escaped (GitHub renders entities), pipes and backticks neutralized.
pub fn markdown(s: &str) -> String {
    escape(s).replace('|', "&#124;").replace('`', "&#96;")
}

pub use gmem_prof_model::{library_entry, library_via, without_parameters};

/// "pid 12 mapped up to 64.0 MiB of another process's memory through CUDA
/// IPC: …", for a process that did.
pub fn ipc_mapped(p: &gmem_prof_model::ProcessReport) -> Option<String> {
    (p.ipc_mapped_peak_bytes > 0).then(|| {
        format!(
            "pid {} mapped up to {} of another process's memory through CUDA IPC: counted once, in the process that allocated it",
            p.pid,
            bytes(p.ipc_mapped_peak_bytes)
        )
    })
}

/// "pid 12: only steps 3 to 5 were recorded, from 1.2 s to 1.9 s; …", for
/// a process of which only a window was recorded.
pub fn recorded_window(p: &gmem_prof_model::ProcessReport) -> Option<String> {
    let w = p.window.as_ref()?;
    let span = match w.closed_ns {
        Some(end) => format!("from {} to {}", time(w.opened_ns), time(end)),
        None => format!("from {} to its end", time(w.opened_ns)),
    };
    let tensors = w.tensors_at_open_bytes.map_or(String::new(), |t| {
        format!(" ({} of it in tensors)", bytes(t))
    });
    let after = if w.closed_ns.is_some() {
        "; what it held when the window closed is counted as held at its end"
    } else {
        ""
    };
    Some(format!(
        "pid {}: only {} of its run {} recorded, {span}; {}{tensors} was live when it \
         opened, each allocation counted with its site{after}",
        p.pid,
        w.what,
        if w.what.starts_with("steps") {
            "were"
        } else {
            "was"
        },
        bytes(w.live_at_open_bytes),
    ))
}

/// "pid 12 marks steps: +3.00 MiB of tensors kept per step from step 6 on
/// (45 steps) …": growth judged by steps, for a process that marks them,
/// beside the growth judged over time.
pub fn step_growth(p: &gmem_prof_model::ProcessSteps) -> Option<String> {
    let g = p.growth.as_ref()?;
    Some(format!(
        "pid {} marks steps: {} {}kept per step on average from step {} on ({} steps); \
         `check --max-step-growth` budgets it, `--max-growth` the growth over time",
        p.pid,
        signed_bytes(g.bytes_per_step),
        if g.tensors { "of tensors " } else { "" },
        g.from_step,
        g.steps
    ))
}

/// How much of a framework pool's free space sat in segments that held no
/// tensor, to follow "N free in segments": that part is cache, which the
/// allocator gives back (and retries with) before a request could fail,
/// so a high fragmentation made of it costs nothing.
pub fn idle_words(free: u64, idle: Option<u64>) -> String {
    match idle {
        Some(idle) if idle > 0 && idle >= free => {
            " (all of it in segments holding no tensor: cache)".to_string()
        }
        Some(idle) if idle > 0 => {
            format!(
                " ({} of it in segments holding no tensor: cache)",
                bytes(idle)
            )
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1 << 20), "1.00 MiB");
        assert_eq!(bytes(599_785_472), "572 MiB");
        assert_eq!(bytes(41_875_931_136), "39.0 GiB");
        assert_eq!(time(1_500_000_000), "1.500 s");
        assert_eq!(signed_bytes(-(1 << 20)), "-1.00 MiB");
        assert_eq!(signed_bytes(512), "+512 B");
        assert_eq!(change(100, 125), "+25.0%");
        assert_eq!(change(0, 5), "new");
        assert_eq!(escape("<script>a&b\"'"), "&lt;script&gt;a&amp;b&quot;&#39;");
    }
}
