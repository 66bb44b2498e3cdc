//! Results: the JSON schema written to `bench/results/` and the text table.
//!
//! Ratios are *time* ratios, `t(path) / t(reference path)`: below 1 the path is faster. Ours is
//! compared with cuBLASLt and with the unfused sequence; the unfused sequence with cuBLASLt.
//! Where cuBLASLt has no fused epilogue its column is the bare GEMM (`computes: "GEMM only"`),
//! so `t/cuBLASLt` there is the cost of the epilogue over the GEMM alone.

use serde::{Deserialize, Serialize};

use crate::epilogue::Epilogue;
use crate::timing::Summary;

/// Version of the JSON layout below; bump on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// One benchmark run.
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
    /// One entry per (shape, epilogue).
    pub cases: Vec<CaseResult>,
}

/// The GPU as the driver reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Name (`NVIDIA H200`).
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
    /// Untimed runs per path.
    pub warmup: usize,
    /// Timed runs per path.
    pub runs: usize,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Whether cuBLASLt could be loaded.
    pub cublaslt_available: bool,
    /// How times were taken (one sentence).
    pub method: String,
}

/// Which implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    /// Our fused kernel (the slot in `ours`).
    Ours,
    /// cuBLASLt, with its fused epilogue where one exists.
    Cublaslt,
    /// cuBLASLt plain GEMM followed by the row kernels of `fused_gemm::rowwise`.
    Unfused,
}

impl PathKind {
    /// All paths, in table order.
    pub const ALL: [PathKind; 3] = [PathKind::Ours, PathKind::Cublaslt, PathKind::Unfused];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Ours => "ours",
            PathKind::Cublaslt => "cublaslt",
            PathKind::Unfused => "unfused",
        }
    }
}

/// What happened to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Verified and timed.
    Ok,
    /// Not run: no implementation (ours not plugged in, cuBLASLt missing).
    NotAvailable,
    /// Failed verification: not timed.
    Wrong,
    /// An error stopped it (see `note`).
    Error,
}

/// One path of one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathResult {
    /// Which path.
    pub path: PathKind,
    /// Outcome.
    pub status: Status,
    /// What the path computes relative to the epilogue's contract: `full`, `GELU tanh`,
    /// `GEMM only`.
    pub computes: String,
    /// Why it is n/a, wrong or failed; empty when ok.
    pub note: String,
    /// Relative Frobenius error against the f64 reference on the sampled rows (per-row outputs
    /// included), if checked.
    pub err_vs_reference: Option<f64>,
    /// Relative Frobenius error against the unfused path's whole output (ours only).
    pub err_vs_unfused: Option<f64>,
    /// Timings, when ok.
    pub timing: Option<Summary>,
    /// GEMM TFLOP/s at the median.
    pub tflops: Option<f64>,
    /// Effective GB/s of the minimal traffic at the median.
    pub gbps: Option<f64>,
    /// t / t(cuBLASLt).
    pub time_vs_cublaslt: Option<f64>,
    /// t / t(unfused).
    pub time_vs_unfused: Option<f64>,
}

impl PathResult {
    /// A path that did not produce a timing.
    pub fn without_timing(path: PathKind, status: Status, computes: &str, note: String) -> Self {
        PathResult {
            path,
            status,
            computes: computes.to_owned(),
            note,
            err_vs_reference: None,
            err_vs_unfused: None,
            timing: None,
            tflops: None,
            gbps: None,
            time_vs_cublaslt: None,
            time_vs_unfused: None,
        }
    }
}

/// One (shape, epilogue).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    /// Shape name.
    pub shape: String,
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
    /// Rows checked against the f64 reference.
    pub checked_rows: Vec<usize>,
    /// A problem with the case as a whole (empty if none).
    pub note: String,
    /// Ours, cuBLASLt, unfused.
    pub paths: Vec<PathResult>,
}

impl CaseResult {
    /// The result of `kind`, if present.
    pub fn path(&self, kind: PathKind) -> Option<&PathResult> {
        self.paths.iter().find(|p| p.path == kind)
    }

    /// Fills TFLOP/s, GB/s and the time ratios from the medians.
    pub fn derive(&mut self) {
        let median = |c: &CaseResult, k| {
            c.path(k)
                .and_then(|p| p.timing.map(|t| t.median_ms))
                .filter(|t| *t > 0.0)
        };
        let (lt, un) = (
            median(self, PathKind::Cublaslt),
            median(self, PathKind::Unfused),
        );
        let (flops, bytes) = (self.flops, self.bytes_min);
        for p in &mut self.paths {
            let Some(t) = p.timing.map(|t| t.median_ms).filter(|t| *t > 0.0) else {
                continue;
            };
            p.tflops = Some(flops / (t * 1e-3) / 1e12);
            p.gbps = Some(bytes / (t * 1e-3) / 1e9);
            p.time_vs_cublaslt = match p.path {
                PathKind::Cublaslt => None,
                _ => lt.map(|l| t / l),
            };
            p.time_vs_unfused = match p.path {
                PathKind::Ours => un.map(|u| t / u),
                _ => None,
            };
        }
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.prec$}"))
}

/// The results as a text table (one line per path; see the [module docs](self) for ratios).
pub fn format_table(r: &Report) -> String {
    let mut s = String::new();
    s += &format!(
        "fused-gemm-bench · {} (sm_{}, {} SMs, L2 {} MB) · {} · {} · commit {}\n",
        r.device.name,
        r.device.compute_capability,
        r.device.sm_count,
        r.device.l2_bytes >> 20,
        r.dtype,
        r.date,
        r.git_commit
    );
    s += &format!(
        "median of {} runs after {} warm-up (p10–p90 shown); t/x = time ÷ time of x, < 1 is faster\n\n",
        r.settings.runs, r.settings.warmup
    );
    s += &format!(
        "{:<28} {:<18} {:<24} {:<9} {:>10} {:>19} {:>8} {:>8} {:>10} {:>10}  {}\n",
        "shape",
        "M×N×K",
        "epilogue",
        "path",
        "median ms",
        "p10–p90 ms",
        "TFLOP/s",
        "GB/s",
        "t/cuBLASLt",
        "t/unfused",
        "check"
    );
    for c in &r.cases {
        let mnk = format!("{}×{}×{}", c.m, c.n, c.k);
        for (i, p) in c.paths.iter().enumerate() {
            let (shape, dims, epi) = if i == 0 {
                (c.shape.as_str(), mnk.as_str(), c.epilogue.name())
            } else {
                ("", "", "")
            };
            let mut check = match p.err_vs_reference {
                Some(e) => format!("err {e:.1e}"),
                None => String::new(),
            };
            if let Some(e) = p.err_vs_unfused {
                check += &format!(" (vs unfused {e:.1e})");
            }
            if p.computes != "full" {
                check += &format!(" [{}]", p.computes);
            }
            match p.status {
                Status::Ok => {
                    let t = p.timing.expect("ok paths carry timings");
                    s += &format!(
                        "{shape:<28} {dims:<18} {epi:<24} {:<9} {:>10.4} {:>19} {:>8} {:>8} {:>10} {:>10}  {}\n",
                        p.path.name(),
                        t.median_ms,
                        format!("{:.4}–{:.4}", t.p10_ms, t.p90_ms),
                        opt(p.tflops, 1),
                        opt(p.gbps, 0),
                        opt(p.time_vs_cublaslt, 2),
                        opt(p.time_vs_unfused, 2),
                        check.trim()
                    );
                }
                other => {
                    let word = match other {
                        Status::NotAvailable => "n/a",
                        Status::Wrong => "WRONG",
                        _ => "error",
                    };
                    let line = format!(
                        "{shape:<28} {dims:<18} {epi:<24} {:<9} {word:>10}  {} {}",
                        p.path.name(),
                        p.note,
                        check.trim()
                    );
                    s += line.trim_end();
                    s += "\n";
                }
            }
        }
        if !c.note.is_empty() {
            s += &format!("{:<28} {}\n", "", c.note);
        }
    }
    s
}

/// The device's name as a file-name part: lower case, every character other than an ASCII letter
/// or digit replaced by `-` (`NVIDIA H100 80GB HBM3` → `nvidia-h100-80gb-hbm3`).
pub fn device_slug(name: &str) -> String {
    name.to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn device_names_become_file_name_parts() {
        assert_eq!(device_slug("NVIDIA H200"), "nvidia-h200");
        assert_eq!(
            device_slug("NVIDIA H100 80GB HBM3"),
            "nvidia-h100-80gb-hbm3"
        );
        assert_eq!(device_slug("A/B c_d"), "a-b-c-d");
    }

    pub(crate) fn sample() -> Report {
        let t = |m: f64| Summary {
            runs: 100,
            median_ms: m,
            p10_ms: m * 0.95,
            p90_ms: m * 1.1,
            mean_ms: m,
            min_ms: m * 0.9,
            max_ms: m * 1.5,
        };
        let timed = |path, m, computes: &str| PathResult {
            timing: Some(t(m)),
            err_vs_reference: Some(2.5e-3),
            ..PathResult::without_timing(path, Status::Ok, computes, String::new())
        };
        let mut c = CaseResult {
            shape: "anchor.bert-ffn-up".into(),
            m: 4096,
            n: 3072,
            k: 768,
            epilogue: Epilogue::BiasGelu,
            rotation_sets: 4,
            flops: Epilogue::flops(4096, 3072, 768),
            bytes_min: Epilogue::BiasGelu.bytes_min(4096, 3072, 768, 2),
            checked_rows: vec![0, 4095],
            note: String::new(),
            paths: vec![
                timed(PathKind::Ours, 0.05, "full"),
                timed(PathKind::Cublaslt, 0.04, "GELU tanh"),
                timed(PathKind::Unfused, 0.08, "full"),
            ],
        };
        c.derive();
        let mut d = c.clone();
        d.shape = "llama3-8b.gate-up.m128".into();
        d.epilogue = Epilogue::Swiglu;
        d.paths[0] = PathResult::without_timing(
            PathKind::Ours,
            Status::NotAvailable,
            "full",
            "no fused kernel plugged in".into(),
        );
        d.paths[1].computes = "GEMM only".into();
        d.derive();
        Report {
            schema_version: SCHEMA_VERSION,
            tool: "fused-gemm-bench 0.1.0".into(),
            command_line: vec!["fused-gemm-bench".into(), "--quick".into()],
            date: "2026-11-29T17:00:00Z".into(),
            git_commit: "0123456789abcdef".into(),
            device: DeviceInfo {
                name: "NVIDIA H200".into(),
                compute_capability: 90,
                sm_count: 132,
                l2_bytes: 62_914_560,
            },
            dtype: "bf16".into(),
            settings: Settings {
                warmup: 10,
                runs: 100,
                seed: 42,
                cublaslt_available: true,
                method: "CUDA events".into(),
            },
            cases: vec![c, d],
        }
    }

    #[test]
    fn derived_numbers_are_right() {
        let r = sample();
        let c = &r.cases[0];
        let ours = c.path(PathKind::Ours).unwrap();
        // 2·4096·3072·768 flop in 0.05 ms = 386.5 TFLOP/s.
        assert!((ours.tflops.unwrap() - 386.547_056_64).abs() < 1e-3);
        assert!((ours.time_vs_cublaslt.unwrap() - 1.25).abs() < 1e-12);
        assert!((ours.time_vs_unfused.unwrap() - 0.625).abs() < 1e-12);
        let un = c.path(PathKind::Unfused).unwrap();
        assert!((un.time_vs_cublaslt.unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(un.time_vs_unfused, None);
        assert_eq!(c.path(PathKind::Cublaslt).unwrap().time_vs_cublaslt, None);
        let gbps = c.bytes_min / 0.05e-3 / 1e9;
        assert!((ours.gbps.unwrap() - gbps).abs() < 1e-9);
        // n/a paths get no numbers.
        assert_eq!(r.cases[1].paths[0].tflops, None);
    }

    #[test]
    fn json_round_trips_and_names_fields() {
        let r = sample();
        let text = serde_json::to_string_pretty(&r).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["cases"][0]["epilogue"], "bias-gelu");
        assert_eq!(v["cases"][0]["paths"][1]["path"], "cublaslt");
        assert_eq!(v["cases"][1]["paths"][0]["status"], "not-available");
        assert_eq!(v["command_line"][1], "--quick");
        assert!(v["cases"][0]["paths"][0]["timing"]["median_ms"].is_f64());
        // A failed check's infinite error is written as null, not refused.
        let mut bad = sample();
        bad.cases[0].paths[0].err_vs_reference = Some(f64::INFINITY);
        let text = serde_json::to_string(&bad).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back.cases[0].paths[0].err_vs_reference, None);
    }

    #[test]
    fn table_shows_every_path_with_its_numbers() {
        let t = format_table(&sample());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("NVIDIA H200") && lines[0].contains("commit 0123456789abcdef"));
        let ours = lines
            .iter()
            .find(|l| l.contains("anchor.bert-ffn-up"))
            .unwrap();
        assert!(ours.contains("ours") && ours.contains("0.0500") && ours.contains("386.5"));
        assert!(ours.contains("1.25") && ours.contains("0.62"), "{ours}");
        assert!(t.contains("[GELU tanh]") && t.contains("[GEMM only]"));
        let na = lines
            .iter()
            .find(|l| l.contains("llama3-8b.gate-up.m128"))
            .unwrap();
        assert!(
            na.contains("n/a") && na.contains("no fused kernel plugged in"),
            "{na}"
        );
        println!("{t}");
        // Two header lines, a blank one, column names, 6 path lines.
        assert_eq!(lines.len(), 4 + 6);
    }
}
