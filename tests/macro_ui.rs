//! The `#[fused_gemm]` attribute's diagnostics, checked with trybuild.
//!
//! `tests/ui/{stages,options,item}/*.rs` must each fail to compile with exactly the errors in the
//! `.stderr` file beside it. Regenerate the `.stderr` files with
//! `TRYBUILD=overwrite cargo test --test macro_ui` and read every diff. The accepted forms are
//! ordinary tests (`tests/macro_forms/`): with only failing cases trybuild type-checks
//! (`cargo check`) instead of building and linking its copy of every dependency.
//!
//! The device side of the same expansions is built by the root crate's `build.rs` from
//! `src/kernels/` and checked by `tests/ptx.rs` with ptxas.

#[test]
fn ui() {
    // trybuild compiles the cases in its own target directory, where `fused-gemm`'s build script
    // would run the nested nvptx64 build again (minutes on two cores). The cases only need the
    // host side, so skip the PTX there.
    // SAFETY: this is the only test in this binary and nothing else reads the environment
    // concurrently.
    unsafe { std::env::set_var("FUSED_GEMM_SKIP_PTX", "1") };
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/stages/*.rs");
    t.compile_fail("tests/ui/options/*.rs");
    t.compile_fail("tests/ui/item/*.rs");
}
