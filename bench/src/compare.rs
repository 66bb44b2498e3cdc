//! The curated comparison: merges one run of every side on one card into `compare.md`,
//! `compare.csv` and `compare.png`.
//!
//! Inputs, all written in one `bench/compare/run.sh` run on one GPU:
//! - ours and cuBLAS in-process ([`Report`] of `fused-gemm-bench run`), once first and once
//!   last, so the table shows the card's drift over the run;
//! - the PyTorch side of the same rows ([`Baselines`], `bench/compare/torch_rows.py`): PyTorch's
//!   own GEMM, eager, `torch.compile`, CUDA-graph replay, cuBLASLt's fused bias+GELU through
//!   PyTorch, CODA and quack;
//! - the whole MiniLM forward pass, ours (`fused-gemm bench --json`) and PyTorch's
//!   (`bench/minilm/pytorch_baseline.py`).
//!
//! Every ratio is a time ratio `ours / baseline`: above 1 ours is slower. The best baseline of
//! a row is the fastest column that computes the row's whole contract (the plain GEMM on a
//! fused row and cuBLASLt's tanh GELU on an erf row are shown, never counted).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chart::{Bars, draw_bars};
use crate::epilogue::Epilogue;
use crate::error::{BenchError, Result};
use crate::report::{PathKind, PathResult, Report, RowResult, Status};

/// How far apart the in-process cuBLAS and PyTorch's GEMM may be before the table says so.
pub const GEMM_AGREEMENT: f64 = 0.03;

/// One column of the PyTorch side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BaselineColumn {
    /// Stable key: `torch-gemm`, `torch-eager`, `torch-compile`, `torch-graph`,
    /// `torch-lt-fused`, `quack`, `coda`.
    pub column: String,
    /// What it computes relative to the row's contract (`full`, `GEMM only`, …).
    pub computes: String,
    /// `ok`, `n/a`, `wrong` or `error`.
    pub status: String,
    /// Why it is not ok, or what it is (`default config`).
    pub note: String,
    /// Median, ms.
    pub median_ms: Option<f64>,
    /// 10th percentile, ms.
    pub p10_ms: Option<f64>,
    /// 90th percentile, ms.
    pub p90_ms: Option<f64>,
    /// Timed runs.
    pub runs: Option<usize>,
    /// Relative Frobenius error against the f32 reference on upcast inputs.
    pub err: Option<f64>,
}

impl BaselineColumn {
    fn median(&self) -> Option<f64> {
        self.median_ms.filter(|t| self.status == "ok" && *t > 0.0)
    }
}

/// One row of the PyTorch side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BaselineRow {
    /// The row's name, as `fused-gemm-bench list --json` gave it.
    pub name: String,
    /// Its columns.
    pub columns: Vec<BaselineColumn>,
}

/// What `bench/compare/torch_rows.py` writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Baselines {
    /// The GPU's name.
    pub device: String,
    /// Library versions (`torch`, `cuda`, `triton`, `quack`, `coda`), or why one is missing.
    pub versions: BTreeMap<String, String>,
    /// How times were taken.
    pub method: String,
    /// One entry per row.
    pub rows: Vec<BaselineRow>,
    /// Anything the script wants said (skipped columns, budgets).
    pub notes: Vec<String>,
}

/// One batch size of the MiniLM forward, either side (fields absent on the other side).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ForwardRow {
    /// Batch size.
    pub batch: usize,
    /// Eager forward, ms.
    pub eager_ms: Option<f64>,
    /// CUDA-graph replay, ms.
    pub graph_ms: Option<f64>,
    /// `torch.compile`, ms (PyTorch only).
    pub compile_ms: Option<f64>,
    /// Upload + forward + download, host clock, ms (ours only).
    pub end_to_end_ms: Option<f64>,
}

/// One side of the MiniLM forward comparison.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Forward {
    /// Storage type.
    pub dtype: String,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// How it was measured.
    pub method: String,
    /// One entry per batch size.
    pub rows: Vec<ForwardRow>,
    /// Measurements skipped, with reasons (PyTorch).
    pub skipped: Vec<String>,
    /// Why CUDA graphs were off (ours).
    pub graph_error: Option<String>,
}

/// Everything one comparison run produced, and what the table says about it.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// Ours and cuBLAS, first.
    pub ours: Option<Report>,
    /// Ours and cuBLAS again, last.
    pub ours_last: Option<Report>,
    /// The PyTorch side.
    pub torch: Option<Baselines>,
    /// Ours, MiniLM forward.
    pub minilm_ours: Option<Forward>,
    /// PyTorch, MiniLM forward.
    pub minilm_torch: Option<Forward>,
    /// Ours, BERT-base forward (random weights of its shapes).
    pub bert_ours: Option<Forward>,
    /// PyTorch, BERT-base forward.
    pub bert_torch: Option<Forward>,
    /// The driver version (`nvidia-smi`).
    pub driver: String,
    /// The command that produced the inputs.
    pub command: String,
    /// Inputs that could not be read, with why.
    pub missing: Vec<String>,
}

/// Reads a JSON file; `None` with the reason recorded when it is absent or unreadable.
pub fn load<T: for<'de> Deserialize<'de>>(
    path: Option<&Path>,
    missing: &mut Vec<String>,
) -> Option<T> {
    let path = path?;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            missing.push(format!("{}: {e}", path.display()));
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            missing.push(format!("{}: {e}", path.display()));
            None
        }
    }
}

/// One column of the merged table.
#[derive(Clone, Debug, PartialEq)]
struct Cell {
    /// Column header.
    name: &'static str,
    /// Median, ms, when timed and right.
    ms: Option<f64>,
    /// What it computes.
    computes: String,
    /// `n/a`, `WRONG`, `error` or empty.
    flag: &'static str,
    /// A baseline (not ours).
    baseline: bool,
}

/// Baseline columns of the PyTorch side, in table order, with their headers.
const TORCH_COLUMNS: [(&str, &str); 7] = [
    ("torch-gemm", "PyTorch GEMM"),
    ("torch-eager", "PyTorch eager"),
    ("torch-compile", "torch.compile"),
    ("torch-graph", "PyTorch CUDA graph"),
    ("torch-lt-fused", "PyTorch cuBLASLt fused"),
    ("quack", "quack"),
    ("coda", "CODA"),
];

fn flag_of(s: Status) -> &'static str {
    match s {
        Status::Ok => "",
        Status::NotAvailable => "n/a",
        Status::Wrong => "WRONG",
        Status::Error => "error",
    }
}

fn ours_cell(name: &'static str, p: Option<&PathResult>, baseline: bool) -> Cell {
    Cell {
        name,
        ms: p.and_then(PathResult::median_ms),
        computes: p.map_or_else(|| "full".into(), |p| p.computes.clone()),
        flag: p.map_or("n/a", |p| flag_of(p.status)),
        baseline,
    }
}

/// A merged row: our side's result and the PyTorch side's columns.
struct Merged<'a> {
    row: &'a RowResult,
    last: Option<&'a RowResult>,
    cells: Vec<Cell>,
}

impl Merged<'_> {
    fn ours(&self) -> Option<f64> {
        self.row
            .path(PathKind::Ours)
            .and_then(PathResult::median_ms)
    }

    /// The fastest baseline computing the whole contract.
    fn best(&self) -> Option<&Cell> {
        self.cells
            .iter()
            .filter(|c| c.baseline && c.computes == "full" && c.ms.is_some())
            .min_by(|a, b| a.ms.unwrap().total_cmp(&b.ms.unwrap()))
    }

    /// The faster plain GEMM of this shape: the in-process cuBLAS or PyTorch's.
    fn gemm_floor(&self) -> Option<f64> {
        self.cells
            .iter()
            .filter(|c| c.name == "cuBLAS" || c.name == "PyTorch GEMM")
            .filter_map(|c| c.ms)
            .min_by(f64::total_cmp)
    }

    /// Baselines computing the whole contract that beat ours.
    fn faster_than_ours(&self) -> Vec<&'static str> {
        let Some(ours) = self.ours() else {
            return Vec::new();
        };
        self.cells
            .iter()
            .filter(|c| c.baseline && c.computes == "full")
            .filter(|c| c.ms.is_some_and(|t| t < ours))
            .map(|c| c.name)
            .collect()
    }
}

fn merge<'a>(inputs: &'a Inputs, ours: &'a Report) -> Vec<Merged<'a>> {
    let torch_rows: BTreeMap<&str, &BaselineRow> = inputs
        .torch
        .iter()
        .flat_map(|b| &b.rows)
        .map(|r| (r.name.as_str(), r))
        .collect();
    ours.rows
        .iter()
        .map(|row| {
            let best_tile = row
                .paths
                .iter()
                .filter(|p| p.path == PathKind::OursTile)
                .filter_map(|p| p.median_ms().map(|t| (p, t)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(p, _)| p);
            let mut cells = vec![
                ours_cell("ours", row.path(PathKind::Ours), false),
                ours_cell("ours, model's tile", row.path(PathKind::OursModel), false),
                ours_cell("best forced tile", best_tile, false),
                ours_cell("cuBLAS", row.path(PathKind::Cublas), true),
                ours_cell("cuBLASLt fused", row.path(PathKind::Cublaslt), true),
            ];
            // A row without a fused cuBLASLt epilogue has no such column at all.
            if row.path(PathKind::Cublaslt).is_none() {
                cells[4].flag = "";
                cells[4].computes = "none".into();
            }
            let t = torch_rows.get(row.name.as_str());
            for (key, name) in TORCH_COLUMNS {
                let c = t.and_then(|t| t.columns.iter().find(|c| c.column == key));
                cells.push(Cell {
                    name,
                    ms: c.and_then(BaselineColumn::median),
                    computes: c.map_or_else(|| "none".into(), |c| c.computes.clone()),
                    flag: match c.map(|c| c.status.as_str()) {
                        None | Some("ok") => "",
                        Some("wrong") => "WRONG",
                        Some("error") => "error",
                        Some(_) => "n/a",
                    },
                    baseline: true,
                });
            }
            let last = inputs
                .ours_last
                .as_ref()
                .and_then(|l| l.rows.iter().find(|r| r.name == row.name));
            Merged { row, last, cells }
        })
        .collect()
}

fn ms(v: Option<f64>) -> String {
    match v {
        Some(t) if t < 0.1 => format!("{t:.4}"),
        Some(t) => format!("{t:.3}"),
        None => "–".into(),
    }
}

fn cell_text(c: &Cell) -> String {
    if !c.flag.is_empty() {
        return c.flag.to_owned();
    }
    match (c.ms, c.computes.as_str()) {
        (_, "none") => String::new(),
        (Some(t), "full") => ms(Some(t)),
        // Shown, not a competitor: another function (the plain GEMM, tanh for erf).
        (Some(t), _) => format!("({})", ms(Some(t))),
        (None, _) => "–".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => {
            let r = a / b;
            if r > 1.0 {
                format!("**{r:.2}**")
            } else {
                format!("{r:.2}")
            }
        }
        _ => "–".into(),
    }
}

fn versions(inputs: &Inputs) -> String {
    let Some(t) = &inputs.torch else {
        return "PyTorch side not run".into();
    };
    let v = |k: &str| t.versions.get(k).cloned().unwrap_or_else(|| "?".into());
    format!(
        "PyTorch {} (CUDA {}), Triton {}, quack {}, CODA {}",
        v("torch"),
        v("cuda"),
        v("triton"),
        v("quack"),
        v("coda")
    )
}

/// The markdown table and notes.
pub fn markdown(inputs: &Inputs) -> String {
    let mut s = String::new();
    let Some(ours) = &inputs.ours else {
        return "# fused-gemm comparison\n\nOur side did not run; nothing to compare.\n".into();
    };
    let d = &ours.device;
    let clean = if ours.git_commit.ends_with("-dirty") {
        "built from a tree with uncommitted changes"
    } else {
        "clean"
    };
    let _ = writeln!(s, "# fused-gemm against cuBLAS, PyTorch, CODA and quack\n");
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| date | {} |", ours.date);
    let _ = writeln!(
        s,
        "| card | {} · sm_{} · {} SMs · L2 {} MiB · driver {} |",
        d.name,
        d.compute_capability,
        d.sm_count,
        d.l2_bytes >> 20,
        if inputs.driver.is_empty() {
            "?"
        } else {
            &inputs.driver
        }
    );
    let _ = writeln!(s, "| build | commit `{}` ({clean}) |", ours.git_commit);
    let _ = writeln!(s, "| baselines | {} |", versions(inputs));
    let _ = writeln!(s, "| command | `{}` |", inputs.command);
    let _ = writeln!(
        s,
        "| method | {} {} rounds × {} runs per column, interleaved; cuBLAS: the fastest of \
         the {} algorithms cuBLASLt's heuristic offers, {} MiB workspace |",
        ours.settings.method,
        ours.settings.rounds,
        ours.settings.runs_per_round,
        ours.settings.cublas_algos,
        ours.settings.cublas_workspace_bytes >> 20,
    );
    if let Some(t) = &inputs.torch {
        let _ = writeln!(s, "| PyTorch side | {} |", t.method);
    }
    let merged = merge(inputs, ours);
    let _ = writeln!(
        s,
        "\n## Layer GEMMs ({}, ms, medians)\n\nRatios are times: above 1 (bold) ours is \
         slower. A value in parentheses computes something else (the plain GEMM on a fused \
         row, tanh-GELU on an erf row) and is never the best baseline. `best forced tile` is \
         ours with each Hopper tile forced, the fastest; `drift` is ours in the run's last \
         pass over its first.\n",
        ours.dtype
    );
    let mut header = vec!["row", "M×N×K"];
    header.extend(merged.first().map_or(Vec::new(), |m| {
        m.cells.iter().map(|c| c.name).collect::<Vec<_>>()
    }));
    header.extend([
        "best baseline",
        "ours ÷ best",
        "ours ÷ GEMM",
        "drift",
        "ours is slower than",
    ]);
    let _ = writeln!(s, "| {} |", header.join(" | "));
    let _ = writeln!(
        s,
        "|{}",
        header
            .iter()
            .enumerate()
            .map(|(i, _)| if i < 2 { "---|" } else { "---:|" })
            .collect::<String>()
    );
    for m in &merged {
        let r = m.row;
        let mut cols = vec![r.name.clone(), format!("{}×{}×{}", r.m, r.n, r.k)];
        cols.extend(m.cells.iter().map(cell_text));
        let best = m.best();
        cols.push(best.map_or("–".into(), |b| format!("{} ({})", ms(b.ms), b.name)));
        cols.push(ratio(m.ours(), best.and_then(|b| b.ms)));
        cols.push(ratio(m.ours(), m.gemm_floor()));
        let drift = m
            .last
            .and_then(|l| l.path(PathKind::Ours))
            .and_then(PathResult::median_ms)
            .zip(m.ours())
            .map_or("–".into(), |(l, f)| {
                format!("{:+.1}%", (l / f - 1.0) * 100.0)
            });
        cols.push(drift);
        cols.push(m.faster_than_ours().join(", "));
        let _ = writeln!(s, "| {} |", cols.join(" | "));
    }

    // Summary of where we stand.
    let judged: Vec<(f64, &Merged<'_>)> = merged
        .iter()
        .filter_map(|m| Some((m.ours()? / m.best()?.ms?, m)))
        .collect();
    let slower: Vec<&(f64, &Merged<'_>)> = judged.iter().filter(|(r, _)| *r > 1.0).collect();
    let _ = writeln!(
        s,
        "\nOurs (the launcher's choice) is slower than the best baseline on {} of {} rows with \
         both timed{}.",
        slower.len(),
        judged.len(),
        if slower.is_empty() {
            String::new()
        } else {
            let worst = slower
                .iter()
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .expect("not empty");
            format!(" (worst: {} at {:.2}×)", worst.1.row.name, worst.0)
        }
    );

    // The in-process cuBLAS against PyTorch's on the plain-GEMM rows.
    let mut agree = 0;
    let mut disagree = Vec::new();
    for m in merged.iter().filter(|m| m.row.epilogue == Epilogue::Gemm) {
        let get = |n: &str| m.cells.iter().find(|c| c.name == n).and_then(|c| c.ms);
        if let (Some(a), Some(b)) = (get("cuBLAS"), get("PyTorch GEMM")) {
            if (a / b - 1.0).abs() <= GEMM_AGREEMENT {
                agree += 1;
            } else {
                disagree.push(format!(
                    "{}: in-process {} ms, PyTorch {} ms ({:+.1}%; the best baseline is the \
                     faster)",
                    m.row.name,
                    ms(Some(a)),
                    ms(Some(b)),
                    (a / b - 1.0) * 100.0
                ));
            }
        }
    }
    let _ = writeln!(
        s,
        "\nThe in-process cuBLAS and PyTorch's `x @ w.T` agree within {:.0}% on {agree} of {} \
         plain-GEMM rows timed by both.",
        GEMM_AGREEMENT * 100.0,
        agree + disagree.len()
    );
    for d in &disagree {
        let _ = writeln!(s, "- {d}");
    }

    // What did not run or was wrong, and why.
    let mut notes: Vec<String> = Vec::new();
    for m in &merged {
        if !m.row.note.is_empty() {
            notes.push(format!("{}: {}", m.row.name, m.row.note));
        }
        for p in &m.row.paths {
            if p.status != Status::Ok
                && !(p.path == PathKind::OursTile && p.status == Status::NotAvailable)
            {
                notes.push(format!(
                    "{} · {}: {} {}",
                    m.row.name,
                    p.label,
                    flag_of(p.status),
                    p.note
                ));
            }
        }
    }
    for r in inputs.torch.iter().flat_map(|t| &t.rows) {
        for c in r
            .columns
            .iter()
            .filter(|c| c.status == "wrong" || c.status == "error")
        {
            notes.push(format!(
                "{} · {}: {} {}",
                r.name, c.column, c.status, c.note
            ));
        }
    }
    notes.extend(inputs.torch.iter().flat_map(|t| t.notes.iter().cloned()));
    if let Some(t) = &inputs.torch {
        let absent: Vec<&str> = merged
            .iter()
            .map(|m| m.row.name.as_str())
            .filter(|n| !t.rows.iter().any(|r| r.name == *n))
            .collect();
        if !absent.is_empty() {
            notes.push(format!(
                "the PyTorch, CODA and quack side did not reach {} row(s): {}",
                absent.len(),
                absent.join(", ")
            ));
        }
    }
    notes.extend(inputs.missing.iter().map(|m| format!("not read: {m}")));
    if !notes.is_empty() {
        let _ = writeln!(s, "\nNot timed, and why:\n");
        for n in notes {
            let _ = writeln!(s, "- {n}");
        }
    }

    for (model, _, o, t) in inputs.forwards() {
        forward_table(&mut s, model, o, t);
    }
    s
}

impl Inputs {
    /// The whole-model comparisons: (title, CSV row prefix, ours, PyTorch).
    fn forwards(
        &self,
    ) -> [(
        &'static str,
        &'static str,
        Option<&Forward>,
        Option<&Forward>,
    ); 2] {
        [
            (
                "all-MiniLM-L6-v2",
                "minilm-forward",
                self.minilm_ours.as_ref(),
                self.minilm_torch.as_ref(),
            ),
            (
                "BERT-base (random weights)",
                "bert-base-forward",
                self.bert_ours.as_ref(),
                self.bert_torch.as_ref(),
            ),
        ]
    }
}

fn forward_table(s: &mut String, model: &str, o: Option<&Forward>, t: Option<&Forward>) {
    if o.is_none() && t.is_none() {
        return;
    }
    let seq = o.or(t).map_or(0, |f| f.seq_len);
    let _ = writeln!(
        s,
        "\n## {model} forward pass (sequence length {seq}, ms per forward, medians)\n"
    );
    if let Some(o) = o {
        let _ = writeln!(s, "Ours: {}, {}.", o.dtype, o.method);
    }
    if let Some(t) = t {
        let _ = writeln!(s, "PyTorch: {}, {}.", t.dtype, t.method);
    }
    let _ = writeln!(
        s,
        "\n| batch | ours eager | ours CUDA graph | ours end to end | PyTorch eager | \
         torch.compile | PyTorch CUDA graph | ours ÷ best PyTorch |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut batches: Vec<usize> = o
        .iter()
        .chain(t.iter())
        .flat_map(|f| f.rows.iter().map(|r| r.batch))
        .collect();
    batches.sort_unstable();
    batches.dedup();
    let row = |f: Option<&Forward>, b| {
        f.and_then(|f| f.rows.iter().find(|r| r.batch == b))
            .cloned()
    };
    for b in batches {
        let (or, tr) = (row(o, b).unwrap_or_default(), row(t, b).unwrap_or_default());
        let ours = [or.eager_ms, or.graph_ms]
            .into_iter()
            .flatten()
            .min_by(f64::total_cmp);
        let best = [tr.eager_ms, tr.compile_ms, tr.graph_ms]
            .into_iter()
            .flatten()
            .min_by(f64::total_cmp);
        let _ = writeln!(
            s,
            "| {b} | {} | {} | {} | {} | {} | {} | {} |",
            ms(or.eager_ms),
            ms(or.graph_ms),
            ms(or.end_to_end_ms),
            ms(tr.eager_ms),
            ms(tr.compile_ms),
            ms(tr.graph_ms),
            ratio(ours, best)
        );
    }
    for n in t.iter().flat_map(|t| &t.skipped) {
        let _ = writeln!(s, "\n- PyTorch: {n}");
    }
    if let Some(e) = o.and_then(|o| o.graph_error.as_ref()) {
        let _ = writeln!(s, "\n- ours: CUDA graphs were off: {e}");
    }
}

/// One line of `compare.csv`.
#[derive(Debug, Serialize)]
struct CsvLine<'a> {
    row: &'a str,
    m: usize,
    n: usize,
    k: usize,
    epilogue: &'a str,
    column: &'a str,
    computes: &'a str,
    status: &'a str,
    median_ms: Option<f64>,
    p10_ms: Option<f64>,
    p90_ms: Option<f64>,
    runs: Option<usize>,
    rel_error: Option<f64>,
    kernel: Option<&'a str>,
    note: &'a str,
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::NotAvailable => "n/a",
        Status::Wrong => "wrong",
        Status::Error => "error",
    }
}

/// Every measured column of every row, one line each (ours first and last, cuBLAS, the
/// PyTorch side, the MiniLM forward).
pub fn csv(inputs: &Inputs) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let err = |e: csv::Error| BenchError::Chart(format!("CSV: {e}"));
    for (pass, rep) in [("", &inputs.ours), (" (last)", &inputs.ours_last)] {
        for r in rep.iter().flat_map(|r| &r.rows) {
            for p in &r.paths {
                let column = format!("{}{pass}", p.label);
                w.serialize(CsvLine {
                    row: &r.name,
                    m: r.m,
                    n: r.n,
                    k: r.k,
                    epilogue: r.epilogue.name(),
                    column: &column,
                    computes: &p.computes,
                    status: status_name(p.status),
                    median_ms: p.median_ms(),
                    p10_ms: p.timing.map(|t| t.p10_ms),
                    p90_ms: p.timing.map(|t| t.p90_ms),
                    runs: p.timing.map(|t| t.runs),
                    rel_error: p.err_vs_reference,
                    kernel: p.kernel.as_deref(),
                    note: &p.note,
                })
                .map_err(err)?;
            }
        }
    }
    let shapes: BTreeMap<&str, &RowResult> = inputs
        .ours
        .iter()
        .flat_map(|r| &r.rows)
        .map(|r| (r.name.as_str(), r))
        .collect();
    for r in inputs.torch.iter().flat_map(|t| &t.rows) {
        let s = shapes.get(r.name.as_str());
        for c in &r.columns {
            w.serialize(CsvLine {
                row: &r.name,
                m: s.map_or(0, |s| s.m),
                n: s.map_or(0, |s| s.n),
                k: s.map_or(0, |s| s.k),
                epilogue: s.map_or("", |s| s.epilogue.name()),
                column: &c.column,
                computes: &c.computes,
                status: &c.status,
                median_ms: c.median(),
                p10_ms: c.p10_ms,
                p90_ms: c.p90_ms,
                runs: c.runs,
                rel_error: c.err,
                kernel: None,
                note: &c.note,
            })
            .map_err(err)?;
        }
    }
    for (side, prefix, f) in inputs
        .forwards()
        .into_iter()
        .flat_map(|(_, prefix, o, t)| [("ours", prefix, o), ("pytorch", prefix, t)])
    {
        for r in f.iter().flat_map(|f| &f.rows) {
            let name = format!("{prefix}.b{}", r.batch);
            for (col, v) in [
                ("eager", r.eager_ms),
                ("cuda-graph", r.graph_ms),
                ("compile", r.compile_ms),
                ("end-to-end", r.end_to_end_ms),
            ] {
                let Some(v) = v else { continue };
                let column = format!("{side} {col}");
                w.serialize(CsvLine {
                    row: &name,
                    m: r.batch,
                    n: 0,
                    k: 0,
                    epilogue: "forward",
                    column: &column,
                    computes: "full",
                    status: "ok",
                    median_ms: Some(v),
                    p10_ms: None,
                    p90_ms: None,
                    runs: None,
                    rel_error: None,
                    kernel: None,
                    note: "",
                })
                .map_err(err)?;
            }
        }
    }
    let bytes = w
        .into_inner()
        .map_err(|e| BenchError::Chart(format!("CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| BenchError::Chart(format!("CSV: {e}")))
}

/// Chart series, in [`Bars::ratios`] order.
pub const SERIES: [&str; 3] = [
    "ours ÷ best baseline",
    "best of ours ÷ best baseline",
    "ours ÷ plain GEMM",
];

/// The chart's bar groups: every row with a ratio, then the MiniLM forward.
pub fn bars(inputs: &Inputs) -> Vec<Bars> {
    let Some(ours) = &inputs.ours else {
        return Vec::new();
    };
    let mut out: Vec<Bars> = merge(inputs, ours)
        .iter()
        .filter_map(|m| {
            let best = m.best().and_then(|b| b.ms);
            let best_ours = m.row.best_ours().and_then(PathResult::median_ms);
            let r = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
            let ratios = [
                r(m.ours(), best),
                r(best_ours, best),
                if m.row.epilogue == Epilogue::Gemm {
                    None
                } else {
                    r(m.ours(), m.gemm_floor())
                },
            ];
            ratios.iter().any(Option::is_some).then(|| Bars {
                label: m.row.name.clone(),
                ratios,
            })
        })
        .collect();
    for (_, prefix, o, t) in inputs.forwards() {
        let (Some(o), Some(t)) = (o, t) else {
            continue;
        };
        let label = prefix.replace('-', " ");
        for or in &o.rows {
            let Some(tr) = t.rows.iter().find(|r| r.batch == or.batch) else {
                continue;
            };
            let ours = [or.eager_ms, or.graph_ms]
                .into_iter()
                .flatten()
                .min_by(f64::total_cmp);
            let best = [tr.eager_ms, tr.compile_ms, tr.graph_ms]
                .into_iter()
                .flatten()
                .min_by(f64::total_cmp);
            if let (Some(a), Some(b)) = (ours, best) {
                out.push(Bars {
                    label: format!("{label} b{}", or.batch),
                    ratios: [Some(a / b), None, None],
                });
            }
        }
    }
    out
}

/// Writes `compare.md`, `compare.csv` and `compare.png` into `dir`.
///
/// # Errors
/// I/O, CSV or chart errors.
pub fn write(inputs: &Inputs, dir: &Path) -> Result<Vec<PathBuf>> {
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |source| BenchError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let md = dir.join("compare.md");
    std::fs::write(&md, markdown(inputs)).map_err(io(&md))?;
    let csv_path = dir.join("compare.csv");
    std::fs::write(&csv_path, csv(inputs)?).map_err(io(&csv_path))?;
    let png = dir.join("compare.png");
    let title = inputs.ours.as_ref().map_or_else(
        || "fused-gemm comparison".to_owned(),
        |o| {
            format!(
                "fused-gemm vs the best baseline: {} · {}",
                o.device.name, o.date
            )
        },
    );
    draw_bars(&title, &bars(inputs), &SERIES, &png)?;
    Ok(vec![md, csv_path, png])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{sample, summary};

    fn column(column: &str, computes: &str, ms: f64) -> BaselineColumn {
        BaselineColumn {
            column: column.into(),
            computes: computes.into(),
            status: "ok".into(),
            median_ms: Some(ms),
            ..BaselineColumn::default()
        }
    }

    fn inputs() -> Inputs {
        let ours = sample();
        let mut last = ours.clone();
        last.rows[0].paths[0].timing = Some(summary(0.055));
        let mut gemm_row = ours.rows[0].clone();
        gemm_row.name = "bert-base.ffn-up.gemm".into();
        gemm_row.epilogue = Epilogue::Gemm;
        gemm_row.paths.retain(|p| p.path != PathKind::Cublaslt);
        for p in &mut gemm_row.paths {
            p.computes = "full".into();
        }
        let mut ours = ours;
        ours.rows.push(gemm_row);
        Inputs {
            ours: Some(ours),
            ours_last: Some(last),
            torch: Some(Baselines {
                device: "NVIDIA H100 80GB HBM3".into(),
                versions: [("torch".to_owned(), "2.11.0".to_owned())].into(),
                method: "events".into(),
                rows: vec![
                    BaselineRow {
                        name: "bert-base.ffn-up.bias-gelu".into(),
                        columns: vec![
                            column("torch-gemm", "GEMM only", 0.0342),
                            column("torch-eager", "full", 0.0874),
                            column("torch-compile", "full", 0.045),
                            column("quack", "none", 0.0),
                        ],
                    },
                    BaselineRow {
                        name: "bert-base.ffn-up.gemm".into(),
                        // 10% faster than the in-process 0.034: flagged.
                        columns: vec![column("torch-gemm", "full", 0.0306)],
                    },
                ],
                notes: vec![],
            }),
            minilm_ours: Some(Forward {
                dtype: "f16".into(),
                seq_len: 128,
                rows: vec![ForwardRow {
                    batch: 1,
                    eager_ms: Some(0.9),
                    graph_ms: Some(0.44),
                    end_to_end_ms: Some(0.6),
                    ..ForwardRow::default()
                }],
                ..Forward::default()
            }),
            minilm_torch: Some(Forward {
                dtype: "fp16".into(),
                seq_len: 128,
                rows: vec![ForwardRow {
                    batch: 1,
                    eager_ms: Some(2.4),
                    compile_ms: Some(1.28),
                    graph_ms: Some(0.313),
                    ..ForwardRow::default()
                }],
                ..Forward::default()
            }),
            bert_ours: Some(Forward {
                dtype: "f16".into(),
                seq_len: 128,
                rows: vec![ForwardRow {
                    batch: 128,
                    graph_ms: Some(6.0),
                    ..ForwardRow::default()
                }],
                ..Forward::default()
            }),
            bert_torch: Some(Forward {
                dtype: "fp16".into(),
                seq_len: 128,
                rows: vec![ForwardRow {
                    batch: 128,
                    graph_ms: Some(7.5),
                    ..ForwardRow::default()
                }],
                ..Forward::default()
            }),
            driver: "580.159.04".into(),
            command: "bench/compare/run.sh".into(),
            missing: vec![],
        }
    }

    #[test]
    fn the_best_baseline_computes_the_whole_contract() {
        let i = inputs();
        let ours = i.ours.as_ref().unwrap();
        let m = merge(&i, ours);
        // bias-gelu (erf): cuBLASLt's tanh GELU (0.039) and the plain GEMMs are faster than
        // torch.compile (0.045) but compute something else.
        let best = m[0].best().unwrap();
        assert_eq!((best.name, best.ms), ("torch.compile", Some(0.045)));
        assert_eq!(m[0].gemm_floor(), Some(0.034));
        assert!(m[0].faster_than_ours().contains(&"torch.compile"));
        assert!(!m[0].faster_than_ours().contains(&"cuBLASLt fused"));
        // On the plain-GEMM row PyTorch's GEMM is the best baseline.
        assert_eq!(m[1].best().unwrap().name, "PyTorch GEMM");
    }

    #[test]
    fn the_table_says_what_is_slower_and_where_cublas_disagrees() {
        let md = markdown(&inputs());
        assert!(
            md.contains("driver 580.159.04") && md.contains("commit `abc` (clean)"),
            "{md}"
        );
        // ours 0.05 vs torch.compile 0.045: slower, in bold.
        assert!(md.contains(&format!("**{:.2}**", 0.05 / 0.045)), "{md}");
        assert!(
            md.contains("(0.0390)"),
            "the tanh column is shown in parentheses: {md}"
        );
        assert!(md.contains("+10.0%"), "drift of ours between passes: {md}");
        assert!(
            md.contains("slower than the best baseline on 2 of 2 rows"),
            "{md}"
        );
        assert!(md.contains("agree within 3% on 0 of 1"), "{md}");
        assert!(
            md.contains("bert-base.ffn-up.gemm: in-process 0.0340 ms, PyTorch 0.0306 ms"),
            "{md}"
        );
        assert!(
            !md.contains("tile 256x256 cluster"),
            "n/a tiles are not listed: {md}"
        );
        // MiniLM: ours' best 0.44 over PyTorch's best 0.313.
        assert!(md.contains(&format!("**{:.2}**", 0.44 / 0.313)), "{md}");
        // BERT-base, its own table: 6.0 over 7.5.
        assert!(
            md.contains("## BERT-base (random weights) forward pass"),
            "{md}"
        );
        assert!(md.contains("| 128 |") && md.contains("0.80"), "{md}");
    }

    #[test]
    fn files_are_written_and_the_csv_has_every_column() {
        let dir = tempfile::tempdir().unwrap();
        let files = write(&inputs(), dir.path()).unwrap();
        assert_eq!(files.len(), 3);
        let csv = std::fs::read_to_string(dir.path().join("compare.csv")).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("row,m,n,k,epilogue,column,computes,status,median_ms"));
        assert!(csv.contains(
            "bert-base.ffn-up.bias-gelu,4096,3072,768,bias-gelu,torch-eager,full,ok,0.0874"
        ));
        assert!(csv.contains("ours (last)"));
        assert!(csv.contains("minilm-forward.b1,1,0,0,forward,pytorch cuda-graph"));
        assert!(csv.contains("bert-base-forward.b128,128,0,0,forward,ours cuda-graph"));
        let b = bars(&inputs());
        let labels: Vec<&str> = b.iter().map(|b| b.label.as_str()).collect();
        assert!(
            labels.ends_with(&["minilm forward b1", "bert base forward b128"]),
            "{labels:?}"
        );
    }

    #[test]
    fn missing_inputs_are_said_not_hidden() {
        let mut missing = Vec::new();
        let r: Option<Report> = load(Some(Path::new("/no/such/file.json")), &mut missing);
        assert!(r.is_none() && missing[0].contains("/no/such/file.json"));
        let i = Inputs {
            missing,
            ..inputs()
        };
        assert!(markdown(&i).contains("not read: /no/such/file.json"));
        let mut short = inputs();
        short.torch.as_mut().unwrap().rows.pop();
        assert!(
            markdown(&short).contains("did not reach 1 row(s): bert-base.ffn-up.gemm"),
            "{}",
            markdown(&short)
        );
        assert!(markdown(&Inputs::default()).contains("Our side did not run"));
    }
}
