//! Compile a kernel crate to PTX from a `build.rs`.
//!
//! A kernel crate is an ordinary library crate whose device entry points are emitted under
//! `cfg(target_arch = "nvptx64")` (by `#[fused_gemm]` or by hand). [`PtxBuilder`] runs a nested
//! `cargo rustc` for `nvptx64-nvidia-cuda` once per [`Arch`], with `-Zbuild-std=core`, fat LTO and
//! `panic = "abort"`, and writes one `.ptx` file per arch into `OUT_DIR`.
//!
//! # How the PTX is obtained
//!
//! rustc's NVPTX target links with the `llvm-bitcode-linker` rustup component, which cannot be
//! downloaded on the machines this project is built on. We do not link at all: the crate is built
//! as a `cdylib` with `--emit=asm` and `-C linker=/bin/true`. With fat LTO the single `.s` file
//! rustc writes is the whole program after LTO, which is exactly the PTX module we want; the link
//! step that follows is a no-op. (The alternative, `llvm-link` + `llc` from the `llvm-tools`
//! component, needs a second LLVM whose version must match rustc's; `--emit=asm` keeps rustc's own.)
//!
//! # Usage from a downstream `build.rs`
//!
//! ```no_run
//! // build.rs: sm_80 and sm_90a, each as zstd-packed PTX and cubin in OUT_DIR
//! fused_gemm_build::PtxBuilder::new(std::env::var("CARGO_MANIFEST_DIR").unwrap())
//!     .build_or_exit();
//! // lib.rs: fused_gemm::include_ptx!();
//! ```
//!
//! Without [`PtxBuilder::arch`] the builder compiles [`DEFAULT_ARCHS`]: `sm_80`, which runs on
//! every later GPU (its PTX is JIT-compiled on GPUs newer than Hopper), and `sm_90a`, the only
//! module with the TMA + `wgmma` mainloop of H100 and H200. The archs compile in parallel; each
//! module's ptxas starts once its PTX and those of the archs listed before it are written.
//!
//! # What a build leaves in `OUT_DIR`
//!
//! Per arch: `<crate>.<arch>.ptx` (the text), `.cubin` and `.ptxas.log` (with [`PtxBuilder::ptxas`]),
//! and the two files programs embed, `.ptx.zst` and `.cubin.zst` ([zstd] frames, empty when
//! there is nothing to pack). Packing cuts an embedded kernel crate about tenfold (the built-in
//! kernels: 175 MB of PTX and 78 MB of cubins to about 15 MB).
//!
//! With `FUSED_GEMM_SKIP_PTX` set to anything but empty, `0` or `false` (documentation and
//! lint-only builds) nothing is compiled and every packed file is written empty; loading such a
//! module fails with `PtxNotBuilt`.
//!
//! [zstd]: https://facebook.github.io/zstd/
//!
//! The nested cargo gets its own target directory under `OUT_DIR` (the outer build holds the
//! lock on the usual one) and does not inherit the host's `RUSTFLAGS` or compiler wrappers.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use fused_gemm_device::target::Arch;

/// The archs built when [`PtxBuilder::arch`] names none.
pub const DEFAULT_ARCHS: &[Arch] = &[Arch::Sm80, Arch::Sm90a];

/// rustc flags `arch` needs beyond `-Ctarget-cpu`: the Hopper mainloop's tensor-map fence needs
/// PTX ISA 8.3, above the 8.0 LLVM picks for sm_90a by default.
fn arch_rustflags(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::Sm90a => &["-Ctarget-feature=+ptx85"],
        Arch::Sm80 | Arch::Sm90 => &[],
    }
}

/// zstd level of the packed files: within 1 % of level 19's size at a twentieth of its time.
#[cfg(feature = "pack")]
const PACK_LEVEL: i32 = 9;

/// Why a PTX build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A variable cargo sets for build scripts is missing: not running under cargo.
    #[error("environment variable {0} is not set; PtxBuilder must run inside a cargo build script")]
    MissingEnv(&'static str),
    /// The nested cargo could not be started.
    #[error("could not run `{cargo}`: {source}")]
    Spawn {
        /// The cargo binary that was tried.
        cargo: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The device code did not compile; rustc's diagnostics were printed to stderr.
    #[error(
        "device code failed to compile for {arch} (rustc's errors are in this build script's output)"
    )]
    Compile {
        /// The arch whose build failed.
        arch: Arch,
    },
    /// ptxas rejected the PTX (its messages were printed to stderr).
    #[error("ptxas failed on {path} for {arch}")]
    Ptxas {
        /// The arch.
        arch: Arch,
        /// The PTX file.
        path: PathBuf,
    },
    /// The nested build succeeded but left no `.s` file behind.
    #[error("the {arch} build produced no PTX file in {dir}")]
    NoPtx {
        /// The arch whose build produced nothing.
        arch: Arch,
        /// Where the file was looked for.
        dir: PathBuf,
    },
    /// This build of the builder lacks its `pack` feature (on by default), which writes the
    /// packed modules.
    #[error("fused-gemm-build was built without its `pack` feature, which packs the modules")]
    NoPacking,
    /// Reading or writing a PTX file failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// One PTX module written by [`PtxBuilder::build`].
#[derive(Clone, Debug)]
pub struct PtxArtifact {
    /// The arch it was compiled for.
    pub arch: Arch,
    /// Where it was written (`OUT_DIR/<crate>.<arch>.ptx`).
    pub path: PathBuf,
    /// The machine code ptxas made of it (`OUT_DIR/<crate>.<arch>.cubin`); the file is empty
    /// when no ptxas was given (see [`PtxBuilder::ptxas`]).
    pub cubin: PathBuf,
    /// The PTX as one zstd frame (`OUT_DIR/<crate>.<arch>.ptx.zst`), what programs embed.
    pub packed_ptx: PathBuf,
    /// The cubin as one zstd frame (`OUT_DIR/<crate>.<arch>.cubin.zst`); empty without a cubin.
    pub packed_cubin: PathBuf,
    /// What `ptxas -v` reported while making `cubin` (`OUT_DIR/<crate>.<arch>.ptxas.log`):
    /// per entry point its registers, stack frame, spill bytes and shared memory, and any
    /// warnings. Tests read it instead of running ptxas a second time; empty without ptxas.
    pub ptxas_log: PathBuf,
}

/// Builds a kernel crate to PTX; see the [crate docs](crate).
#[derive(Clone, Debug)]
pub struct PtxBuilder {
    crate_dir: PathBuf,
    archs: Vec<Arch>,
    features: Vec<String>,
    no_default_features: bool,
    watch: Vec<PathBuf>,
    out_dir: Option<PathBuf>,
    rustflags: Vec<String>,
    ptxas: Option<PathBuf>,
}

impl PtxBuilder {
    /// A builder for the crate whose `Cargo.toml` is in `crate_dir`.
    pub fn new(crate_dir: impl Into<PathBuf>) -> Self {
        PtxBuilder {
            crate_dir: crate_dir.into(),
            archs: Vec::new(),
            features: Vec::new(),
            no_default_features: false,
            watch: Vec::new(),
            out_dir: None,
            rustflags: Vec::new(),
            ptxas: None,
        }
    }

    /// Adds a target arch (one PTX module each). Without any, [`DEFAULT_ARCHS`] are built.
    pub fn arch(mut self, arch: Arch) -> Self {
        if !self.archs.contains(&arch) {
            self.archs.push(arch);
        }
        self
    }

    /// Enables a cargo feature of the kernel crate in the nvptx64 build.
    pub fn feature(mut self, feature: impl Into<String>) -> Self {
        self.features.push(feature.into());
        self
    }

    /// Builds the kernel crate for nvptx64 without its default features (only those given with
    /// [`Self::feature`]): for a crate whose default features pull in host-only build
    /// dependencies that the nvptx64 pass would otherwise compile for nothing.
    pub fn no_default_features(mut self) -> Self {
        self.no_default_features = true;
        self
    }

    /// Rebuilds when anything under `path` changes (the crate's `src/` and `Cargo.toml` are
    /// always watched). Use it for path dependencies that hold device code.
    pub fn watch(mut self, path: impl Into<PathBuf>) -> Self {
        self.watch.push(path.into());
        self
    }

    /// Passes an extra flag to rustc for the device build (e.g. `-Cllvm-args=...`).
    pub fn rustflag(mut self, flag: impl Into<String>) -> Self {
        self.rustflags.push(flag.into());
        self
    }

    /// Also assembles each PTX module to a cubin with this `ptxas` (all archs in parallel), so
    /// the program loads machine code instead of JIT-compiling the PTX at start-up (seconds for
    /// large kernel crates), and keeps ptxas' `-v` report ([`PtxArtifact::ptxas_log`]). Without
    /// it the `.cubin` and `.ptxas.log` files are written empty.
    pub fn ptxas(mut self, ptxas: impl Into<PathBuf>) -> Self {
        self.ptxas = Some(ptxas.into());
        self
    }

    /// [`ptxas`](Self::ptxas) from the environment variable `FUSED_GEMM_PTXAS`, when it names
    /// a file (fused-gemm's `scripts/setup.sh` exports it, and its `.cargo/config.toml` sets it
    /// to where setup.sh installs ptxas); otherwise no cubins are made, with a cargo warning
    /// when the variable names no file.
    pub fn ptxas_from_env(self) -> Self {
        println!("cargo::rerun-if-env-changed=FUSED_GEMM_PTXAS");
        match std::env::var_os("FUSED_GEMM_PTXAS").map(PathBuf::from) {
            Some(p) if p.is_file() => self.ptxas(p),
            Some(p) if !p.as_os_str().is_empty() => {
                println!(
                    "cargo::warning=FUSED_GEMM_PTXAS={} is not a file: the modules get no cubins",
                    p.display()
                );
                self
            }
            _ => self,
        }
    }

    /// Writes PTX here instead of cargo's `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Like [`build`](Self::build), but on error prints it in a form cargo shows and exits with
    /// status 1, so a device compile error reads like any other build error.
    pub fn build_or_exit(self) -> Vec<PtxArtifact> {
        match self.build() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("error: {e}");
                println!("cargo::error={e}");
                std::process::exit(1);
            }
        }
    }

    /// Compiles the crate for every arch (in parallel), assembles each module with ptxas when
    /// one was given and packs the files programs embed; returns one artifact per arch.
    ///
    /// Returns no artifacts when called from the nvptx64 build itself (the nested build runs the
    /// crate's build script again).
    ///
    /// # Errors
    /// [`BuildError::Compile`] when the device code does not compile (rustc's diagnostics, with
    /// the device source's file and line, go to stderr, which cargo prints for a failed build
    /// script); [`BuildError::Ptxas`] when ptxas rejects a module; the other variants for a
    /// missing cargo environment or i/o failures.
    pub fn build(self) -> Result<Vec<PtxArtifact>, BuildError> {
        // The nested nvptx64 build of the kernel crate runs its build script again; building
        // PTX from there would recurse without end, and that build needs none.
        if std::env::var("TARGET").is_ok_and(|t| t.starts_with("nvptx")) {
            return Ok(Vec::new());
        }
        let out_dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(env("OUT_DIR")?),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
        let manifest = self.crate_dir.join("Cargo.toml");
        let crate_name = read_package_name(&manifest)?.replace('-', "_");

        println!(
            "cargo::rerun-if-changed={}",
            self.crate_dir.join("src").display()
        );
        println!("cargo::rerun-if-changed={}", manifest.display());
        for w in &self.watch {
            println!("cargo::rerun-if-changed={}", w.display());
        }
        // The kernels' device code also comes from fused-gemm's device and macro crates, beside
        // this one in its source tree: a newer fused-gemm must rebuild the PTX too.
        let fused_gemm = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for dir in ["device/src", "device/Cargo.toml", "macros/src"] {
            let p = fused_gemm.join(dir);
            if p.exists() {
                println!("cargo::rerun-if-changed={}", p.display());
            }
        }
        println!("cargo::rerun-if-env-changed=FUSED_GEMM_SKIP_PTX");

        let archs = if self.archs.is_empty() {
            DEFAULT_ARCHS.to_vec()
        } else {
            self.archs.clone()
        };
        let artifacts: Vec<PtxArtifact> = archs
            .iter()
            .map(|&arch| {
                let file = |ext: &str| out_dir.join(format!("{crate_name}.{}.{ext}", arch.name()));
                PtxArtifact {
                    arch,
                    path: file("ptx"),
                    cubin: file("cubin"),
                    ptxas_log: file("ptxas.log"),
                    packed_ptx: file("ptx.zst"),
                    packed_cubin: file("cubin.zst"),
                }
            })
            .collect();
        if skip_ptx() {
            for a in &artifacts {
                for f in [
                    &a.path,
                    &a.cubin,
                    &a.ptxas_log,
                    &a.packed_ptx,
                    &a.packed_cubin,
                ] {
                    write(f, &[])?;
                }
            }
            return Ok(artifacts);
        }

        // One nested cargo per arch, all at once: each is a single LLVM thread (fat LTO, one
        // codegen unit), so they share the cores instead of taking turns.
        let mut builds = Running(Vec::new());
        for a in &artifacts {
            let child = self
                .nested_build(&cargo, &manifest, &out_dir, a.arch)
                .spawn()
                .map_err(|source| BuildError::Spawn {
                    cargo: cargo.to_string_lossy().into_owned(),
                    source,
                })?;
            builds.0.push(child);
        }
        let mut assemblers = Running(Vec::new());
        let mut assembling = Vec::new();
        let mut failed = None;
        for (a, child) in artifacts.iter().zip(builds.0.iter_mut()) {
            let status = child.wait().map_err(|source| BuildError::Io {
                path: a.path.clone(),
                source,
            })?;
            if !status.success() {
                failed.get_or_insert(BuildError::Compile { arch: a.arch });
                continue;
            }
            if failed.is_some() {
                continue;
            }
            let deps = out_dir
                .join("ptx-target")
                .join(a.arch.name())
                .join("nvptx64-nvidia-cuda")
                .join("release")
                .join("deps");
            let src = newest_asm(&deps, &crate_name).ok_or_else(|| BuildError::NoPtx {
                arch: a.arch,
                dir: deps.clone(),
            })?;
            let text = std::fs::read_to_string(&src).map_err(|source| BuildError::Io {
                path: src.clone(),
                source,
            })?;
            write(&a.path, apply_launch_bounds(&text).as_bytes())?;
            // This arch's ptxas runs while the later archs still compile.
            if let Some(child) = self.start_ptxas(a)? {
                assemblers.0.push(child);
                assembling.push(a);
            }
        }
        for (a, child) in assembling.into_iter().zip(assemblers.0.iter_mut()) {
            finish_ptxas(a, child)?;
        }
        if let Some(e) = failed {
            return Err(e);
        }
        std::thread::scope(|s| {
            let packs: Vec<_> = artifacts
                .iter()
                .flat_map(|a| [(&a.path, &a.packed_ptx), (&a.cubin, &a.packed_cubin)])
                .map(|(from, to)| s.spawn(move || pack(from, to)))
                .collect();
            packs
                .into_iter()
                .try_for_each(|p| p.join().expect("packing does not panic"))
        })?;
        Ok(artifacts)
    }

    /// The nested `cargo rustc` that compiles the crate for `arch` into its own target dir.
    fn nested_build(
        &self,
        cargo: &OsString,
        manifest: &Path,
        out_dir: &Path,
        arch: Arch,
    ) -> Command {
        let target_dir = out_dir.join("ptx-target").join(arch.name());
        let mut cmd = Command::new(cargo);
        cmd.arg("rustc")
            .arg("--lib")
            .arg("--release")
            .arg("--target")
            .arg("nvptx64-nvidia-cuda")
            .arg("-Zbuild-std=core")
            .arg("--crate-type")
            .arg("cdylib")
            .arg("--manifest-path")
            .arg(manifest)
            .arg("--target-dir")
            .arg(&target_dir)
            .args(["--config", "profile.release.lto=\"fat\""])
            .args(["--config", "profile.release.panic=\"abort\""])
            .args(["--config", "profile.release.codegen-units=1"])
            .args(["--config", "profile.release.opt-level=3"])
            .args(["--config", "profile.release.debug=false"]);
        if self.no_default_features {
            cmd.arg("--no-default-features");
        }
        if !self.features.is_empty() {
            cmd.arg("--features").arg(self.features.join(","));
        }
        cmd.arg("--")
            .arg("--emit=asm")
            .arg(format!("-Ctarget-cpu={}", arch.name()))
            .arg("-Clinker=/bin/true")
            // Register arrays indexed by loop counters (accumulator fragments) stay in
            // registers only when their loops are fully unrolled; the default threshold gives
            // up on large tiles and the arrays go to local memory.
            .arg("-Cllvm-args=-unroll-threshold=4000")
            .args(arch_rustflags(arch))
            .args(&self.rustflags);
        // The host build's flags and wrappers (clippy-driver, coverage, sanitizers) must not
        // leak into the device build.
        for var in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_BUILD_RUSTFLAGS",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_BUILD_RUSTC_WRAPPER",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_BUILD_TARGET_DIR",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_ENCODED_RUSTDOCFLAGS",
            "RUSTDOCFLAGS",
            "CARGO_LLVM_COV",
            "LLVM_PROFILE_FILE",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    std::fs::write(path, bytes).map_err(|source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Whether `FUSED_GEMM_SKIP_PTX` asks for no PTX: set to anything but empty, `0` or `false`.
fn skip_ptx() -> bool {
    skips(std::env::var("FUSED_GEMM_SKIP_PTX").ok().as_deref())
}

/// [`skip_ptx`] for the variable's value.
fn skips(value: Option<&str>) -> bool {
    value.is_some_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
}

/// `from` as one zstd frame in `to`; an empty `from` gives an empty `to`.
fn pack(from: &Path, to: &Path) -> Result<(), BuildError> {
    let io = |source| BuildError::Io {
        path: from.to_path_buf(),
        source,
    };
    let bytes = std::fs::read(from).map_err(io)?;
    if bytes.is_empty() {
        return write(to, &[]);
    }
    #[cfg(feature = "pack")]
    {
        let packed = zstd::bulk::compress(&bytes, PACK_LEVEL).map_err(io)?;
        write(to, &packed)
    }
    #[cfg(not(feature = "pack"))]
    {
        let _ = to;
        Err(BuildError::NoPacking)
    }
}

/// Prefix of the statics that carry launch bounds (see [`apply_launch_bounds`]).
pub const LAUNCH_BOUNDS_PREFIX: &str = "__fg_launch_bounds__";

/// Rust cannot attach `__launch_bounds__` to a kernel, so kernel crates export a static
/// `__fg_launch_bounds__<entry>: [u32; 2] = [max_threads, min_ctas_per_sm]` next to each entry
/// point (`#[fused_gemm]` does). This turns each into the PTX directives `.maxntid` and
/// `.minnctapersm` on `<entry>` (PTX ISA §11.4, performance-tuning directives) and removes the
/// static, so ptxas caps registers for the intended occupancy.
pub fn apply_launch_bounds(ptx: &str) -> String {
    let mut bounds: Vec<(String, u32, u32)> = Vec::new();
    let mut kept = String::with_capacity(ptx.len());
    for line in ptx.lines() {
        if let Some(rest) = line
            .split(LAUNCH_BOUNDS_PREFIX)
            .nth(1)
            .filter(|_| line.contains(".global"))
        {
            // `.visible .global .align 4 .b8 __fg_launch_bounds__NAME[8] = {0, 1, 0, 0, 2, 0, 0, 0};`
            let name = rest.split('[').next().unwrap_or("").to_owned();
            let mut bytes: Vec<u32> = rest
                .split('{')
                .nth(1)
                .and_then(|b| b.split('}').next())
                .map(|b| b.split(',').filter_map(|x| x.trim().parse().ok()).collect())
                .unwrap_or_default();
            // PTX initializers omit trailing zero bytes.
            if !bytes.is_empty() && bytes.len() <= 8 {
                bytes.resize(8, 0);
                let word = |i: usize| {
                    bytes[i] | bytes[i + 1] << 8 | bytes[i + 2] << 16 | bytes[i + 3] << 24
                };
                bounds.push((name, word(0), word(4)));
                continue;
            }
        }
        kept.push_str(line);
        kept.push('\n');
    }
    if bounds.is_empty() {
        return kept;
    }
    let mut out = String::with_capacity(kept.len() + bounds.len() * 48);
    let mut pending: Option<(u32, u32)> = None;
    for line in kept.lines() {
        if let Some(rest) = line
            .strip_prefix(".visible .entry ")
            .or_else(|| line.strip_prefix(".entry "))
        {
            let name = rest.split('(').next().unwrap_or("").trim();
            pending = bounds
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, t, c)| (*t, *c));
        }
        if line == "{"
            && let Some((threads, ctas)) = pending.take()
        {
            out.push_str(&format!(".maxntid {threads}, 1, 1\n.minnctapersm {ctas}\n"));
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

impl PtxBuilder {
    /// Starts ptxas on `a`'s PTX; without a ptxas, writes the cubin and log empty.
    fn start_ptxas(&self, a: &PtxArtifact) -> Result<Option<std::process::Child>, BuildError> {
        let Some(ptxas) = &self.ptxas else {
            write(&a.cubin, &[])?;
            write(&a.ptxas_log, &[])?;
            return Ok(None);
        };
        println!("cargo::rerun-if-changed={}", ptxas.display());
        // Into a file, not a pipe: a child whose pipe filled would wait for the parent, which
        // waits for the archs in turn, and the archs would no longer run in parallel.
        let io = |source| BuildError::Io {
            path: a.ptxas_log.clone(),
            source,
        };
        let log = std::fs::File::create(&a.ptxas_log).map_err(io)?;
        let log_err = log.try_clone().map_err(io)?;
        Command::new(ptxas)
            .arg(format!("-arch={}", a.arch.name()))
            .arg("-O3")
            .arg("-v")
            .arg(&a.path)
            .arg("-o")
            .arg(&a.cubin)
            // Optimizes functions on every CPU: the sm_90a module of the built-in kernels took
            // 65 s instead of 119 s on 2 cores, with the same registers and spills per entry.
            .args(["-split-compile", "0"])
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map(Some)
            .map_err(|source| BuildError::Spawn {
                cargo: ptxas.display().to_string(),
                source,
            })
    }
}

/// Child processes killed and reaped when dropped: when one arch fails, the others' builds must
/// not run on, holding their target directories' locks and writing into `OUT_DIR`. (A child
/// already waited for is not signalled again.)
struct Running(Vec<std::process::Child>);

impl Drop for Running {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits for `a`'s ptxas; on failure prints its errors and warnings (without `-v`'s
/// per-kernel report).
fn finish_ptxas(a: &PtxArtifact, child: &mut std::process::Child) -> Result<(), BuildError> {
    let status = child.wait().map_err(|source| BuildError::Io {
        path: a.path.clone(),
        source,
    })?;
    if status.success() {
        return Ok(());
    }
    let log = std::fs::read_to_string(&a.ptxas_log).unwrap_or_default();
    for line in log.lines() {
        if !line.starts_with("ptxas info") && !line.starts_with(' ') {
            eprintln!("{line}");
        }
    }
    Err(BuildError::Ptxas {
        arch: a.arch,
        path: a.path.clone(),
    })
}

fn env(name: &'static str) -> Result<String, BuildError> {
    std::env::var(name).map_err(|_| BuildError::MissingEnv(name))
}

fn read_package_name(manifest: &Path) -> Result<String, BuildError> {
    let io = |source| BuildError::Io {
        path: manifest.to_path_buf(),
        source,
    };
    let text = std::fs::read_to_string(manifest).map_err(io)?;
    let doc: toml::Table = text
        .parse()
        .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    doc.get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "no [package] name",
            ))
        })
}

fn newest_asm(dir: &Path, crate_name: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "s")
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| s == crate_name || s.starts_with(&format!("{crate_name}-")))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn skip_ptx_reads_zero_and_false_as_off() {
        for off in [None, Some(""), Some("0"), Some("false"), Some(" FALSE ")] {
            assert!(!super::skips(off), "{off:?}");
        }
        for on in [Some("1"), Some("yes"), Some("true")] {
            assert!(super::skips(on), "{on:?}");
        }
    }

    use super::*;

    #[test]
    fn launch_bounds_statics_become_directives() {
        let ptx = ".version 7.8\n.target sm_90\n\
            .visible .global .align 4 .b8 __fg_launch_bounds__k1[8] = {0, 1, 0, 0, 2};\n\
            .visible .entry k1(\n\t.param .u64 k1_param_0\n)\n{\n\tret;\n}\n\
            .visible .entry k2()\n{\n\tret;\n}\n";
        let out = apply_launch_bounds(ptx);
        assert!(!out.contains("__fg_launch_bounds__"));
        assert!(
            out.contains(")\n.maxntid 256, 1, 1\n.minnctapersm 2\n{\n\tret;"),
            "{out}"
        );
        assert_eq!(out.matches(".maxntid").count(), 1, "only k1 gets bounds");
    }

    /// A stand-in ptxas (a shell script) that reports on both streams, then fails when the PTX
    /// file's name contains "bad": the report lands in the log, the failure is an error.
    #[cfg(unix)]
    #[test]
    fn ptxas_report_is_kept_and_a_failure_is_an_error() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("fgb-ptxas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("ptxas");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"ptxas info    : Compiling entry function 'k' for '$1'\"\n\
             echo 'ptxas info    : Used 40 registers' >&2\n\
             case \"$4\" in *bad*) echo 'ptxas fatal   : bad input' >&2; exit 1;; esac\n\
             : > \"$6\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let artifact = |name: &str, arch: Arch| PtxArtifact {
            arch,
            path: dir.join(format!("{name}.ptx")),
            cubin: dir.join(format!("{name}.cubin")),
            ptxas_log: dir.join(format!("{name}.ptxas.log")),
            packed_ptx: dir.join(format!("{name}.ptx.zst")),
            packed_cubin: dir.join(format!("{name}.cubin.zst")),
        };
        // Every module's ptxas at once, then each waited for, as `build` does.
        let assemble = |builder: &PtxBuilder, artifacts: &[PtxArtifact]| {
            let started = artifacts
                .iter()
                .map(|a| builder.start_ptxas(a).map(|c| (a, c)))
                .collect::<Result<Vec<_>, _>>()?;
            started
                .into_iter()
                .filter_map(|(a, c)| c.map(|c| (a, c)))
                .try_for_each(|(a, mut c)| finish_ptxas(a, &mut c))
        };
        let builder = PtxBuilder::new(&dir).ptxas(&fake);
        let good = [
            artifact("good80", Arch::Sm80),
            artifact("good90a", Arch::Sm90a),
        ];
        assemble(&builder, &good).unwrap();
        for a in &good {
            let log = std::fs::read_to_string(&a.ptxas_log).unwrap();
            let arch = format!("-arch={}", a.arch.name());
            assert!(
                log.contains(&format!("entry function 'k' for '{arch}'")),
                "{log}"
            );
            assert!(log.contains("Used 40 registers"), "{log}");
            assert!(a.cubin.exists());
        }
        let bad = [artifact("bad", Arch::Sm90)];
        match assemble(&builder, &bad) {
            Err(BuildError::Ptxas { arch, path }) => {
                assert_eq!((arch, path), (Arch::Sm90, dir.join("bad.ptx")));
            }
            other => panic!("expected BuildError::Ptxas, got {other:?}"),
        }
        assert!(
            std::fs::read_to_string(&bad[0].ptxas_log)
                .unwrap()
                .contains("bad input")
        );
        let none = [artifact("none", Arch::Sm80)];
        assemble(&PtxBuilder::new(&dir), &none).unwrap();
        assert_eq!(std::fs::read(&none[0].ptxas_log).unwrap(), b"");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    #[cfg(feature = "pack")]
    fn packed_files_round_trip_and_empty_stays_empty() {
        let dir = std::env::temp_dir().join(format!("fgb-pack-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (text, packed) = (dir.join("m.ptx"), dir.join("m.ptx.zst"));
        let ptx = ".version 8.5\n.target sm_90a\n".repeat(1000);
        std::fs::write(&text, &ptx).unwrap();
        pack(&text, &packed).unwrap();
        let bytes = std::fs::read(&packed).unwrap();
        assert!(bytes.len() < ptx.len() / 10, "{} bytes", bytes.len());
        assert_eq!(zstd::decode_all(&bytes[..]).unwrap(), ptx.as_bytes());
        std::fs::write(&text, b"").unwrap();
        pack(&text, &packed).unwrap();
        assert!(std::fs::read(&packed).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn package_name_is_read_from_the_package_table() {
        let dir = std::env::temp_dir().join(format!("fgb-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = dir.join("Cargo.toml");
        std::fs::write(
            &m,
            "[workspace]\nname = \"no\"\n[package]\nname = \"my-kernels\"\nversion = \"0.1.0\"\n",
        )
        .unwrap();
        assert_eq!(read_package_name(&m).unwrap(), "my-kernels");
        std::fs::remove_dir_all(&dir).ok();
    }
}
