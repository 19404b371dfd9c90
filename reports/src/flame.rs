//! Flame graphs of what was live at a peak, as memray and heaptrack draw
//! them: each site's bytes spread over its stack, the outermost frame at
//! the bottom, a frame as wide as the bytes live under it. Static SVG
//! (a file for CI attachments, and inline in the page), each frame's full
//! name and bytes in its tooltip (`<title>`).

use gmem_prof_model::{Analysis, DeviceReport, FrameText, FrameworkView, PeakPart};
use maud::{html, Markup};

use crate::chart::{framework_stem, Chart};
use crate::format::bytes;

const WIDTH: f64 = 960.0;
const ROW: f64 = 17.0;
/// Frames below this many levels from the bottom are folded into their
/// caller's box (very deep stacks would make a very tall graph).
const MAX_DEPTH: usize = 48;
/// Boxes narrower than this (px) are not drawn; their bytes stay in their
/// caller's width.
const MIN_WIDTH: f64 = 0.5;
/// Characters of a name drawn per pixel of box width, about.
const CHAR_PX: f64 = 6.5;

#[derive(Default)]
struct Node {
    name: String,
    python: bool,
    bytes: u64,
    children: Vec<Node>,
}

impl Node {
    /// Adds `bytes` along `path` (outermost first).
    fn add(&mut self, path: &[&FrameText], bytes: u64) {
        self.bytes += bytes;
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let name = frame_name(first);
        let child = match self.children.iter().position(|c| c.name == name) {
            Some(i) => &mut self.children[i],
            None => {
                self.children.push(Node {
                    name,
                    python: first.python,
                    ..Default::default()
                });
                self.children.last_mut().expect("just pushed")
            }
        };
        child.add(rest, bytes);
    }

    fn depth(&self) -> usize {
        1 + self.children.iter().map(Node::depth).max().unwrap_or(0)
    }
}

fn frame_name(f: &FrameText) -> String {
    if !f.resolved {
        format!("{}+{:#x}", f.module, f.offset)
    } else if f.python && !f.location.is_empty() {
        format!("{} ({})", f.function, f.location)
    } else {
        f.function.clone()
    }
}

/// A warm color for native frames, a blue one for Python frames, varied
/// by name so that neighbours differ.
fn color(n: &Node) -> String {
    let h = n
        .name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let v = (h % 60) as u8;
    if n.python {
        format!("rgb({},{},{})", 90 + v, 150 + v / 2, 230)
    } else {
        format!("rgb(235,{},{})", 110 + v * 2, 40 + v / 2)
    }
}

fn draw(n: &Node, x: f64, depth: usize, height: f64, scale: f64, total: u64) -> Markup {
    let w = n.bytes as f64 * scale;
    if w < MIN_WIDTH {
        return html! {};
    }
    let y = height - (depth as f64 + 1.0) * ROW;
    let share = n.bytes as f64 * 100.0 / total.max(1) as f64;
    let room = ((w - 6.0) / CHAR_PX).floor() as usize;
    let text: Option<String> = (room >= 3).then(|| {
        if n.name.chars().count() > room {
            let cut: String = n.name.chars().take(room - 1).collect();
            format!("{cut}…")
        } else {
            n.name.clone()
        }
    });
    // Each child starts where the one before it ends.
    let starts = n.children.iter().scan(x, |cx, c| {
        let at = *cx;
        *cx += c.bytes as f64 * scale;
        Some(at)
    });
    html! {
        g {
            title { (n.name) ": " (bytes(n.bytes)) " (" (format!("{share:.1}")) "%)" }
            rect x=(f1(x)) y=(f1(y)) width=(f1(w)) height=(f1(ROW - 1.0)) fill=(color(n)) rx="2" {}
            @if let Some(text) = text {
                text x=(f1(x + 3.0)) y=(f1(y + ROW - 5.0)) font-size="11" font-family="sans-serif" { (text) }
            }
        }
        @for (c, cx) in n.children.iter().zip(starts) {
            (draw(c, cx, depth + 1, height, scale, total))
        }
    }
}

/// A coordinate with one decimal.
fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// The flame graph of `sites` (bytes, frames innermost first), or None
/// when nothing was live or no site has a stack.
fn flame(name: String, title: String, sites: &[(u64, &[FrameText])]) -> Option<Chart> {
    let mut root = Node {
        name: "all".into(),
        ..Default::default()
    };
    for (b, frames) in sites {
        let mut path: Vec<&FrameText> = frames.iter().rev().collect();
        path.truncate(MAX_DEPTH);
        root.add(&path, *b);
    }
    if root.bytes == 0 || root.children.is_empty() {
        return None;
    }
    let height = (root.depth() as f64 + 2.0) * ROW;
    let height_px = format!("{height:.0}");
    let svg = html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height_px) viewBox={ "0 0 " (WIDTH) " " (height_px) } {
            rect width="100%" height="100%" fill="#fff" {}
            text x="4" y="13" font-size="13" font-family="sans-serif" { (title) }
            (draw(&root, 0.0, 0, height, WIDTH / root.bytes as f64, root.bytes))
        }
    };
    Some(Chart {
        name,
        title,
        svg: svg.into_string(),
    })
}

/// What was live on a device at its peak, by stack: inside a framework
/// allocator seen from the inside, its tensors by their stacks and its
/// free space as one box.
pub fn device(a: &Analysis, d: &DeviceReport) -> Option<Chart> {
    let free_boxes: Vec<(u64, [FrameText; 1])> = a
        .peak_parts(d)
        .into_iter()
        .filter_map(|p| match p {
            PeakPart::FreeInSegments {
                pid,
                allocator,
                bytes,
            } => Some((
                bytes,
                [FrameText {
                    function: format!("free inside the segments of {allocator} (pid {pid})"),
                    location: String::new(),
                    module: String::new(),
                    offset: 0,
                    resolved: true,
                    python: false,
                }],
            )),
            _ => None,
        })
        .collect();
    let sites: Vec<(u64, &[FrameText])> = d
        .peak_sites
        .iter()
        .filter_map(|s| {
            a.sites
                .get(s.site as usize)
                .map(|site| (s.bytes, &site.frames[..]))
        })
        .chain(d.frameworks_at_peak.iter().flat_map(|f| {
            f.tensor_sites.iter().filter_map(|s| {
                a.tensor_sites
                    .get(s.site as usize)
                    .map(|site| (s.bytes, &site.frames[..]))
            })
        }))
        .chain(free_boxes.iter().map(|(b, f)| (*b, &f[..])))
        .collect();
    flame(
        format!("device{}-peak-flame.svg", d.device),
        format!(
            "Device {}: live at the peak ({}), by stack: outermost frame at the bottom, width = bytes",
            d.device,
            bytes(d.peak_bytes)
        ),
        &sites,
    )
}

/// The tensors of a framework view at its allocated peak, by stack.
pub fn framework(a: &Analysis, v: &FrameworkView) -> Option<Chart> {
    let sites: Vec<(u64, &[FrameText])> = v
        .peak_sites
        .iter()
        .filter_map(|s| {
            a.tensor_sites
                .get(s.site as usize)
                .map(|site| (s.bytes, &site.frames[..]))
        })
        .collect();
    flame(
        format!("{}-peak-flame.svg", framework_stem(v)),
        format!(
            "pid {} device {}: tensors at the allocated peak ({}), by stack",
            v.pid,
            v.device,
            bytes(v.allocated_peak)
        ),
        &sites,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str) -> FrameText {
        FrameText {
            function: function.into(),
            location: String::new(),
            module: String::new(),
            offset: 0,
            resolved: true,
            python: false,
        }
    }

    #[test]
    fn widths_add_up_along_shared_callers() {
        // main → train → alloc_a (3 MiB) and main → train → alloc_b (1 MiB):
        // main and train 4 MiB wide, the leaves 3 and 1.
        let a = [frame("alloc_a"), frame("train"), frame("main")];
        let b = [frame("alloc_b"), frame("train"), frame("main")];
        let chart = flame(
            "t.svg".into(),
            "<title & test>".into(),
            &[(3 << 20, &a[..]), (1 << 20, &b[..])],
        )
        .unwrap();
        let svg = &chart.svg;
        assert!(
            svg.contains("<title>main: 4.00 MiB (100.0%)</title>"),
            "{svg}"
        );
        assert!(svg.contains("<title>train: 4.00 MiB (100.0%)</title>"));
        assert!(svg.contains("<title>alloc_a: 3.00 MiB (75.0%)</title>"));
        assert!(svg.contains("<title>alloc_b: 1.00 MiB (25.0%)</title>"));
        // The caption is escaped.
        assert!(svg.contains("&lt;title &amp; test&gt;"));
        assert!(flame("e.svg".into(), String::new(), &[]).is_none());
    }
}
