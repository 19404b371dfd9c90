//! Strings written into the trace once per process (`String` records):
//! kernel names, and NVTX domains and range names.

use std::collections::HashMap;

use gmem_prof_traces::record::{StringDef, StringId};
use gmem_prof_traces::Record;

/// Interns names so each is written once per process.
#[derive(Default)]
pub struct Names {
    ids: HashMap<String, StringId>,
}

impl Names {
    pub fn intern(&mut self, name: &str, out: &mut Vec<Record>) -> StringId {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = StringId(self.ids.len() as u32 + 1);
        self.ids.insert(name.to_string(), id);
        out.push(Record::String(StringDef {
            id,
            text: name.to_string(),
        }));
        id
    }
}
