//! What the memory is: a view's tensors at its allocated peak by role
//! (parameters, gradients, optimizer state, activations, …), in words for
//! the terminal and as a table and a stacked timeline on the page.

use gmem_prof_model::{FrameworkView, RoleBytes, RolesAtPeak};
use maud::{html, Markup};

use crate::blocks::charts_named;
use crate::chart::{framework_stem, Chart};
use crate::format::{bytes, percent};

/// The roles holding bytes, the most first (equals in `Role::ALL` order).
fn largest_first(r: &RoleBytes) -> Vec<(gmem_prof_model::Role, u64)> {
    let mut v: Vec<_> = r.iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// "16.0 MiB optimizer state, 8.0 MiB parameters, …".
pub fn role_list(r: &RoleBytes) -> String {
    largest_first(r)
        .iter()
        .map(|(role, b)| format!("{} {role}", bytes(*b)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary's line: the peak by role, and the allocator's cache beside.
pub fn summary_line(r: &RolesAtPeak) -> String {
    let mut line = format!("  by role: {}", role_list(&r.roles));
    if r.cached > 0 {
        line.push_str(&format!("; {} cached (free in segments)", bytes(r.cached)));
    }
    line
}

/// How roles are decided, in a sentence the page gives once.
const HOW: &str = "Each tensor's role comes from the trace's evidence, with no \
    change to the program: its Python frames (module construction and \
    Module.to()/cuda() make parameters; a trainer's input-moving code makes \
    inputs; a generation cache makes the KV cache), CUDA libraries' workspaces \
    by their stacks and moments, and otherwise its lifetime across PyTorch's \
    phases: made before a backward and freed in it, an activation; made in a \
    backward and kept past it, a gradient; made in an optimizer's step and \
    kept past it, optimizer state; freed in the phase that made it, a \
    temporary; anything else, unknown.";

/// The page's table of a view's peak by role, and its timeline by role.
pub fn html(v: &FrameworkView, charts: &[Chart]) -> Markup {
    let Some(r) = &v.roles_at_peak else {
        return html! {};
    };
    let whole = v.allocated_peak + r.cached;
    html! {
        h4 { "What the memory was at the allocated peak" }
        table {
            tr { th { "role" } th.n { "bytes" } th.n { "share" } }
            @for (role, b) in largest_first(&r.roles) {
                tr { td { (role.as_str()) } td.n { (bytes(b)) } td.n { (percent(b, whole)) } }
            }
            @if r.cached > 0 {
                tr { td { "cached (free in the allocator's segments)" } td.n { (bytes(r.cached)) } td.n { (percent(r.cached, whole)) } }
            }
        }
        (charts_named(charts, &format!("{}-roles.svg", framework_stem(v))))
        p.meta { (HOW) }
    }
}
