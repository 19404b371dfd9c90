//! A chart as the report writes it (an SVG file beside the page, a figure
//! in it), and the file names of a framework view's charts: what the
//! sections showing charts share with `charts`, which draws them.

use gmem_prof_model::FrameworkView;

/// One chart: a file name for its SVG file and the SVG text.
pub struct Chart {
    pub name: String,
    pub title: String,
    pub svg: String,
}

/// File-name stem of a framework view's charts.
pub fn framework_stem(v: &FrameworkView) -> String {
    format!("pid{}-device{}-tensors", v.pid, v.device)
}
