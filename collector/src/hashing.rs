//! A hasher for the collector's own maps, whose keys are addresses and
//! stacks of addresses that the program and the driver picked, not an
//! attacker: the std hasher's resistance to chosen keys buys nothing there
//! and costs time on the program's threads (a launch's name lookup) and
//! the writer's (interning every stack).

use std::hash::{BuildHasherDefault, Hasher};

/// One multiplication per 8-byte word, folded so that the aligned (zero)
/// low bits of addresses do not leave buckets unused.
#[derive(Default)]
pub struct WordHasher(u64);

/// For `HashMap::with_hasher` / `HashMap::default()`.
pub type WordHash = BuildHasherDefault<WordHasher>;

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        // `[u64]` keys (stacks) arrive here as their bytes, in one call.
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            self.write_u64(u64::from_le_bytes(word));
        }
        for b in words.remainder() {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        let wide = u128::from(n ^ self.0) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (wide as u64) ^ ((wide >> 64) as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::hash::Hash;

    fn hash(v: impl Hash) -> u64 {
        let mut h = WordHasher::default();
        v.hash(&mut h);
        h.finish()
    }

    /// Stacks that differ in one frame, in order or in length hash apart;
    /// a map keyed by them finds each.
    #[test]
    fn stacks_that_differ_anywhere_hash_apart() {
        let a = vec![0x7f00_1000u64, 0x7f00_2000, 0x55_0000];
        let mut b = a.clone();
        b[1] += 8;
        let c = vec![0x7f00_2000u64, 0x7f00_1000, 0x55_0000];
        let d = vec![0x7f00_1000u64, 0x7f00_2000];
        let hashes = [hash(&a), hash(&b), hash(&c), hash(&d)];
        for i in 0..hashes.len() {
            for j in i + 1..hashes.len() {
                assert_ne!(hashes[i], hashes[j], "{i} {j}");
            }
        }
        let mut m: HashMap<Vec<u64>, u32, WordHash> = HashMap::default();
        for (i, k) in [&a, &b, &c, &d].into_iter().enumerate() {
            m.insert(k.clone(), i as u32);
        }
        assert_eq!((m[&a], m[&b], m[&c], m[&d]), (0, 1, 2, 3));
        // Bytes past the last whole word count too.
        assert_ne!(hash([1u8, 2, 3].as_slice()), hash([1u8, 2, 4].as_slice()));
    }
}
