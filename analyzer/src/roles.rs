//! What each tensor of a framework allocator is (docs/design.md, "Roles"):
//! the evidence a tensor's stack gives at its allocation (`stack_hint`),
//! the phases of PyTorch's training loop it was made and freed in
//! (`Phases`), and the books that keep bytes by role while some tensors'
//! roles are not known yet (`RoleLive`, `Snapshot`).
//!
//! A tensor whose stack says nothing is *pending* from its allocation until
//! its lifetime decides: freed in the part of the phase that made it, a
//! temporary; made before a backward pass and freed in it, an activation;
//! made in a backward and kept past its end, a gradient; made in an
//! optimizer's step and kept past its end, optimizer state; anything else,
//! unknown. Figures taken while it was pending (a view's peak, a step's
//! peak, the timeline's buckets) get its bytes under its role once it is
//! known, so that every figure is exact: a snapshot remembers the
//! allocation count it was taken at, and a tensor allocated before it and
//! live when its role is decided was live then.

use gmem_prof_model::{Role, RoleBytes};
use gmem_prof_traces::record::{Frame, AUTOGRAD_NODE_FILE};

use crate::sites::ProcDefs;
use crate::timeline::{Axis, Curve};

/// A block's role byte while its role is not known yet; `PENDING_OPTIMIZER`
/// for a tensor an optimizer's own code made (kept, it is its state).
pub const PENDING: u8 = u8::MAX;
pub const PENDING_OPTIMIZER: u8 = u8::MAX - 1;

/// Whether a block's role byte is one not known yet.
pub fn is_pending(role: u8) -> bool {
    role >= PENDING_OPTIMIZER
}

/// What a tensor's stack says it is, at its allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    /// Nothing: its lifetime decides.
    Lifetime,
    /// Made by an optimizer's own code (its innermost Python frame is in
    /// `torch/optim/`): a temporary if freed where it was made, its state
    /// if kept.
    Optimizer,
    /// Made on a thread right after a CUDA library allocated for itself
    /// there (PyTorch handing the library a workspace): a workspace if
    /// kept to the end, else what its lifetime says.
    AfterLibrary,
    Known(Role),
}

impl Hint {
    /// The block's role byte at its allocation.
    pub fn role_byte(self) -> u8 {
        match self {
            Hint::Lifetime | Hint::AfterLibrary => PENDING,
            Hint::Optimizer => PENDING_OPTIMIZER,
            Hint::Known(r) => r.index() as u8,
        }
    }
}

/// The role a stack's Python frames name, the innermost naming frame
/// first: module construction and `Module._apply` (`to()`, `cuda()`,
/// `half()`) make parameters; trainers' input-moving functions make
/// inputs; generation caches make the KV cache; autograd's
/// `AccumulateGrad` node makes a gradient. An innermost Python frame in
/// `torch/optim/` is an optimizer's own code (a forward run by an
/// optimizer's closure has the program's frames innermost).
pub fn stack_hint(defs: &ProcDefs, stack: u32) -> Hint {
    let Some(s) = defs.stacks.get(&stack) else {
        return Hint::Lifetime;
    };
    let mut innermost = true;
    for f in &s.frames {
        let Frame::Python { code, .. } = f else {
            continue;
        };
        let Some(c) = defs.py_codes.get(&code.0) else {
            continue;
        };
        if c.file == AUTOGRAD_NODE_FILE {
            if c.function.ends_with("AccumulateGrad") {
                return Hint::Known(Role::Gradient);
            }
            continue;
        }
        if let Some(role) = frame_role(&c.file, &c.function) {
            return Hint::Known(role);
        }
        if innermost && c.file.replace('\\', "/").contains("torch/optim/") {
            return Hint::Optimizer;
        }
        innermost = false;
    }
    Hint::Lifetime
}

/// The role one Python frame names, by its file and qualified function.
pub fn frame_role(file: &str, function: &str) -> Option<Role> {
    let file = file.replace('\\', "/");
    // `co_qualname` ("Module._apply"), or `co_name` before Python 3.11.
    let name = function.rsplit('.').next().unwrap_or(function);
    let lower = function.to_ascii_lowercase();
    if file.ends_with("transformers/cache_utils.py")
        || ["kvcache", "kv_cache", "past_key_value"]
            .iter()
            .any(|w| lower.contains(w))
    {
        return Some(Role::KvCache);
    }
    let parameter = (file.ends_with("torch/nn/modules/module.py")
        && matches!(
            name,
            "_apply" | "to_empty" | "register_parameter" | "register_buffer"
        ))
        || (file.contains("torch/nn/modules/") && matches!(name, "__init__" | "reset_parameters"))
        || file.ends_with("torch/nn/parameter.py")
        || (file.ends_with("transformers/modeling_utils.py")
            && (name.contains("load") || name.starts_with("from_")))
        || (file.ends_with("accelerate/utils/modeling.py")
            && name == "set_module_tensor_to_device");
    if parameter {
        return Some(Role::Parameter);
    }
    let input = (file.ends_with("transformers/trainer.py")
        && matches!(name, "_prepare_input" | "_prepare_inputs"))
        || (file.contains("lightning")
            && matches!(
                name,
                "move_data_to_device"
                    | "batch_to_device"
                    | "transfer_batch_to_device"
                    | "_apply_batch_transfer_handler"
            ))
        || (file.ends_with("accelerate/utils/operations.py") && name == "send_to_device");
    input.then_some(Role::Input)
}

/// A phase of PyTorch's training loop, as the Python bootstrap marks it
/// (ranges of the domain "PyTorch").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Forward,
    Backward,
    OptimizerStep,
}

impl Phase {
    /// The phase a range of the domain "PyTorch" named `name` marks.
    pub fn of_range(domain: &str, name: &str) -> Option<Phase> {
        if domain != "PyTorch" {
            return None;
        }
        match name {
            "forward" => Some(Phase::Forward),
            "backward" => Some(Phase::Backward),
            "optimizer step" => Some(Phase::OptimizerStep),
            _ => None,
        }
    }
}

/// What a part of the run between two phase edges does, for the tensors
/// made in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// A forward, no phase, or the part of an optimizer step before the
    /// backward its closure ran: what it keeps for a backward is
    /// activations.
    Forward,
    Backward,
    /// An optimizer's step, past any backward inside it: what it keeps is
    /// optimizer state.
    Update,
}

/// Parts whose kinds are kept: a pending tensor is decided by the end of
/// the backward after it (a few parts later), so older ones are never
/// asked for, and memory stays bounded however long the run.
const PARTS_KEPT: usize = 4096;

/// The open phases and the parts the run was cut into by their edges.
#[derive(Debug)]
pub struct Phases {
    /// Whether any phase began: without phases, a tensor's lifetime tells
    /// only a temporary freed at once (`FrameworkState`).
    pub seen: bool,
    open: Vec<(u64, Phase)>,
    /// The kinds of the last `PARTS_KEPT` parts (the current one last),
    /// the first of them part number `first`.
    parts: std::collections::VecDeque<Part>,
    first: u32,
}

impl Default for Phases {
    fn default() -> Self {
        Phases {
            seen: false,
            open: Vec::new(),
            parts: std::collections::VecDeque::from([Part::Forward]),
            first: 0,
        }
    }
}

impl Phases {
    /// The part under way.
    pub fn current(&self) -> u32 {
        self.first + (self.parts.len() - 1) as u32
    }

    fn push(&mut self, kind: Part) {
        if self.parts.len() == PARTS_KEPT {
            self.parts.pop_front();
            self.first += 1;
        }
        self.parts.push_back(kind);
    }

    fn kind_now(&self) -> Part {
        if self.open.iter().any(|&(_, p)| p == Phase::Backward) {
            Part::Backward
        } else if self.open.iter().any(|&(_, p)| p == Phase::OptimizerStep) {
            Part::Update
        } else {
            Part::Forward
        }
    }

    pub fn kind(&self, part: u32) -> Part {
        part.checked_sub(self.first)
            .and_then(|i| self.parts.get(i as usize))
            .copied()
            .unwrap_or(Part::Forward)
    }

    /// A phase began: a new part. A backward inside an optimizer's step
    /// (its closure) makes what the step ran before it a forward.
    pub fn begin(&mut self, id: u64, phase: Phase) {
        if phase == Phase::Backward {
            if let Some(last) = self.parts.back_mut() {
                if *last == Part::Update {
                    *last = Part::Forward;
                }
            }
        }
        self.seen = true;
        self.open.push((id, phase));
        self.push(self.kind_now());
    }

    /// A range ended: the phase it was, if it was one (then a new part).
    pub fn end(&mut self, id: u64) -> Option<Phase> {
        let at = self.open.iter().position(|&(i, _)| i == id)?;
        let (_, phase) = self.open.remove(at);
        self.push(self.kind_now());
        Some(phase)
    }

    /// The role of a tensor made in part `made` and freed now;
    /// `immediate`: freed before another tensor was allocated; `optimizer`:
    /// made by an optimizer's own code.
    pub fn at_free(&self, made: u32, immediate: bool, optimizer: bool) -> Role {
        // Without phases an optimizer's own temporaries (a foreach
        // update's) cannot be told from its state: its code says nothing
        // then.
        if optimizer && self.seen {
            return if made == self.current() {
                Role::Temporary
            } else {
                Role::OptimizerState
            };
        }
        if !self.seen {
            // With no phase to tell by, what was freed is a temporary only
            // when nothing came between (memray's meaning): a program's
            // whole run is no phase (its objects are freed at shutdown).
            return if immediate {
                Role::Temporary
            } else {
                Role::Unknown
            };
        }
        if made == self.current() {
            return Role::Temporary;
        }
        match self.kind(made) {
            Part::Backward => Role::Gradient,
            Part::Update => Role::OptimizerState,
            Part::Forward if self.kind(self.current()) == Part::Backward => Role::Activation,
            Part::Forward => Role::Unknown,
        }
    }

    /// The role of a tensor made in part `made` (by an optimizer's code:
    /// `optimizer`), still live as `ended` ends; `None` while it may still
    /// become something else.
    pub fn at_phase_end(&self, made: u32, ended: Phase, optimizer: bool) -> Option<Role> {
        if optimizer {
            return Some(Role::OptimizerState);
        }
        match (ended, self.kind(made)) {
            (_, Part::Update) => Some(Role::OptimizerState),
            (Phase::Backward, Part::Backward) => Some(Role::Gradient),
            // Made before the backward that just ended and kept past it:
            // not kept for it.
            (Phase::Backward, Part::Forward) => Some(Role::Unknown),
            _ => None,
        }
    }
}

/// Bytes by role at one moment, with those whose role was not known then;
/// `seq`: the process's allocation count then.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    pub seq: u64,
    pub roles: RoleBytes,
    pub pending: u64,
}

impl Snapshot {
    /// A tensor allocated as the `seq`th allocation, live until now and
    /// counted as `was`, is `role`.
    pub fn moved(&mut self, seq: u64, was: Role, role: Role, bytes: u64) {
        if seq <= self.seq {
            self.roles.moved(was, role, bytes);
        }
    }

    /// Its bytes by role, those still pending (none once the sweep has
    /// ended) as unknown.
    pub fn roles_known(&self) -> RoleBytes {
        let mut out = self.roles;
        out.add(Role::Unknown, self.pending);
        out
    }

    /// A tensor of `bytes` allocated as the process's `seq`th allocation,
    /// live until now, turned out to be `role`: if it was live at this
    /// snapshot, its bytes move there too.
    pub fn resolved(&mut self, seq: u64, role: Role, bytes: u64) {
        if seq <= self.seq && self.pending >= bytes {
            self.pending -= bytes;
            self.roles.add(role, bytes);
        }
    }
}

/// One view's live tensors by role, over time.
#[derive(Debug, Default)]
pub struct RoleLive {
    pub live: RoleBytes,
    pub pending: u64,
    pub curves: [Curve; 9],
    /// At the view's allocated peak.
    pub at_peak: Snapshot,
}

impl RoleLive {
    pub fn snapshot(&self, seq: u64) -> Snapshot {
        Snapshot {
            seq,
            roles: self.live,
            pending: self.pending,
        }
    }

    /// A tensor of known role came or went.
    pub fn change(&mut self, axis: &Axis, role: Role, bytes: u64, alloc: bool) {
        let v = &mut self.live.0[role.index()];
        *v = if alloc {
            *v + bytes
        } else {
            v.saturating_sub(bytes)
        };
        self.curves[role.index()].set(axis, *v);
    }

    /// A live tensor made at `made`, counted as `was`, is `role`: its
    /// bytes move to it since then.
    pub fn reclassify(
        &mut self,
        axis: &Axis,
        made: u64,
        seq: u64,
        was: Role,
        role: Role,
        bytes: u64,
    ) {
        self.curves[was.index()].shift_since(axis, made, -(bytes as i64));
        self.change(axis, was, bytes, false);
        self.curves[role.index()].add_since(axis, made, bytes);
        self.change(axis, role, bytes, true);
        self.at_peak.moved(seq, was, role, bytes);
    }

    /// A live tensor made at `made` turned out to be `role`: its bytes
    /// count under it since then.
    pub fn resolve(&mut self, axis: &Axis, made: u64, seq: u64, role: Role, bytes: u64) {
        self.pending = self.pending.saturating_sub(bytes);
        self.curves[role.index()].add_since(axis, made, bytes);
        self.change(axis, role, bytes, true);
        self.at_peak.resolved(seq, role, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_name_parameters_inputs_and_caches() {
        let m = "/usr/lib/python3/site-packages/torch/nn/modules/module.py";
        assert_eq!(frame_role(m, "Module._apply"), Some(Role::Parameter));
        assert_eq!(frame_role(m, "_apply"), Some(Role::Parameter));
        assert_eq!(frame_role(m, "Module._call_impl"), None);
        let linear = "/x/site-packages/torch/nn/modules/linear.py";
        assert_eq!(frame_role(linear, "Linear.__init__"), Some(Role::Parameter));
        assert_eq!(frame_role(linear, "Linear.forward"), None);
        assert_eq!(
            frame_role("/x/transformers/cache_utils.py", "DynamicLayer.update"),
            Some(Role::KvCache)
        );
        assert_eq!(
            frame_role("/x/transformers/trainer.py", "Trainer._prepare_input"),
            Some(Role::Input)
        );
        assert_eq!(
            frame_role("/x/transformers/trainer.py", "Trainer.training_step"),
            None
        );
        assert_eq!(
            frame_role("model.py", "KVCache.update"),
            Some(Role::KvCache)
        );
    }

    /// A process's definitions holding one stack of Python frames
    /// (file, function), innermost first, as stack 1.
    fn defs_with(frames: &[(&str, &str)]) -> ProcDefs {
        use gmem_prof_traces::record::{PyCode, PyCodeId, StackDef, StackId};
        let mut d = ProcDefs::default();
        let mut stack = Vec::new();
        for (i, (file, function)) in frames.iter().enumerate() {
            let id = i as u32 + 1;
            d.py_codes.insert(
                id,
                PyCode {
                    id: PyCodeId(id),
                    file: file.to_string(),
                    function: function.to_string(),
                    first_line: 1,
                },
            );
            stack.push(Frame::Python {
                code: PyCodeId(id),
                line: 1,
            });
        }
        d.stacks.insert(
            1,
            StackDef {
                id: StackId(1),
                frames: stack,
                truncated: false,
            },
        );
        d
    }

    #[test]
    fn stacks_name_gradients_optimizer_code_and_parameters() {
        let optim = "/x/site-packages/torch/optim/adam.py";
        let module = "/x/site-packages/torch/nn/modules/module.py";
        let hint = |frames: &[(&str, &str)]| stack_hint(&defs_with(frames), 1);
        assert_eq!(
            hint(&[(AUTOGRAD_NODE_FILE, "torch::autograd::AccumulateGrad")]),
            Hint::Known(Role::Gradient)
        );
        assert_eq!(
            hint(&[(
                AUTOGRAD_NODE_FILE,
                "torch::autograd::generated::MmBackward0"
            )]),
            Hint::Lifetime
        );
        assert_eq!(
            hint(&[(optim, "Adam._init_group"), ("train.py", "main")]),
            Hint::Optimizer
        );
        // A forward an optimizer's closure runs: the program's frame is
        // innermost.
        assert_eq!(
            hint(&[
                ("train.py", "closure"),
                (optim, "Adam.step"),
                ("train.py", "main")
            ]),
            Hint::Lifetime
        );
        assert_eq!(
            hint(&[
                ("train.py", "<lambda>"),
                (module, "Module._apply"),
                ("train.py", "main")
            ]),
            Hint::Known(Role::Parameter)
        );
        assert_eq!(hint(&[]), Hint::Lifetime);
        assert_eq!(stack_hint(&ProcDefs::default(), 7), Hint::Lifetime);
    }

    #[test]
    fn an_optimizers_own_tensors_are_its_state_when_kept() {
        let mut p = Phases::default();
        // No phases: its temporaries and its state look alike.
        assert_eq!(p.at_free(0, true, true), Role::Temporary);
        assert_eq!(p.at_free(0, false, true), Role::Unknown);
        // Made outside an optimizer's step (a state loaded), kept: state.
        let outside = p.current();
        p.begin(1, Phase::Backward);
        assert_eq!(p.at_free(outside, false, true), Role::OptimizerState);
        assert_eq!(
            p.at_phase_end(outside, Phase::Backward, true),
            Some(Role::OptimizerState)
        );
    }

    #[test]
    fn a_long_run_keeps_the_last_parts_only() {
        let mut p = Phases::default();
        for id in 0..3000 {
            p.begin(id, Phase::Backward);
            p.end(id);
        }
        assert_eq!(p.current(), 6000);
        assert_eq!(p.parts.len(), PARTS_KEPT);
        assert_eq!(p.kind(5999), Part::Backward);
        assert_eq!(p.kind(6000), Part::Forward);
        // Forgotten parts read as forward ones.
        assert_eq!(p.kind(1), Part::Forward);
    }

    #[test]
    fn parts_follow_a_loop_and_a_closure_step() {
        let mut p = Phases::default();
        // No phase yet: only a tensor freed at once is a temporary.
        assert_eq!(p.at_free(0, true, false), Role::Temporary);
        assert_eq!(p.at_free(0, false, false), Role::Unknown);
        let first_forward = p.current();
        p.begin(1, Phase::Backward);
        let backward = p.current();
        assert_eq!(p.at_free(first_forward, false, false), Role::Activation);
        assert_eq!(p.at_free(backward, false, false), Role::Temporary);
        assert_eq!(p.end(1), Some(Phase::Backward));
        assert_eq!(
            p.at_phase_end(backward, Phase::Backward, false),
            Some(Role::Gradient)
        );
        p.begin(2, Phase::OptimizerStep);
        let update = p.current();
        assert_eq!(p.at_free(update, false, false), Role::Temporary);
        assert_eq!(p.end(2), Some(Phase::OptimizerStep));
        assert_eq!(
            p.at_phase_end(update, Phase::OptimizerStep, false),
            Some(Role::OptimizerState)
        );
        assert_eq!(p.end(99), None);
        // A closure: the step's part before its backward is a forward.
        p.begin(3, Phase::OptimizerStep);
        let closure_forward = p.current();
        p.begin(4, Phase::Backward);
        assert_eq!(p.kind(closure_forward), Part::Forward);
        assert_eq!(p.at_free(closure_forward, false, false), Role::Activation);
        p.end(4);
        assert_eq!(p.kind(p.current()), Part::Update);
    }
}
