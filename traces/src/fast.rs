//! The fast decoder: a chunk's payload decoded record by record into a
//! `Sink`. The frequent kinds (memory, API, pool, kernels, allocator events,
//! process ends) go to the sink as they are decoded, field by field; every
//! other record goes whole, as `Record::decode` gives it.
//!
//! It takes the fastest way the processor has, and callers see none of it:
//! - AVX-512 with VBMI2 (`wide`): memory, API and kernel bodies sixteen
//!   fields at a time;
//! - a fast BMI2: bodies read from a fixed window (`WinDec`) without a
//!   check per read, multi-byte varints joined by `pext`;
//! - otherwise the same window reads with shifts and masks, and near a
//!   chunk's end (no whole window left) the checked reads of `Dec`.
//!
//! Every way gives the fields `Record::decode` gives, or an error for a bad
//! body; `cross_check` asks each way this processor has about every record
//! of a payload (the property tests and the fuzz target use it).

use crate::codec::{self, Dec, Fields, WinDec, WINDOW};
use crate::file::{ChunkRecords, RawRecord};
use crate::record::{
    self, tag, AllocatorEvent, ApiCall, KernelLaunch, KernelSpan, MemoryEvent, PoolEvent,
    ProcessEnd,
};
use crate::{DecodeError, Record};

/// Where `decode_payload` delivers a chunk's records, in file order.
/// `index` is the record's place in its chunk (from 0).
pub trait Sink {
    fn memory(&mut self, index: u64, m: &MemoryEvent);
    fn api(&mut self, index: u64, a: &ApiCall);
    fn pool(&mut self, index: u64, p: &PoolEvent);
    /// A `KERNEL` record's leading fields: its run on the device (the rest
    /// of the record, launch geometry, is not read).
    fn kernel(&mut self, index: u64, k: &KernelSpan);
    fn kernel_launch(&mut self, index: u64, k: &KernelLaunch);
    fn allocator_event(&mut self, index: u64, a: &AllocatorEvent);
    fn process_end(&mut self, index: u64, e: &ProcessEnd);
    /// Any other record, whole (definitions, messages, …).
    fn other(&mut self, index: u64, r: Record);
}

/// What `decode_payload` did: the records it delivered, and the error that
/// stopped it before the payload's end (the chunk's framing is lost there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadRead {
    pub records: u64,
    pub error: Option<DecodeError>,
}

/// The way this processor decodes the frequent records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Memory, API and kernel bodies sixteen fields at a time (AVX-512 with
    /// BW, VBMI and VBMI2, and a fast BMI2).
    Wide,
    /// From a window, varints joined by `pext` (a fast BMI2).
    Pext,
    /// From a window, with shifts and masks.
    Plain,
}

/// Which way `decode_payload` takes here (found once).
pub fn way() -> Way {
    #[cfg(target_arch = "x86_64")]
    if crate::wide::available() {
        return Way::Wide;
    }
    #[cfg(target_arch = "x86_64")]
    if codec::fast_pext() {
        return Way::Pext;
    }
    Way::Plain
}

/// Decodes a chunk's payload (decompressed: `RawChunk::payload_in`) into
/// `sink`.
#[inline]
pub fn decode_payload<S: Sink>(payload: &[u8], sink: &mut S) -> PayloadRead {
    match way() {
        // SAFETY: the processor has AVX-512 with BW, VBMI and VBMI2, and
        // BMI2.
        #[cfg(target_arch = "x86_64")]
        Way::Wide => unsafe { decode_wide(payload, sink) },
        // SAFETY: the processor has BMI2.
        #[cfg(target_arch = "x86_64")]
        Way::Pext => unsafe { decode_bmi2(payload, sink) },
        _ => decode_with::<false, false, S>(payload, sink),
    }
}

/// `decode_with`, compiled for BMI2 so that varints are joined by `pext`
/// (about a tenth fewer instructions in decoding).
///
/// # Safety
/// The processor must have BMI2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
unsafe fn decode_bmi2<S: Sink>(payload: &[u8], sink: &mut S) -> PayloadRead {
    decode_with::<true, false, S>(payload, sink)
}

/// `decode_with`, compiled for AVX-512 so that the frequent records are
/// decoded sixteen fields at a time (`wide`).
///
/// # Safety
/// The processor must have what `wide::available` asks for.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2,avx512f,avx512bw,avx512vbmi,avx512vbmi2")]
unsafe fn decode_wide<S: Sink>(payload: &[u8], sink: &mut S) -> PayloadRead {
    decode_with::<true, true, S>(payload, sink)
}

#[inline(always)]
fn decode_with<const BMI2: bool, const WIDE: bool, S: Sink>(
    payload: &[u8],
    sink: &mut S,
) -> PayloadRead {
    let mut records = ChunkRecords::new(payload);
    let base = records.base();
    let mut read = PayloadRead {
        records: 0,
        error: None,
    };
    let mut index = 0u64;
    while let Some(raw) = records.next_raw_window() {
        // A match, not `and_then`: a closure is compiled without the
        // caller's target features (BMI2, AVX-512) and was not inlined, so
        // `pext` became a call (a fifth more instructions in decoding).
        let decoded = match raw {
            Ok(r) => decode_record::<BMI2, WIDE, S>(r, base, index, sink),
            Err(e) => Err(e),
        };
        index += 1;
        match decoded {
            Ok(()) => read.records += 1,
            Err(e) => {
                read.error = Some(e);
                break;
            }
        }
    }
    read
}

/// One record into `sink`.
#[inline(always)]
fn decode_record<const BMI2: bool, const WIDE: bool, S: Sink>(
    r: RawRecord,
    base: u64,
    index: u64,
    sink: &mut S,
) -> Result<(), DecodeError> {
    let delivered = match r.window {
        // SAFETY: WIDE is only asked for on processors that have what it
        // needs (`decode_payload`).
        #[cfg(target_arch = "x86_64")]
        Some(w) if WIDE && unsafe { wide_way(r.tag, w, r.body.len(), base, index, sink) } => true,
        Some(w) => {
            // SAFETY: BMI2 is only asked for on processors that have it
            // (`decode_payload`).
            let win = &mut unsafe { WinDec::<BMI2>::new_generic(w, r.body.len()) };
            frequent(r.tag, win, base, index, sink)?
        }
        None => frequent(r.tag, &mut Dec::new(r.body), base, index, sink)?,
    };
    if !delivered {
        sink.other(index, Record::decode(r.tag, r.body, base)?);
    }
    Ok(())
}

/// Reads that can say, once the record is read, whether all of it lay in
/// its body: `WinDec` checks then; `Dec` checked every read already.
trait Checked: Fields {
    fn finish(&self) -> Result<(), DecodeError>;
}

impl Checked for Dec<'_> {
    #[inline(always)]
    fn finish(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}

impl<const BMI2: bool> Checked for WinDec<'_, BMI2> {
    #[inline(always)]
    fn finish(&self) -> Result<(), DecodeError> {
        WinDec::finish(self)
    }
}

/// Delivers a frequent record to `sink` and returns true, or returns false
/// for any other record (decoded whole by the caller). A record is
/// delivered only once its reads are known to have stayed in its body.
#[inline(always)]
fn frequent<S: Sink>(
    tag: u8,
    d: &mut impl Checked,
    base: u64,
    index: u64,
    sink: &mut S,
) -> Result<bool, DecodeError> {
    macro_rules! deliver {
        ($decode:path, $method:ident) => {{
            let r = $decode(d, base)?;
            d.finish()?;
            sink.$method(index, &r);
            true
        }};
    }
    Ok(match tag {
        tag::MEMORY => deliver!(record::decode_memory, memory),
        tag::API => deliver!(record::decode_api, api),
        tag::POOL => deliver!(record::decode_pool, pool),
        tag::KERNEL => deliver!(record::decode_kernel_span, kernel),
        tag::KERNEL_LAUNCH => deliver!(record::decode_kernel_launch, kernel_launch),
        tag::ALLOCATOR_EVENT => deliver!(record::decode_allocator_event, allocator_event),
        tag::PROCESS_END => deliver!(record::decode_process_end, process_end),
        _ => false,
    })
}

/// The memory, API and kernel records decoded sixteen fields at a time
/// (`wide`): true when it delivered the record; false for other records,
/// and for bodies that way leaves to the field-by-field one.
///
/// # Safety
/// The processor has what `wide::available` asks for.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn wide_way<S: Sink>(
    tag: u8,
    w: &[u8; WINDOW],
    len: usize,
    base: u64,
    index: u64,
    sink: &mut S,
) -> bool {
    let deliver: WideDeliver<S> = match tag {
        tag::MEMORY => wide_memory::<S>,
        tag::API => wide_api::<S>,
        tag::KERNEL => wide_kernel::<S>,
        _ => return false,
    };
    // Called through a pointer the compiler cannot see through, so that it
    // stays a call: rustc inlines `#[target_feature]` functions whatever
    // their `#[inline]` says, and inlined into the decoding loop their
    // vector registers spilled; reloading a spilled 512-bit register stalls
    // (the wide decoding then took longer than the scalar one).
    // SAFETY: the caller's promise.
    unsafe { std::hint::black_box(deliver)(w, len, base, index, sink) }
}

/// One of the functions `wide_way` calls; unsafe for its promise.
#[cfg(target_arch = "x86_64")]
type WideDeliver<S> = unsafe fn(&[u8; WINDOW], usize, u64, u64, &mut S) -> bool;

/// Defines a `WideDeliver`: the sink's `$method` with the body `$decode`
/// decodes.
macro_rules! wide_deliver {
    ($name:ident, $decode:path, $method:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "bmi2,avx512f,avx512bw,avx512vbmi,avx512vbmi2")]
        unsafe fn $name<S: Sink>(
            w: &[u8; WINDOW],
            len: usize,
            base: u64,
            index: u64,
            sink: &mut S,
        ) -> bool {
            // SAFETY: the caller's promise (`wide_way`'s).
            match unsafe { $decode(w, len, base) } {
                Some(r) => {
                    sink.$method(index, &r);
                    true
                }
                None => false,
            }
        }
    };
}
wide_deliver!(wide_memory, crate::wide::memory, memory);
wide_deliver!(wide_api, crate::wide::api, api);
wide_deliver!(wide_kernel, crate::wide::kernel_span, kernel);

/// What `cross_check` found: records looked at, how many of them each way
/// decoded (those with a whole window after them, of a frequent kind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrossChecked {
    pub records: u64,
    /// Decoded from a window, and with `pext` too where the processor has it.
    pub windowed: u64,
    /// Taken by the sixteen-fields-at-a-time way (0 without AVX-512 VBMI2).
    pub wide: u64,
}

/// Decodes every frequent record of `payload` each way this processor has
/// and compares: the checked reads, the window (with shifts, and with
/// `pext` where there is BMI2) and the wide way must give the same fields,
/// or all refuse the body (the wide way may leave a body to the others).
/// Err says which record disagreed. For tests and fuzzing: it is slow.
pub fn cross_check(payload: &[u8]) -> Result<CrossChecked, String> {
    let mut records = ChunkRecords::new(payload);
    let base = records.base();
    let mut seen = CrossChecked::default();
    while let Some(Ok(r)) = records.next_raw_window() {
        seen.records += 1;
        let Some(w) = r.window else { continue };
        let checked = describe(r.tag, &mut Dec::new(r.body), base);
        let Some(checked) = checked else { continue };
        let checked = checked.ok();
        let windowed =
            describe(r.tag, &mut WinDec::new(w, r.body.len()), base).and_then(Result::ok);
        if windowed != checked {
            return Err(format!(
                "tag {} body {:?}: checked {checked:?}, windowed {windowed:?}",
                r.tag, r.body
            ));
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("bmi2") {
            // SAFETY: the processor has BMI2.
            let with_pext = describe(
                r.tag,
                &mut unsafe { WinDec::new_bmi2(w, r.body.len()) },
                base,
            )
            .and_then(Result::ok);
            if with_pext != checked {
                return Err(format!(
                    "tag {} body {:?}: checked {checked:?}, with pext {with_pext:?}",
                    r.tag, r.body
                ));
            }
        }
        seen.windowed += 1;
        if let Some(wide) = wide_describe(r.tag, w, r.body.len(), base) {
            if Some(&wide) != checked.as_ref() {
                return Err(format!(
                    "tag {} body {:?}: checked {checked:?}, wide {wide:?}",
                    r.tag, r.body
                ));
            }
            seen.wide += 1;
        }
    }
    Ok(seen)
}

/// What a way delivered for one record, as text: every way is asked
/// through the same dispatch the fast decoder runs (`frequent`,
/// `wide_way`), so a frequent kind added there is checked here too.
#[derive(Default)]
struct Described(Option<String>);

impl Described {
    fn keep(&mut self, r: &impl std::fmt::Debug) {
        self.0 = Some(format!("{r:?}"));
    }
}

impl Sink for Described {
    fn memory(&mut self, _: u64, m: &MemoryEvent) {
        self.keep(m);
    }
    fn api(&mut self, _: u64, a: &ApiCall) {
        self.keep(a);
    }
    fn pool(&mut self, _: u64, p: &PoolEvent) {
        self.keep(p);
    }
    fn kernel(&mut self, _: u64, k: &KernelSpan) {
        self.keep(k);
    }
    fn kernel_launch(&mut self, _: u64, k: &KernelLaunch) {
        self.keep(k);
    }
    fn allocator_event(&mut self, _: u64, a: &AllocatorEvent) {
        self.keep(a);
    }
    fn process_end(&mut self, _: u64, e: &ProcessEnd) {
        self.keep(e);
    }
    fn other(&mut self, _: u64, r: Record) {
        self.keep(&r);
    }
}

/// A frequent record's fields as text (`None`: not a frequent kind), or
/// why it does not decode.
fn describe(tag: u8, d: &mut impl Checked, base: u64) -> Option<Result<String, DecodeError>> {
    let mut seen = Described::default();
    match frequent(tag, d, base, 0, &mut seen) {
        Ok(true) => seen.0.map(Ok),
        Ok(false) => None,
        Err(e) => Some(Err(e)),
    }
}

/// The wide way's fields as text, where the processor has it and it takes
/// the body.
fn wide_describe(tag: u8, w: &[u8; WINDOW], len: usize, base: u64) -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    if crate::wide::available() {
        let mut seen = Described::default();
        // SAFETY: the processor has what the wide decoders need.
        return unsafe { wide_way(tag, w, len, base, 0, &mut seen) }
            .then_some(seen.0)
            .flatten();
    }
    let _ = (tag, w, len, base);
    None
}
