//! Checks every embedded PTX module on the CPU (no GPU needed) and prints the resources of each
//! kernel, from the report that `ptxas -v` wrote when `build.rs` assembled the module into the
//! embedded cubin (`fused_gemm.<arch>.ptxas.log` in the build's `OUT_DIR`, see
//! `PtxArtifact::ptxas_log`): the machine code these tests judge is the code the library loads,
//! and ptxas runs once per build instead of once more per test run (20 minutes of CI on two
//! cores).
//!
//! ptxas comes from the PyPI wheel `nvidia-cuda-nvcc==13.0.88` (CUDA 13.0, as on the GPU hosts);
//! `scripts/setup.sh` installs it under `.tools/`, where `build.rs` finds it.

use fused_gemm::device::target::Mainloop;
use fused_gemm::host::module::Arch;

/// The archs of the built-in modules (`fused_gemm::ptx::BUILTIN`).
const ARCHS: [Arch; 2] = [Arch::Sm80, Arch::Sm90a];

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

/// What ptxas reported on the built-in `arch` module at build time.
///
/// # Panics
/// When the build had no ptxas (the report is empty), with the command that installs it.
fn ptxas_log(arch: &str) -> String {
    let path = format!("{}/fused_gemm.{arch}.ptxas.log", env!("OUT_DIR"));
    let log = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        !log.trim().is_empty(),
        "{path} is empty: build.rs found no ptxas. Run `. scripts/setup.sh` (it installs ptxas \
         under .tools/) and build again"
    );
    log
}

/// The PTX text of every built-in module (unpacked from the embedded images once per test
/// process), newest arch first.
fn builtin_ptx() -> &'static [(Arch, String)] {
    static PTX: std::sync::OnceLock<Vec<(Arch, String)>> = std::sync::OnceLock::new();
    PTX.get_or_init(|| {
        let set = &fused_gemm::ptx::BUILTIN;
        let archs: Vec<Arch> = set.modules.iter().map(|m| m.arch).collect();
        assert_eq!(archs, [Arch::Sm90a, Arch::Sm80], "the built-in modules");
        set.modules
            .iter()
            .map(|m| {
                let text = m
                    .ptx_text(set.crate_name)
                    .unwrap_or_else(|e| panic!("the embedded {} PTX: {e}", m.arch));
                assert!(
                    !text.is_empty(),
                    "{} has no {} PTX (built with FUSED_GEMM_SKIP_PTX?)",
                    set.crate_name,
                    m.arch
                );
                (m.arch, text)
            })
            .collect()
    })
}

/// The PTX text of the built-in `arch` module.
fn module_ptx(arch: Arch) -> &'static str {
    builtin_ptx()
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, text)| text.as_str())
        .unwrap_or_else(|| panic!("no built-in {arch} module"))
}

/// Every built-in module's kernels with their resources, from [`ptxas_log`]; read once per test
/// process and printed as one table.
fn builtin_infos() -> &'static [(Arch, KernelInfo)] {
    static INFOS: std::sync::OnceLock<Vec<(Arch, KernelInfo)>> = std::sync::OnceLock::new();
    INFOS.get_or_init(|| {
        let set = &fused_gemm::ptx::BUILTIN;
        let mut all = Vec::new();
        for m in set.modules {
            let ptx = module_ptx(m.arch);
            assert!(
                ptx.contains(&format!(".target {}", m.arch.name())),
                "{} module is not {} PTX",
                set.crate_name,
                m.arch
            );
            assert!(
                !m.cubin.is_empty(),
                "the embedded {} cubin is empty",
                m.arch
            );
            let cubin = m
                .cubin
                .bytes(set.crate_name, m.arch.name())
                .unwrap_or_else(|e| panic!("the embedded {} cubin: {e}", m.arch));
            assert!(
                cubin.starts_with(b"\x7fELF"),
                "the embedded {} cubin does not unpack to an ELF image",
                m.arch
            );
            let kernels = parse_ptxas(&ptxas_log(m.arch.name()));
            let entries = ptx.lines().filter(|l| l.contains(".entry ")).count();
            assert!(
                kernels.len() == entries,
                "ptxas reported {} kernels of the {} module, which has {entries} entry points",
                kernels.len(),
                m.arch
            );
            all.extend(kernels.into_iter().map(|k| (m.arch, k)));
        }
        println!(
            "{:<8} {:<60} {:>5} {:>6} {:>7} {:>7} {:>7}",
            "arch", "kernel", "regs", "stack", "spillS", "spillL", "smem"
        );
        for (arch, k) in &all {
            println!(
                "{:<8} {:<60} {:>5} {:>6} {:>7} {:>7} {:>7}",
                arch.name(),
                k.name,
                k.registers,
                k.stack,
                k.spill_stores,
                k.spill_loads,
                k.smem
            );
        }
        all
    })
}

#[test]
fn builtin_ptx_is_accepted_by_ptxas_for_every_arch() {
    let infos = builtin_infos();
    for &name in [
        fused_gemm::kernels::basic::AXPY_F32,
        fused_gemm::kernels::basic::GEMM_NAIVE_F32,
        fused_gemm::kernels::bert::EMBED_LN_F32,
        fused_gemm::kernels::bert::EMBED_LN_F16,
        fused_gemm::kernels::bert::EMBED_LN_BF16,
        fused_gemm::kernels::bert::POOL_L2_F32,
        fused_gemm::kernels::bert::POOL_L2_F16,
        fused_gemm::kernels::bert::POOL_L2_BF16,
    ]
    .iter()
    .chain(fused_gemm::kernels::bert::ATTENTION)
    {
        for arch in ARCHS {
            assert!(
                infos.iter().any(|(a, k)| *a == arch && k.name == name),
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
    let ptx = module_ptx(Arch::Sm90a);
    let log = ptxas_log("sm_90a");
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
        "expected the Hopper variants of the built-in 16-bit kernels, found {}",
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
    let bodies: std::collections::HashMap<&str, &str> = entries(ptx).into_iter().collect();
    for k in &hopper {
        let body = bodies
            .get(k.name.as_str())
            .unwrap_or_else(|| panic!("no entry {}", k.name));
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

/// Every entry point of `ptx` with its text, from its `.entry` line to the next entry's, in one
/// pass (a search per entry from the start of a 60 MB module took seconds per test).
fn entries(ptx: &str) -> Vec<(&str, &str)> {
    const ENTRY: &str = ".visible .entry ";
    let starts: Vec<usize> = ptx.match_indices(ENTRY).map(|(i, _)| i).collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, &start)| {
            let text = &ptx[start..starts.get(k + 1).copied().unwrap_or(ptx.len())];
            let name = text[ENTRY.len()..].split('(').next().unwrap_or("").trim();
            (name, text)
        })
        .collect()
}

/// A norm's finishing kernel may be launched as its GEMM's programmatic dependent on sm_90+
/// (`LaunchOptions::dependent_finish`, `launch::norm_finish::launch_norm_finish`): there, it must wait for the
/// GEMM (`griddepcontrol.wait`) before its first global load or store, or it reads C while the
/// GEMM still writes it. Below sm_90 the instruction does not exist and must not appear. The
/// Hopper mainloop lets its dependent start (`griddepcontrol.launch_dependents`).
#[test]
fn finishing_kernels_wait_for_their_gemm_where_launched_as_dependents() {
    let mut finishers = 0;
    for &(arch, ref ptx) in builtin_ptx() {
        for (name, body) in entries(ptx) {
            let wait = body.find("griddepcontrol.wait");
            if name.contains("__norm_finish_") {
                finishers += 1;
                if arch.compute_capability() >= 90 {
                    let first_access = ["ld.global", "st.global"]
                        .iter()
                        .filter_map(|op| body.find(op))
                        .min()
                        .unwrap_or_else(|| panic!("{} {name}: no global access", arch));
                    assert!(
                        wait.is_some_and(|w| w < first_access),
                        "{} {name}: no griddepcontrol.wait before its first global access",
                        arch
                    );
                } else {
                    assert!(
                        wait.is_none(),
                        "{} {name}: griddepcontrol below sm_90",
                        arch
                    );
                }
            } else if name.contains("__sm90tma_") {
                assert!(
                    body.contains("griddepcontrol.launch_dependents"),
                    "{} {name}: the Hopper mainloop does not let its dependent start",
                    arch
                );
            } else {
                assert!(
                    !body.contains("griddepcontrol"),
                    "{} {name}: griddepcontrol outside the finishing kernels and the Hopper mainloop",
                    arch
                );
            }
        }
    }
    assert!(
        finishers > 0,
        "no finishing kernel in the PTX (built with FUSED_GEMM_SKIP_PTX?)"
    );
}

/// The opcode of one PTX statement (`@p bar.sync 1, 256` → `bar.sync`): its first token, or
/// its second after a guard predicate; empty for a blank statement.
fn opcode(statement: &str) -> &str {
    let mut tokens = statement.split_whitespace();
    match tokens.next() {
        Some(guard) if guard.starts_with('@') => tokens.next().unwrap_or(""),
        first => first.unwrap_or(""),
    }
}

/// Shared-memory address space: shared memory must be addressed as `.shared`, never through
/// generic pointers (slower, and a sign that address-space inference failed). Every load and
/// store in the PTX names its state space.
#[test]
fn every_load_and_store_names_its_state_space() {
    for &(arch, ref ptx) in builtin_ptx() {
        for (i, line) in ptx.lines().enumerate() {
            let op = opcode(line);
            let generic = (op.starts_with("ld.") || op.starts_with("st."))
                && ![".global", ".shared", ".param", ".local", ".const"]
                    .iter()
                    .any(|s| op.contains(s));
            assert!(
                !generic,
                "{} line {}: generic memory access `{}`",
                arch,
                i + 1,
                line.trim()
            );
        }
    }
}

/// Barriers that LLVM may copy into both sides of a branch on the thread index are the
/// non-`.aligned` forms: Rust's `asm!` is not `convergent` to LLVM, and an `.aligned` barrier
/// reached by one warp's lanes at two copies hung the global row-statistics exchange on an
/// H100. So the cluster barriers in inline asm are never `.aligned`, and in every kernel with a
/// spin on a global counter (`nanosleep`: thread 0 of the global exchange) the first inline-asm
/// barrier after each spin is `barrier.sync` (`arch::sync::named_barrier`), not `bar.sync`.
/// `__syncthreads` (`bar.sync 0`, outside any asm block) comes from LLVM's `convergent`
/// intrinsic, which LLVM does not copy that way.
///
/// The other way round, `barrier.sync` appears only in kernels with such a spin: elsewhere it
/// costs (with it, ptxas adds reconvergence points and the 128×128 ping-pong GEMMs ran up to
/// 35 % slower on an H100), and a branch on the thread index before a barrier is written as
/// predicated asm instead (`arch::atomic::leader_arrive_counted`).
#[test]
fn barriers_after_thread_branches_are_not_aligned() {
    let mut spins = 0;
    for &(arch, ref ptx) in builtin_ptx() {
        let mut after_spin: Option<usize> = None;
        let mut in_asm = false;
        // The current entry: its name, whether it spins, its first `barrier.sync` line.
        let mut entry: (&str, bool, Option<usize>) = ("", false, None);
        let unaligned_without_spin = |e: (&str, bool, Option<usize>)| {
            if let (false, Some(line)) = (e.1, e.2) {
                panic!(
                    "{} line {line}: `barrier.sync` in {}, which has no spin",
                    arch, e.0
                );
            }
        };
        for (i, line) in ptx.lines().enumerate() {
            match line.trim() {
                "// begin inline asm" => in_asm = true,
                "// end inline asm" => in_asm = false,
                _ => {}
            }
            for statement in line.trim().split([';', '{', '}']) {
                let op = opcode(statement);
                assert!(
                    !(op.starts_with("barrier.cluster") && op.contains(".aligned")),
                    "{} line {}: aligned cluster barrier `{}`",
                    arch,
                    i + 1,
                    statement.trim()
                );
                let barrier = in_asm
                    && ((op.starts_with("bar.") && !op.starts_with("bar.warp."))
                        || op.starts_with("barrier.sync"));
                if barrier && op == "barrier.sync" && entry.2.is_none() {
                    entry.2 = Some(i + 1);
                }
                if op == "nanosleep.u32" {
                    after_spin = Some(i + 1);
                    entry.1 = true;
                } else if let (true, Some(spin)) = (barrier, after_spin) {
                    after_spin = None;
                    spins += 1;
                    assert!(
                        op == "barrier.sync",
                        "{} line {}: `{}` is the first barrier after the spin at line {spin}",
                        arch,
                        i + 1,
                        statement.trim()
                    );
                }
            }
            if let Some(name) = line.strip_prefix(".visible .entry ") {
                unaligned_without_spin(entry);
                entry = (name.split('(').next().unwrap_or(name), false, None);
                after_spin = None;
            }
        }
        unaligned_without_spin(entry);
    }
    assert!(
        spins > 0,
        "no spin followed by a barrier in the PTX (built with FUSED_GEMM_SKIP_PTX?)"
    );
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

/// Every entry point of every `#[fused_gemm]` kernel in `src/kernels/` (its tile variants and its
/// norm-finishing kernel) is in the PTX of each arch it is compiled for, and only there: kernels
/// without `arch` have their `mma.sync` (f32: CUDA-core) variants in both modules and, for
/// 16-bit inputs with B stored N×K and no `tile`, TMA + `wgmma` variants in the sm_90a module
/// only; `arch = sm_80` kernels have no TMA variants; `arch = sm_90` kernels (Hopper only) are
/// in the sm_90a module only. Together with `builtin_ptx_is_accepted_by_ptxas_for_every_arch`,
/// each stage and option has an expansion that ptxas accepts.
#[test]
fn every_macro_kernel_is_in_the_ptx_of_its_arch() {
    use fused_gemm::device::types::DType;
    use fused_gemm::host::kernel::GemmKernelSpec;
    use fused_gemm::kernels::{blocks::*, gemm::*, hopper::*, stages::*};
    // No `arch`: every module.
    let every_target: &[&GemmKernelSpec] = &[
        &BIAS_BF16,
        &STAGE_SCALE_CONST_USER,
        &STAGE_CAST_BF16,
        &COMBO_PAIR_THEN_OPERANDS,
        &COMBO_NORM_THEN_POST,
        &OPTION_TILE_DERIVED,
        &OPTION_F16_BROW_F32,
        &OPTION_F32_TILE_DERIVED,
        &FFN_UP_BIAS_GELU,
        &FFN_UP_BIAS_GELU_F16,
        &FFN_UP_BIAS_GELU_TANH,
        &PROJ_BIAS_RESIDUAL_LAYER_NORM,
        &PROJ_BIAS_RESIDUAL_LAYER_NORM_F16,
        &PROJ_BIAS_RESIDUAL,
        &MLP_UP_SWIGLU,
        &RMS_SCALED_GEMM,
        &QK_PROJ_ROPE,
        &BIAS_F16,
        &RESIDUAL_RMS_NORM_F16,
        &MLP_UP_SWIGLU_F16,
        &BIAS_F32,
        &FFN_UP_BIAS_GELU_F32,
        &PROJ_BIAS_RESIDUAL_LAYER_NORM_F32,
        &GEMM_BF16,
        &GEMM_F16,
        &GEMM_BF16_BROW,
        &GEMM_F16_BROW,
        &GEMM_BF16_F32,
        &GEMM_F32,
        &GEMM_BF16_T128X256,
        &GEMM_BF16_T256X128,
        &GEMM_BF16_T128X128X64,
    ];
    // `arch = sm_80`: the `mma.sync` variants only, in every module.
    let sm80_only: &[&GemmKernelSpec] = &[
        &STAGE_SCALE,
        &STAGE_SCALE_ROW,
        &STAGE_SCALE_COL,
        &STAGE_BIAS_ROW,
        &STAGE_RELU,
        &STAGE_GELU,
        &STAGE_GELU_TANH,
        &STAGE_SILU,
        &STAGE_SIGMOID,
        &STAGE_RESIDUAL,
        &STAGE_ACCUMULATE,
        &STAGE_LAYER_NORM,
        &STAGE_RMS_NORM,
        &STAGE_SWIGLU,
        &STAGE_GEGLU,
        &STAGE_ROPE,
        &STAGE_CAST_F16,
        &STAGE_USER,
        &SCALE_THEN_BIAS,
        &BIAS_THEN_SCALE,
        &BIAS_GELU_F16_F32,
    ];
    // `arch = sm_90`: Hopper only, the sm_90a module.
    let hopper_only: &[&GemmKernelSpec] = &[
        &OPTION_SM90,
        &H_SCALE_BIAS_RELU,
        &H_ROWSCALE_ROWBIAS_GELU,
        &H_COLSCALE_GELU_TANH,
        &H_RESIDUAL_SILU,
        &H_SIGMOID_ACCUMULATE,
        &H_RMS_NORM,
        &H_GEGLU_F16,
        &H_USER_CAST,
    ];
    let names = |arch: Arch| -> std::collections::HashSet<&'static str> {
        entries(module_ptx(arch))
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    };
    let (sm80, sm90a) = (names(Arch::Sm80), names(Arch::Sm90a));
    assert!(
        sm80.iter().all(|e| !e.contains("__sm90tma_")),
        "a TMA entry point in the sm_80 PTX"
    );
    let groups = [
        (every_target, true, true),
        (sm80_only, true, false),
        (hopper_only, false, true),
    ];
    let mut tma_kernels = 0;
    for (specs, in_sm80, tma_allowed) in groups {
        for spec in specs {
            // `tile = (...)` compiles one tile twice (16-byte and bounds-checked loads), and no
            // TMA variants.
            let simple: Vec<_> = spec
                .variants
                .iter()
                .filter(|v| !v.mainloop.is_sm90())
                .collect();
            let one_tile = simple.len() == 2 && simple[0].tile == simple[1].tile;
            let wants_tma = tma_allowed && spec.input != DType::F32 && spec.b_col && !one_tile;
            assert_eq!(
                spec.variants.iter().any(|v| v.mainloop.is_sm90()),
                wants_tma,
                "{}: TMA + wgmma variants",
                spec.name
            );
            tma_kernels += usize::from(wants_tma);
            for v in spec.variants {
                let simple = if spec.input == DType::F32 {
                    Mainloop::Simt
                } else {
                    Mainloop::Sm80
                };
                assert!(
                    v.mainloop.is_sm90() || v.mainloop == simple,
                    "{}: {} has mainloop {:?}",
                    spec.name,
                    v.entry,
                    v.mainloop
                );
                assert_eq!(
                    v.mainloop.is_sm90(),
                    v.entry.contains("__sm90tma_"),
                    "{}: {} named against its mainloop {:?}",
                    spec.name,
                    v.entry,
                    v.mainloop
                );
            }
            let names = spec
                .variants
                .iter()
                .map(|v| (v.entry, in_sm80 && Arch::Sm80.has(v.mainloop)))
                .chain(spec.norm_finish.map(|f| (f, in_sm80)));
            for (name, want_sm80) in names {
                assert!(
                    sm90a.contains(name),
                    "{}: {name} missing from the sm_90a PTX",
                    spec.name
                );
                assert_eq!(
                    sm80.contains(name),
                    want_sm80,
                    "{}: {name} {} the sm_80 PTX",
                    spec.name,
                    if want_sm80 {
                        "is missing from"
                    } else {
                        "is in"
                    }
                );
            }
        }
    }
    assert!(
        tma_kernels >= 20,
        "{tma_kernels} kernels with TMA + wgmma variants"
    );
}

/// The unfused row kernels (`kernels::rowwise`) are in every arch's PTX and keep their row
/// slots in registers: no stack frame, no spills.
#[test]
fn rowwise_kernels_have_no_stack_or_spills() {
    let infos = builtin_infos();
    for &name in fused_gemm::kernels::rowwise::ALL {
        for arch in ARCHS {
            let (_, k) = infos
                .iter()
                .find(|(a, k)| *a == arch && k.name == name)
                .unwrap_or_else(|| panic!("{name} missing from the {arch} PTX"));
            assert_eq!(
                (k.stack, k.spill_stores, k.spill_loads),
                (0, 0, 0),
                "{arch} {name}: stack frame or spills"
            );
        }
    }
}

/// The attention kernels (CUDA-core f32, tensor-core f16/bf16, every head dimension) keep their
/// fragments, accumulators and softmax state in registers: no stack frame, no spills.
#[test]
fn attention_kernels_have_no_stack_or_spills() {
    let infos = builtin_infos();
    for &name in fused_gemm::kernels::bert::ATTENTION {
        for arch in ARCHS {
            let (_, k) = infos
                .iter()
                .find(|(a, k)| *a == arch && k.name == name)
                .unwrap_or_else(|| panic!("{name} missing from the {arch} PTX"));
            println!(
                "{arch} {name}: {} registers, {} bytes stack, {}/{} bytes spill stores/loads",
                k.registers, k.stack, k.spill_stores, k.spill_loads
            );
            assert_eq!(
                (k.stack, k.spill_stores, k.spill_loads),
                (0, 0, 0),
                "{arch} {name}: stack frame or spills"
            );
        }
    }
}
