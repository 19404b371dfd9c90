//! What a framework's tensors are: parameters, gradients, optimizer state,
//! activations, temporaries, inputs, KV caches, CUDA libraries'
//! workspaces, or unknown. The analyzer decides each tensor's role from
//! the trace's evidence (docs/design.md, "Roles"); this is the vocabulary
//! and the figures by role the reports read.

use serde::{Deserialize, Serialize};

vocabulary! {
    /// What a tensor is.
    #[derive(Hash, PartialOrd, Ord)]
    pub enum Role {
        /// The model's weights and buffers: made by a module's
        /// construction, `Module.to()`/`cuda()` (`Module._apply`) or a
        /// framework's model loading.
        Parameter => "parameters",
        /// Made in a backward pass and kept past its end (`.grad`).
        Gradient => "gradients",
        /// Made in an optimizer's step and kept past its end (Adam's
        /// moments, SGD's momentum).
        OptimizerState => "optimizer state",
        /// Made before a backward pass and freed in it: kept for the
        /// backward.
        Activation => "activations",
        /// Freed in the phase that made it.
        Temporary => "temporaries",
        /// A batch moved to the device (a trainer's input-moving code).
        Input => "inputs",
        /// A generation cache (keys and values of past tokens).
        KvCache => "KV cache",
        /// A CUDA library's workspace given from the framework's allocator.
        Workspace => "library workspaces",
        /// None of the above: kept past the backward that followed it, or
        /// made where no phase or frame tells.
        Unknown => "unknown",
    }
}

impl Role {
    /// Every role, in the order the reports list them.
    pub const ALL: [Role; 9] = [
        Role::Parameter,
        Role::Gradient,
        Role::OptimizerState,
        Role::Activation,
        Role::Temporary,
        Role::Input,
        Role::KvCache,
        Role::Workspace,
        Role::Unknown,
    ];

    /// Its key in budgets (`max_role.KEY`): its word in lower case, `_`
    /// for spaces ("optimizer_state", "kv_cache").
    pub fn key(self) -> &'static str {
        match self {
            Role::Parameter => "parameters",
            Role::Gradient => "gradients",
            Role::OptimizerState => "optimizer_state",
            Role::Activation => "activations",
            Role::Temporary => "temporaries",
            Role::Input => "inputs",
            Role::KvCache => "kv_cache",
            Role::Workspace => "library_workspaces",
            Role::Unknown => "unknown",
        }
    }

    /// Its place in `ALL` (and in `RoleBytes`' array).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The role a `check --max-role` or TOML key names: its word, or the
    /// word with `_` for spaces, singular or plural ("activations",
    /// "optimizer_state", "kv_cache", "parameter").
    pub fn from_key(key: &str) -> Option<Role> {
        let key = key.trim().to_ascii_lowercase().replace(['_', '-'], " ");
        Role::ALL.into_iter().find(|r| {
            let word = r.as_str().to_ascii_lowercase();
            key == word
                || key == r.key().replace('_', " ")
                || key == word.trim_end_matches('s')
                || format!("{key}s") == word
                || (*r == Role::Workspace && key == "workspace")
                || (*r == Role::Temporary && key == "temporary")
        })
    }
}

/// Bytes by role, in `Role::ALL` order; written in the JSON as an object
/// keyed by the roles' words, roles with no bytes left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoleBytes(pub [u64; 9]);

impl RoleBytes {
    pub fn get(&self, role: Role) -> u64 {
        self.0[role.index()]
    }

    pub fn add(&mut self, role: Role, bytes: u64) {
        self.0[role.index()] += bytes;
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// `bytes` counted as `was` turn out to be `role`; false (and nothing
    /// moved) when `was` holds fewer.
    pub fn moved(&mut self, was: Role, role: Role, bytes: u64) -> bool {
        if self.get(was) < bytes {
            return false;
        }
        self.0[was.index()] -= bytes;
        self.add(role, bytes);
        true
    }

    /// (role, bytes) of the roles holding bytes, in `Role::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (Role, u64)> + '_ {
        Role::ALL
            .into_iter()
            .map(|r| (r, self.get(r)))
            .filter(|&(_, b)| b > 0)
    }

    /// The sum of two breakdowns.
    pub fn plus(&self, other: &RoleBytes) -> RoleBytes {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(other.0) {
            *a += b;
        }
        out
    }
}

impl Serialize for RoleBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (role, bytes) in self.iter() {
            m.serialize_entry(role.as_str(), &bytes)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for RoleBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<String, u64>::deserialize(d)?;
        let mut out = RoleBytes::default();
        for (word, bytes) in map {
            let role = Role::ALL
                .into_iter()
                .find(|r| r.as_str() == word)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown role {word:?}")))?;
            out.add(role, bytes);
        }
        Ok(out)
    }
}

/// A view's tensors at its allocated peak, by role, with the allocator's
/// cache beside them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RolesAtPeak {
    pub roles: RoleBytes,
    /// Reserved minus allocated then: the allocator's free cache.
    pub cached: u64,
    /// The trace has PyTorch's phases, which tell activations, gradients,
    /// optimizer state and temporaries by their lifetimes; without them
    /// only frames and workspaces tell, and the rest is unknown.
    #[serde(default)]
    pub by_phases: bool,
}

/// A role's live bytes at each bucket's end: the stacked timeline's bands.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoleCurve {
    pub role: Role,
    pub live: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_roles_in_the_forms_people_write() {
        for (key, role) in [
            ("activations", Role::Activation),
            ("activation", Role::Activation),
            ("optimizer_state", Role::OptimizerState),
            ("optimizer-state", Role::OptimizerState),
            ("kv_cache", Role::KvCache),
            ("KV cache", Role::KvCache),
            ("parameter", Role::Parameter),
            ("gradients", Role::Gradient),
            ("workspace", Role::Workspace),
            ("temporaries", Role::Temporary),
            ("temporary", Role::Temporary),
            ("inputs", Role::Input),
            ("library_workspaces", Role::Workspace),
        ] {
            assert_eq!(Role::from_key(key), Some(role), "{key}");
        }
        assert_eq!(Role::from_key("weights"), None);
        for r in Role::ALL {
            assert_eq!(Role::from_key(r.key()), Some(r));
            assert_eq!(Role::from_key(r.as_str()), Some(r));
        }
    }

    #[test]
    fn role_bytes_round_trip_as_an_object_of_words() {
        let mut r = RoleBytes::default();
        r.add(Role::OptimizerState, 16);
        r.add(Role::Activation, 4);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#"{"optimizer state":16,"activations":4}"#);
        let back: RoleBytes = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.total(), 20);
    }
}
