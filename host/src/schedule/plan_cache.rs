//! Plans per case (Cocktailer's specialization): a plan (tile choices, programs, grid; for
//! control flow a [`super::control::LoopPlan`] or a runner built from it) is made once per
//! bucket of (workload, trip count, sequence length, batch) and reused. Buckets are powers of
//! two ([`bucket`]; sizes above 2³¹ share a top bucket): a plan made for a bucket serves every
//! size up to its upper bound (loop buffers sized for the bound, shorter trips clamp at run
//! time), so a new size in a known bucket costs a hash lookup, and the first call of a new
//! bucket reports how long planning took.
//!
//! Eviction is least-recently-used once `capacity` plans are held.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The bucket of `x`: the smallest power of two ≥ `x` (0 for 0). Sizes 5..=8 share bucket 8.
/// Sizes above 2³¹, which have no such power in `u32`, share the top bucket `u32::MAX`, whose
/// upper bound still covers them.
pub fn bucket(x: u32) -> u32 {
    if x == 0 {
        0
    } else {
        x.checked_next_power_of_two().unwrap_or(u32::MAX)
    }
}

/// A cache key: the workload and its size buckets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PlanKey {
    /// Workload name (its shapes other than the bucketed sizes are part of the name).
    pub workload: String,
    /// Trip-count bucket.
    pub trips: u32,
    /// Sequence-length bucket.
    pub seq: u32,
    /// Batch bucket.
    pub batch: u32,
}

impl PlanKey {
    /// The key of a case: `workload` with `trips`, `seq` and `batch` bucketed.
    pub fn new(workload: &str, trips: u32, seq: u32, batch: u32) -> Self {
        PlanKey {
            workload: workload.to_owned(),
            trips: bucket(trips),
            seq: bucket(seq),
            batch: bucket(batch),
        }
    }
}

/// How a [`PlanCache::get_or_plan`] call went.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Lookup {
    /// The plan was cached.
    pub hit: bool,
    /// Time of the whole call (lookup, plus planning on a miss).
    pub elapsed: Duration,
    /// Time spent planning (zero on a hit).
    pub planning: Duration,
}

/// Cache counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Hits.
    pub hits: u64,
    /// Misses (plans made).
    pub misses: u64,
    /// Plans evicted.
    pub evictions: u64,
}

/// Plans keyed by [`PlanKey`], least-recently-used eviction beyond `capacity`.
#[derive(Debug)]
pub struct PlanCache<P> {
    map: HashMap<PlanKey, (Arc<P>, u64)>,
    capacity: usize,
    clock: u64,
    stats: CacheStats,
}

impl<P> PlanCache<P> {
    /// An empty cache holding at most `capacity` plans (at least 1).
    pub fn new(capacity: usize) -> Self {
        PlanCache {
            map: HashMap::new(),
            capacity: capacity.max(1),
            clock: 0,
            stats: CacheStats::default(),
        }
    }

    /// The plan for `key`, made by `plan` on a miss (and cached; the least recently used plan
    /// is evicted when full).
    ///
    /// # Errors
    /// Whatever `plan` returns (nothing is cached then).
    pub fn get_or_plan<E>(
        &mut self,
        key: &PlanKey,
        plan: impl FnOnce(&PlanKey) -> Result<P, E>,
    ) -> Result<(Arc<P>, Lookup), E> {
        let t0 = Instant::now();
        self.clock += 1;
        if let Some((p, used)) = self.map.get_mut(key) {
            *used = self.clock;
            self.stats.hits += 1;
            let p = Arc::clone(p);
            return Ok((
                p,
                Lookup {
                    hit: true,
                    elapsed: t0.elapsed(),
                    planning: Duration::ZERO,
                },
            ));
        }
        let t1 = Instant::now();
        let p = Arc::new(plan(key)?);
        let planning = t1.elapsed();
        self.stats.misses += 1;
        if self.map.len() >= self.capacity {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
                self.stats.evictions += 1;
            }
        }
        self.map.insert(key.clone(), (Arc::clone(&p), self.clock));
        Ok((
            p,
            Lookup {
                hit: false,
                elapsed: t0.elapsed(),
                planning,
            },
        ))
    }

    /// Whether `key` is cached.
    pub fn contains(&self, key: &PlanKey) -> bool {
        self.map.contains_key(key)
    }

    /// Plans held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no plan is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Hit, miss and eviction counts.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(2), 2);
        assert_eq!(bucket(3), 4);
        assert_eq!(bucket(100), 128);
        assert_eq!(bucket(128), 128);
        assert_eq!(bucket(1000), 1024);
        assert_eq!(
            PlanKey::new("lstm", 100, 1, 64),
            PlanKey::new("lstm", 127, 1, 33)
        );
        assert_ne!(
            PlanKey::new("lstm", 100, 1, 64),
            PlanKey::new("lstm", 129, 1, 64)
        );
        assert_ne!(PlanKey::new("a", 1, 1, 1), PlanKey::new("b", 1, 1, 1));
    }

    #[test]
    fn sizes_above_two_to_the_31_get_the_top_bucket() {
        assert_eq!(bucket(1 << 31), 1 << 31);
        assert_eq!(bucket((1 << 31) + 1), u32::MAX);
        assert_eq!(bucket(3_000_000_000), u32::MAX);
        assert_eq!(bucket(u32::MAX), u32::MAX);
        // Every bucket bounds its sizes.
        for x in [
            1,
            2,
            3,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            u32::MAX - 1,
            u32::MAX,
        ] {
            assert!(bucket(x) >= x, "{x}");
        }
        // 3e9 trips wrapped into the 0-trip bucket.
        assert_ne!(
            PlanKey::new("w", 3_000_000_000, 1, 1),
            PlanKey::new("w", 0, 1, 1)
        );
        assert_ne!(
            PlanKey::new("w", 3_000_000_000, 1, 1),
            PlanKey::new("w", 1 << 31, 1, 1)
        );
        assert_eq!(
            PlanKey::new("w", 3_000_000_000, 1, 1),
            PlanKey::new("w", u32::MAX, 1, 1)
        );
    }

    #[test]
    fn plans_are_reused_within_a_bucket() {
        let mut c: PlanCache<u32> = PlanCache::new(4);
        let mut made = 0;
        for t in [100, 101, 120, 128] {
            let (p, l) = c
                .get_or_plan(&PlanKey::new("lstm", t, 1, 1), |k| {
                    made += 1;
                    Ok::<_, ()>(k.trips)
                })
                .unwrap();
            assert_eq!(*p, 128);
            assert_eq!(l.hit, t != 100);
            if l.hit {
                assert_eq!(l.planning, Duration::ZERO);
            }
        }
        assert_eq!(made, 1);
        assert_eq!(
            c.stats(),
            CacheStats {
                hits: 3,
                misses: 1,
                evictions: 0
            }
        );
    }

    #[test]
    fn least_recently_used_is_evicted() {
        let mut c: PlanCache<u32> = PlanCache::new(2);
        let k = |t| PlanKey::new("w", t, 1, 1);
        let ok = |k: &PlanKey| Ok::<_, ()>(k.trips);
        c.get_or_plan(&k(1), ok).unwrap();
        c.get_or_plan(&k(2), ok).unwrap();
        // Touch 1, then a third bucket evicts 2.
        assert!(c.get_or_plan(&k(1), ok).unwrap().1.hit);
        c.get_or_plan(&k(4), ok).unwrap();
        assert!(c.contains(&k(1)) && c.contains(&k(4)) && !c.contains(&k(2)));
        assert_eq!(c.len(), 2);
        assert_eq!(c.stats().evictions, 1);
    }

    #[test]
    fn failed_plans_are_not_cached() {
        let mut c: PlanCache<u32> = PlanCache::new(2);
        let k = PlanKey::new("w", 3, 1, 1);
        assert_eq!(c.get_or_plan(&k, |_| Err("no")).unwrap_err(), "no");
        assert!(c.is_empty());
        let (p, l) = c.get_or_plan(&k, |_| Ok::<_, &str>(7)).unwrap();
        assert_eq!((*p, l.hit), (7, false));
    }
}
