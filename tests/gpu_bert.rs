//! GPU tests of the BERT kernels (`fused_gemm::bert`: embeddings + LayerNorm, masked attention,
//! mean pooling + L2) against the f64 references of `fused_gemm::host::reference::bert`, for
//! f32, f16 and bf16 storage, on fresh random inputs at awkward sizes. Outputs are poisoned
//! (NaN) before every launch. Every comparison checks the relative Frobenius error and each
//! element (`assert_close`). Without a GPU each test prints why it is skipped and passes
//! (fails with `FUSED_GEMM_REQUIRE_GPU=1`).

use cudarc::driver::CudaSlice;
use fused_gemm::bert::{self, BertElement, EmbeddingWeights, SeqBatch};
use fused_gemm::host::Gpu;
use fused_gemm::host::reference::bert as reference;
use fused_gemm::host::reference::max_rel_error;
use fused_gemm::host::testing::{
    Tolerance, assert_close, compare, gpu_or_skip, nan_max, rng, sanitizing, uniform,
};
use rand::RngExt;
use rand::rngs::StdRng;

/// A storage type under test: conversions and the tolerance it must meet (relative Frobenius
/// error, and each element within `TOL·(rms + |ref|)`).
trait Dt: BertElement + Default + Clone + std::fmt::Debug + PartialEq {
    const NAME: &'static str;
    const TOL: f64;
    fn from_f32(x: f32) -> Self;
    fn to_f64(self) -> f64;
}
impl Dt for f32 {
    const NAME: &'static str = "f32";
    const TOL: f64 = 1e-5;
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl Dt for half::f16 {
    const NAME: &'static str = "f16";
    const TOL: f64 = 2e-3;
    fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
}
impl Dt for half::bf16 {
    const NAME: &'static str = "bf16";
    const TOL: f64 = 1e-2;
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
}

/// Host values rounded to `T`, and the same values widened to f64 for the reference.
struct Buf<T> {
    t: Vec<T>,
    f: Vec<f64>,
}

fn buf<T: Dt>(xs: impl IntoIterator<Item = f32>) -> Buf<T> {
    let t: Vec<T> = xs.into_iter().map(T::from_f32).collect();
    let f = t.iter().map(|&v| v.to_f64()).collect();
    Buf { t, f }
}

fn poisoned<T: Dt>(gpu: &Gpu, len: usize) -> CudaSlice<T> {
    gpu.upload(&vec![T::from_f32(f32::NAN); len]).unwrap()
}

fn download<T: Dt>(gpu: &Gpu, d: &CudaSlice<T>) -> Vec<f64> {
    gpu.download(d)
        .unwrap()
        .into_iter()
        .map(T::to_f64)
        .collect()
}

/// The batch shapes every kernel is checked at: (T, lengths).
fn shapes() -> Vec<(usize, Vec<u32>)> {
    vec![(1, vec![1]), (128, vec![1, 17, 128]), (512, vec![512, 257])]
}

/// [`shapes`] for attention, whose work grows with T²: under [`sanitizing`] the longest batch is
/// T = 256 (lengths 256 and 129: still several query blocks and key tiles, one key past a
/// multiple of 64).
fn attention_shapes() -> Vec<(usize, Vec<u32>)> {
    let mut s = shapes();
    if sanitizing() {
        s[2] = (256, vec![256, 129]);
    }
    s
}

/// Random token ids `< vocab` for the valid positions and `[PAD]` = 0 for padding.
fn token_ids(r: &mut StdRng, seq_len: usize, lengths: &[u32], vocab: u32) -> Vec<u32> {
    let mut ids = vec![0u32; lengths.len() * seq_len];
    for (b, &len) in lengths.iter().enumerate() {
        for id in &mut ids[b * seq_len..][..len as usize] {
            *id = r.random_range(0..vocab);
        }
    }
    ids
}

/// Embedding tables (d columns) on the host and the device.
struct Tables<T> {
    word: Buf<T>,
    pos: Buf<T>,
    typ: Buf<T>,
    gamma: Buf<T>,
    beta: Buf<T>,
    d: usize,
    eps: f32,
}

impl<T: Dt> Tables<T> {
    fn random(r: &mut StdRng, vocab: usize, positions: usize, types: usize, d: usize) -> Self {
        Tables {
            word: buf(uniform(r, vocab * d)),
            pos: buf(uniform(r, positions * d)),
            typ: buf(uniform(r, types * d)),
            gamma: buf(uniform(r, d).into_iter().map(|x| 1.0 + 0.25 * x)),
            beta: buf(uniform(r, d).into_iter().map(|x| 0.5 * x)),
            d,
            eps: 1e-12,
        }
    }

    fn reference(&self, ids: &[u32], types: Option<&[u32]>, seq_len: usize) -> Vec<f64> {
        reference::embeddings(
            ids,
            types,
            seq_len,
            &reference::EmbeddingTables {
                word: &self.word.f,
                position: &self.pos.f,
                token_type: &self.typ.f,
                gamma: &self.gamma.f,
                beta: &self.beta.f,
                hidden: self.d,
                eps: self.eps as f64,
            },
        )
    }

    /// Runs the kernel on `batch` with poisoned output; returns the output widened to f64.
    fn run(&self, gpu: &Gpu, batch: &SeqBatch) -> fused_gemm::host::Result<Vec<f64>> {
        let up = |b: &Buf<T>| gpu.upload(&b.t).unwrap();
        let (word, pos, typ, gamma, beta) = (
            up(&self.word),
            up(&self.pos),
            up(&self.typ),
            up(&self.gamma),
            up(&self.beta),
        );
        let w = EmbeddingWeights {
            word: &word,
            position: &pos,
            token_type: &typ,
            gamma: &gamma,
            beta: &beta,
            eps: self.eps,
        };
        let mut out = poisoned::<T>(gpu, batch.tokens() * self.d);
        bert::embeddings(gpu, batch, &w, &mut out)?;
        Ok(download(gpu, &out))
    }
}

fn embeddings_random<T: Dt>(gpu: &Gpu, r: &mut StdRng) {
    let (vocab, positions, types, d) = (1000u32, 512usize, 2usize, 384usize);
    let tables = Tables::<T>::random(r, vocab as usize, positions, types, d);
    for (seq_len, lengths) in shapes() {
        let ids = token_ids(r, seq_len, &lengths, vocab);
        let tt: Vec<u32> = (0..ids.len()).map(|_| r.random_range(0..2)).collect();
        for with_types in [false, true] {
            let mut batch = SeqBatch::new(gpu, &ids, &lengths, seq_len).unwrap();
            if with_types {
                batch = batch.with_token_types(gpu, &tt).unwrap();
            }
            let got = tables.run(gpu, &batch).unwrap();
            let want = tables.reference(&ids, with_types.then_some(&tt[..]), seq_len);
            assert_close(
                &got,
                &want,
                T::TOL,
                &format!(
                    "embeddings {} T={seq_len} lengths={lengths:?} types={with_types}",
                    T::NAME
                ),
            );
        }
    }
}

#[test]
fn embeddings_match_reference() {
    let Some(gpu) = gpu_or_skip("bert embeddings") else {
        return;
    };
    let mut r = rng("bert embeddings");
    embeddings_random::<f32>(&gpu, &mut r);
    embeddings_random::<half::f16>(&gpu, &mut r);
    embeddings_random::<half::bf16>(&gpu, &mut r);
}

/// Hidden sizes that are not multiples of 4 take the element-wise path; 1024 is the largest.
fn embeddings_odd_widths<T: Dt>(gpu: &Gpu, r: &mut StdRng) {
    for d in [1usize, 2, 3, 5, 17, 383, 388, 1024] {
        let tables = Tables::<T>::random(r, 50, 33, 2, d);
        let (seq_len, lengths) = (33, vec![33, 5, 1]);
        let ids = token_ids(r, seq_len, &lengths, 50);
        let batch = SeqBatch::new(gpu, &ids, &lengths, seq_len).unwrap();
        let got = tables.run(gpu, &batch).unwrap();
        let want = tables.reference(&ids, None, seq_len);
        assert_close(
            &got,
            &want,
            T::TOL,
            &format!("embeddings {} d={d}", T::NAME),
        );
    }
}

#[test]
fn embeddings_handle_every_hidden_size() {
    let Some(gpu) = gpu_or_skip("bert embeddings widths") else {
        return;
    };
    let mut r = rng("bert embeddings widths");
    embeddings_odd_widths::<f32>(&gpu, &mut r);
    embeddings_odd_widths::<half::f16>(&gpu, &mut r);
    embeddings_odd_widths::<half::bf16>(&gpu, &mut r);
}

/// Constant and extreme rows in LayerNorm, through the embedding path: tables whose three rows
/// always sum to the constant `k` (positions and types vary per column, the word row
/// compensates) give exactly β in every row; so do all-zero and huge constant rows (an f32 sum
/// of 384 × 8.5e37 overflows); a NaN in one word row makes only the token rows that use it NaN.
fn constant_rows<T: Dt>(gpu: &Gpu, r: &mut StdRng, constants: &[f32]) {
    let (d, vocab, seq_len) = (384usize, 8usize, 20usize);
    let lengths = vec![20u32, 3];
    let ids = token_ids(r, seq_len, &lengths, vocab as u32);
    let batch = SeqBatch::new(gpu, &ids, &lengths, seq_len).unwrap();
    let mut tables = Tables::<T>::random(r, vocab, seq_len, 2, d);
    for &k in constants {
        if k.abs() < 1e4 {
            // Positions and types vary along the row; the word rows compensate exactly (small
            // integers are exact in every storage type used with such k).
            let (p, y) = (|c: usize| (c % 7) as f32, |c: usize| (c % 3) as f32);
            tables.pos = buf((0..seq_len * d).map(|i| p(i % d)));
            tables.typ = buf((0..2 * d).map(|i| y(i % d)));
            tables.word = buf((0..vocab * d).map(|i| k - p(i % d) - y(i % d)));
        } else {
            tables.pos = buf(vec![0.0; seq_len * d]);
            tables.typ = buf(vec![0.0; 2 * d]);
            tables.word = buf(vec![k; vocab * d]);
        }
        let got = tables.run(gpu, &batch).unwrap();
        for (row, g) in got.chunks(d).enumerate() {
            assert_eq!(
                g,
                &tables.beta.f[..],
                "{} k={k}: row {row} is not exactly beta",
                T::NAME
            );
        }
        println!(
            "embeddings {} constant rows k={k}: every row exactly beta",
            T::NAME
        );
    }
    // One NaN in the word row of id 7, used by one token only.
    let mut ids = ids;
    ids.iter_mut().for_each(|i| *i %= 7);
    ids[seq_len + 1] = 7;
    let batch = SeqBatch::new(gpu, &ids, &lengths, seq_len).unwrap();
    tables = Tables::<T>::random(r, vocab, seq_len, 2, d);
    tables.word.t[7 * d + 100] = T::from_f32(f32::NAN);
    tables.word.f[7 * d + 100] = f64::NAN;
    let got = tables.run(gpu, &batch).unwrap();
    let want = tables.reference(&ids, None, seq_len);
    for (row, (g, w)) in got.chunks(d).zip(want.chunks(d)).enumerate() {
        if row == seq_len + 1 {
            assert!(g.iter().all(|v| v.is_nan()), "{}: NaN row {row}", T::NAME);
        } else {
            let r = compare(g, w, T::TOL);
            assert!(
                r.passed(),
                "{}: row {row} next to the NaN row: {r}",
                T::NAME
            );
        }
    }
}

#[test]
fn embeddings_layer_norm_constant_and_nan_rows() {
    let Some(gpu) = gpu_or_skip("bert embeddings constant rows") else {
        return;
    };
    let mut r = rng("bert embeddings constant rows");
    constant_rows::<f32>(&gpu, &mut r, &[1234.0, 0.0, 8.5e37, -8.5e37]);
    constant_rows::<half::f16>(&gpu, &mut r, &[1234.0, 0.0, 60000.0]);
    // bf16 holds integers exactly only up to 256; 8.5e37 is in range.
    constant_rows::<half::bf16>(&gpu, &mut r, &[100.0, 0.0, 8.5e37]);
}

/// Rows narrower than the block, through the embedding path: N = 3 (a row far narrower than
/// the warp; padded lanes must not add to the variance) and N = 384 with x_i = i, one row.
fn narrow_rows<T: Dt>(gpu: &Gpu) {
    let mut t = Tables::<T> {
        word: buf([1.0, 2.0, 3.0]),
        pos: buf([0.0; 3]),
        typ: buf([0.0; 3]),
        gamma: buf([1.0; 3]),
        beta: buf([0.0; 3]),
        d: 3,
        eps: 1e-5,
    };
    let batch = SeqBatch::new(gpu, &[0], &[1], 1).unwrap();
    let got = t.run(gpu, &batch).unwrap();
    let want = [-1.224_735_7, 0.0, 1.224_735_7];
    let err = max_rel_error(&got, &want, 1.0);
    println!(
        "embeddings {} [1, 2, 3]: {got:?}, max error {err:.2e}",
        T::NAME
    );
    assert!(err < T::TOL.max(1e-6), "{}: {got:?}", T::NAME);
    assert_close(
        &got,
        &want,
        T::TOL.max(1e-6),
        &format!("embeddings {} [1, 2, 3]", T::NAME),
    );

    let d = 384;
    t = Tables {
        word: buf((0..d).map(|i| i as f32)),
        pos: buf(vec![0.0; d]),
        typ: buf(vec![0.0; d]),
        gamma: buf(vec![1.0; d]),
        beta: buf(vec![0.0; d]),
        d,
        eps: 1e-5,
    };
    let got = t.run(gpu, &batch).unwrap();
    let want = t.reference(&[0], None, 1);
    assert_close(
        &got,
        &want,
        T::TOL,
        &format!("embeddings {} x_i = i, N = 384", T::NAME),
    );
}

#[test]
fn embeddings_layer_norm_narrow_rows() {
    let Some(gpu) = gpu_or_skip("bert embeddings narrow rows") else {
        return;
    };
    narrow_rows::<f32>(&gpu);
    narrow_rows::<half::f16>(&gpu);
    narrow_rows::<half::bf16>(&gpu);
}

/// The tolerance of an attention output: `tol`, plus `tol·max|qkv|` per element. The output is
/// a convex combination of V rows whose weights carry rounding errors relative to themselves
/// (bf16 probabilities: 2⁻⁸), so an element's error is bounded by that relative error times
/// the values mixed, which can be far larger than the (averaged) output; the Frobenius bound is
/// unchanged. (On an H100, bf16 attention put one element at 1.06× the plain bound while the
/// Frobenius error was 2.2e-3.)
fn attention_tolerance(tol: impl Into<Tolerance>, qkv: &[f64]) -> Tolerance {
    let tol = tol.into();
    let max = nan_max(qkv.iter().filter(|v| v.is_finite()).map(|v| v.abs()));
    tol.plus_abs(tol.rtol * max.max(0.0))
}

/// One attention case's outcome: its description and measured error, and why it failed (if).
struct AttnResult {
    what: String,
    err: f64,
    failure: Option<String>,
}

/// Random QKV (values `scale·U(-1, 1)`) with the rows of padded positions set to NaN: padded
/// keys must not be read, padded query rows must come out exactly zero, the rest must match
/// the f64 reference within `tol` (relative Frobenius error and each element).
#[allow(clippy::too_many_arguments)]
fn attention_case<T: Dt>(
    gpu: &Gpu,
    r: &mut StdRng,
    heads: usize,
    head_dim: usize,
    seq_len: usize,
    lengths: &[u32],
    scale: f32,
    tol: impl Into<Tolerance>,
) -> AttnResult {
    let d = heads * head_dim;
    let mut qkv: Vec<f32> = uniform(r, lengths.len() * seq_len * 3 * d)
        .into_iter()
        .map(|x| scale * x)
        .collect();
    for (b, &len) in lengths.iter().enumerate() {
        for t in len as usize..seq_len {
            qkv[(b * seq_len + t) * 3 * d..][..3 * d].fill(f32::NAN);
        }
    }
    let qkv = buf::<T>(qkv);
    let ids = vec![0u32; lengths.len() * seq_len];
    let batch = SeqBatch::new(gpu, &ids, lengths, seq_len).unwrap();
    let dqkv = gpu.upload(&qkv.t).unwrap();
    let mut out = poisoned::<T>(gpu, lengths.len() * seq_len * d);
    let what = format!(
        "attention {} hd={head_dim} heads={heads} T={seq_len} lengths={lengths:?} scale={scale}",
        T::NAME
    );
    if let Err(e) = bert::attention(gpu, &batch, heads, head_dim, &dqkv, &mut out) {
        println!("{what}: launch error {e}");
        return AttnResult {
            what,
            err: f64::NAN,
            failure: Some(format!("launch error {e}")),
        };
    }
    let got = download(gpu, &out);
    let want = reference::attention(&qkv.f, lengths, seq_len, heads, head_dim);
    let close = compare(&got, &want, attention_tolerance(tol, &qkv.f));
    let err = close.frobenius;
    let non_finite = got.iter().filter(|v| !v.is_finite()).count();
    let padded_nonzero: usize = lengths
        .iter()
        .enumerate()
        .map(|(b, &len)| {
            got[(b * seq_len + len as usize) * d..(b + 1) * seq_len * d]
                .iter()
                .filter(|&&v| v != 0.0)
                .count()
        })
        .sum();
    let failure = if non_finite > 0 {
        Some(format!("{non_finite} non-finite outputs"))
    } else if padded_nonzero > 0 {
        Some(format!(
            "{padded_nonzero} non-zero values in padded query rows"
        ))
    } else if !close.passed() {
        Some(format!("not close: {close}"))
    } else {
        None
    };
    println!(
        "{what}: {close}{}",
        failure
            .as_ref()
            .map_or(String::new(), |f| format!("  FAILED: {f}"))
    );
    AttnResult { what, err, failure }
}

/// Every case of one dtype: the batch shapes of [`shapes`] with 12 heads, query-block and
/// key-tile boundaries (64) crossed by one, other head counts, for each head dimension.
fn attention_all<T: Dt>(gpu: &Gpu, r: &mut StdRng, results: &mut Vec<AttnResult>) {
    for head_dim in bert::HEAD_DIMS {
        // 12 heads of 32 is MiniLM (d = 384), of 64 BERT-base (d = 768).
        let heads = if head_dim == 128 { 4 } else { 12 };
        for (seq_len, lengths) in attention_shapes() {
            results.push(attention_case::<T>(
                gpu,
                r,
                heads,
                head_dim,
                seq_len,
                &lengths,
                2.0,
                T::TOL,
            ));
        }
        for (heads, seq_len, lengths) in [
            (1, 65, vec![65, 64, 63]),
            (3, 130, vec![2, 129, 17, 130]),
            (2, 200, vec![200, 128, 1]),
        ] {
            results.push(attention_case::<T>(
                gpu,
                r,
                heads,
                head_dim,
                seq_len,
                &lengths,
                2.0,
                T::TOL,
            ));
        }
    }
}

/// Panics listing every failed case (after all of them ran and printed their errors).
fn assert_all_passed(results: &[AttnResult]) {
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.failure.as_ref().map(|f| format!("{}: {f}", r.what)))
        .collect();
    // NaN when a case did not run (its failure says why).
    let worst = nan_max(results.iter().map(|r| r.err));
    println!(
        "{} attention cases, {} failed, largest error {worst:.2e}",
        results.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "failed cases:\n  {}",
        failed.join("\n  ")
    );
}

#[test]
fn attention_matches_reference() {
    let Some(gpu) = gpu_or_skip("bert attention") else {
        return;
    };
    let mut r = rng("bert attention");
    let mut results = Vec::new();
    attention_all::<f32>(&gpu, &mut r, &mut results);
    attention_all::<half::f16>(&gpu, &mut r, &mut results);
    attention_all::<half::bf16>(&gpu, &mut r, &mut results);
    assert_all_passed(&results);
}

/// A peaked softmax: scores of a few hundred (values 10·U(-1, 1)) are far beyond f32's exp
/// range, so max subtraction must keep exp from overflowing, in every kernel.
#[test]
fn attention_survives_large_scores() {
    let Some(gpu) = gpu_or_skip("bert attention large scores") else {
        return;
    };
    let mut r = rng("bert attention large scores");
    let mut results = Vec::new();
    for hd in bert::HEAD_DIMS {
        let (seq_len, lengths) = (70usize, [70u32, 40]);
        // f32 with scores of a few hundred: an f32 rounding error of a score (|s|·2⁻²⁴, about
        // 1e-5) shifts the softmax weights of nearly tied keys by as much, and the few outputs
        // that mix such keys are off by up to ~20× the average error (the CPU simulation of
        // this kernel body in tests/sim_bert.rs: Frobenius 6e-7, one element 1.2e-5 of the
        // output's rms). The element bound is 10× the tolerance; a wrong element is off by
        // about the output's rms, still 50× over it.
        let large_scores_f32 = Tolerance::rel(1e-5).per_element(10.0);
        results.push(attention_case::<f32>(
            &gpu,
            &mut r,
            2,
            hd,
            seq_len,
            &lengths,
            10.0,
            large_scores_f32,
        ));
        results.push(attention_case::<half::f16>(
            &gpu,
            &mut r,
            2,
            hd,
            seq_len,
            &lengths,
            10.0,
            half::f16::TOL,
        ));
        results.push(attention_case::<half::bf16>(
            &gpu,
            &mut r,
            2,
            hd,
            seq_len,
            &lengths,
            10.0,
            half::bf16::TOL,
        ));
    }
    assert_all_passed(&results);
}

/// Buffers that start one element into an allocation (2-byte aligned for f16, 4 for f32)
/// take the element-wise load and store paths: same results, no fault.
fn attention_misaligned<T: Dt>(gpu: &Gpu, r: &mut StdRng, results: &mut Vec<AttnResult>) {
    for head_dim in bert::HEAD_DIMS {
        let (heads, seq_len, lengths) = (2usize, 67usize, [67u32, 5]);
        let d = heads * head_dim;
        let rows = lengths.len() * seq_len;
        let mut x = uniform(r, rows * 3 * d + 1);
        x[0] = f32::NAN;
        for (b, &len) in lengths.iter().enumerate() {
            x[1 + (b * seq_len + len as usize) * 3 * d..1 + (b + 1) * seq_len * 3 * d]
                .fill(f32::NAN);
        }
        let qkv = buf::<T>(x);
        let ids = vec![0u32; rows];
        let batch = SeqBatch::new(gpu, &ids, &lengths, seq_len).unwrap();
        let dqkv = gpu.upload(&qkv.t).unwrap();
        let mut out = poisoned::<T>(gpu, rows * d + 1);
        let what = format!("attention {} hd={head_dim} misaligned qkv and out", T::NAME);
        let run = {
            let src = dqkv.slice(1..);
            let mut dst = out.slice_mut(1..);
            bert::attention(gpu, &batch, heads, head_dim, &src, &mut dst)
        };
        if let Err(e) = run {
            println!("{what}: launch error {e}");
            results.push(AttnResult {
                what,
                err: f64::NAN,
                failure: Some(format!("launch error {e}")),
            });
            continue;
        }
        let got = download(gpu, &out);
        let want = reference::attention(&qkv.f[1..], &lengths, seq_len, heads, head_dim);
        let close = compare(&got[1..], &want, attention_tolerance(T::TOL, &qkv.f[1..]));
        let err = close.frobenius;
        let failure = if !got[0].is_nan() {
            Some("the element before the output was written".to_owned())
        } else if got[1..].iter().any(|v| !v.is_finite()) {
            Some("non-finite output".to_owned())
        } else if !close.passed() {
            Some(format!("not close: {close}"))
        } else {
            None
        };
        println!(
            "{what}: {close}{}",
            failure
                .as_ref()
                .map_or(String::new(), |f| format!("  FAILED: {f}"))
        );
        results.push(AttnResult { what, err, failure });
    }
}

#[test]
fn attention_handles_misaligned_buffers() {
    let Some(gpu) = gpu_or_skip("bert attention misaligned") else {
        return;
    };
    let mut r = rng("bert attention misaligned");
    let mut results = Vec::new();
    attention_misaligned::<f32>(&gpu, &mut r, &mut results);
    attention_misaligned::<half::f16>(&gpu, &mut r, &mut results);
    attention_misaligned::<half::bf16>(&gpu, &mut r, &mut results);
    assert_all_passed(&results);
}

/// Kernel time at all-MiniLM-L6-v2's attention shapes (12 heads of 32, T = 128, every
/// sequence full, f16 on the tensor cores), beside heads of 64 (the doubled work of the padded
/// layout the MiniLM backend used before head-dim-32 kernels) and the f32 CUDA-core kernel.
/// Prints only; correctness is checked above. Under the sanitizer (times meaningless) the same
/// kernels run on batches of 1 and 4, three launches each.
#[test]
fn attention_minilm_timings() {
    let Some(gpu) = gpu_or_skip("bert attention timings") else {
        return;
    };
    let seq_len = 128usize;
    let (batches, warmup, runs): (&[usize], _, _) = if sanitizing() {
        (&[1, 4], 1, 2)
    } else {
        (&[1, 32, 256], 3, 20)
    };
    for &batch_size in batches {
        let lengths = vec![seq_len as u32; batch_size];
        let batch = SeqBatch::new(&gpu, &vec![0; batch_size * seq_len], &lengths, seq_len).unwrap();
        let mut line = format!("attention B={batch_size} T={seq_len} 12 heads:");
        for hd in [32usize, 64] {
            let d = 12 * hd;
            let rows = batch_size * seq_len;
            let qkv = gpu
                .upload(&vec![half::f16::from_f32(0.01); rows * 3 * d])
                .unwrap();
            let mut out = poisoned::<half::f16>(&gpu, rows * d);
            let ms = gpu
                .time_ms(warmup, runs, |g| {
                    bert::attention(g, &batch, 12, hd, &qkv, &mut out)
                })
                .unwrap();
            let bytes = (rows * 4 * d * 2) as f64;
            line += &format!(
                "  f16 hd={hd}: {:.1} µs ({:.0} GB/s of QKV+out)",
                ms * 1e3,
                bytes / (ms as f64 * 1e-3) / 1e9
            );
        }
        let d = 12 * 32;
        let rows = batch_size * seq_len;
        let qkv = gpu.upload(&vec![0.01f32; rows * 3 * d]).unwrap();
        let mut out = poisoned::<f32>(&gpu, rows * d);
        let ms = gpu
            .time_ms(warmup, runs, |g| {
                bert::attention(g, &batch, 12, 32, &qkv, &mut out)
            })
            .unwrap();
        line += &format!("  f32 hd=32 (CUDA cores): {:.1} µs", ms * 1e3);
        println!("{line}");
    }
}

fn pool_case<T: Dt>(gpu: &Gpu, r: &mut StdRng, d: usize, seq_len: usize, lengths: &[u32]) {
    let mut h = uniform(r, lengths.len() * seq_len * d);
    for (b, &len) in lengths.iter().enumerate() {
        h[(b * seq_len + len as usize) * d..(b + 1) * seq_len * d].fill(f32::NAN);
    }
    let h = buf::<T>(h);
    let batch = SeqBatch::new(gpu, &vec![0; lengths.len() * seq_len], lengths, seq_len).unwrap();
    let dh = gpu.upload(&h.t).unwrap();
    let mut out = gpu.upload(&vec![f32::NAN; lengths.len() * d]).unwrap();
    bert::mean_pool_l2(gpu, &batch, d, &dh, &mut out).unwrap();
    let got: Vec<f64> = gpu
        .download(&out)
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect();
    let want = reference::mean_pool_l2(&h.f, lengths, seq_len, d);
    // The output is f32 whatever the input type: only f32 arithmetic error remains.
    assert_close(
        &got,
        &want,
        1e-5,
        &format!(
            "mean pool {} d={d} T={seq_len} lengths={lengths:?}",
            T::NAME
        ),
    );
    for (b, row) in got.chunks(d).enumerate() {
        let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-5,
            "{} sequence {b}: norm {norm}",
            T::NAME
        );
    }
}

fn pool_all<T: Dt>(gpu: &Gpu, r: &mut StdRng) {
    for (seq_len, lengths) in shapes() {
        pool_case::<T>(gpu, r, 384, seq_len, &lengths);
    }
    for d in [1usize, 3, 383, 1000, bert::MAX_POOL_HIDDEN] {
        pool_case::<T>(gpu, r, d, 9, &[9, 1, 4]);
    }
}

#[test]
fn mean_pool_l2_matches_reference() {
    let Some(gpu) = gpu_or_skip("bert mean pool") else {
        return;
    };
    let mut r = rng("bert mean pool");
    pool_all::<f32>(&gpu, &mut r);
    pool_all::<half::f16>(&gpu, &mut r);
    pool_all::<half::bf16>(&gpu, &mut r);
}

/// A zero mean gives a zero embedding (the ε guard), not NaN; huge values do not overflow the
/// norm.
#[test]
fn mean_pool_l2_zero_and_huge_rows() {
    let Some(gpu) = gpu_or_skip("bert mean pool extremes") else {
        return;
    };
    let (d, seq_len) = (384usize, 2usize);
    let mut h = vec![0.0f32; 2 * seq_len * d];
    // Sequence 0: rows +x and −x cancel to a zero mean. Sequence 1: 3e37 everywhere, whose
    // norm (5.9e38) is beyond f32 although every output (1/√384) is not.
    for c in 0..d {
        h[c] = 1.0 + c as f32;
        h[d + c] = -(1.0 + c as f32);
        h[2 * d + c] = 3.0e37;
        h[3 * d + c] = 3.0e37;
    }
    let batch = SeqBatch::new(&gpu, &[0; 4], &[2, 2], seq_len).unwrap();
    let dh = gpu.upload(&h).unwrap();
    let mut out = gpu.upload(&vec![f32::NAN; 2 * d]).unwrap();
    bert::mean_pool_l2(&gpu, &batch, d, &dh, &mut out).unwrap();
    let got = gpu.download(&out).unwrap();
    assert!(
        got[..d].iter().all(|&v| v == 0.0),
        "zero mean: {:?}",
        &got[..4]
    );
    let want = 1.0 / (d as f32).sqrt();
    assert!(
        got[d..].iter().all(|&v| (v - want).abs() < 1e-6),
        "huge rows: {:?}",
        &got[d..d + 4]
    );
}

#[test]
fn launchers_reject_bad_arguments() {
    let Some(gpu) = gpu_or_skip("bert launchers reject") else {
        return;
    };
    let invalid = |r: fused_gemm::host::Result<()>, arg: &str| match r {
        Err(fused_gemm::host::Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg),
        other => panic!("expected an invalid `{arg}`, got {other:?}"),
    };
    // Batches: lengths outside 1..=T, ids of the wrong count.
    assert!(SeqBatch::new(&gpu, &[0, 0], &[0], 2).is_err());
    assert!(SeqBatch::new(&gpu, &[0, 0], &[3], 2).is_err());
    assert!(SeqBatch::new(&gpu, &[0, 0, 0], &[2], 2).is_err());

    let d = 8;
    let z = |n: usize| gpu.upload(&vec![0.5f32; n]).unwrap();
    let (word, pos, typ, gamma, beta) = (z(4 * d), z(3 * d), z(d), z(d), z(d));
    let w = EmbeddingWeights {
        word: &word,
        position: &pos,
        token_type: &typ,
        gamma: &gamma,
        beta: &beta,
        eps: 1e-12,
    };
    let batch = SeqBatch::new(&gpu, &[3, 1, 2, 0, 0, 0], &[3, 1], 3).unwrap();
    let mut out = z(6 * d);
    bert::embeddings(&gpu, &batch, &w, &mut out).unwrap();
    let far = SeqBatch::new(&gpu, &[4, 1, 2, 0, 0, 0], &[3, 1], 3).unwrap();
    invalid(bert::embeddings(&gpu, &far, &w, &mut out), "ids");
    let typed = SeqBatch::new(&gpu, &[0; 6], &[3, 1], 3)
        .unwrap()
        .with_token_types(&gpu, &[0, 1, 0, 0, 0, 0])
        .unwrap();
    invalid(bert::embeddings(&gpu, &typed, &w, &mut out), "token_types");
    let long = SeqBatch::new(&gpu, &[0; 4], &[4], 4).unwrap();
    invalid(bert::embeddings(&gpu, &long, &w, &mut z(4 * d)), "position");
    invalid(bert::embeddings(&gpu, &batch, &w, &mut z(6 * d - 1)), "out");
    let short_beta = z(d - 1);
    let bad = EmbeddingWeights {
        beta: &short_beta,
        ..w
    };
    invalid(bert::embeddings(&gpu, &batch, &bad, &mut out), "beta");
    let ragged = z(4 * d + 1);
    let bad = EmbeddingWeights { word: &ragged, ..w };
    invalid(bert::embeddings(&gpu, &batch, &bad, &mut out), "word");
    let bad = EmbeddingWeights { eps: f32::NAN, ..w };
    invalid(bert::embeddings(&gpu, &batch, &bad, &mut out), "eps");
    let wide = z(bert::MAX_HIDDEN + 1);
    let bad = EmbeddingWeights { gamma: &wide, ..w };
    invalid(bert::embeddings(&gpu, &batch, &bad, &mut out), "gamma");

    for hd in bert::HEAD_DIMS {
        let qkv = z(6 * 3 * hd);
        bert::attention(&gpu, &batch, 1, hd, &qkv, &mut z(6 * hd)).unwrap();
        invalid(
            bert::attention(&gpu, &batch, 0, hd, &qkv, &mut z(1)),
            "heads",
        );
        invalid(
            bert::attention(&gpu, &batch, 2, hd, &qkv, &mut z(12 * hd)),
            "qkv",
        );
        invalid(
            bert::attention(&gpu, &batch, 1, hd, &qkv, &mut z(6 * hd + 1)),
            "out",
        );
    }
    for bad in [0, 16, 48, 96, 256] {
        let qkv = z(6 * 3 * bad);
        invalid(
            bert::attention(&gpu, &batch, 1, bad, &qkv, &mut z(6 * bad)),
            "head_dim",
        );
    }
    let qkv16 = gpu
        .upload(&vec![half::f16::from_f32(0.5); 6 * 3 * 48])
        .unwrap();
    let mut out16 = gpu.upload(&vec![half::f16::from_f32(0.5); 6 * 48]).unwrap();
    invalid(
        bert::attention(&gpu, &batch, 1, 48, &qkv16, &mut out16),
        "head_dim",
    );

    let hidden = z(6 * d);
    bert::mean_pool_l2(&gpu, &batch, d, &hidden, &mut z(2 * d)).unwrap();
    invalid(
        bert::mean_pool_l2(&gpu, &batch, d, &hidden, &mut z(2 * d + 1)),
        "out",
    );
    invalid(
        bert::mean_pool_l2(&gpu, &batch, d + 1, &hidden, &mut z(2 * d + 2)),
        "hidden",
    );
    invalid(
        bert::mean_pool_l2(&gpu, &batch, 0, &hidden, &mut z(1)),
        "hidden_size",
    );
    gpu.synchronize().unwrap();
}
