// The example of docs/macro.md: BERT's attention output projection, C = LayerNorm(A·W + b + R).
use fused_gemm::device::gemm::sm90::TILES_SM90;
use fused_gemm::device::target::Mainloop;
use fused_gemm::device::types::DType;
use fused_gemm::fused_gemm;
use fused_gemm::host::kernel::KernelVariant;
use fused_gemm::host::{Gpu, LaunchReport, Result, Tensor};

/// BERT attention output projection.
#[fused_gemm(epilogue = [bias, residual, layer_norm(eps = 1e-12)], dtype = bf16)]
pub fn attn_out_proj() {}

// The launcher's signature: gpu, A, B, C, then one parameter per stage operand, in stage order.
#[allow(dead_code, clippy::too_many_arguments)]
fn call(
    gpu: &Gpu,
    x: &Tensor,
    w: &Tensor,
    out: &mut Tensor,
    b: &Tensor,
    r: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
) -> Result<LaunchReport> {
    attn_out_proj(gpu, x, w, out, b, r, gamma, beta)
}

#[test]
fn attention_output_projection() {
    let spec = &ATTN_OUT_PROJ;
    assert_eq!(spec.name, "attn_out_proj");
    assert_eq!(spec.stages, "bias, residual, layer_norm(eps = 1e-12)");
    assert_eq!((spec.input, spec.output), (DType::Bf16, DType::Bf16));
    assert!(spec.b_col && !spec.accumulate);
    assert_eq!(spec.norm_finish, Some("attn_out_proj__norm_finish_bf16"));
    assert_eq!(spec.ptx.crate_name, "macro_forms");
    // The mma.sync variants (every GPU): three general tiles with 16-byte loads, one
    // bounds-checked, five row-spanning tiles.
    let (sm80, tma): (Vec<&KernelVariant>, Vec<&KernelVariant>) = spec
        .variants
        .iter()
        .partition(|v| v.mainloop == Mainloop::Sm80);
    assert_eq!(sm80.len(), 9);
    assert_eq!(sm80.iter().filter(|v| !v.vec).count(), 1);
    assert!(sm80.iter().any(|v| v.tile.bn == 1024));
    for v in &sm80 {
        assert!(
            v.entry.starts_with("attn_out_proj__sm80_bf16_bf16_bcol_t"),
            "{}",
            v.entry
        );
        assert_eq!(v.tile.check(), None);
    }
    // No `arch`: also the TMA + wgmma variants (the sm_90a module), one per Hopper tile.
    assert_eq!(tma.len(), TILES_SM90.len());
    for v in &tma {
        assert!(v.mainloop.is_sm90() && v.vec, "{}", v.entry);
        assert!(
            v.entry
                .starts_with("attn_out_proj__sm90tma_bf16_bf16_bcol_t"),
            "{}",
            v.entry
        );
        assert!(TILES_SM90.contains(&v.tile), "{}", v.entry);
    }
}
