//! What `fused-gemm-bench run` writes: the JSON schema of one run (ours and the in-process
//! cuBLAS columns of every row) and its text table.
//!
//! Columns ("paths") of a row: ours as the launcher chooses (tuned), ours with the model's
//! tile, ours with each Hopper tile forced, cuBLAS's plain GEMM (the best of the heuristic's top algorithms,
//! timed) and cuBLASLt's fused epilogue where one exists. `computes` says what a path computes
//! relative to the row's contract: `full`, `GEMM only` (cuBLAS on a fused row: the floor, not
//! a competitor) or `gelu_tanh, not erf`.

use serde::{Deserialize, Serialize};

use crate::epilogue::Epilogue;
use crate::timing::Summary;

/// Version of the JSON layout below; bump on incompatible changes.
pub const SCHEMA_VERSION: u32 = 3;

/// One run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `fused-gemm-bench <version>`.
    pub tool: String,
    /// The exact command line (argv).
    pub command_line: Vec<String>,
    /// UTC start time, RFC 3339.
    pub date: String,
    /// Git commit the binary was built from (`-dirty` if the tree had changes), or `unknown`.
    pub git_commit: String,
    /// The GPU.
    pub device: DeviceInfo,
    /// Storage type of every operand (`bf16`, `f16`).
    pub dtype: String,
    /// How the timings were taken.
    pub settings: Settings,
    /// One entry per row.
    pub rows: Vec<RowResult>,
}

/// The GPU as the driver reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Compute capability, major·10 + minor.
    pub compute_capability: u32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u64,
}

/// Timing settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Untimed runs per path before its first round.
    pub warmup: usize,
    /// Interleaved rounds: each path is timed once per round, in turn.
    pub rounds: usize,
    /// Timed runs per path per round.
    pub runs_per_round: usize,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Algorithms of cuBLASLt's heuristic timed per shape (the fastest is kept).
    pub cublas_algos: usize,
    /// cuBLASLt's workspace, bytes.
    pub cublas_workspace_bytes: usize,
    /// Whether cuBLASLt could be loaded.
    pub cublaslt_available: bool,
    /// How times were taken (one sentence).
    pub method: String,
}

/// Which implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathKind {
    /// Our launcher, choosing the tile itself.
    Ours,
    /// Our launcher without an autotuner: the model's tile.
    OursModel,
    /// Our launcher restricted to one Hopper tile ([`PathResult::label`] names it).
    OursTile,
    /// cuBLAS's plain GEMM through cuBLASLt, the fastest of the heuristic's top algorithms.
    Cublas,
    /// cuBLASLt with its fused epilogue (bias, bias+GELU).
    Cublaslt,
}

impl PathKind {
    /// Whether the path is one of ours.
    pub fn is_ours(self) -> bool {
        matches!(
            self,
            PathKind::Ours | PathKind::OursModel | PathKind::OursTile
        )
    }
}

/// What happened to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Verified and timed.
    Ok,
    /// Not run: no implementation (no kernel for the epilogue, a tile that cannot take the
    /// problem, cuBLASLt missing).
    NotAvailable,
    /// Failed verification: not timed.
    Wrong,
    /// An error stopped it (see `note`).
    Error,
}

/// One path of one row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathResult {
    /// Which path.
    pub path: PathKind,
    /// Its column name: `ours`, `ours, model's tile`, `tile 128x256 cooperative`, `cuBLAS`,
    /// `cuBLASLt fused`.
    pub label: String,
    /// Outcome.
    pub status: Status,
    /// What the path computes relative to the row's contract (see the [module docs](self)).
    pub computes: String,
    /// Why it is n/a, wrong or failed; empty when ok.
    pub note: String,
    /// What ran: ours' mainloop and tile (`sm90-tma 128x256x64`, see
    /// [`crate::ours::describe`]) or the cuBLASLt algorithm (`algorithm 3 of 8 ...`).
    pub kernel: Option<String>,
    /// Relative Frobenius error against the f64 reference on the sampled rows.
    pub err_vs_reference: Option<f64>,
    /// The largest `|x − ref| / (atol + rtol·|ref|)` over the sampled rows (≤ 1 passes).
    pub worst_element: Option<f64>,
    /// Timings over every round, when ok.
    pub timing: Option<Summary>,
}

impl PathResult {
    /// A path without a result yet.
    pub fn new(path: PathKind, label: impl Into<String>, computes: &str) -> Self {
        PathResult {
            path,
            label: label.into(),
            status: Status::Ok,
            computes: computes.to_owned(),
            note: String::new(),
            kernel: None,
            err_vs_reference: None,
            worst_element: None,
            timing: None,
        }
    }

    /// The path with `status` and `note`.
    pub fn with_status(mut self, status: Status, note: impl Into<String>) -> Self {
        self.status = status;
        self.note = note.into();
        self
    }

    /// The median, when the path was timed.
    pub fn median_ms(&self) -> Option<f64> {
        self.timing
            .map(|t| t.median_ms)
            .filter(|t| self.status == Status::Ok && *t > 0.0)
    }
}

/// One row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowResult {
    /// Row name (`bert-base.ffn-up.bias-gelu`).
    pub name: String,
    /// M.
    pub m: usize,
    /// N (GEMM width).
    pub n: usize,
    /// K.
    pub k: usize,
    /// The epilogue.
    pub epilogue: Epilogue,
    /// Rotation sets used.
    pub rotation_sets: usize,
    /// GEMM floating-point operations.
    pub flops: f64,
    /// Minimal bytes moved.
    pub bytes_min: f64,
    /// Rows of C checked against the f64 reference.
    pub checked_rows: Vec<usize>,
    /// A problem with the row as a whole (empty if none).
    pub note: String,
    /// Every column.
    pub paths: Vec<PathResult>,
}

impl RowResult {
    /// The first path of `kind`.
    pub fn path(&self, kind: PathKind) -> Option<&PathResult> {
        self.paths.iter().find(|p| p.path == kind)
    }

    /// The fastest of our timed paths.
    pub fn best_ours(&self) -> Option<&PathResult> {
        self.paths
            .iter()
            .filter(|p| p.path.is_ours())
            .filter_map(|p| p.median_ms().map(|t| (p, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(p, _)| p)
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.prec$}"))
}

/// The run as a text table: one line per path, with its median, TFLOP/s, time over cuBLAS's
/// GEMM and its check.
pub fn format_table(r: &Report) -> String {
    let mut s = format!(
        "fused-gemm-bench · {} (sm_{}, {} SMs, L2 {} MB) · {} · commit {}\n",
        r.device.name,
        r.device.compute_capability,
        r.device.sm_count,
        r.device.l2_bytes >> 20,
        r.dtype,
        r.git_commit,
    );
    s += &format!("{}\n", r.settings.method);
    for row in &r.rows {
        s += &format!(
            "\n{} ({}×{}×{}, {} sets){}\n",
            row.name,
            row.m,
            row.n,
            row.k,
            row.rotation_sets,
            if row.note.is_empty() {
                String::new()
            } else {
                format!(" — {}", row.note)
            }
        );
        let gemm = row.path(PathKind::Cublas).and_then(PathResult::median_ms);
        for p in &row.paths {
            let t = p.median_ms();
            let status = match p.status {
                Status::Ok => String::new(),
                Status::NotAvailable => "n/a".into(),
                Status::Wrong => "WRONG".into(),
                Status::Error => "error".into(),
            };
            s += &format!(
                "  {:<30} {:>9} ms {:>6} TF/s {:>6}× GEMM  err {:>8} worst {:>5}  {}{}{}\n",
                p.label,
                opt(t, 4),
                opt(t.map(|t| row.flops / (t * 1e-3) / 1e12), 0),
                opt(t.zip(gemm).map(|(t, g)| t / g), 3),
                p.err_vs_reference
                    .map_or_else(|| "-".into(), |e| format!("{e:.1e}")),
                opt(p.worst_element, 2),
                status,
                if p.note.is_empty() || p.status == Status::Ok {
                    String::new()
                } else {
                    format!(" {}", p.note)
                },
                if p.computes == "full" {
                    String::new()
                } else {
                    format!(" [{}]", p.computes)
                },
            );
        }
    }
    s
}

/// Where a benchmark binary writes its results: the folder `var` names if set; else
/// `bench/results` under the current directory when run from a checkout's root (a GPU bundle
/// run from elsewhere); else this crate's `results/` of the tree it was built in.
pub fn results_dir(var: &str) -> std::path::PathBuf {
    if let Some(d) = std::env::var_os(var) {
        return d.into();
    }
    let local = std::path::Path::new("bench");
    if local.is_dir() {
        return local.join("results");
    }
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results")
}

/// A file-name-safe slug of a device name: `NVIDIA H100 80GB HBM3` → `nvidia-h100-80gb-hbm3`.
pub fn device_slug(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
    }
    s.trim_end_matches('-').to_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn summary(median_ms: f64) -> Summary {
        Summary {
            runs: 10,
            median_ms,
            p10_ms: median_ms,
            p90_ms: median_ms,
            mean_ms: median_ms,
            min_ms: median_ms,
            max_ms: median_ms,
        }
    }

    pub(crate) fn sample() -> Report {
        let timed = |path, label: &str, computes: &str, ms| PathResult {
            timing: Some(summary(ms)),
            err_vs_reference: Some(1e-3),
            worst_element: Some(0.2),
            ..PathResult::new(path, label, computes)
        };
        Report {
            schema_version: SCHEMA_VERSION,
            tool: "fused-gemm-bench 0.1.0".into(),
            command_line: vec!["fused-gemm-bench".into(), "run".into()],
            date: "2026-12-06T00:00:00Z".into(),
            git_commit: "abc".into(),
            device: DeviceInfo {
                name: "NVIDIA H100 80GB HBM3".into(),
                compute_capability: 90,
                sm_count: 132,
                l2_bytes: 50 << 20,
            },
            dtype: "bf16".into(),
            settings: Settings {
                warmup: 5,
                rounds: 3,
                runs_per_round: 20,
                seed: 1,
                cublas_algos: 8,
                cublas_workspace_bytes: 32 << 20,
                cublaslt_available: true,
                method: "events".into(),
            },
            rows: vec![RowResult {
                name: "bert-base.ffn-up.bias-gelu".into(),
                m: 4096,
                n: 3072,
                k: 768,
                epilogue: Epilogue::BiasGelu,
                rotation_sets: 4,
                flops: Epilogue::flops(4096, 3072, 768),
                bytes_min: 1.0,
                checked_rows: vec![0, 4095],
                note: String::new(),
                paths: vec![
                    timed(PathKind::Ours, "ours", "full", 0.05),
                    timed(PathKind::OursTile, "tile 128x256 cooperative", "full", 0.04),
                    PathResult::new(PathKind::OursTile, "tile 256x256 cluster", "full")
                        .with_status(Status::NotAvailable, "not compiled"),
                    timed(PathKind::Cublas, "cuBLAS", "GEMM only", 0.034),
                    timed(
                        PathKind::Cublaslt,
                        "cuBLASLt fused",
                        "gelu_tanh, not erf",
                        0.039,
                    ),
                ],
            }],
        }
    }

    #[test]
    fn table_names_every_path_and_what_it_computes() {
        let r = sample();
        let t = format_table(&r);
        assert!(
            t.contains("bert-base.ffn-up.bias-gelu (4096×3072×768, 4 sets)"),
            "{t}"
        );
        assert!(t.contains("n/a not compiled"), "{t}");
        assert!(
            t.contains("[gelu_tanh, not erf]") && t.contains("[GEMM only]"),
            "{t}"
        );
        // ours ÷ cuBLAS GEMM: 0.05 / 0.034.
        assert!(t.contains(&format!("{:.3}× GEMM", 0.05 / 0.034)), "{t}");
        assert_eq!(
            r.rows[0].best_ours().unwrap().label,
            "tile 128x256 cooperative"
        );
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn device_slugs_are_file_names() {
        assert_eq!(
            device_slug("NVIDIA H100 80GB HBM3"),
            "nvidia-h100-80gb-hbm3"
        );
        assert_eq!(device_slug("NVIDIA H200"), "nvidia-h200");
    }
}
