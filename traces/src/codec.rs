//! Byte-level primitives: LEB128 varints, zigzag, length-prefixed strings.
//!
//! `Enc` appends to a `Vec<u8>`; `Dec` reads from a slice and returns
//! `DecodeError` instead of panicking, and never allocates more than the bytes
//! it was given can describe.

use crate::DecodeError;

/// Appends encoded values to a byte vector.
#[derive(Default)]
pub struct Enc {
    pub buf: Vec<u8>,
}

impl Enc {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn var(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    pub fn ivar(&mut self, v: i64) {
        self.var(((v << 1) ^ (v >> 63)) as u64);
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.var(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    pub fn bool(&mut self, b: bool) {
        self.u8(b as u8);
    }
}

/// How a record decoder reads its fields: `Dec` checks every read against
/// the end of the body; `WinDec` reads from a fixed window and checks once,
/// at the end. Every record decoder is written over this, once; `var32`,
/// `ivar` and `bool` are built on `var` and `u8` here for both readers.
pub trait Fields {
    fn u8(&mut self) -> Result<u8, DecodeError>;
    fn var(&mut self) -> Result<u64, DecodeError>;

    #[inline(always)]
    fn var32(&mut self) -> Result<u32, DecodeError> {
        u32::try_from(self.var()?).map_err(|_| DecodeError::OutOfRange)
    }

    #[inline(always)]
    fn ivar(&mut self) -> Result<i64, DecodeError> {
        Ok(unzigzag(self.var()?))
    }

    #[inline(always)]
    fn bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.u8()? != 0)
    }
}

/// The signed value a zigzag varint (`Enc::ivar`) holds.
#[inline(always)]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Reads encoded values from a byte slice.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self.buf.get(self.pos).ok_or(DecodeError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub fn var(&mut self) -> Result<u64, DecodeError> {
        // Fast path: most values are one or two bytes.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.var_slow()
    }

    /// The next `WINDOW` bytes, when the input holds that many from here.
    #[inline]
    pub fn window(&self) -> Option<&'a [u8; WINDOW]> {
        self.buf
            .get(self.pos..self.pos.checked_add(WINDOW)?)?
            .try_into()
            .ok()
    }

    #[inline]
    fn var_slow(&mut self) -> Result<u64, DecodeError> {
        let rest = &self.buf[self.pos.min(self.buf.len())..];
        // Up to eight bytes at once when eight can be read.
        if let Some(word) = rest.get(..8) {
            let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            if let Some((v, len)) = within_eight(word) {
                self.pos += len;
                return Ok(v);
            }
        }
        let mut v: u64 = 0;
        for (i, &b) in rest.iter().take(10).enumerate() {
            let shift = 7 * i as u32;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    return Err(DecodeError::BadVarint);
                }
                self.pos += i + 1;
                return Ok(v);
            }
        }
        if rest.len() < 10 {
            Err(DecodeError::Truncated)
        } else {
            Err(DecodeError::BadVarint)
        }
    }

    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.var()?;
        let n = usize::try_from(n).map_err(|_| DecodeError::Truncated)?;
        self.take(n)
    }

    /// Strings are stored as UTF-8; invalid bytes (a hostile or corrupt trace)
    /// are replaced rather than rejected, so a report can still show them.
    pub fn string(&mut self) -> Result<String, DecodeError> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }

    /// A count of items that each take at least `min_item_bytes`: refused when
    /// the remaining input could not hold that many, so a corrupt count can
    /// never make us allocate more than the input's size.
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.var()?;
        let n = usize::try_from(n).map_err(|_| DecodeError::OutOfRange)?;
        if n.saturating_mul(min_item_bytes.max(1)) > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        Ok(n)
    }
}

/// A varint that ends within the eight bytes of `word` (little-endian):
/// its value and length. Finds the byte that ends it, then squeezes out the
/// continuation bits.
#[inline(always)]
fn within_eight(word: u64) -> Option<(u64, usize)> {
    let ends = !word & 0x8080_8080_8080_8080;
    if ends == 0 {
        return None;
    }
    let len = (ends.trailing_zeros() + 1) / 8;
    let keep = if len == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * len)) - 1
    };
    Some((squeeze(word & keep), len as usize))
}

/// The 7-bit groups of up to eight varint bytes (little-endian in `w`, the
/// bytes after the last one zeroed), joined into one value.
#[inline(always)]
fn squeeze(w: u64) -> u64 {
    let mut x = w & 0x7f7f_7f7f_7f7f_7f7f;
    x = ((x & 0x7f00_7f00_7f00_7f00) >> 1) | (x & 0x007f_007f_007f_007f);
    x = ((x & 0x3fff_0000_3fff_0000) >> 2) | (x & 0x0000_3fff_0000_3fff);
    ((x & 0x0fff_ffff_0000_0000) >> 4) | (x & 0x0000_0000_0fff_ffff)
}

impl Fields for Dec<'_> {
    #[inline(always)]
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Dec::u8(self)
    }
    #[inline(always)]
    fn var(&mut self) -> Result<u64, DecodeError> {
        Dec::var(self)
    }
}

/// Bytes `WinDec` reads from: a record body and whatever follows it.
pub const WINDOW: usize = 192;
/// The longest body `WinDec` decodes. Sixteen fields of at most ten bytes
/// fit; a read that goes past `WINDOW - 16` is already past the body.
pub const WINDOW_BODY: usize = 160;

/// Reads a record body from a fixed window without checking each read: the
/// window always holds the bytes a read looks at, so reads past the body
/// give garbage, never a fault, and `finish` turns that into an error.
/// That takes the bounds checks and most branches out of decoding the
/// frequent records. Whatever the bytes, `WinDec` and `Dec` agree on the
/// fields of a good body and both refuse a bad one (a proptest checks it).
///
/// `BMI2`: multi-byte varints are joined by the processor's `pext`
/// instruction instead of a dozen shifts and masks (`new_bmi2`).
pub struct WinDec<'a, const BMI2: bool = false> {
    w: &'a [u8; WINDOW],
    len: usize,
    pos: usize,
    bad_varint: bool,
}

impl<'a> WinDec<'a> {
    /// `w` starts at the body, whose length is `len` (at most `WINDOW_BODY`).
    #[inline(always)]
    pub fn new(w: &'a [u8; WINDOW], len: usize) -> Self {
        // SAFETY: without BMI2 there is nothing to require.
        unsafe { Self::new_generic(w, len) }
    }
}

impl<'a> WinDec<'a, true> {
    /// Like `new`, joining varints with `pext`.
    ///
    /// # Safety
    /// The processor must have BMI2 (`fast_pext` says so); to be fast, the
    /// caller must be compiled with it (`#[target_feature(enable = "bmi2")]`)
    /// so that the instruction is inlined.
    #[inline(always)]
    pub unsafe fn new_bmi2(w: &'a [u8; WINDOW], len: usize) -> Self {
        // SAFETY: the caller's promise is the one `new_generic` asks for.
        unsafe { Self::new_generic(w, len) }
    }
}

/// Whether this processor has BMI2 with a fast `pext` (`WinDec::new_bmi2`):
/// AMD processors before Zen 3 (and Hygon's) have it microcoded, slower
/// than the shifts.
pub fn fast_pext() -> bool {
    static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAST.get_or_init(detect_fast_pext)
}

#[cfg(target_arch = "x86_64")]
fn detect_fast_pext() -> bool {
    use std::arch::x86_64::__cpuid;
    if !std::arch::is_x86_feature_detected!("bmi2") {
        return false;
    }
    // SAFETY: cpuid exists on every x86_64 processor.
    #[allow(unused_unsafe)]
    let (vendor, version) = unsafe { (__cpuid(0), __cpuid(1)) };
    // "AuthenticAMD", and Hygon's Zen-based "HygonGenuine".
    let id = (vendor.ebx, vendor.edx, vendor.ecx);
    let amd = id == (0x6874_7541, 0x6974_6e65, 0x444d_4163)
        || id == (0x6f67_7948, 0x6e65_476e, 0x656e_6975);
    let base = (version.eax >> 8) & 0xf;
    let family = if base == 0xf {
        base + ((version.eax >> 20) & 0xff)
    } else {
        base
    };
    !amd || family >= 0x19
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_fast_pext() -> bool {
    false
}

/// `within_eight` with `pext`: keeps the varint's bytes (`bzhi`) and
/// gathers their low seven bits in one instruction each.
#[inline(always)]
fn within_eight_bmi2(word: u64) -> Option<(u64, usize)> {
    #[cfg(target_arch = "x86_64")]
    {
        let ends = !word & 0x8080_8080_8080_8080;
        if ends == 0 {
            return None;
        }
        let bits = ends.trailing_zeros() + 1;
        // SAFETY: only reached through `WinDec::new_bmi2`, whose caller
        // made sure the processor has BMI2.
        let v = unsafe {
            use std::arch::x86_64::{_bzhi_u64, _pext_u64};
            _pext_u64(_bzhi_u64(word, bits), 0x7f7f_7f7f_7f7f_7f7f)
        };
        Some((v, (bits / 8) as usize))
    }
    #[cfg(not(target_arch = "x86_64"))]
    within_eight(word)
}

impl<'a, const BMI2: bool> WinDec<'a, BMI2> {
    /// `new` or `new_bmi2`, as `BMI2` says, for code generic over it.
    ///
    /// # Safety
    /// With `BMI2`, as for `new_bmi2`.
    #[inline(always)]
    pub unsafe fn new_generic(w: &'a [u8; WINDOW], len: usize) -> Self {
        WinDec {
            w,
            len: len.min(WINDOW_BODY),
            pos: 0,
            bad_varint: false,
        }
    }

    /// Whether everything read lay inside the body and was well formed.
    #[inline(always)]
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.pos > self.len {
            Err(DecodeError::Truncated)
        } else if self.bad_varint {
            Err(DecodeError::BadVarint)
        } else {
            Ok(())
        }
    }

    /// Where the next read starts: past `WINDOW - 16` only after reading
    /// beyond the body, so clamping there changes no good body's fields and
    /// keeps every read below inside the window.
    #[inline(always)]
    fn at(&self) -> usize {
        self.pos.min(WINDOW - 16)
    }

    #[inline(always)]
    fn var_long(&mut self, p: usize) -> u64 {
        let word = u64::from_le_bytes(self.w[p..p + 8].try_into().expect("eight bytes"));
        let short = if BMI2 {
            within_eight_bmi2(word)
        } else {
            within_eight(word)
        };
        if let Some((v, len)) = short {
            self.pos = p + len;
            return v;
        }
        // Nine or ten bytes: the tenth may only hold the top bit.
        let mut v = squeeze(word) | (u64::from(self.w[p + 8] & 0x7f) << 56);
        if self.w[p + 8] < 0x80 {
            self.pos = p + 9;
            return v;
        }
        let last = self.w[p + 9];
        self.bad_varint |= last > 1;
        v |= u64::from(last) << 63;
        self.pos = p + 10;
        v
    }
}

impl<const BMI2: bool> Fields for WinDec<'_, BMI2> {
    #[inline(always)]
    fn u8(&mut self) -> Result<u8, DecodeError> {
        let p = self.at();
        self.pos = p + 1;
        Ok(self.w[p])
    }

    #[inline(always)]
    fn var(&mut self) -> Result<u64, DecodeError> {
        let p = self.at();
        let b = self.w[p];
        if b < 0x80 {
            self.pos = p + 1;
            return Ok(u64::from(b));
        }
        Ok(self.var_long(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_edges_round_trip() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut e = Enc::default();
            e.var(v);
            assert_eq!(Dec::new(&e.buf).var().unwrap(), v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -123456789] {
            let mut e = Enc::default();
            e.ivar(v);
            assert_eq!(Dec::new(&e.buf).ivar().unwrap(), v);
        }
    }

    /// Values at every varint length's edges, and one with mixed bits for
    /// each bit length.
    fn varint_edge_values() -> Vec<u64> {
        let mut values = vec![0u64, 1, 127, 128, 16_383, 16_384, u64::MAX];
        for bits in 1..64 {
            values.push((1u64 << bits) - 1);
            values.push(1u64 << bits);
            values.push((1u64 << bits) | 0x5a5a_5a5a_5a5a_5a5a >> (64 - bits));
        }
        values
    }

    /// The word-at-a-time path against the byte loop, for every length, at
    /// the end of the buffer and with bytes after it.
    #[test]
    fn varints_of_every_length_decode_the_same_in_any_position() {
        let values = varint_edge_values();
        for v in values {
            for tail in [0usize, 1, 7, 12] {
                let mut e = Enc::default();
                e.var(v);
                let len = e.buf.len();
                e.buf.extend(std::iter::repeat_n(0xffu8, tail));
                let mut d = Dec::new(&e.buf);
                assert_eq!(d.var().unwrap(), v, "value {v:#x}, {tail} bytes after");
                assert_eq!(d.remaining(), tail);
                if len > 1 {
                    // Cut short: an error, never a wrong value.
                    assert!(Dec::new(&e.buf[..len - 1]).var().is_err());
                }
            }
        }
    }

    /// `pext` joins varints of every length as the shifts do, whatever
    /// bytes follow them in the window.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn pext_and_shifts_agree_on_varints_of_every_length() {
        // Answers either way on any processor (and must not crash).
        let _ = fast_pext();
        if !std::arch::is_x86_feature_detected!("bmi2") {
            return;
        }
        let values = varint_edge_values();
        for v in values {
            for after in [0x00u8, 0x7f, 0x80, 0xff] {
                let mut e = Enc::default();
                e.var(v);
                e.var(300);
                let len = e.buf.len();
                let mut w = [after; WINDOW];
                w[..len].copy_from_slice(&e.buf);
                let mut shifts = WinDec::new(&w, len);
                // SAFETY: the processor has BMI2.
                let mut pext = unsafe { WinDec::new_bmi2(&w, len) };
                assert_eq!(pext.var(), Ok(v), "value {v:#x}, then {after:#x}");
                assert_eq!(shifts.var(), Ok(v));
                assert_eq!(pext.var(), Ok(300));
                assert_eq!(shifts.var(), Ok(300));
                assert_eq!(pext.pos, shifts.pos);
                assert!(pext.finish().is_ok());
            }
        }
    }

    #[test]
    fn overlong_varint_is_an_error_not_a_panic() {
        let bytes = [0xffu8; 11];
        assert!(Dec::new(&bytes).var().is_err());
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(Dec::new(&bytes).var().is_err());
    }

    #[test]
    fn huge_count_is_refused() {
        let mut e = Enc::default();
        e.var(u64::MAX / 2);
        assert!(Dec::new(&e.buf).count(1).is_err());
    }
}
