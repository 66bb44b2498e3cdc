//! Checks every embedded PTX module with `ptxas` on the CPU (no GPU needed) and prints the
//! resources of each kernel.
//!
//! ptxas comes from the PyPI wheel `nvidia-cuda-nvcc==13.0.88` (the GPU machine's CUDA 13.0);
//! `scripts/setup.sh` installs it under `.tools/` and the test finds it there, through
//! `FUSED_GEMM_PTXAS`, or on `PATH`.

use std::path::PathBuf;
use std::process::Command;

use fused_gemm::host::module::PtxSet;

fn ptxas() -> PathBuf {
    if let Some(p) = std::env::var_os("FUSED_GEMM_PTXAS") {
        return PathBuf::from(p);
    }
    let local =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/cuda-nvcc/nvidia/cu13/bin/ptxas");
    if local.exists() {
        return local;
    }
    if Command::new("ptxas")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return PathBuf::from("ptxas");
    }
    panic!(
        "ptxas not found. Install it with `scripts/setup.sh` (pip wheel nvidia-cuda-nvcc==13.0.88 into .tools/), \
         or set FUSED_GEMM_PTXAS=/path/to/ptxas"
    );
}

/// Per-kernel resources parsed from `ptxas -v`.
#[derive(Debug, Default)]
struct KernelInfo {
    name: String,
    registers: u32,
    stack: u32,
    spill_stores: u32,
    spill_loads: u32,
    smem: u32,
}

fn number_before(line: &str, unit: &str) -> Option<u32> {
    let i = line.find(unit)?;
    line[..i]
        .trim_end()
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn parse_ptxas(log: &str) -> Vec<KernelInfo> {
    let mut out: Vec<KernelInfo> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            out.push(KernelInfo {
                name: rest.split('\'').next().unwrap_or("").to_owned(),
                ..Default::default()
            });
        } else if let Some(k) = out.last_mut() {
            if line.contains("bytes stack frame") {
                k.stack = number_before(line, "bytes stack frame").unwrap_or(0);
                k.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
                k.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used") && line.contains("registers") {
                k.registers = number_before(line, "registers").unwrap_or(0);
                k.smem = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

fn check_set(set: &PtxSet) -> Vec<(String, KernelInfo)> {
    let ptxas = ptxas();
    let dir = std::env::temp_dir().join(format!("fused-gemm-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut all = Vec::new();
    assert!(
        !set.modules.is_empty(),
        "{} has no PTX (built with FUSED_GEMM_SKIP_PTX?)",
        set.crate_name
    );
    for m in set.modules {
        assert!(
            m.ptx.contains(&format!(".target {}", m.arch)),
            "{} module is not {} PTX",
            set.crate_name,
            m.arch
        );
        let file = dir.join(format!("{}.{}.ptx", set.crate_name, m.arch));
        std::fs::write(&file, m.ptx).unwrap();
        let out = Command::new(&ptxas)
            .arg(format!("-arch={}", m.arch))
            .arg("-v")
            .arg(&file)
            .arg("-o")
            .arg(dir.join("out.cubin"))
            .output()
            .unwrap_or_else(|e| panic!("could not run {}: {e}", ptxas.display()));
        let log = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "ptxas -arch={} rejected {}:\n{log}",
            m.arch,
            set.crate_name
        );
        for k in parse_ptxas(&log) {
            all.push((m.arch.to_owned(), k));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    println!(
        "{:<8} {:<60} {:>5} {:>6} {:>7} {:>7} {:>7}",
        "arch", "kernel", "regs", "stack", "spillS", "spillL", "smem"
    );
    for (arch, k) in &all {
        println!(
            "{arch:<8} {:<60} {:>5} {:>6} {:>7} {:>7} {:>7}",
            k.name, k.registers, k.stack, k.spill_stores, k.spill_loads, k.smem
        );
    }
    all
}

#[test]
fn builtin_ptx_is_accepted_by_ptxas_for_every_arch() {
    let infos = check_set(&fused_gemm::ptx::BUILTIN);
    for name in [
        fused_gemm::kernels::basic::AXPY_F32,
        fused_gemm::kernels::basic::GEMM_NAIVE_F32,
        fused_gemm::kernels::bert::EMBED_LN_F32,
        fused_gemm::kernels::bert::EMBED_LN_F16,
        fused_gemm::kernels::bert::EMBED_LN_BF16,
        fused_gemm::kernels::bert::ATTN_H64_F32,
        fused_gemm::kernels::bert::ATTN_H64_F16,
        fused_gemm::kernels::bert::ATTN_H64_BF16,
        fused_gemm::kernels::bert::POOL_L2_F32,
        fused_gemm::kernels::bert::POOL_L2_F16,
        fused_gemm::kernels::bert::POOL_L2_BF16,
    ] {
        for arch in ["sm_80", "sm_90", "sm_90a"] {
            assert!(
                infos.iter().any(|(a, k)| a == arch && k.name == name),
                "{name} missing from the {arch} PTX"
            );
        }
    }
}

/// The Hopper mainloop (sm_90a module only): every `__sm90tma_` entry point issues `wgmma` and
/// `setmaxnreg`, keeps everything in registers (no stack, no spills), and ptxas reports no
/// `wgmma` serialisation (C7514/C7515/C7518: accumulators touched while MMAs are in flight,
/// C7517: waits it had to insert) and no ignored `setmaxnreg` (C7508).
#[test]
fn hopper_entry_points_issue_wgmma_without_spills() {
    let module = fused_gemm::ptx::BUILTIN
        .modules
        .iter()
        .find(|m| m.arch == "sm_90a")
        .expect("the built-in kernels have an sm_90a module");
    let dir = std::env::temp_dir().join(format!("fused-gemm-ptx90a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sm_90a.ptx");
    std::fs::write(&file, module.ptx).unwrap();
    let out = Command::new(ptxas())
        .args(["-arch=sm_90a", "-v"])
        .arg(&file)
        .arg("-o")
        .arg(dir.join("out.cubin"))
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ptxas rejected the sm_90a module:\n{log}"
    );
    for code in ["C7508", "C7514", "C7515", "C7517", "C7518"] {
        let bad: Vec<&str> = log.lines().filter(|l| l.contains(code)).collect();
        assert!(bad.is_empty(), "ptxas {code}:\n{}", bad.join("\n"));
    }
    let hopper: Vec<KernelInfo> = parse_ptxas(&log)
        .into_iter()
        .filter(|k| k.name.contains("__sm90tma_"))
        .collect();
    assert!(
        hopper.len() >= 3 * 10,
        "expected the Hopper variants of the kernels in src/kernels/hopper.rs, found {}",
        hopper.len()
    );
    for k in &hopper {
        println!(
            "{:<80} regs {:>3} stack {} spills {}/{}",
            k.name, k.registers, k.stack, k.spill_stores, k.spill_loads
        );
        assert_eq!(
            (k.stack, k.spill_stores, k.spill_loads),
            (0, 0, 0),
            "{} uses local memory",
            k.name
        );
    }
    // The instructions are in each entry's PTX body.
    for k in &hopper {
        let body = entry_body(module.ptx, &k.name);
        for instr in [
            "wgmma.mma_async.sync.aligned",
            "setmaxnreg.inc.sync.aligned.u32",
            "setmaxnreg.dec.sync.aligned.u32",
            "cp.async.bulk.tensor.2d",
            "mbarrier.try_wait.parity",
        ] {
            assert!(body.contains(instr), "{} lacks {instr}", k.name);
        }
    }
    for probe in [
        fused_gemm::kernels::hopper::probe::TMA,
        fused_gemm::kernels::hopper::probe::WGMMA_N128,
        fused_gemm::kernels::hopper::probe::WGMMA_N256,
    ] {
        assert!(
            parse_ptxas(&log).iter().any(|k| k.name == probe),
            "{probe} missing from the sm_90a PTX"
        );
    }
}

/// The PTX text of entry `name`, from its `.entry` line to the next entry.
fn entry_body<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no entry {name}"));
    let rest = &ptx[start + 1..];
    let end = rest.find(".entry ").map_or(rest.len(), |e| e);
    &rest[..end]
}

/// known-faults #13: shared memory must be addressed as `.shared`, never through generic
/// pointers (slower, and a sign that address-space inference failed). Every load and store in
/// the PTX names its state space.
#[test]
fn every_load_and_store_names_its_state_space() {
    for m in fused_gemm::ptx::BUILTIN.modules {
        for (i, line) in m.ptx.lines().enumerate() {
            let mut tokens = line.split_whitespace();
            let first = tokens.next().unwrap_or("");
            let op = if first.starts_with('@') {
                tokens.next().unwrap_or("")
            } else {
                first
            };
            let generic = (op.starts_with("ld.") || op.starts_with("st."))
                && ![".global", ".shared", ".param", ".local", ".const"]
                    .iter()
                    .any(|s| op.contains(s));
            assert!(
                !generic,
                "{} line {}: generic memory access `{}`",
                m.arch,
                i + 1,
                line.trim()
            );
        }
    }
}

#[test]
fn ptxas_log_parser_reads_resources() {
    let log = "ptxas info    : Compiling entry function 'k1' for 'sm_90'\n\
               ptxas info    : Function properties for k1\n    \
               8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
               ptxas info    : Used 168 registers, used 1 barriers, 16384 bytes smem, 384 bytes cmem[0]\n";
    let k = &parse_ptxas(log)[0];
    assert_eq!(
        (
            k.name.as_str(),
            k.registers,
            k.stack,
            k.spill_stores,
            k.spill_loads,
            k.smem
        ),
        ("k1", 168, 8, 4, 12, 16384)
    );
}
