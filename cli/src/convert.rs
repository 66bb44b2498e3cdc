//! `fused-gemm convert-model`: a copy of a model directory with its weights stored in f16 or
//! bf16.
//!
//! all-MiniLM-L6-v2's `model.safetensors` is 90 MB in f32; in f16 it is 45 MB, half as much to
//! copy to a GPU host. The loader ([`crate::weights::ModelWeights`]) reads F16 and BF16 tensors,
//! so the converted directory is a drop-in model directory.
//!
//! Consequence for comparisons: every path that loads the converted file sees weights rounded
//! once to the storage dtype. The GPU f16 path loses nothing more (it rounds the f32 weights to
//! f16 anyway). The CPU f32 path and the bf16 GPU path then start from f16-rounded weights
//! (relative error ≤ 2^-11 per weight), so compare against the f32 fixtures with that in mind,
//! or convert to bf16 for bf16 runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::TensorView;
use safetensors::{Dtype as StDtype, SafeTensors};

use crate::backend::Dtype;
use crate::embed::{Model, ModelFiles};
use crate::error::{Error, Result, read_model_file};
use crate::output::write_output;

/// What [`convert_model`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvertReport {
    /// The converted weights file.
    pub weights: PathBuf,
    /// Floating-point tensors converted (F32, F16 or BF16 other than the target dtype).
    pub converted: usize,
    /// Other tensors copied as they were (e.g. the I64 `position_ids`, or tensors already in
    /// the target dtype).
    pub copied: usize,
    /// Size of the source weights file, bytes.
    pub bytes_in: u64,
    /// Size of the written weights file, bytes.
    pub bytes_out: u64,
    /// Largest `|x − round(x)|` over all converted values.
    pub max_abs_rounding: f32,
    /// Largest `|x − round(x)| / |x|` over converted values with `|x| ≥ 1e-4` (below that,
    /// f16 subnormals dominate and a relative bound means little).
    pub max_rel_rounding: f32,
}

/// Reads one little-endian element as f32 (exact for F32, F16 and BF16).
type Widen = fn(&[u8]) -> f32;

/// Bytes of `v` in `dtype` (little-endian) and the rounding error.
fn encode(dtype: Dtype, v: f32) -> ([u8; 2], f32) {
    let (bytes, back) = match dtype {
        Dtype::Bf16 => {
            let h = half::bf16::from_f32(v);
            (h.to_le_bytes(), h.to_f32())
        }
        _ => {
            let h = half::f16::from_f32(v);
            (h.to_le_bytes(), h.to_f32())
        }
    };
    (bytes, (v - back).abs())
}

/// Writes `dst/model.safetensors` holding every F32, F16 and BF16 tensor of
/// `src/model.safetensors` in `dtype` (widened to f32, then rounded to nearest even; tensors
/// already in `dtype` and non-float tensors copied unchanged, names and metadata kept),
/// copies `config.json` and `tokenizer.json`, then loads the result with [`Model::load`] to
/// check it. `dst` is created if missing; files are written atomically (temporary file, then
/// rename).
///
/// # Errors
/// [`Error::InvalidArgument`] for `dtype` f32, `dst` equal to `src` or holding links to its
/// files, or a finite value that rounds to infinity in `dtype` (|x| ≥ 65520 for f16, beyond
/// about 3.39e38 for bf16); every error of reading the source model; [`Error::Io`] when `dst` cannot
/// be created or written.
pub fn convert_model(src: &Path, dst: &Path, dtype: Dtype) -> Result<ConvertReport> {
    if dtype == Dtype::F32 {
        return Err(Error::invalid(
            "--dtype",
            "f16 or bf16 (convert-model writes 16-bit weights)",
            dtype,
        ));
    }
    // Paths resolved through every symbolic link: output files that are links back into the
    // source directory would otherwise overwrite the model being read.
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same(src, dst) {
        return Err(Error::invalid(
            "--output",
            "a directory other than the model directory",
            dst.display(),
        ));
    }
    let from = ModelFiles::in_dir(src);
    let to = ModelFiles::in_dir(dst);
    let sources = [&from.weights, &from.config, &from.tokenizer];
    for out in [&to.weights, &to.config, &to.tokenizer] {
        if let Some(s) = sources.iter().find(|s| same(s, out)) {
            return Err(Error::invalid(
                "--output",
                "files that are not the source model's (a link in the output directory points \
                 back to it)",
                format!("{} is {}", out.display(), s.display()),
            ));
        }
    }

    let bytes = read_model_file(&from.weights)?;
    let st = SafeTensors::deserialize(&bytes).map_err(|source| Error::SafeTensors {
        path: from.weights.clone(),
        source,
    })?;
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|source| Error::SafeTensors {
        path: from.weights.clone(),
        source,
    })?;
    let metadata: Option<HashMap<String, String>> = header.metadata().clone();
    std::fs::create_dir_all(dst).map_err(|e| Error::io("create", dst, e))?;

    let st_dtype = if dtype == Dtype::Bf16 {
        StDtype::BF16
    } else {
        StDtype::F16
    };
    let mut report = ConvertReport {
        weights: to.weights.clone(),
        converted: 0,
        copied: 0,
        bytes_in: bytes.len() as u64,
        bytes_out: 0,
        max_abs_rounding: 0.0,
        max_rel_rounding: 0.0,
    };
    let mut converted: Vec<(String, StDtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in st.tensors() {
        // Floating-point tensors are widened to f32 (exact) and rounded once to `dtype`.
        let widen: Option<(usize, Widen)> = match t.dtype() {
            d if d == st_dtype => None,
            StDtype::F32 => Some((4, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            StDtype::F16 => Some((2, |b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())),
            StDtype::BF16 => Some((2, |b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())),
            _ => None,
        };
        let Some((width, widen)) = widen else {
            report.copied += 1;
            converted.push((name, t.dtype(), t.shape().to_vec(), t.data().to_vec()));
            continue;
        };
        let mut out = Vec::with_capacity(t.data().len() / width * 2);
        for b in t.data().chunks_exact(width) {
            let v = widen(b);
            let (e, err) = encode(dtype, v);
            if v.is_finite() && !err.is_finite() {
                return Err(Error::invalid(
                    "weights",
                    format!("finite values that stay finite in {dtype}"),
                    format!("{v} in `{name}`, which rounds to infinity"),
                ));
            }
            out.extend_from_slice(&e);
            report.max_abs_rounding = report.max_abs_rounding.max(err);
            if v.abs() >= 1e-4 {
                report.max_rel_rounding = report.max_rel_rounding.max(err / v.abs());
            }
        }
        report.converted += 1;
        converted.push((name, st_dtype, t.shape().to_vec(), out));
    }
    let views = converted
        .iter()
        .map(|(n, d, s, data)| {
            TensorView::new(*d, s.clone(), data)
                .map(|v| (n.clone(), v))
                .map_err(|source| Error::SafeTensors {
                    path: to.weights.clone(),
                    source,
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let serialized =
        safetensors::serialize(views, metadata).map_err(|source| Error::SafeTensors {
            path: to.weights.clone(),
            source,
        })?;
    report.bytes_out = serialized.len() as u64;
    write_output(Some(&to.weights), |w| w.write_all(&serialized))?;
    for (a, b) in [(&from.config, &to.config), (&from.tokenizer, &to.tokenizer)] {
        let data = read_model_file(a)?;
        write_output(Some(b), |w| w.write_all(&data))?;
    }
    Model::load(dst, 2)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_rounds_to_nearest_even_and_reports_the_error() {
        let (b, e) = encode(Dtype::F16, 1.0);
        assert_eq!((half::f16::from_le_bytes(b).to_f32(), e), (1.0, 0.0));
        // 1 + 2^-11 is halfway between two f16 values: ties to even gives 1.0.
        let (b, e) = encode(Dtype::F16, 1.0 + 1.0 / 2048.0);
        assert_eq!(half::f16::from_le_bytes(b).to_f32(), 1.0);
        assert_eq!(e, 1.0 / 2048.0);
        let (b, _) = encode(Dtype::Bf16, -2.5);
        assert_eq!(half::bf16::from_le_bytes(b).to_f32(), -2.5);
    }
}
