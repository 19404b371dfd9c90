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

/// A chart's SVG goes into the page as it is: it is markup we drew
/// (plotters' charts carry only our words; the flame graphs are written
/// with `html!` like the page, so their trace strings are escaped).
impl maud::Render for Chart {
    fn render_to(&self, buffer: &mut String) {
        buffer.push_str(&self.svg);
    }
}
