//! Embeds the git commit the benchmark was built from (`FUSED_GEMM_GIT_COMMIT`), with a
//! `-dirty` suffix when tracked files differ from it, or `unknown` outside a git checkout.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(sha) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            // Rebuild when HEAD moves or the index changes (commits, checkouts, staging).
            for p in ["HEAD", "index"] {
                if let Some(path) = git(&["rev-parse", "--git-path", p]) {
                    println!("cargo::rerun-if-changed={path}");
                }
            }
            if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"])
                && let Some(path) = git(&["rev-parse", "--git-path", &r])
            {
                println!("cargo::rerun-if-changed={path}");
            }
            // Re-check `-dirty` when sources change (directories are scanned recursively).
            for dir in [
                "src",
                "build.rs",
                "../src",
                "../device",
                "../host",
                "../macros",
                "../builder",
                "../cli",
                "../tests",
                "../Cargo.toml",
            ] {
                println!("cargo::rerun-if-changed={dir}");
            }
            if dirty { format!("{sha}-dirty") } else { sha }
        }
        None => "unknown".to_owned(),
    };
    println!("cargo::rustc-env=FUSED_GEMM_GIT_COMMIT={commit}");
}
