//! Why figures may be short or uncertain, as facts: what was wrong with the
//! input (`InputWarning`), what a device's fragmentation figure cannot see
//! (`BlindSpot`), why a process was not wholly profiled (`NotProfiled`) and
//! what the collector said of it (`ProcessMessage`). The reports crate puts
//! them in sentences (`reports::words`), for the page, the summary, `check`
//! and `diff` alike.
//!
//! Each is written in the JSON as an object with its `kind` and figures.
//! Analyses of schema version 1 held these as sentences: such a file reads
//! back with each sentence as `Worded`, which reports print as it is.

use serde::{Deserialize, Deserializer, Serialize};

/// Something in the input that makes the figures short or uncertain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InputWarning {
    /// Records CUPTI or the collector lost while recording (buffers full).
    RecordsLost { records: u64 },
    /// Events that arrived later than the reordering window allowed
    /// (`window_ns`); they were applied at the time already reached.
    LateEvents { events: u64, window_ns: u64 },
    /// Events claiming `limit_bytes` or more were left out: a damaged trace
    /// or a faulty collector.
    ImpossibleSizes { events: u64, limit_bytes: u64 },
    /// Frees whose allocation the trace does not hold (made before
    /// recording started, or its record lost).
    UnmatchedFrees { frees: u64 },
    /// Records of a newer format version, skipped.
    NewerRecords { records: u64 },
    /// The trace holds no event.
    NoEvents,
    /// A trace file's damage, as the format's reader describes it.
    DamagedFile { file: String, damage: String },
    /// The rest of a chunk was skipped from `offset` on; `reason` is the
    /// decoder's.
    DamagedChunk { offset: u64, reason: String },
    /// A sentence of a version-1 analysis.
    Worded { text: String },
}

/// What the trace cannot see of a device's fragmentation, said once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlindSpot {
    /// PyTorch's cudaMallocAsync backend: its pool's inside is not shown by
    /// CUDA, so its fragmentation is estimated from addresses.
    TorchCudaPool,
    /// PyTorch's caching allocator was seen from the inside: its pools'
    /// fragmentation is with the framework allocators, not here.
    TorchSeenInside,
    /// A caching allocator sub-allocates inside blocks the trace sees
    /// whole, and was not seen from the inside.
    CachingAllocatorUnseen,
    /// No stream-ordered pool or VMM reservation was used on the device:
    /// there is no reserved region to measure.
    NoReservedRegions,
    /// A sentence of a version-1 analysis.
    Worded { text: String },
}

/// Why a process's record is incomplete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NotProfiled {
    /// The collector reported an error (another CUPTI client, CUPTI
    /// missing or of another version, an internal error): its message.
    CollectorError { message: String },
    /// Records dropped while recording (buffers full).
    RecordsDropped { records: u64 },
    /// Killed, crashed, or still running when the trace was written: what
    /// it did after the collector's last flush is missing.
    CutShort,
    /// PyTorch's caching allocator was found but not seen from the inside
    /// (`detail`: the collector's reason), so budgets on tensors cannot be
    /// judged. Given by `check` and `diff` when they judge tensors; a
    /// process's report holds it as `allocator_not_attached`.
    TensorsUnseen { detail: String },
    /// A sentence of a version-1 analysis.
    Worded { text: String },
}

/// A part of a run that was not profiled: which process, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnprofiledPart {
    pub pid: u32,
    /// The executable's file name.
    pub program: String,
    pub reason: NotProfiled,
}

vocabulary! {
    /// How serious a collector's message is.
    pub enum MessageLevel {
        Info => "info",
        Warning => "warning",
        Error => "error",
    }
}

impl MessageLevel {
    /// The level of a trace's message record (0 info, 1 warning, 2 or more
    /// error).
    pub fn of_record(level: u8) -> MessageLevel {
        match level {
            0 => MessageLevel::Info,
            1 => MessageLevel::Warning,
            _ => MessageLevel::Error,
        }
    }
}

/// What is said of a process beside its figures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProcessMessage {
    /// A message the collector wrote into the trace, in its words.
    Collector { level: MessageLevel, text: String },
    /// The process did not end cleanly (killed, crashed or still running):
    /// what it held is shown as live when the trace ends.
    NotEndedCleanly,
    /// A sentence of a version-1 analysis.
    Worded { text: String },
}

/// A reason that can be read back from a version-1 analysis' sentence.
pub(crate) trait FromWords {
    fn from_words(text: String) -> Self;
}

macro_rules! from_words {
    ($($t:ident),*) => {$(
        impl FromWords for $t {
            fn from_words(text: String) -> Self {
                $t::Worded { text }
            }
        }
    )*};
}
from_words!(InputWarning, BlindSpot, NotProfiled, ProcessMessage);

/// Reads a list of reasons written as objects (schema 2) or as sentences
/// (schema 1).
pub(crate) fn typed_or_worded<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + FromWords,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either<T> {
        Typed(T),
        Worded(String),
    }
    Ok(Vec::<Either<T>>::deserialize(d)?
        .into_iter()
        .map(|e| match e {
            Either::Typed(t) => t,
            Either::Worded(text) => T::from_words(text),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "typed_or_worded")]
        warnings: Vec<InputWarning>,
    }

    #[test]
    fn reasons_read_from_either_schema() {
        let v2 = r#"{"warnings": [{"kind": "records_lost", "records": 3}, {"kind": "no_events"}]}"#;
        let h: Holder = serde_json::from_str(v2).unwrap();
        assert_eq!(
            h.warnings,
            [
                InputWarning::RecordsLost { records: 3 },
                InputWarning::NoEvents
            ]
        );
        let v1 = r#"{"warnings": ["the trace holds no events"]}"#;
        let h: Holder = serde_json::from_str(v1).unwrap();
        assert_eq!(
            h.warnings,
            [InputWarning::Worded {
                text: "the trace holds no events".into()
            }]
        );
        // Neither an object of a known kind nor a sentence: an error, not
        // a silent default.
        assert!(serde_json::from_str::<Holder>(r#"{"warnings": [{"kind": "nonsense"}]}"#).is_err());
        assert!(serde_json::from_str::<Holder>(r#"{"warnings": [7]}"#).is_err());
    }

    #[test]
    fn a_reason_is_written_with_its_kind_and_figures() {
        let json = serde_json::to_string(&NotProfiled::RecordsDropped { records: 9 }).unwrap();
        assert_eq!(json, r#"{"kind":"records_dropped","records":9}"#);
        let json = serde_json::to_string(&ProcessMessage::Collector {
            level: MessageLevel::Error,
            text: "x".into(),
        })
        .unwrap();
        assert_eq!(json, r#"{"kind":"collector","level":"error","text":"x"}"#);
    }
}
