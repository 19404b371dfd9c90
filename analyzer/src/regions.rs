//! Reserved regions whose sub-allocations the trace sees, for external
//! fragmentation: F = 1 − largest free extent / total free.
//!
//! - VMM reservations (`cuMemAddressReserve`): the free extents are exactly
//!   the unmapped gaps of the reserved range.
//! - Stream-ordered pools: CUPTI reports each pool's reserved size and every
//!   sub-allocation's address, but not which address ranges back the pool.
//!   The layout is estimated as one range: holes between live
//!   sub-allocations, plus what the pool holds beyond their span as one more
//!   extent. Reports mark pool figures as estimated.

use std::collections::BTreeMap;

use crate::engine::FastMap;

#[derive(Clone, Debug, Default)]
pub struct Pool {
    pub device: u32,
    pub pid: u32,
    pub address: u64,
    /// Reserved size as CUPTI last reported it.
    pub size: u64,
    pub max_size: u64,
    /// Bytes of its live sub-allocations. The sub-allocations themselves
    /// are the engine's live set (one map, not two): it hands them in when
    /// free extents are wanted.
    used: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Reservation {
    pub device: Option<u32>,
    pub pid: u32,
    pub base: u64,
    pub size: u64,
    mapped: BTreeMap<u64, u64>,
    used: u64,
}

/// Free space of one region or of a device's regions together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extents {
    pub free: u64,
    pub largest: u64,
}

impl Extents {
    /// F in [0, 1]; 0 when nothing is free.
    pub fn fragmentation(&self) -> f64 {
        if self.free == 0 {
            0.0
        } else {
            1.0 - self.largest as f64 / self.free as f64
        }
    }

    fn add(&mut self, other: Extents) {
        self.free += other.free;
        self.largest = self.largest.max(other.largest);
    }
}

impl Pool {
    /// Free extents, given the pool's live blocks (address, bytes), which
    /// this sorts.
    fn extents(&self, blocks: &mut [(u64, u64)]) -> Extents {
        let free = self.size.saturating_sub(self.used);
        if free == 0 {
            return Extents::default();
        }
        // Addresses of live blocks are distinct: the address alone orders them.
        blocks.sort_unstable_by_key(|&(a, _)| a);
        let (Some(&(first, _)), Some(&(last, last_len))) = (blocks.first(), blocks.last()) else {
            return Extents {
                free,
                largest: free,
            };
        };
        let span = (last + last_len).saturating_sub(first);
        let mut largest = self.size.saturating_sub(span);
        let mut end = first;
        for &(a, len) in blocks.iter() {
            largest = largest.max(a.saturating_sub(end));
            end = end.max(a + len);
        }
        Extents {
            free,
            largest: largest.min(free),
        }
    }
}

impl Reservation {
    fn extents(&self) -> Extents {
        let mut largest = 0;
        let mut end = self.base;
        for (&a, &len) in &self.mapped {
            largest = largest.max(a.saturating_sub(end));
            end = end.max(a + len);
        }
        largest = largest.max((self.base + self.size).saturating_sub(end));
        Extents {
            free: self.size.saturating_sub(self.used),
            largest,
        }
    }
}

/// Every region of the run, keyed by (stream, address).
#[derive(Default)]
pub struct Regions {
    /// Looked up on every pool event: hashed. Listed sorted (`pools_sorted`).
    pub pools: FastMap<(u32, u64), Pool>,
    pub reservations: BTreeMap<(u32, u64), Reservation>,
    /// Live blocks by pool, gathered for one `device_extents` (kept to
    /// reuse the vectors).
    blocks: FastMap<(u32, u64), Vec<(u64, u64)>>,
}

impl Regions {
    /// A pool's reserved size as a record states it (creation, trim, or an
    /// allocation from it, which also takes `allocated` bytes; the caller
    /// frees first whatever lived at the block's address). Returns the
    /// change in size.
    pub fn set_pool_size(
        &mut self,
        stream: u32,
        pid: u32,
        device: u32,
        address: u64,
        size: u64,
        allocated: u64,
    ) -> i128 {
        let p = self.pools.entry((stream, address)).or_insert_with(|| Pool {
            device,
            pid,
            address,
            ..Pool::default()
        });
        let delta = size as i128 - p.size as i128;
        p.size = size;
        p.max_size = p.max_size.max(size);
        p.used += allocated;
        delta
    }

    pub fn pool_free(&mut self, stream: u32, pool: u64, bytes: u64) {
        if let Some(p) = self.pools.get_mut(&(stream, pool)) {
            p.used = p.used.saturating_sub(bytes);
        }
    }

    pub fn reserve(&mut self, stream: u32, pid: u32, base: u64, size: u64) {
        self.reservations.insert(
            (stream, base),
            Reservation {
                device: None,
                pid,
                base,
                size,
                ..Reservation::default()
            },
        );
    }

    pub fn unreserve(&mut self, stream: u32, base: u64) -> Option<u32> {
        self.reservations
            .remove(&(stream, base))
            .and_then(|r| r.device)
    }

    /// The reservation of `stream` holding `address`, if any.
    fn reservation_mut(&mut self, stream: u32, address: u64) -> Option<&mut Reservation> {
        self.reservations
            .range_mut((stream, 0)..=(stream, address))
            .next_back()
            .map(|(_, r)| r)
            .filter(|r| address < r.base + r.size)
    }

    /// A mapping appeared; returns true if it lies in a known reservation.
    pub fn map(&mut self, stream: u32, device: u32, address: u64, bytes: u64) -> bool {
        match self.reservation_mut(stream, address) {
            Some(r) => {
                r.device.get_or_insert(device);
                if r.mapped.insert(address, bytes).is_none() {
                    r.used += bytes;
                }
                true
            }
            None => false,
        }
    }

    pub fn unmap(&mut self, stream: u32, address: u64) -> bool {
        match self.reservation_mut(stream, address) {
            Some(r) => {
                if let Some(len) = r.mapped.remove(&address) {
                    r.used -= len;
                }
                true
            }
            None => false,
        }
    }

    /// The pools in a deterministic order.
    pub fn pools_sorted(&self) -> Vec<&Pool> {
        let mut v: Vec<(&(u32, u64), &Pool)> = self.pools.iter().collect();
        v.sort_by_key(|(k, _)| **k);
        v.into_iter().map(|(_, p)| p).collect()
    }

    /// Free extents of a device's regions together; None when it has none.
    /// `pool_blocks` lists the live pool blocks as ((stream, pool), address,
    /// bytes); blocks of other devices' pools are ignored.
    pub fn device_extents(
        &mut self,
        device: u32,
        pool_blocks: impl Iterator<Item = ((u32, u64), u64, u64)>,
    ) -> Option<Extents> {
        let mut total: Option<Extents> = None;
        let on_device = |p: &Pool| p.device == device && p.size > 0;
        if self.pools.values().any(on_device) {
            self.blocks.values_mut().for_each(Vec::clear);
            for (key, address, bytes) in pool_blocks {
                if self.pools.get(&key).is_some_and(on_device) {
                    self.blocks.entry(key).or_default().push((address, bytes));
                }
            }
            for (key, p) in self.pools.iter().filter(|(_, p)| on_device(p)) {
                let blocks = self.blocks.entry(*key).or_default();
                total
                    .get_or_insert_with(Extents::default)
                    .add(p.extents(blocks));
            }
        }
        for r in self
            .reservations
            .values()
            .filter(|r| r.device == Some(device))
        {
            total.get_or_insert_with(Extents::default).add(r.extents());
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn vmm_gaps_are_exact() {
        let mut r = Regions::default();
        r.reserve(0, 1, 0x1000_0000, 64 * MIB);
        assert!(r.map(0, 0, 0x1000_0000, 16 * MIB));
        assert!(r.map(0, 0, 0x1000_0000 + 32 * MIB, 16 * MIB));
        // Free: [16, 32) and [48, 64) MiB: 32 MiB in two 16 MiB extents.
        let e = r.device_extents(0, std::iter::empty()).unwrap();
        assert_eq!(
            e,
            Extents {
                free: 32 * MIB,
                largest: 16 * MIB
            }
        );
        assert!((e.fragmentation() - 0.5).abs() < 1e-12);
        assert!(r.unmap(0, 0x1000_0000 + 32 * MIB));
        let e = r.device_extents(0, std::iter::empty()).unwrap();
        assert_eq!(
            e,
            Extents {
                free: 48 * MIB,
                largest: 48 * MIB
            }
        );
        assert!(!r.map(0, 0, 0x9000_0000, MIB), "outside every reservation");
    }

    #[test]
    fn pool_holes() {
        let mut r = Regions::default();
        r.set_pool_size(0, 1, 0, 0xA, 64 * MIB, 0);
        let mut live: Vec<u64> = Vec::new();
        for i in 0..8 {
            let a = 0x2000_0000 + i * 8 * MIB;
            r.set_pool_size(0, 1, 0, 0xA, 64 * MIB, 8 * MIB);
            live.push(a);
        }
        let blocks = |live: &[u64]| {
            live.iter()
                .map(|&a| ((0u32, 0xAu64), a, 8 * MIB))
                .collect::<Vec<_>>()
        };
        let e = r.device_extents(0, blocks(&live).into_iter()).unwrap();
        assert_eq!(e.free, 0);
        for i in [1, 3, 5] {
            r.pool_free(0, 0xA, 8 * MIB);
            live.retain(|&a| a != 0x2000_0000 + i * 8 * MIB);
        }
        let e = r.device_extents(0, blocks(&live).into_iter()).unwrap();
        assert_eq!(
            e,
            Extents {
                free: 24 * MIB,
                largest: 8 * MIB
            }
        );
        r.pool_free(0, 0xA, 8 * MIB);
        live.retain(|&a| a != 0x2000_0000 + 6 * 8 * MIB);
        let e = r.device_extents(0, blocks(&live).into_iter()).unwrap();
        assert_eq!(
            e,
            Extents {
                free: 32 * MIB,
                largest: 16 * MIB
            }
        );
        // Another device's blocks change nothing.
        let other = std::iter::once(((0u32, 0xBu64), 0x2000_0000 + 6 * 8 * MIB, 8 * MIB));
        let e2 = r
            .device_extents(0, blocks(&live).into_iter().chain(other))
            .unwrap();
        assert_eq!(e2, e);
    }
}
