//! The `#[fused_gemm]` attribute's diagnostics, checked with trybuild.
//!
//! `tests/ui/{stages,options,item}/*.rs` must each fail to compile with exactly the errors in the
//! `.stderr` file beside it. Regenerate the `.stderr` files with
//! `TRYBUILD=overwrite cargo test -p fused-gemm-macros --test ui` and read every diff.
//!
//! These cases fail in the attribute itself, so they need this crate alone: trybuild
//! type-checks them against it and not against the facade and its dependencies. The errors
//! rustc reports in the expansion (a missing `include_ptx!`, a user stage that does not exist
//! or has the wrong signature) are `compile_fail` doctests of the facade (`src/compile_fail.rs`);
//! the accepted forms are the facade's ordinary tests (`tests/macro_forms/`).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/stages/*.rs");
    t.compile_fail("tests/ui/options/*.rs");
    t.compile_fail("tests/ui/item/*.rs");
}
