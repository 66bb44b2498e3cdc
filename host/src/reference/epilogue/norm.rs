//! Row normalizations in f64: LayerNorm and RMSNorm over each row of an M×N row-major matrix,
//! directly and through per-tile partial statistics (the path a kernel takes when one CTA does
//! not span the row).

use super::stage::{ReferenceError, check_len, check_shape};

/// Statistics of a set of values: count, mean and M2 = Σ(x − mean)².
///
/// [`push`](RowMoments::push) is Welford's update (Welford 1962) and
/// [`merge`](RowMoments::merge) Chan, Golub & LeVeque's pairwise combination ("Algorithms for
/// computing the sample variance", 1979), in f64. The device keeps the same triple in f32
/// (`fused_gemm_device::epilogue::stages::Moments`), one per row and N-tile in its
/// partial-statistics workspace; this type is the reference for those partials. A constant row
/// gives mean = the constant and M2 = 0 exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowMoments {
    /// Values seen.
    pub n: f64,
    /// Their mean.
    pub mean: f64,
    /// Sum of squared deviations from the mean.
    pub m2: f64,
}

impl RowMoments {
    /// Adds one value.
    pub fn push(&mut self, x: f64) {
        self.n += 1.0;
        let d = x - self.mean;
        self.mean += d / self.n;
        self.m2 += d * (x - self.mean);
    }

    /// The statistics of `xs`.
    pub fn of(xs: impl IntoIterator<Item = f64>) -> RowMoments {
        let mut m = RowMoments::default();
        for x in xs {
            m.push(x);
        }
        m
    }

    /// The statistics of the union of the two sets.
    pub fn merge(self, o: RowMoments) -> RowMoments {
        if o.n == 0.0 {
            return self;
        }
        if self.n == 0.0 {
            return o;
        }
        let n = self.n + o.n;
        let d = o.mean - self.mean;
        RowMoments {
            n,
            mean: self.mean + d * (o.n / n),
            m2: self.m2 + o.m2 + d * d * (self.n * o.n / n),
        }
    }

    /// Biased (population) variance M2/n, as LayerNorm uses.
    pub fn variance(&self) -> f64 {
        self.m2 / self.n
    }
}

fn check_norm_shapes(
    m: usize,
    n: usize,
    x: &[f64],
    gamma: &[f64],
    beta: Option<&[f64]>,
) -> Result<(), ReferenceError> {
    if n == 0 {
        return Err(ReferenceError::ZeroDim {
            what: "N (row width)",
        });
    }
    check_shape("x", m, n, x.len())?;
    check_len("gamma", n, gamma.len())?;
    if let Some(b) = beta {
        check_len("beta", n, b.len())?;
    }
    Ok(())
}

/// Mean of the row (Welford, exact for constant rows) and biased variance by a second pass
/// around that mean.
fn mean_var(row: &[f64]) -> (f64, f64) {
    let mean = RowMoments::of(row.iter().copied()).mean;
    let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f64>() / row.len() as f64;
    (mean, var)
}

/// LayerNorm of each row (Ba, Kiros & Hinton 2016, "Layer Normalization"):
/// `y[r, c] = (x[r, c] − μ_r) / √(σ²_r + eps) · gamma[c] + beta[c]`, μ and σ² the mean and
/// biased variance of row r's N values.
///
/// `x` is M×N row-major, `gamma` and `beta` have length N. Returns M×N. A constant row gives
/// exactly `beta`; a NaN makes only its own row NaN.
///
/// # Errors
/// [`ReferenceError::ZeroDim`] if N = 0, [`ReferenceError::Length`] on a buffer of the wrong
/// length, [`ReferenceError::TooLarge`] if M×N overflows `usize`.
pub fn layer_norm_rows(
    m: usize,
    n: usize,
    x: &[f64],
    gamma: &[f64],
    beta: &[f64],
    eps: f64,
) -> Result<Vec<f64>, ReferenceError> {
    check_norm_shapes(m, n, x, gamma, Some(beta))?;
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n) {
        let (mean, var) = mean_var(row);
        let rstd = 1.0 / (var + eps).sqrt();
        y.extend(
            row.iter()
                .zip(gamma.iter().zip(beta))
                .map(|(&v, (&g, &b))| (v - mean) * rstd * g + b),
        );
    }
    Ok(y)
}

/// RMSNorm of each row (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"):
/// `y[r, c] = x[r, c] / √(mean_c x[r, c]² + eps) · gamma[c]`.
///
/// `x` is M×N row-major, `gamma` has length N. Returns M×N. Squares are summed in f64, so no
/// f16-range value can overflow them.
///
/// # Errors
/// As [`layer_norm_rows`].
pub fn rms_norm_rows(
    m: usize,
    n: usize,
    x: &[f64],
    gamma: &[f64],
    eps: f64,
) -> Result<Vec<f64>, ReferenceError> {
    check_norm_shapes(m, n, x, gamma, None)?;
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n) {
        let ms = row.iter().map(|&v| v * v).sum::<f64>() / n as f64;
        let r = 1.0 / (ms + eps).sqrt();
        y.extend(row.iter().zip(gamma).map(|(&v, &g)| v * r * g));
    }
    Ok(y)
}

/// Per-tile partial statistics of each row, as a kernel with N-tiles of `bn` columns writes
/// them: an M × ceil(N/bn) row-major array; entry `(r, t)` holds the [`RowMoments`] of
/// `x[r, t·bn .. min((t+1)·bn, N)]`, or of their squares when `of_squares` (RMSNorm). The last
/// tile counts only its in-bounds columns.
///
/// # Errors
/// [`ReferenceError::ZeroDim`] if N or `bn` is 0, [`ReferenceError::Length`] if `x` is not M×N,
/// [`ReferenceError::TooLarge`] if M×N overflows `usize`.
pub fn partial_row_moments(
    m: usize,
    n: usize,
    x: &[f64],
    bn: usize,
    of_squares: bool,
) -> Result<Vec<RowMoments>, ReferenceError> {
    if n == 0 {
        return Err(ReferenceError::ZeroDim {
            what: "N (row width)",
        });
    }
    if bn == 0 {
        return Err(ReferenceError::ZeroDim {
            what: "BN (tile width)",
        });
    }
    check_shape("x", m, n, x.len())?;
    Ok(x.chunks_exact(n)
        .flat_map(|row| {
            row.chunks(bn).map(|tile| {
                RowMoments::of(tile.iter().map(|&v| if of_squares { v * v } else { v }))
            })
        })
        .collect())
}

/// Merges each row's partials (an M × tiles array from [`partial_row_moments`]) in tile
/// order: the finishing step. Returns M row statistics.
///
/// # Errors
/// [`ReferenceError::ZeroDim`] if `tiles` is 0, [`ReferenceError::Length`] if `partials` is
/// not M × tiles, [`ReferenceError::TooLarge`] if M × tiles overflows `usize`.
pub fn merge_row_moments(
    m: usize,
    tiles: usize,
    partials: &[RowMoments],
) -> Result<Vec<RowMoments>, ReferenceError> {
    if tiles == 0 {
        return Err(ReferenceError::ZeroDim { what: "tiles" });
    }
    check_shape("partials", m, tiles, partials.len())?;
    Ok(partials
        .chunks_exact(tiles)
        .map(|t| t.iter().fold(RowMoments::default(), |a, &b| a.merge(b)))
        .collect())
}

/// [`layer_norm_rows`] computed the way a kernel whose CTA tile is `bn` columns wide does it:
/// per-tile partial statistics, merged per row, then normalized. Agrees with
/// [`layer_norm_rows`] to f64 rounding for every `bn` (≥ N: one tile, with padded lanes that
/// must not count; < N: the row split over several tiles).
///
/// # Errors
/// As [`layer_norm_rows`], and [`ReferenceError::ZeroDim`] if `bn` is 0.
pub fn layer_norm_rows_tiled(
    m: usize,
    n: usize,
    x: &[f64],
    gamma: &[f64],
    beta: &[f64],
    eps: f64,
    bn: usize,
) -> Result<Vec<f64>, ReferenceError> {
    check_norm_shapes(m, n, x, gamma, Some(beta))?;
    let tiles = n.div_ceil(bn.max(1));
    let stats = merge_row_moments(m, tiles, &partial_row_moments(m, n, x, bn, false)?)?;
    let mut y = Vec::with_capacity(x.len());
    for (row, st) in x.chunks_exact(n).zip(&stats) {
        let rstd = 1.0 / (st.variance() + eps).sqrt();
        y.extend(
            row.iter()
                .zip(gamma.iter().zip(beta))
                .map(|(&v, (&g, &b))| (v - st.mean) * rstd * g + b),
        );
    }
    Ok(y)
}

/// [`rms_norm_rows`] through per-tile partial statistics of x² (see
/// [`layer_norm_rows_tiled`]).
///
/// # Errors
/// As [`rms_norm_rows`], and [`ReferenceError::ZeroDim`] if `bn` is 0.
pub fn rms_norm_rows_tiled(
    m: usize,
    n: usize,
    x: &[f64],
    gamma: &[f64],
    eps: f64,
    bn: usize,
) -> Result<Vec<f64>, ReferenceError> {
    check_norm_shapes(m, n, x, gamma, None)?;
    let tiles = n.div_ceil(bn.max(1));
    let stats = merge_row_moments(m, tiles, &partial_row_moments(m, n, x, bn, true)?)?;
    let mut y = Vec::with_capacity(x.len());
    for (row, st) in x.chunks_exact(n).zip(&stats) {
        let r = 1.0 / (st.mean + eps).sqrt();
        y.extend(row.iter().zip(gamma).map(|(&v, &g)| v * r * g));
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_merge_equals_one_pass() {
        let xs: Vec<f64> = (0..101).map(|i| ((i * 37) % 11) as f64 - 4.5).collect();
        let whole = RowMoments::of(xs.iter().copied());
        let merged = xs
            .chunks(13)
            .map(|c| RowMoments::of(c.iter().copied()))
            .fold(RowMoments::default(), RowMoments::merge);
        assert_eq!(whole.n, merged.n);
        assert!((whole.mean - merged.mean).abs() < 1e-13);
        assert!((whole.m2 - merged.m2).abs() < 1e-10 * whole.m2);
        let mean = xs.iter().sum::<f64>() / 101.0;
        assert!((whole.mean - mean).abs() < 1e-13);
    }

    #[test]
    fn shape_errors_are_typed() {
        assert_eq!(
            layer_norm_rows(2, 3, &[0.0; 5], &[1.0; 3], &[0.0; 3], 1e-5),
            Err(ReferenceError::Length {
                what: "x",
                expected: 6,
                actual: 5
            })
        );
        assert!(matches!(
            rms_norm_rows(1, 0, &[], &[], 1e-6),
            Err(ReferenceError::ZeroDim { .. })
        ));
        assert!(matches!(
            partial_row_moments(1, 3, &[0.0; 3], 0, false),
            Err(ReferenceError::ZeroDim { .. })
        ));
    }
}
