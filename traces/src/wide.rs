//! The frequent record bodies (memory, API, kernel span) decoded sixteen
//! varints at a time with AVX-512 (VBMI and VBMI2).
//!
//! One 64-byte load holds the start of the body. The bytes whose top bit
//! is clear end the varints; compressing their positions gives every
//! field's end and start at once. Each field's bytes are then gathered into
//! a 64-bit lane, the bytes past its end cleared, and the 7-bit groups of
//! all lanes joined by two multiply-adds. One-byte fields (`u8`, `bool`) are
//! read as varints: below 0x80 they are the same byte.
//!
//! Only the common case is decoded here: every field at most eight bytes,
//! one-byte fields below 0x80, each value in its field's range, all ending
//! inside the body and within the 64 bytes. For anything else these return
//! `None` and the caller decodes the body field by field (`WinDec`), which
//! also gives the error of a bad body. Whenever they return a value, it is
//! the one `record::decode_memory` and its siblings give (a property test
//! in `tests/roundtrip.rs` checks it on good, damaged and random bodies).
//!
//! The scalar decoders spend about ten instructions per field, one after
//! another; here a memory record's sixteen fields take about a hundred, in
//! a few short chains. Decoding the 50M-event synthetic trace on one core
//! takes 0.78 of the scalar way's time, and the whole report 0.91.

/// Whether this processor decodes the wide way (the functions below): it has
/// AVX-512 with BW, VBMI and VBMI2, and a fast BMI2 (`fast_pext`).
pub fn available() -> bool {
    static WIDE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WIDE.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> bool {
    crate::codec::fast_pext()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vbmi")
        && std::arch::is_x86_feature_detected!("avx512vbmi2")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
pub use x86::{api, kernel_span, memory};

/// The decoders. Their `# Safety`: the processor has what `available` asks
/// for. To be fast, the caller must also be compiled with
/// `bmi2,avx512f,avx512bw,avx512vbmi,avx512vbmi2` (`#[target_feature]`),
/// so that the instructions are inlined; called from elsewhere (tests) they
/// are right, only slow.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::codec::WINDOW;
    use crate::record::{
        ApiCall, ApiFunc, Bytes, KernelSpan, MemoryEvent, Nanos, StackId, StringId,
    };

    /// 64 bytes, aligned for a vector load.
    #[repr(align(64))]
    struct Table([u8; 64]);

    const fn make_table(kind: u8) -> Table {
        let mut t = [0u8; 64];
        let mut i = 0;
        while i < 64 {
            t[i] = match kind {
                // Byte positions.
                0 => i as u8,
                // The position before (the previous field's end).
                1 => i.saturating_sub(1) as u8,
                // Field of each byte of a lane, first eight fields.
                2 => (i / 8) as u8,
                // The same, last eight fields.
                3 => (8 + i / 8) as u8,
                // Byte within its lane.
                4 => (i % 8) as u8,
                // Weights of 7-bit groups in pairs: 1 and 2^7.
                _ => {
                    if i % 2 == 0 {
                        1
                    } else {
                        128
                    }
                }
            };
            i += 1;
        }
        Table(t)
    }

    static POSITIONS: Table = make_table(0);
    static PREVIOUS: Table = make_table(1);
    static LOW_FIELDS: Table = make_table(2);
    static HIGH_FIELDS: Table = make_table(3);
    static BYTE_IN_LANE: Table = make_table(4);
    static JOIN_PAIRS: Table = make_table(5);

    /// The first sixteen varints of a body, as lanes, with what is needed to
    /// check them.
    struct Wide {
        /// Bit `i` set when byte `i` ends a varint.
        stops: u64,
        /// Byte `i`: field `i`'s length minus one.
        last: __m512i,
        /// Bit `i` set when field `i` is above `u32::MAX`.
        above_32_bits: u16,
        values: [u64; 16],
    }

    impl Wide {
        /// # Safety
        /// The processor has what `available` asks for; the caller is compiled
        /// with those features.
        #[inline(always)]
        unsafe fn load(w: &[u8; WINDOW]) -> Wide {
            // SAFETY: the window holds at least 64 bytes; the caller vouches
            // for the features.
            unsafe {
                let v = _mm512_loadu_si512(w.as_ptr().cast());
                let stops = !_mm512_movepi8_mask(v);
                let ends = _mm512_maskz_compress_epi8(stops, table(&POSITIONS));
                // Field 0 starts at 0, every other one past the end before it.
                let starts = _mm512_maskz_add_epi8(
                    !1,
                    _mm512_permutexvar_epi8(table(&PREVIOUS), ends),
                    _mm512_set1_epi8(1),
                );
                let last = _mm512_sub_epi8(ends, starts);
                let low = join(v, starts, last, &LOW_FIELDS);
                let high = join(v, starts, last, &HIGH_FIELDS);
                let max = _mm512_set1_epi64(u32::MAX as i64);
                let above_32_bits = u16::from(_mm512_cmpgt_epu64_mask(low, max))
                    | u16::from(_mm512_cmpgt_epu64_mask(high, max)) << 8;
                let mut values = [0u64; 16];
                _mm512_storeu_si512(values.as_mut_ptr().cast(), low);
                _mm512_storeu_si512(values[8..].as_mut_ptr().cast(), high);
                Wide {
                    stops,
                    last,
                    above_32_bits,
                    values,
                }
            }
        }

        /// Whether the first `n` fields (1 to 16) are decoded right: each ends
        /// within the 64 bytes and the last inside the body of `len` bytes, none
        /// is longer than eight bytes, those in `single` take one byte, and
        /// those in `narrow` fit in 32 bits.
        ///
        /// # Safety
        /// As for `load`.
        #[inline(always)]
        unsafe fn fields_ok(&self, n: u32, len: usize, single: u16, narrow: u16) -> bool {
            // SAFETY: as for `load`.
            unsafe {
                // The n-th stop: none when fewer than n fields end in the 64
                // bytes.
                let nth = _pdep_u64(1 << (n - 1), self.stops);
                let first_n = (1u64 << n) - 1;
                let long = _mm512_cmpgt_epu8_mask(self.last, _mm512_set1_epi8(7)) & first_n;
                let not_single =
                    _mm512_cmpgt_epu8_mask(self.last, _mm512_setzero_si512()) & u64::from(single);
                nth != 0
                    && (nth.trailing_zeros() as usize) < len
                    && long == 0
                    && not_single == 0
                    && self.above_32_bits & narrow == 0
            }
        }
    }

    /// # Safety
    /// As for `Wide::load`.
    #[inline(always)]
    unsafe fn table(t: &Table) -> __m512i {
        // SAFETY: a table is 64 aligned bytes.
        unsafe { _mm512_load_si512(t.0.as_ptr().cast()) }
    }

    /// Eight fields (those `fields` names) from the body `v`, each in a lane.
    ///
    /// # Safety
    /// As for `Wide::load`.
    #[inline(always)]
    unsafe fn join(v: __m512i, starts: __m512i, last: __m512i, fields: &Table) -> __m512i {
        // SAFETY: as for `Wide::load`.
        unsafe {
            let fields = table(fields);
            let byte = table(&BYTE_IN_LANE);
            // Each lane's bytes: its field's, from its start on (the index
            // wraps at 64, past any field that ends inside).
            let at = _mm512_add_epi8(_mm512_permutexvar_epi8(fields, starts), byte);
            let bytes = _mm512_permutexvar_epi8(at, v);
            let inside = _mm512_cmple_epu8_mask(byte, _mm512_permutexvar_epi8(fields, last));
            let groups =
                _mm512_maskz_mov_epi8(inside, _mm512_and_si512(bytes, _mm512_set1_epi8(0x7f)));
            // 7-bit groups joined in pairs (14 bits), then in fours (28 bits in
            // each half of the lane), then the halves.
            let pairs = _mm512_maddubs_epi16(table(&JOIN_PAIRS), groups);
            let fours = _mm512_madd_epi16(pairs, _mm512_set1_epi32(1 | (1 << 30)));
            let low = _mm512_set1_epi64(0xffff_ffff);
            _mm512_or_si512(
                _mm512_and_si512(fours, low),
                _mm512_srli_epi64::<4>(_mm512_andnot_si512(low, fours)),
            )
        }
    }

    #[inline(always)]
    fn time(v: u64, base: u64) -> Nanos {
        Nanos(base.wrapping_add(crate::codec::unzigzag(v) as u64))
    }

    /// `record::decode_memory` of the body at the start of `w` (`len` bytes),
    /// or `None` (see the module's comment).
    ///
    /// # Safety
    /// The processor has what `available` asks for; the caller is compiled with
    /// `bmi2,avx512f,avx512bw,avx512vbmi,avx512vbmi2`.
    #[inline(always)]
    pub unsafe fn memory(w: &[u8; WINDOW], len: usize, base: u64) -> Option<MemoryEvent> {
        // time, alloc, kind, address, bytes, device, context, stream,
        // correlation, pc, is_async, pool_type, then four pool fields when
        // pool_type is not 0.
        const SINGLE: u16 = 1 << 1 | 1 << 2 | 1 << 10 | 1 << 11;
        const NARROW: u16 = 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8;
        // SAFETY: the caller's promise.
        let x = unsafe { Wide::load(w) };
        let v = &x.values;
        let pooled = v[11] != 0;
        // SAFETY: the caller's promise.
        if !unsafe { x.fields_ok(if pooled { 16 } else { 12 }, len, SINGLE, NARROW) } {
            return None;
        }
        let pool = |i: usize| if pooled { v[i] } else { 0 };
        Some(MemoryEvent {
            time: time(v[0], base),
            alloc: v[1] != 0,
            kind: v[2] as u8,
            address: v[3],
            bytes: Bytes(v[4]),
            device: v[5] as u32,
            context: v[6] as u32,
            stream: v[7] as u32,
            correlation: v[8] as u32,
            pc: v[9],
            is_async: v[10] != 0,
            pool_type: v[11] as u8,
            pool_address: pool(12),
            pool_release_threshold: pool(13),
            pool_size: pool(14),
            pool_utilized: pool(15),
        })
    }

    /// `record::decode_api`, as `memory`.
    ///
    /// # Safety
    /// As for `memory`.
    #[inline(always)]
    pub unsafe fn api(w: &[u8; WINDOW], len: usize, base: u64) -> Option<ApiCall> {
        // time, duration, tid, func, cbid, correlation, result, bytes, address,
        // handle, stream, stack, internal.
        const SINGLE: u16 = 1 << 12;
        const NARROW: u16 = 1 << 2 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 11;
        // SAFETY: the caller's promise.
        let x = unsafe { Wide::load(w) };
        let v = &x.values;
        // SAFETY: the caller's promise.
        if !unsafe { x.fields_ok(13, len, SINGLE, NARROW) } || v[3] > u64::from(u16::MAX) {
            return None;
        }
        Some(ApiCall {
            time: time(v[0], base),
            duration: Nanos(v[1]),
            tid: v[2] as u32,
            func: ApiFunc(v[3] as u16),
            cbid: v[4] as u32,
            correlation: v[5] as u32,
            result: v[6] as u32,
            bytes: Bytes(v[7]),
            address: v[8],
            handle: v[9],
            stream: v[10],
            stack: StackId(v[11] as u32),
            internal: v[12] != 0,
        })
    }

    /// `record::decode_kernel_span`, as `memory`.
    ///
    /// # Safety
    /// As for `memory`.
    #[inline(always)]
    pub unsafe fn kernel_span(w: &[u8; WINDOW], len: usize, base: u64) -> Option<KernelSpan> {
        // start, duration, name, device, context, stream.
        const NARROW: u16 = 1 << 2 | 1 << 3 | 1 << 4 | 1 << 5;
        // SAFETY: the caller's promise.
        let x = unsafe { Wide::load(w) };
        let v = &x.values;
        // SAFETY: the caller's promise.
        if !unsafe { x.fields_ok(6, len, 0, NARROW) } {
            return None;
        }
        let start = time(v[0], base);
        Some(KernelSpan {
            start,
            end: Nanos(start.0.wrapping_add(v[1])),
            name: StringId(v[2] as u32),
            device: v[3] as u32,
            context: v[4] as u32,
            stream: v[5] as u32,
        })
    }
}
