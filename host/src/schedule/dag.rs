//! The dataflow graph the scheduler takes: fused-GEMM operators in program order, connected
//! through the memory they read and write.
//!
//! An operator ([`OpSpec`]) names its epilogue kind, its GEMM arguments and epilogue parameters
//! (as the device reads them), and the memory it reads and writes as [`Region`]s. The graph's
//! meaning is sequential execution in insertion order; [`WaveGraph::add`] connects a new
//! operator to every earlier one it conflicts with:
//!
//! - it reads what the earlier one writes (an operator's A, residual or state is another's C):
//!   a *flow* dependency, row-mapped when both regions are row-indexed ([`Access::Rows`]) with
//!   the same leading dimension and dtype, so each output tile waits only for the producer's row
//!   blocks holding the rows it reads;
//! - it writes what the earlier one reads or writes: the whole earlier operator must finish.
//!
//! Connecting through memory (rather than by hand) means a forgotten edge cannot exist: two
//! operators that touch the same bytes are always ordered as written.

use fused_gemm_device::gemm::GemmArgs;
use fused_gemm_device::kernel::persistent::EPI_WORDS;

use crate::plan::Problem;
use crate::tensor::MatrixDesc;
use crate::validate::{Overlap, overlap};
use crate::{Error, Result};

/// How an operator's tiles touch a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Row `r` of the region belongs to output row `r`: the tile of output rows `r0..r1`
    /// touches region rows `r0..r1` (A, residual, recurrent state, C).
    Rows,
    /// Every tile may touch all of it (B, bias and norm vectors).
    Whole,
}

/// A matrix an operator reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The memory.
    pub desc: MatrixDesc,
    /// How tiles touch it.
    pub access: Access,
}

impl Region {
    /// A row-indexed region.
    pub fn rows(desc: MatrixDesc) -> Self {
        Region {
            desc,
            access: Access::Rows,
        }
    }

    /// A region every tile may touch.
    pub fn whole(desc: MatrixDesc) -> Self {
        Region {
            desc,
            access: Access::Whole,
        }
    }
}

/// One fused-GEMM operator (Rammer's rOperator; its rTasks are its output tiles).
#[derive(Clone, Debug, PartialEq)]
pub struct OpSpec {
    /// A name for reports.
    pub name: String,
    /// Epilogue kind, as the family's arms name it.
    pub kind: &'static str,
    /// The problem as the performance model sees it.
    pub problem: Problem,
    /// GEMM arguments: pointers, M, N, K, leading dimensions. `splits`, `k_per_split`,
    /// `workspace` and `counters` are set per launch by the scheduler's choice.
    pub args: GemmArgs,
    /// The kind's epilogue parameters (`#[repr(C)]` bytes, zero-padded).
    pub epi: [u64; EPI_WORDS],
    /// Regions read (A and B included).
    pub reads: Vec<Region>,
    /// Regions written (C included).
    pub writes: Vec<Region>,
}

/// Producer rows a consumer row needs: consumer row `r` reads producer rows
/// `r + offset ..= r + offset + extra`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowShift {
    /// Producer row of consumer row 0 (may be negative).
    pub offset: i64,
    /// Further producer rows one consumer row reaches into (when its columns wrap past the
    /// producer's row pitch).
    pub extra: u32,
}

/// Which of the producer's rows a dependent operator's tiles need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DepRows {
    /// All of them, whatever the tile.
    Whole,
    /// Row-mapped: the union over the shifts.
    Shifts(Vec<RowShift>),
}

/// `consumer` must see `producer`'s writes (or must not overwrite what it still reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dep {
    /// The earlier operator.
    pub producer: usize,
    /// The later operator.
    pub consumer: usize,
    /// Which producer rows each consumer tile needs.
    pub rows: DepRows,
}

/// Producer rows of consumer rows `r0..r1` (half-open, consumer indexing) under `rows`,
/// clipped to the producer's `0..m`: `None` when there are none.
pub fn producer_rows(rows: &DepRows, r0: u32, r1: u32, m: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    if r1 <= r0 || m == 0 {
        return out;
    }
    match rows {
        DepRows::Whole => out.push((0, m)),
        DepRows::Shifts(shifts) => {
            for s in shifts {
                // i128: an offset near i64::MAX must clip, not overflow.
                let lo = r0 as i128 + s.offset as i128;
                let hi = r1 as i128 + s.offset as i128 + s.extra as i128;
                let (lo, hi) = (lo.max(0), hi.min(m as i128));
                if lo < hi {
                    out.push((lo as u32, hi as u32));
                }
            }
        }
    }
    out
}

/// How a consumer's region relates to a producer's, when they share memory; `None` (the whole
/// producer) when the regions are not both row-indexed with one pitch, or the shift does not
/// fit a [`RowShift`].
fn row_shift(consumer: &Region, producer: &Region) -> Option<RowShift> {
    let (c, p) = (&consumer.desc, &producer.desc);
    if consumer.access != Access::Rows
        || producer.access != Access::Rows
        || c.ld != p.ld
        || c.dtype != p.dtype
        || c.ld == 0
    {
        return None;
    }
    // In i128: `ld · size` may exceed 64 bits for a one-row region.
    let size = p.dtype.size() as i128;
    let pitch = p.ld as i128 * size;
    let d = c.ptr as i128 - p.ptr as i128;
    let q = i64::try_from(d.div_euclid(pitch)).ok()?;
    let s = d.rem_euclid(pitch);
    let end = s + c.cols as i128 * size;
    let extra = u32::try_from((end - 1).max(0) / pitch).ok()?;
    // Consumer row r starts in producer row q + r at byte s of its pitch; it shares columns
    // with that row only if s falls before the producer's last column (later rows it reaches
    // start at column 0).
    let first_shares = s < p.cols as i128 * size;
    if first_shares || extra == 0 {
        Some(RowShift { offset: q, extra })
    } else {
        Some(RowShift {
            offset: q.checked_add(1)?,
            extra: extra - 1,
        })
    }
}

/// Checks one non-empty region's geometry, as [`crate::validate`] checks an operand: a
/// leading dimension of at least its columns (so non-zero) and a byte extent, `ptr` +
/// `((rows − 1)·ld + cols)·size`, within 64 bits.
fn check_region(op: &str, r: &Region) -> Result<()> {
    let d = &r.desc;
    if d.ld < d.cols {
        return Err(Error::LeadingDimension {
            arg: "region",
            ld: d.ld as u64,
            cols: d.cols as u64,
        });
    }
    let end = d.span_bytes().and_then(|span| d.ptr.checked_add(span));
    if end.is_none() {
        return Err(Error::invalid(
            "region",
            "a byte extent (ptr + ((rows − 1)·ld + cols)·size) within 64 bits",
            format!(
                "{} (ld {}) {} at {:#x} in `{op}`",
                d.shape_str(),
                d.ld,
                d.dtype.name(),
                d.ptr
            ),
        ));
    }
    Ok(())
}

/// Operators in program order and the dependencies between them. See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct WaveGraph {
    ops: Vec<OpSpec>,
    deps: Vec<Dep>,
}

impl WaveGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `op` after every operator added so far, connects it to those it conflicts with
    /// (see the [module docs](self)), and returns its index.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `op.args` disagrees with `op.problem` (M, N, K), a
    /// region is empty, or a region's byte extent does not fit in 64 bits;
    /// [`Error::LeadingDimension`] for a region whose leading dimension is smaller than its
    /// columns; [`Error::Aliasing`] when the operator writes memory it also reads (other than
    /// C as its own residual, which every tile reads before it writes).
    pub fn add(&mut self, op: OpSpec) -> Result<usize> {
        let (a, p) = (&op.args, &op.problem);
        if (a.m, a.n, a.k) != (p.m, p.n, p.k) {
            return Err(Error::invalid(
                "op",
                format!("GemmArgs M, N, K = problem's {}×{}×{}", p.m, p.n, p.k),
                format!("{}×{}×{} in `{}`", a.m, a.n, a.k, op.name),
            ));
        }
        for r in op.reads.iter().chain(&op.writes) {
            if r.desc.is_empty() {
                return Err(Error::invalid(
                    "op",
                    "non-empty regions",
                    format!("an empty region in `{}`", op.name),
                ));
            }
            check_region(&op.name, r)?;
        }
        for w in &op.writes {
            for r in &op.reads {
                match overlap(&w.desc, &r.desc) {
                    Overlap::Disjoint => {}
                    // A residual that is C itself: each element is read by the thread that
                    // later writes it.
                    Overlap::Exact if w.access == Access::Rows && r.access == Access::Rows => {}
                    _ => {
                        return Err(Error::Aliasing {
                            output: "op output",
                            input: "op input",
                            detail: format!(
                                "`{}` writes {} at {:#x} and reads {} at {:#x}",
                                op.name,
                                w.desc.shape_str(),
                                w.desc.ptr,
                                r.desc.shape_str(),
                                r.desc.ptr
                            ),
                        });
                    }
                }
            }
        }
        let me = self.ops.len();
        for (i, prev) in self.ops.iter().enumerate() {
            let mut whole = false;
            let mut shifts: Vec<RowShift> = Vec::new();
            for r in &op.reads {
                for w in &prev.writes {
                    if overlap(&r.desc, &w.desc) == Overlap::Disjoint {
                        continue;
                    }
                    match row_shift(r, w) {
                        Some(s) if !shifts.contains(&s) => shifts.push(s),
                        Some(_) => {}
                        None => whole = true,
                    }
                }
            }
            for w in &op.writes {
                for x in prev.reads.iter().chain(&prev.writes) {
                    if overlap(&w.desc, &x.desc) != Overlap::Disjoint {
                        whole = true;
                    }
                }
            }
            if whole {
                self.deps.push(Dep {
                    producer: i,
                    consumer: me,
                    rows: DepRows::Whole,
                });
            } else if !shifts.is_empty() {
                self.deps.push(Dep {
                    producer: i,
                    consumer: me,
                    rows: DepRows::Shifts(shifts),
                });
            }
        }
        self.ops.push(op);
        Ok(me)
    }

    /// The operators, in program order.
    pub fn ops(&self) -> &[OpSpec] {
        &self.ops
    }

    /// Every dependency, producers before consumers.
    pub fn deps(&self) -> &[Dep] {
        &self.deps
    }

    /// Dependencies whose consumer is `op`.
    pub fn deps_of(&self, op: usize) -> impl Iterator<Item = &Dep> {
        self.deps.iter().filter(move |d| d.consumer == op)
    }

    /// Breadth-first fringes (Rammer's waves): wave 0 holds the operators with no producer,
    /// wave w those whose latest producer is in wave w − 1. Operators keep program order within
    /// a wave.
    pub fn waves(&self) -> Vec<Vec<usize>> {
        let mut level = vec![0usize; self.ops.len()];
        // Producers precede consumers, so levels settle in one pass in program order.
        for j in 0..self.ops.len() {
            level[j] = self
                .deps_of(j)
                .map(|d| level[d.producer] + 1)
                .max()
                .unwrap_or(0);
        }
        let n = level.iter().max().map_or(0, |l| l + 1);
        let mut waves = vec![Vec::new(); n];
        for (j, l) in level.iter().enumerate() {
            waves[*l].push(j);
        }
        waves
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_gemm_device::types::DType;

    fn m(ptr: u64, rows: usize, cols: usize, ld: usize) -> MatrixDesc {
        MatrixDesc::new(ptr, rows, cols, ld, DType::Bf16)
    }

    #[test]
    fn row_shift_of_column_slices_and_offsets() {
        // Producer writes columns 256..512 of a 4×2304 buffer; the consumer reads columns
        // 0..512 (its A spans two producers' outputs).
        let p = Region::rows(m(0x10000 + 256 * 2, 4, 256, 2304));
        let c = Region::rows(m(0x10000, 4, 512, 2304));
        assert_eq!(
            row_shift(&c, &p),
            Some(RowShift {
                offset: 0,
                extra: 0
            })
        );
        // Starting past the producer's columns and wrapping into the next row: only that row.
        let c3 = Region::rows(m(0x10000 + 2200 * 2, 4, 512, 2304));
        assert_eq!(
            row_shift(&c3, &p),
            Some(RowShift {
                offset: 1,
                extra: 0
            })
        );
        // Starting inside the producer's columns and wrapping: both rows.
        let c4 = Region::rows(m(0x10000 + 356 * 2, 4, 2300, 2304));
        assert_eq!(
            row_shift(&c4, &p),
            Some(RowShift {
                offset: 0,
                extra: 1
            })
        );
        // Same rows, consumer starting two rows further down.
        let c2 = Region::rows(m(0x10000 + 2 * 2304 * 2, 2, 256, 2304));
        let p2 = Region::rows(m(0x10000, 4, 256, 2304));
        assert_eq!(
            row_shift(&c2, &p2),
            Some(RowShift {
                offset: 2,
                extra: 0
            })
        );
        assert_eq!(row_shift(&Region::whole(c2.desc), &p2), None);
    }

    /// An operator reading `reads` and writing `writes`, M = N = K = 1.
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
    fn region_geometry_is_checked_and_huge_pitches_do_not_overflow() {
        let f32m = |ptr, rows, cols, ld| MatrixDesc::new(ptr, rows, cols, ld, DType::F32);
        // One row with ld = 2^62 f32: its pitch, 2^64 bytes, overflowed `ld · size`.
        let huge = f32m(0x1000, 1, 4, 1 << 62);
        let mut g = WaveGraph::new();
        g.add(spec("p", vec![], vec![Region::rows(huge)])).unwrap();
        g.add(spec("c", vec![Region::rows(huge)], vec![])).unwrap();
        assert_eq!(
            g.deps(),
            &[Dep {
                producer: 0,
                consumer: 1,
                rows: DepRows::Shifts(vec![RowShift {
                    offset: 0,
                    extra: 0
                }]),
            }]
        );
        // Rows that would overlap (ld < cols, or ld = 0) are refused.
        for bad in [f32m(0x1000, 2, 8, 4), f32m(0x1000, 1, 8, 0)] {
            let e = WaveGraph::new()
                .add(spec("c", vec![Region::rows(bad)], vec![]))
                .unwrap_err();
            assert!(
                matches!(e, Error::LeadingDimension { ld, cols: 8, .. } if ld == bad.ld as u64),
                "{e}"
            );
        }
        // A byte extent past 2^64: the span overflows, or the end address does.
        for bad in [
            f32m(0x1000, 1 << 40, 8, 1 << 30),
            f32m(u64::MAX - 15, 1, 8, 8),
        ] {
            let e = WaveGraph::new()
                .add(spec("c", vec![], vec![Region::whole(bad)]))
                .unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument { arg: "region", .. }),
                "{e}"
            );
        }
    }

    #[test]
    fn producer_rows_clip() {
        let s = DepRows::Shifts(vec![RowShift {
            offset: -1,
            extra: 1,
        }]);
        // Consumer rows 0..4 need producer rows -1..=4, clipped to 0..4.
        assert_eq!(producer_rows(&s, 0, 4, 4), vec![(0, 4)]);
        assert_eq!(producer_rows(&s, 2, 3, 4), vec![(1, 3)]);
        assert_eq!(producer_rows(&DepRows::Whole, 5, 6, 7), vec![(0, 7)]);
        assert!(producer_rows(&s, 3, 3, 4).is_empty());
        // Offsets at the ends of i64 clip instead of overflowing.
        let far = |offset| {
            DepRows::Shifts(vec![RowShift {
                offset,
                extra: u32::MAX,
            }])
        };
        assert!(producer_rows(&far(i64::MAX), 0, u32::MAX, 4).is_empty());
        assert_eq!(producer_rows(&far(i64::MIN), 0, u32::MAX, 4), vec![]);
        assert_eq!(producer_rows(&far(-5), 1, 2, 4), vec![(0, 4)]);
    }
}
