//! LayerNorm folded into the GEMM that reads its output, in f64: the reference for a post-norm
//! encoder layer whose LayerNorm has no kernel of its own.
//!
//! The reparameterisation (CODA's, for post-norm models): for a `Linear`
//! layer with weights W (N×K, PyTorch layout) and bias b reading `LN(h)`, with γ, β the norm's
//! scale and shift, μ_r and s_r = 1/√(σ²_r + eps) row r's statistics,
//!
//! `LN(h)·Wᵀ + b = s_r · (h·W′ᵀ)[r, j] − s_r · μ_r · c_j + d_j`, with
//! `W′[j, k] = γ_k·W[j, k]`, `c_j = Σ_k W′[j, k]` and `d_j = Σ_k β_k·W[j, k] + b_j`.
//!
//! So the GEMM producing h stores h and per-row partial statistics, and the consumer GEMM
//! multiplies h by the folded weights and applies the statistics in its epilogue.
//!
//! **Cancellation, and the per-tile shift that removes it.** In `s·(acc − μ·c)` the two terms
//! are of size |μ|·Σ|W′| while their difference is of size σ·√K·|W′|: rows whose mean is far
//! larger than their spread lose `log2(|μ|/σ)` bits, twice — once when h is stored in 16 bits
//! (a bf16 h of mean 1000 has a resolution of 4), once in the f32 accumulation. The producer
//! therefore stores each of its N-tiles' values shifted by a value near their mean, `t_{r,τ}`
//! (the tile's mean rounded to f32, say), `h′ = h − t_{r,τ}`, with the statistics of what it
//! stored, and the consumer adds the shifts back per K-tile τ of the producer's width:
//!
//! `out[r, j] = s_r · ((h′·W′ᵀ)[r, j] + Σ_τ (t_{r,τ} − μ_r) · c_{τ,j}) + d_j`, with
//! `c_{τ,j} = Σ_{k∈τ} W′[j, k]`.
//!
//! h′ is centred, so it keeps 16-bit relative precision of σ rather than of |μ|. Every
//! quantity the consumer forms is small too: with `t_{r,0}` as origin, the tile means are
//! `(t_{r,τ} − t_{r,0}) + mean(h′_τ)` (where the tile means are within a factor of two of each
//! other, as in the rows that need the shift, their f32 difference is exact: Sterbenz 1974),
//! so μ_r is never formed in f32 at the scale of |μ|. Shifts of zero give the unshifted
//! form; every function here takes them explicitly. The tests measure both forms on rows of
//! mean 1000 and spread 0.01 with 16-bit storage and f32 accumulation.
//!
//! The next layer's residual is `LN(h)` itself, read back from h′: [`normalize_shifted`].

use super::norm::{RowMoments, merge_row_moments};
use super::stage::{ReferenceError, check_len, check_shape};

/// A `Linear` layer (W: N×K, bias b: N) that reads `LayerNorm(h)` (γ, β: K), with the norm's
/// scale folded into its weights and its shift into its bias; see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct FoldedLinear {
    /// Outputs N.
    pub n: usize,
    /// Inputs K (the normalized width).
    pub k: usize,
    /// `W′[j, k] = γ_k·W[j, k]`, N×K row-major: the weights the consumer GEMM multiplies by.
    /// A caller that stores them in 16 bits rounds them here, before [`Self::tile_colsums`],
    /// so that the column sums are those of the weights the GEMM reads.
    pub weight: Vec<f64>,
    /// `d_j = Σ_k β_k·W[j, k] + b_j`, length N.
    pub offset: Vec<f64>,
}

impl FoldedLinear {
    /// Folds γ and β of the norm before a `Linear` layer into its weights `w` (N×K row-major)
    /// and bias (length N, or none).
    ///
    /// # Errors
    /// [`ReferenceError::ZeroDim`] if N or K is 0; [`ReferenceError::Length`] on a buffer of
    /// the wrong length; [`ReferenceError::TooLarge`] if N×K overflows `usize`.
    pub fn fold(
        n: usize,
        k: usize,
        w: &[f64],
        bias: Option<&[f64]>,
        gamma: &[f64],
        beta: &[f64],
    ) -> Result<FoldedLinear, ReferenceError> {
        if n == 0 || k == 0 {
            return Err(ReferenceError::ZeroDim {
                what: "N or K of the folded layer",
            });
        }
        check_shape("w", n, k, w.len())?;
        check_len("gamma", k, gamma.len())?;
        check_len("beta", k, beta.len())?;
        if let Some(b) = bias {
            check_len("bias", n, b.len())?;
        }
        let weight = w
            .chunks_exact(k)
            .flat_map(|row| row.iter().zip(gamma).map(|(&x, &g)| x * g))
            .collect();
        let offset = w
            .chunks_exact(k)
            .enumerate()
            .map(|(j, row)| {
                let d: f64 = row.iter().zip(beta).map(|(&x, &b)| x * b).sum();
                d + bias.map_or(0.0, |b| b[j])
            })
            .collect();
        Ok(FoldedLinear {
            n,
            k,
            weight,
            offset,
        })
    }

    /// `c_{τ,j} = Σ_{k∈τ} W′[j, k]` for the K-tiles τ of `bk` columns (the producer's N-tile
    /// width; the last tile holds the remainder): a ceil(K/bk) × N row-major table.
    ///
    /// # Errors
    /// [`ReferenceError::ZeroDim`] if `bk` is 0.
    pub fn tile_colsums(&self, bk: usize) -> Result<Vec<f64>, ReferenceError> {
        let tiles = tiles_of(self.k, bk)?;
        let mut c = vec![0.0; tiles * self.n];
        for (j, row) in self.weight.chunks_exact(self.k).enumerate() {
            for (t, part) in row.chunks(bk).enumerate() {
                c[t * self.n + j] = part.iter().sum();
            }
        }
        Ok(c)
    }

    /// The layer's output from the consumer GEMM's product: `acc` = h′·W′ᵀ (M×N, h′ the
    /// stored input), `shifts` (M × tiles) the value subtracted from each K-tile of each row
    /// before it was stored, `partials` (M × tiles) the statistics of each stored K-tile (of h′,
    /// not h), `colsums` from [`Self::tile_colsums`] with the same `bk`. Returns M×N:
    /// `s_r·(acc + Σ_τ (shift_{r,τ} − μ_r)·c_{τ,j}) + d_j`, every mean taken relative to the
    /// row's first shift.
    ///
    /// # Errors
    /// [`ReferenceError::Length`] when a buffer does not match M, N and the tile count;
    /// [`ReferenceError::ZeroDim`] if `bk` is 0; [`ReferenceError::TooLarge`] on overflow.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &self,
        m: usize,
        acc: &[f64],
        shifts: &[f64],
        partials: &[RowMoments],
        colsums: &[f64],
        bk: usize,
        eps: f64,
    ) -> Result<Vec<f64>, ReferenceError> {
        let (n, tiles) = (self.n, tiles_of(self.k, bk)?);
        check_shape("acc", m, n, acc.len())?;
        check_shape("colsums", tiles, n, colsums.len())?;
        let stats = row_stats(m, tiles, shifts, partials)?;
        let mut out = Vec::with_capacity(m * n);
        for (r, (mean, var)) in stats.into_iter().enumerate() {
            let s = 1.0 / (var + eps).sqrt();
            let shift = &shifts[r * tiles..(r + 1) * tiles];
            for j in 0..n {
                let correction: f64 = (0..tiles)
                    .map(|t| ((shift[t] - shift[0]) - mean) * colsums[t * n + j])
                    .sum();
                out.push(s * (acc[r * n + j] + correction) + self.offset[j]);
            }
        }
        Ok(out)
    }
}

/// Tiles of `bk` columns over K.
fn tiles_of(k: usize, bk: usize) -> Result<usize, ReferenceError> {
    if k == 0 || bk == 0 {
        return Err(ReferenceError::ZeroDim {
            what: "K or the tile width",
        });
    }
    Ok(k.div_ceil(bk))
}

/// Each row's mean relative to its first shift, and its biased variance, from the statistics
/// of its stored (shifted) tiles.
fn row_stats(
    m: usize,
    tiles: usize,
    shifts: &[f64],
    partials: &[RowMoments],
) -> Result<Vec<(f64, f64)>, ReferenceError> {
    check_shape("shifts", m, tiles, shifts.len())?;
    check_shape("partials", m, tiles, partials.len())?;
    let relative: Vec<RowMoments> = partials
        .iter()
        .zip(shifts)
        .enumerate()
        .map(|(i, (p, &t))| RowMoments {
            mean: p.mean + (t - shifts[i / tiles * tiles]),
            ..*p
        })
        .collect();
    Ok(merge_row_moments(m, tiles, &relative)?
        .into_iter()
        .map(|st| (st.mean, st.variance()))
        .collect())
}

/// h as the producer stores it ([`shift_by_tile_means`]); `shifts` and `partials` are
/// M × ceil(K/bk), row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct ShiftedRows {
    /// h′ = h less its tile's shift, M×K.
    pub values: Vec<f64>,
    /// The value subtracted from each K-tile of each row.
    pub shifts: Vec<f64>,
    /// The statistics of each stored (shifted) K-tile of each row.
    pub partials: Vec<RowMoments>,
}

/// What the producer stores for h (M×K): each K-tile of `bk` columns of each row shifted by
/// that tile's mean, with the statistics of the shifted tiles.
///
/// # Errors
/// [`ReferenceError::ZeroDim`] if K or `bk` is 0; [`ReferenceError::Length`] if `h` is not
/// M×K; [`ReferenceError::TooLarge`] on overflow.
pub fn shift_by_tile_means(
    m: usize,
    k: usize,
    h: &[f64],
    bk: usize,
) -> Result<ShiftedRows, ReferenceError> {
    let shifts: Vec<f64> = super::norm::partial_row_moments(m, k, h, bk, false)?
        .iter()
        .map(|p| p.mean)
        .collect();
    let values = shift_tiles(m, k, h, &shifts, bk)?;
    let partials = super::norm::partial_row_moments(m, k, &values, bk, false)?;
    Ok(ShiftedRows {
        values,
        shifts,
        partials,
    })
}

/// h (M×K) with each K-tile of `bk` columns of row r less `shifts[r·tiles + τ]`.
///
/// # Errors
/// [`ReferenceError::ZeroDim`] if K or `bk` is 0; [`ReferenceError::Length`] when a buffer
/// does not match M, K and the tile count; [`ReferenceError::TooLarge`] on overflow.
pub fn shift_tiles(
    m: usize,
    k: usize,
    h: &[f64],
    shifts: &[f64],
    bk: usize,
) -> Result<Vec<f64>, ReferenceError> {
    let tiles = tiles_of(k, bk)?;
    check_shape("h", m, k, h.len())?;
    check_shape("shifts", m, tiles, shifts.len())?;
    Ok(h.chunks_exact(k)
        .zip(shifts.chunks_exact(tiles))
        .flat_map(|(row, shifts)| {
            row.chunks(bk)
                .zip(shifts)
                .flat_map(|(part, &t)| part.iter().map(move |&x| x - t))
        })
        .collect())
}

/// `LayerNorm(h)` read back from the stored h′ (M×K, each K-tile of `bk` columns shifted by
/// `shifts`, M × tiles) and the stored tiles' `partials`: `(h′ + shift − μ)·s·γ + β`. What a
/// residual load of the next layer computes.
///
/// # Errors
/// [`ReferenceError::Length`] when a buffer does not match M, K and the tile count;
/// [`ReferenceError::ZeroDim`] if K or `bk` is 0; [`ReferenceError::TooLarge`] on overflow.
#[allow(clippy::too_many_arguments)]
pub fn normalize_shifted(
    m: usize,
    k: usize,
    shifted: &[f64],
    shifts: &[f64],
    partials: &[RowMoments],
    gamma: &[f64],
    beta: &[f64],
    bk: usize,
    eps: f64,
) -> Result<Vec<f64>, ReferenceError> {
    let tiles = tiles_of(k, bk)?;
    check_shape("h′", m, k, shifted.len())?;
    check_len("gamma", k, gamma.len())?;
    check_len("beta", k, beta.len())?;
    let stats = row_stats(m, tiles, shifts, partials)?;
    let mut out = Vec::with_capacity(m * k);
    for (r, (mean, var)) in stats.into_iter().enumerate() {
        let s = 1.0 / (var + eps).sqrt();
        let shift = &shifts[r * tiles..(r + 1) * tiles];
        for c in 0..k {
            let x = shifted[r * k + c] + (shift[c / bk] - shift[0]) - mean;
            out.push(x * s * gamma[c] + beta[c]);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::epilogue::{layer_norm_rows, partial_row_moments, round_slice};
    use crate::reference::gemm;
    use crate::testing::{max_abs_diff, nan_max, rng};
    use fused_gemm_device::types::DType;
    use rand::RngExt;

    fn random(rng: &mut rand::rngs::StdRng, len: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..len).map(|_| rng.random_range(lo..hi)).collect()
    }

    /// Largest |got − want| over the largest |want| (a NaN anywhere gives NaN or infinity,
    /// which fails every bound).
    fn rel_err(got: &[f64], want: &[f64]) -> f64 {
        max_abs_diff(got, want) / nan_max(want.iter().map(|w| w.abs()))
    }

    struct Layer {
        m: usize,
        n: usize,
        k: usize,
        h: Vec<f64>,
        w: Vec<f64>,
        bias: Vec<f64>,
        gamma: Vec<f64>,
        beta: Vec<f64>,
    }

    impl Layer {
        /// Rows of h with means in `mean` and spread `spread` around them.
        fn new(seed: &str, (m, n, k): (usize, usize, usize), mean: f64, spread: f64) -> Layer {
            let mut rng = rng(seed);
            let h = (0..m)
                .flat_map(|_| {
                    let mu = mean * rng.random_range(0.5..1.5);
                    random(&mut rng, k, -1.0, 1.0)
                        .into_iter()
                        .map(move |x| mu + spread * x)
                })
                .collect();
            Layer {
                m,
                n,
                k,
                h,
                w: random(&mut rng, n * k, -0.1, 0.1),
                bias: random(&mut rng, n, -1.0, 1.0),
                gamma: random(&mut rng, k, 0.5, 1.5),
                beta: random(&mut rng, k, -0.5, 0.5),
            }
        }

        /// `LN(h)·Wᵀ + b` in f64, from h as given.
        fn want(&self, eps: f64) -> Vec<f64> {
            let (m, n, k) = (self.m, self.n, self.k);
            let ln = layer_norm_rows(m, k, &self.h, &self.gamma, &self.beta, eps).unwrap();
            let mut y = gemm(m, n, k, &ln, &self.w, true);
            for row in y.chunks_exact_mut(n) {
                row.iter_mut().zip(&self.bias).for_each(|(v, b)| *v += b);
            }
            y
        }

        /// The folded layer as a device would compute it with `dtype` storage (f64 throughout
        /// with `None`): W′ and h′ stored in `dtype`, h′ shifted by its tiles' means rounded to
        /// f32 when `shift`, the stored tiles' statistics in f32, the product accumulated in
        /// f32 (products of 16-bit values are exact in f32).
        fn folded(&self, bk: usize, eps: f64, shift: bool, dtype: Option<DType>) -> Vec<f64> {
            let (m, n, k) = (self.m, self.n, self.k);
            let round = |v: Vec<f64>| match dtype {
                Some(d) => round_slice(d, &v),
                None => v,
            };
            let f32s = |v: f64| if dtype.is_some() { v as f32 as f64 } else { v };
            let mut f =
                FoldedLinear::fold(n, k, &self.w, Some(&self.bias), &self.gamma, &self.beta)
                    .unwrap();
            f.weight = round(f.weight);
            let shifts: Vec<f64> = if shift {
                let rows = shift_by_tile_means(m, k, &self.h, bk).unwrap();
                rows.shifts.into_iter().map(f32s).collect()
            } else {
                vec![0.0; m * k.div_ceil(bk)]
            };
            let stored = round(shift_tiles(m, k, &self.h, &shifts, bk).unwrap());
            let partials: Vec<RowMoments> = partial_row_moments(m, k, &stored, bk, false)
                .unwrap()
                .into_iter()
                .map(|p| RowMoments {
                    n: p.n,
                    mean: f32s(p.mean),
                    m2: f32s(p.m2),
                })
                .collect();
            let acc = if dtype.is_some() {
                (0..m * n)
                    .map(|i| {
                        let (r, j) = (i / n, i % n);
                        (0..k).fold(0.0f32, |a, c| {
                            a + (stored[r * k + c] * f.weight[j * k + c]) as f32
                        }) as f64
                    })
                    .collect()
            } else {
                gemm(m, n, k, &stored, &f.weight, true)
            };
            let colsums = f.tile_colsums(bk).unwrap();
            f.apply(m, &acc, &shifts, &partials, &colsums, bk, eps)
                .unwrap()
        }
    }

    #[test]
    fn folded_layer_matches_norm_then_linear_in_f64() {
        // K a multiple of the tile, K with a partial last tile, one tile wider than K.
        for (i, &(m, n, k, bk)) in [(5, 7, 64, 16), (3, 9, 50, 16), (4, 6, 20, 32)]
            .iter()
            .enumerate()
        {
            let l = Layer::new(&format!("fold{i}"), (m, n, k), 0.3, 2.0);
            let want = l.want(1e-5);
            for shift in [false, true] {
                let got = l.folded(bk, 1e-5, shift, None);
                assert!(rel_err(&got, &want) < 1e-12, "{i} shift {shift}");
            }
        }
    }

    #[test]
    fn shifted_rows_read_back_as_their_layer_norm() {
        let l = Layer::new("readback", (6, 1, 70), 50.0, 3.0);
        let s = shift_by_tile_means(l.m, l.k, &l.h, 32).unwrap();
        let got = normalize_shifted(
            l.m,
            l.k,
            &s.values,
            &s.shifts,
            &s.partials,
            &l.gamma,
            &l.beta,
            32,
            1e-12,
        )
        .unwrap();
        let want = layer_norm_rows(l.m, l.k, &l.h, &l.gamma, &l.beta, 1e-12).unwrap();
        assert!(rel_err(&got, &want) < 1e-12);
    }

    #[test]
    fn constant_rows_give_the_offset() {
        // σ = 0: every normalized value is 0 and the output is d = β·Wᵀ + b. Shifted, h′ is 0
        // and so is every term the epilogue adds, even with 16-bit storage and f32 sums; the
        // unshifted form cancels μ·c against the product, which 1/√eps then amplifies, so it is
        // exact only in f64.
        let mut l = Layer::new("constant", (3, 5, 40), 7.0, 0.0);
        l.h.iter_mut().for_each(|v| *v = 7.25);
        let f = FoldedLinear::fold(l.n, l.k, &l.w, Some(&l.bias), &l.gamma, &l.beta).unwrap();
        for (shift, dtype, bound) in [(true, Some(DType::Bf16), 1e-15), (false, None, 1e-9)] {
            let got = l.folded(16, 1e-5, shift, dtype);
            for row in got.chunks_exact(l.n) {
                assert!(rel_err(row, &f.offset) < bound, "shift {shift}: {row:?}");
            }
        }
    }

    /// Rows of mean about 1000 and spread 0.01 (|μ|/σ ≈ 1.7e5, the spread of a uniform
    /// [-1, 1) scaled by 0.01): with h stored in 16 bits and f32 arithmetic, the shifted form
    /// stays within two units of the storage's roundoff (2⁻⁷ for bf16, 2⁻¹⁰ for f16, relative
    /// to the largest output; 40 random seeds gave at most 1.04 units), while the unshifted form,
    /// like a norm of the stored h, loses the rows.
    #[test]
    fn per_tile_shift_keeps_rows_whose_mean_dwarfs_their_spread() {
        let l = Layer::new("cancel", (8, 16, 384), 1000.0, 0.01);
        let want = l.want(1e-12);
        for (dtype, bound) in [(DType::Bf16, 2f64.powi(-7)), (DType::F16, 2f64.powi(-10))] {
            let shifted = rel_err(&l.folded(128, 1e-12, true, Some(dtype)), &want);
            let plain = rel_err(&l.folded(128, 1e-12, false, Some(dtype)), &want);
            // What an unfused layer computes: h stored, then normalized (in f64 here).
            let stored = Layer {
                h: round_slice(dtype, &l.h),
                w: l.w.clone(),
                bias: l.bias.clone(),
                gamma: l.gamma.clone(),
                beta: l.beta.clone(),
                ..l
            };
            let materialized = rel_err(&stored.want(1e-12), &want);
            println!(
                "{dtype:?}: largest error over the largest output: shifted {shifted:.2e}, \
                 unshifted {plain:.2e}, norm of the stored h {materialized:.2e}"
            );
            assert!(shifted < bound, "{dtype:?}: shifted {shifted:.2e}");
            assert!(plain > 10.0 * bound, "{dtype:?}: unshifted {plain:.2e}");
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(matches!(
            FoldedLinear::fold(0, 3, &[], None, &[1.0; 3], &[0.0; 3]),
            Err(ReferenceError::ZeroDim { .. })
        ));
        assert!(matches!(
            FoldedLinear::fold(2, 3, &[0.0; 5], None, &[1.0; 3], &[0.0; 3]),
            Err(ReferenceError::Length { .. })
        ));
        let f = FoldedLinear::fold(2, 3, &[0.5; 6], None, &[1.0; 3], &[0.0; 3]).unwrap();
        assert!(f.tile_colsums(0).is_err());
        let p = vec![RowMoments::of([1.0, 2.0, 3.0])];
        // acc is 1×2 (N = 2); 3 elements are refused.
        assert!(matches!(
            f.apply(1, &[0.0; 3], &[0.0], &p, &[1.5, 1.5], 4, 1e-5),
            Err(ReferenceError::Length { .. })
        ));
        assert!(
            f.apply(1, &[0.0; 2], &[0.0], &p, &[1.5, 1.5], 4, 1e-5)
                .is_ok()
        );
    }
}
