//! `WaveGraph::add` on hostile region geometry (extreme pointers, sizes and leading
//! dimensions: typed errors, never a panic or an overflow), and the dependencies it records
//! between random overlapping regions against a byte-level check.

use std::panic::{AssertUnwindSafe, catch_unwind};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use fused_gemm_device::gemm::GemmArgs;
use fused_gemm_device::kernel::persistent::EPI_WORDS;
use fused_gemm_device::types::DType;
use fused_gemm_host::Error;
use fused_gemm_host::plan::Problem;
use fused_gemm_host::schedule::dag::{DepRows, producer_rows};
use fused_gemm_host::schedule::{Access, OpSpec, Region, WaveGraph};
use fused_gemm_host::tensor::MatrixDesc;

fn spec(name: &str, reads: Vec<Region>, writes: Vec<Region>) -> OpSpec {
    OpSpec {
        name: name.into(),
        kind: "k",
        problem: Problem::gemm(1, 1, 1, DType::F32),
        args: GemmArgs {
            m: 1,
            n: 1,
            k: 1,
            ..GemmArgs::default()
        },
        epi: [0; EPI_WORDS],
        reads,
        writes,
    }
}

#[test]
fn hostile_regions_are_typed_errors() {
    let u = usize::MAX;
    let p = u64::MAX;
    let mut geoms: Vec<(u64, usize, usize, usize)> = Vec::new();
    for ptr in [0u64, 0x1000, p - 1, p, p / 2, 1 << 63] {
        for rows in [0usize, 1, 2, u / 2, u] {
            for cols in [0usize, 1, 8, u / 4, u / 2, u] {
                for ld in [0usize, 1, 7, 8, 9, u / 4, u / 2, u - 1, u] {
                    geoms.push((ptr, rows, cols, ld));
                }
            }
        }
    }
    let mut panics = Vec::new();
    let mut counts = [0usize; 4]; // ok, leading dim, invalid arg, other
    for &(ptr, rows, cols, ld) in &geoms {
        for dt in [DType::F32, DType::Bf16] {
            let d = MatrixDesc::new(ptr, rows, cols, ld, dt);
            for region in [Region::rows(d), Region::whole(d)] {
                for as_write in [false, true] {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let mut g = WaveGraph::new();
                        let op = if as_write {
                            spec("x", vec![], vec![region])
                        } else {
                            spec("x", vec![region], vec![])
                        };
                        let first = g.add(op.clone());
                        // Add it again, and a read/write pair of it, to exercise dependency
                        // computation on the same geometry.
                        let second = g.add(spec("y", vec![region], vec![]));
                        let third = g.add(spec("z", vec![], vec![region]));
                        (first, second, third)
                    }));
                    match r {
                        Err(_) => {
                            panics.push(format!("{d:?} {:?} write={as_write}", region.access))
                        }
                        Ok((first, _, _)) => {
                            let i = match &first {
                                Ok(_) => 0,
                                Err(Error::LeadingDimension { .. }) => 1,
                                Err(Error::InvalidArgument { .. }) => 2,
                                Err(_) => 3,
                            };
                            counts[i] += 1;
                            // Must reject: empty, ld < cols, extent beyond 2^64.
                            let span = if rows == 0 || cols == 0 {
                                Some(0u128)
                            } else {
                                ((rows as u128 - 1) * ld as u128 + cols as u128)
                                    .checked_mul(dt.size() as u128)
                            };
                            let fits = span.is_some_and(|s| ptr as u128 + s <= u64::MAX as u128);
                            let want_ok = rows > 0 && cols > 0 && ld >= cols && fits;
                            assert_eq!(first.is_ok(), want_ok, "{d:?}: {first:?}");
                        }
                    }
                }
            }
        }
    }
    eprintln!("ok/ld/invalid/other = {counts:?}");
    assert!(
        panics.is_empty(),
        "{} panics, first {:?}",
        panics.len(),
        &panics[..panics.len().min(5)]
    );
}

/// Draws the random regions below.
struct Rng(StdRng);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }
}

fn random_region(rng: &mut Rng) -> Region {
    let dt = [DType::F32, DType::Bf16, DType::F16, DType::Bf16][rng.below(4) as usize];
    let rows = 1 + rng.below(5) as usize;
    let cols = 1 + rng.below(8) as usize;
    let ld = if rng.below(6) == 0 {
        cols + rng.below(1 << 20) as usize
    } else {
        cols + rng.below(5) as usize
    };
    let ptr = rng.below(320) & !1; // sometimes misaligned for f32
    let d = MatrixDesc::new(ptr, rows, cols, ld, dt);
    if rng.below(4) == 0 {
        Region::whole(d)
    } else {
        Region::rows(d)
    }
}

fn row_bytes(d: &MatrixDesc, r: usize) -> (u64, u64) {
    let s = d.dtype.size() as u64;
    let start = d.ptr + r as u64 * d.ld as u64 * s;
    (start, start + d.cols as u64 * s)
}

fn meets(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

fn regions_meet(x: &MatrixDesc, y: &MatrixDesc) -> bool {
    (0..x.rows).any(|i| (0..y.rows).any(|j| meets(row_bytes(x, i), row_bytes(y, j))))
}

/// Fresh random graphs each run (the seed is printed, and `WAVE_REGIONS_SEED` repeats it).
#[test]
fn dependencies_cover_every_overlapping_byte() {
    let seed = std::env::var("WAVE_REGIONS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("WAVE_REGIONS_SEED={seed}");
    let mut rng = Rng(StdRng::seed_from_u64(seed));
    let mut problems = Vec::new();
    let mut row_deps = 0;
    for graph in 0..3000 {
        let mut g = WaveGraph::new();
        let mut added: Vec<OpSpec> = Vec::new();
        for o in 0..6 {
            let reads = (0..rng.below(3)).map(|_| random_region(&mut rng)).collect();
            let writes = (0..rng.below(3)).map(|_| random_region(&mut rng)).collect();
            let op = spec(&format!("g{graph}o{o}"), reads, writes);
            if g.add(op.clone()).is_ok() {
                added.push(op);
            }
        }
        for (j, c) in added.iter().enumerate() {
            for (i, p) in added.iter().enumerate().take(j) {
                let dep = g.deps().iter().find(|d| d.producer == i && d.consumer == j);
                // Write after read / write: whole.
                let war = c.writes.iter().any(|w| {
                    p.reads
                        .iter()
                        .chain(&p.writes)
                        .any(|x| regions_meet(&w.desc, &x.desc))
                });
                if war && !matches!(dep.map(|d| &d.rows), Some(DepRows::Whole)) {
                    problems.push(format!("WAR/WAW {i}->{j} not whole: {dep:?}\n{p:?}\n{c:?}"));
                }
                for rr in &c.reads {
                    for pw in &p.writes {
                        for r in 0..rr.desc.rows {
                            for pr in 0..pw.desc.rows {
                                if !meets(row_bytes(&rr.desc, r), row_bytes(&pw.desc, pr)) {
                                    continue;
                                }
                                let ok = match dep.map(|d| &d.rows) {
                                    None => false,
                                    Some(DepRows::Whole) => true,
                                    Some(rows) => {
                                        if rr.access == Access::Whole || pw.access == Access::Whole
                                        {
                                            false
                                        } else {
                                            producer_rows(rows, r as u32, r as u32 + 1, u32::MAX)
                                                .iter()
                                                .any(|&(lo, hi)| (lo..hi).contains(&(pr as u32)))
                                        }
                                    }
                                };
                                if !ok {
                                    problems.push(format!(
                                        "RAW {i}->{j}: consumer row {r} of {:?} reads producer row {pr} of {:?}; dep {dep:?}",
                                        rr, pw
                                    ));
                                }
                            }
                        }
                    }
                }
                if let Some(DepRows::Shifts(_)) = dep.map(|d| &d.rows) {
                    row_deps += 1;
                }
            }
        }
        if problems.len() > 5 {
            break;
        }
    }
    eprintln!("row-mapped deps checked: {row_deps}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
