// Every option, alone and combined, on the host side of the expansion.
use fused_gemm::device::gemm::sm90::TILES_SM90;
use fused_gemm::device::target::{Arch, Mainloop};
use fused_gemm::device::types::DType;
use fused_gemm::fused_gemm;

#[fused_gemm(epilogue = [])]
pub fn defaults() {}

#[fused_gemm(epilogue = [bias], dtype = f16, out = f32, b_layout = row)]
pub fn f16_to_f32_brow() {}

#[fused_gemm(epilogue = [gelu], arch = sm_90)]
pub fn hopper_only() {}

// `arch = sm_80`: the mma.sync variants only, even where TMA variants could be compiled.
#[fused_gemm(epilogue = [bias], arch = sm_80)]
pub fn sm80_only() {}

// f32 inputs run on the CUDA cores; a tile of theirs, and one derived for them.
#[fused_gemm(epilogue = [bias, layer_norm(eps = 1e-5)], dtype = f32)]
pub fn f32_inputs() {}

#[fused_gemm(epilogue = [relu], dtype = f32, out = bf16, tile = (64, 128, 32), arch = sm_90)]
pub fn f32_derived_tile() {}

// An instantiated tile keeps its warp grid; another is given one (and a pipeline depth that fits).
#[fused_gemm(epilogue = [relu], tile = (64, 64, 32))]
pub fn fixed_tile() {}

#[fused_gemm(epilogue = [relu], tile = (96, 96, 48), arch = sm_80)]
pub fn derived_tile() {}

#[fused_gemm(epilogue = [rms_norm(eps = 1e-6)], tile = (32, 768, 32), b_layout = col, arch = sm_80)]
pub fn row_tile_fewer_stages() {}

#[test]
fn every_option_alone_and_combined() {
    assert_eq!(
        (DEFAULTS.input, DEFAULTS.output),
        (DType::Bf16, DType::Bf16)
    );
    assert!(DEFAULTS.b_col && DEFAULTS.norm_finish.is_none());
    // No `arch`, 16-bit inputs, B stored N×K, no `tile`: the mma.sync variants (three tiles with
    // 16-byte loads, one bounds-checked) for every module, and a TMA + wgmma variant per Hopper
    // tile for the sm_90a module.
    let sm80 = DEFAULTS
        .variants
        .iter()
        .filter(|v| v.mainloop == Mainloop::Sm80);
    assert_eq!(sm80.clone().count(), 4);
    assert_eq!(sm80.filter(|v| !v.vec).count(), 1);
    let tma: Vec<_> = DEFAULTS
        .variants
        .iter()
        .filter(|v| v.mainloop.is_sm90())
        .collect();
    assert_eq!(tma.len(), TILES_SM90.len());
    assert_eq!(DEFAULTS.variants.len(), 4 + TILES_SM90.len());
    for v in &tma {
        assert!(v.vec && TILES_SM90.contains(&v.tile), "{}", v.entry);
        assert!(v.entry.contains("__sm90tma_bf16_bf16_bcol_"), "{}", v.entry);
        assert!(
            matches!(v.mainloop, Mainloop::Sm90Tma { cluster_m: 1 | 2 }),
            "{:?}",
            v.mainloop
        );
        assert!(Arch::Sm90a.has(v.mainloop) && !Arch::Sm80.has(v.mainloop));
    }

    // `arch = sm_80`: the same kernel without TMA variants.
    assert_eq!(SM80_ONLY.variants.len(), 4);
    assert!(
        SM80_ONLY
            .variants
            .iter()
            .all(|v| v.mainloop == Mainloop::Sm80)
    );

    assert_eq!(
        (F16_TO_F32_BROW.input, F16_TO_F32_BROW.output),
        (DType::F16, DType::F32)
    );
    assert!(!F16_TO_F32_BROW.b_col);
    assert!(
        F16_TO_F32_BROW.variants[0]
            .entry
            .contains("_sm80_f16_f32_brow_")
    );
    // TMA reads B only stored N×K: B stored K×N gets the mma.sync variants alone.
    assert!(
        F16_TO_F32_BROW
            .variants
            .iter()
            .all(|v| v.mainloop == Mainloop::Sm80)
    );

    // sm_80-style variants compiled for sm_90, plus the Hopper (TMA + wgmma) ones.
    assert!(
        HOPPER_ONLY
            .variants
            .iter()
            .all(|v| v.entry.contains("__sm90_") || v.entry.contains("__sm90tma_"))
    );
    assert!(
        HOPPER_ONLY
            .variants
            .iter()
            .any(|v| v.entry.contains("__sm90tma_"))
    );
    assert!(
        HOPPER_ONLY
            .variants
            .iter()
            .any(|v| v.mainloop == Mainloop::Sm80)
    );
    assert_eq!(
        HOPPER_ONLY
            .variants
            .iter()
            .filter(|v| v.mainloop.is_sm90())
            .count(),
        TILES_SM90.len()
    );
    for v in HOPPER_ONLY.variants {
        assert_eq!(
            v.mainloop.is_sm90(),
            v.entry.contains("__sm90tma_"),
            "{}",
            v.entry
        );
    }

    assert_eq!(
        (F32_INPUTS.input, F32_INPUTS.output),
        (DType::F32, DType::F32)
    );
    assert!(
        F32_INPUTS
            .variants
            .iter()
            .all(|v| v.entry.contains("__simt_f32_f32_"))
    );
    // f32 inputs run on the CUDA cores only, whatever the arch.
    assert!(
        F32_INPUTS
            .variants
            .iter()
            .all(|v| v.mainloop == Mainloop::Simt)
    );
    assert!(
        F32_DERIVED_TILE
            .variants
            .iter()
            .all(|v| v.mainloop == Mainloop::Simt)
    );
    assert!(F32_INPUTS.variants.iter().any(|v| v.tile.bn == 768));
    assert!(
        F32_DERIVED_TILE.variants[0]
            .entry
            .contains("__simt_sm90_f32_bf16_")
    );
    assert_eq!(F32_DERIVED_TILE.variants[0].tile.check(), None);

    // `tile` compiles one tile, twice: 16-byte loads and bounds-checked loads.
    for spec in [&FIXED_TILE, &DERIVED_TILE, &ROW_TILE_FEWER_STAGES] {
        assert_eq!(spec.variants.len(), 2, "{}", spec.name);
        assert_eq!(spec.variants[0].tile, spec.variants[1].tile);
        assert!(spec.variants[0].vec && !spec.variants[1].vec);
        // A `tile` rules out the TMA variants (the Hopper mainloop plans its own tiles).
        assert!(
            spec.variants.iter().all(|v| v.mainloop == Mainloop::Sm80),
            "{}",
            spec.name
        );
        assert_eq!(spec.variants[0].tile.check(), None);
    }
    let t = FIXED_TILE.variants[0].tile;
    assert_eq!((t.warps_m, t.warps_n, t.stages), (2, 2, 4));
    let t = DERIVED_TILE.variants[0].tile;
    assert_eq!((t.bm, t.bn, t.bk), (96, 96, 48));
    // 163 KB on sm_80: the 3-stage row tile (192000 B with B stored N×K) drops to 2 stages.
    let t = ROW_TILE_FEWER_STAGES.variants[0].tile;
    assert_eq!((t.bm, t.bn, t.warps_n, t.stages), (32, 768, 8, 2));
    assert!(t.smem_bytes(true) <= 163 * 1024);
}
