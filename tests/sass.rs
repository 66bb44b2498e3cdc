//! The SASS check on the CPU: the embedded sm_90a cubin (the machine code the launcher
//! loads on an H100/H200) is disassembled with `nvdisasm`, and every Hopper entry point
//! (`__sm90tma_` in its name) must issue `HGMMA` and touch no local memory (`STL`/`LDL`: spills or
//! stack arrays). `tests/ptx.rs` checks the same kernels' PTX and ptxas report; this test checks
//! what ptxas actually emitted.
//!
//! nvdisasm comes from the PyPI wheel `nvidia-cuda-nvdisasm==13.2.51` (the oldest CUDA 13 one);
//! `scripts/setup.sh` installs it under `.tools/` and the test finds it there, through
//! `FUSED_GEMM_NVDISASM`, or on `PATH`.

mod tools;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use fused_gemm::host::module::Arch;
use object::{Object, ObjectSymbol};

fn nvdisasm() -> PathBuf {
    tools::cuda_tool(
        "nvdisasm",
        "FUSED_GEMM_NVDISASM",
        "cuda-nvdisasm",
        "nvidia-cuda-nvdisasm==13.2.51",
    )
}

/// Per function of a disassembly: how many `HGMMA` and how many local-memory instructions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    hgmma: usize,
    local: usize,
}

/// Reads nvdisasm's listing: a function starts at its `.text.<name>:` label; an instruction line
/// holds the opcode after its `/*offset*/` comment (`/*0a30*/  @P0 STL.64 [R1], R2 ;`).
fn count_by_function(listing: impl BufRead) -> BTreeMap<String, Counts> {
    let mut out: BTreeMap<String, Counts> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in listing.lines() {
        let line = line.expect("read nvdisasm's output");
        if let Some(name) = line
            .strip_prefix(".text.")
            .and_then(|l| l.strip_suffix(':'))
        {
            current = Some(name.to_owned());
            out.entry(name.to_owned()).or_default();
            continue;
        }
        let (Some(f), Some(op)) = (current.as_ref(), opcode(&line)) else {
            continue;
        };
        let c = out.get_mut(f).expect("entry made at the label");
        let base = op.split('.').next().unwrap_or(op);
        match base {
            "HGMMA" => c.hgmma += 1,
            "STL" | "LDL" => c.local += 1,
            _ => {}
        }
    }
    out
}

/// The opcode of an instruction line (with its modifiers, without a predicate), or `None`.
fn opcode(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("/*")?;
    let (offset, rest) = rest.split_once("*/")?;
    if offset.is_empty() || !offset.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut words = rest.split_whitespace();
    let first = words.next()?;
    let op = if first.starts_with('@') {
        words.next()?
    } else {
        first
    };
    op.starts_with(|c: char| c.is_ascii_uppercase())
        .then_some(op)
}

/// The ELF symbol indices of the cubin's Hopper functions (`__sm90tma_` in the name).
fn hopper_symbols(cubin: &[u8]) -> Vec<String> {
    let elf = object::File::parse(cubin).expect("the sm_90a cubin is an ELF file");
    elf.symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text)
        .filter(|s| s.name().is_ok_and(|n| n.contains("__sm90tma_")))
        .map(|s| s.index().0.to_string())
        .collect()
}

#[test]
fn listing_parser_reads_functions_and_opcodes() {
    let listing = "\
//--------------------- .text.k__sm90tma_a --------------------------
\t.section\t.text.k__sm90tma_a,\"ax\",@progbits
.text.k__sm90tma_a:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*2630*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR20], R24 ;
        /*2640*/              @!P0 HGMMA.64x256x16.F32.BF16 R24, gdesc[UR20], R24, gsb0 ;
.L_x_12:
        /*2650*/                   STL.64 [R1], R2 ;
.text.k__sm80_b:
        /*0000*/               @P1 LDL R4, [R1+0x8] ;
        /*0010*/                   STLX R4 ;
        /* comment */
";
    let got = count_by_function(listing.as_bytes());
    assert_eq!(
        got.get("k__sm90tma_a"),
        Some(&Counts { hgmma: 2, local: 1 })
    );
    assert_eq!(got.get("k__sm80_b"), Some(&Counts { hgmma: 0, local: 1 }));
    assert_eq!(got.len(), 2);
}

#[test]
fn hopper_entry_points_issue_hgmma_and_use_no_local_memory() {
    let set = &fused_gemm::ptx::BUILTIN;
    let module = set
        .modules
        .iter()
        .find(|m| m.arch == Arch::Sm90a)
        .expect("the built-in kernels have an sm_90a module");
    assert!(
        !module.cubin.is_empty(),
        "the sm_90a cubin is empty: build.rs found no ptxas (run scripts/setup.sh)"
    );
    let cubin = module
        .cubin
        .bytes(set.crate_name, module.arch.name())
        .expect("the embedded sm_90a cubin unpacks");
    let ptx = module
        .ptx_text(set.crate_name)
        .expect("the embedded sm_90a PTX unpacks");
    // Only the Hopper entry points are disassembled (nvdisasm selects functions by ELF symbol
    // index): the whole cubin's listing is three times as long.
    let hopper = hopper_symbols(&cubin);
    assert!(
        !hopper.is_empty(),
        "no __sm90tma_ function in the sm_90a cubin"
    );
    let dir = std::env::temp_dir().join(format!("fused-gemm-sass90a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("fused_gemm.sm_90a.cubin");
    std::fs::write(&file, &cubin).unwrap();
    drop(cubin);
    // nvdisasm writes the listing (about 35 MB) to stdout: read it as it comes.
    let mut child = Command::new(nvdisasm())
        .arg("--print-code")
        .arg("--cuda-function-index")
        .arg(hopper.join(","))
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nvdisasm");
    let counts = count_by_function(BufReader::new(child.stdout.take().unwrap()));
    let out = child.wait_with_output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success(),
        "nvdisasm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every Hopper entry point of the PTX has its SASS function.
    let entries: Vec<&str> = ptx
        .lines()
        .filter_map(|l| l.strip_prefix(".visible .entry "))
        .map(|l| l.split('(').next().unwrap_or("").trim())
        .filter(|n| n.contains("__sm90tma_"))
        .collect();
    assert!(
        entries.len() >= 3 * 10,
        "expected the Hopper variants of the built-in 16-bit kernels, found {}",
        entries.len()
    );
    let mut no_hgmma = Vec::new();
    let mut local = Vec::new();
    for name in &entries {
        let c = counts
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is in the PTX but not in the cubin's SASS"));
        if c.hgmma == 0 {
            no_hgmma.push(*name);
        }
        if c.local > 0 {
            local.push(format!("{name}: {} STL/LDL", c.local));
        }
    }
    println!(
        "sm_90a cubin: {} Hopper entry points, {} with HGMMA, {} with local loads/stores",
        entries.len(),
        entries.len() - no_hgmma.len(),
        local.len()
    );
    assert!(no_hgmma.is_empty(), "no HGMMA in:\n{}", no_hgmma.join("\n"));
    assert!(local.is_empty(), "local memory in:\n{}", local.join("\n"));
}
