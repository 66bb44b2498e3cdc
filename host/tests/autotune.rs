//! Autotune with a fake timer: picks the fastest timed candidate, caches it on disk by key,
//! survives corrupt caches.

use std::cell::Cell;
use std::path::PathBuf;

use fused_gemm_device::types::DType;
use fused_gemm_host::autotune::{
    AUTOTUNE_ENV, Autotuner, CACHE_ENV, CACHE_FILE, Entry, Mainloop, TuneKey, autotune_from_env,
    default_cache_dir, m_class, nk_class,
};
use fused_gemm_host::gpu::DeviceProps;
use fused_gemm_host::plan::{Plan, Planner, Problem};
use fused_gemm_host::{Error, Result};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "fused-gemm-autotune-{name}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn planner() -> Planner {
    Planner::new(DeviceProps::h200())
}

/// Fake device: the candidate with the most splits (then the smallest tile) is fastest, the
/// opposite of what the model predicts for a large square GEMM.
fn fake_ms(p: &Plan) -> f32 {
    1.0 / (p.splits as f32) + (p.tile.bm * p.tile.bn) as f32 * 1e-6
}

#[test]
fn tunes_the_top_k_and_reuses_the_cached_winner() {
    let dir = temp_dir("reuse");
    let pl = planner();
    let p = Problem::gemm(3000, 4096, 4096, DType::Bf16);
    let key = TuneKey::new("H200", 90, "gemm_bias", &p);
    let top = pl.top_k(&p, 3).unwrap();
    let want = top
        .iter()
        .min_by(|a, b| fake_ms(a).total_cmp(&fake_ms(b)))
        .copied()
        .unwrap();

    let calls = Cell::new(0);
    let mut tuner = Autotuner::new(&dir).with_top_k(3);
    let got = tuner
        .tune(&pl, &key, &p, |plan| {
            calls.set(calls.get() + 1);
            Ok(fake_ms(plan))
        })
        .unwrap();
    assert_eq!(calls.get(), 3);
    assert_eq!((got.tile, got.splits), (want.tile, want.splits));
    assert!(dir.join(CACHE_FILE).exists());
    let e = tuner.entry(&key).unwrap();
    assert_eq!(e.tuned_on, (3000, 4096, 4096));
    assert_eq!(e.measured_ms, fake_ms(&want));

    // Same class (M 3000 and 4000 both round to 4096): no timing, same choice, planned for the
    // new M.
    let p2 = Problem::gemm(4000, 4096, 4096, DType::Bf16);
    let key2 = TuneKey::new("H200", 90, "gemm_bias", &p2);
    assert_eq!(key, key2);
    let again = tuner
        .tune(&pl, &key2, &p2, |_| panic!("must not time a cached class"))
        .unwrap();
    assert_eq!((again.tile, again.splits), (want.tile, want.splits));
    assert_eq!(again.grid.1, 4000u32.div_ceil(want.tile.bm));

    // A new process reads the file.
    let fresh = Autotuner::new(&dir);
    assert!(fresh.warnings().is_empty(), "{:?}", fresh.warnings());
    let hit = fresh.lookup(&pl, &key, &p).unwrap();
    assert_eq!((hit.tile, hit.splits), (want.tile, want.splits));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn keys_separate_device_kernel_dtype_and_shape_class() {
    let p = Problem::gemm(1000, 768, 3072, DType::Bf16);
    let base = TuneKey::new("H200", 90, "k", &p);
    let others = [
        TuneKey::new("H100", 90, "k", &p),
        TuneKey::new("H200", 80, "k", &p),
        TuneKey::new("H200", 90, "k2", &p),
        TuneKey::new("H200", 90, "k", &Problem::gemm(1000, 768, 3072, DType::F16)),
        TuneKey::new(
            "H200",
            90,
            "k",
            &Problem::gemm(1025, 768, 3072, DType::Bf16),
        ),
        TuneKey::new(
            "H200",
            90,
            "k",
            &Problem::gemm(1000, 769, 3072, DType::Bf16),
        ),
        TuneKey::new(
            "H200",
            90,
            "k",
            &Problem::gemm(1000, 768, 2816, DType::Bf16),
        ),
    ];
    for o in &others {
        assert_ne!(&base, o);
    }
    assert_eq!(
        base,
        TuneKey::new("H200", 90, "k", &Problem::gemm(513, 768, 3072, DType::Bf16))
    );
    assert_eq!(
        (m_class(0), m_class(1), m_class(513), m_class(u32::MAX)),
        (1, 1, 1024, 1 << 31)
    );
    assert_eq!((nk_class(1), nk_class(128), nk_class(129)), (128, 128, 256));
}

#[test]
fn corrupt_or_foreign_caches_are_ignored_with_a_warning() {
    let pl = planner();
    let p = Problem::gemm(512, 512, 512, DType::F16);
    let key = TuneKey::new("H200", 90, "k", &p);
    for (i, junk) in [
        "{ not json".to_owned(),
        "\u{0}\u{1}binary".to_owned(),
        r#"{"version": 99, "entries": {}}"#.to_owned(),
        r#"{"version": 1, "entries": {"x": {"bad": true}}}"#.to_owned(),
        String::new(),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = temp_dir(&format!("corrupt{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(CACHE_FILE), &junk).unwrap();
        let mut tuner = Autotuner::new(&dir);
        assert_eq!(
            tuner.warnings().len(),
            1,
            "{junk:?}: {:?}",
            tuner.warnings()
        );
        let plan = tuner.tune(&pl, &key, &p, |p| Ok(fake_ms(p))).unwrap();
        assert_eq!(tuner.warnings().len(), 1, "{:?}", tuner.warnings());
        // The file was rewritten and is valid now.
        let reread = Autotuner::new(&dir);
        assert!(reread.warnings().is_empty(), "{:?}", reread.warnings());
        assert_eq!(reread.lookup(&pl, &key, &p).unwrap().tile, plan.tile);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn failing_candidates_are_skipped_and_all_failing_is_an_error() {
    let dir = temp_dir("fail");
    let pl = planner();
    let p = Problem::gemm(64, 8192, 8192, DType::Bf16);
    let key = TuneKey::new("H200", 90, "k", &p);
    let top = pl.top_k(&p, 4).unwrap();
    let mut tuner = Autotuner::new(&dir).with_top_k(4);
    let first = top[0];
    let plan = tuner
        .tune(&pl, &key, &p, |c| {
            if c == &first {
                Err(Error::invalid("plan", "a compiled variant", "missing"))
            } else {
                Ok(fake_ms(c))
            }
        })
        .unwrap();
    assert_ne!(plan, first);
    assert_eq!(tuner.warnings().len(), 1);

    let key2 = TuneKey::new("H200", 90, "other", &p);
    let e = tuner
        .tune(&pl, &key2, &p, |_| -> Result<f32> {
            Err(Error::invalid("plan", "x", "y"))
        })
        .unwrap_err();
    assert!(
        matches!(e, Error::Timing { ref detail, .. } if detail.contains("every candidate failed")),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unusable_cached_choice_is_retuned() {
    let dir = temp_dir("retune");
    let pl = planner();
    // K = 100 is 4 k-tiles of 32: a cached 16-way split (tuned on another K of the class,
    // written by hand here) cannot launch, so the tuner times candidates again.
    let p = Problem::gemm(64, 1024, 100, DType::Bf16);
    let key = TuneKey::new("H200", 90, "k", &p);
    let t = pl.plan(&p).unwrap().tile;
    let entry = Entry {
        key: key.clone(),
        tile: (t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages),
        splits: 16,
        measured_ms: 0.01,
        tuned_on: (64, 1024, 128),
        timed: Vec::new(),
    };
    std::fs::create_dir_all(&dir).unwrap();
    let file = serde_json::json!({ "version": 1, "entries": { key.to_string(): entry } });
    std::fs::write(dir.join(CACHE_FILE), file.to_string()).unwrap();
    let mut tuner = Autotuner::new(&dir);
    assert!(tuner.warnings().is_empty(), "{:?}", tuner.warnings());
    assert_eq!(tuner.entry(&key).unwrap().splits, 16);
    assert!(tuner.lookup(&pl, &key, &p).is_none());
    let calls = Cell::new(0);
    let plan = tuner
        .tune(&pl, &key, &p, |c| {
            calls.set(calls.get() + 1);
            Ok(fake_ms(c))
        })
        .unwrap();
    assert!(calls.get() > 0 && plan.splits < 16);
    assert_eq!(
        Autotuner::new(&dir).entry(&key).unwrap().splits,
        plan.splits
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn processes_sharing_a_cache_keep_each_others_entries() {
    let dir = temp_dir("merge");
    let pl = planner();
    let p = Problem::gemm(256, 256, 256, DType::Bf16);
    let (k1, k2) = (
        TuneKey::new("H200", 90, "one", &p),
        TuneKey::new("H200", 90, "two", &p),
    );
    let mut t1 = Autotuner::new(&dir);
    let mut t2 = Autotuner::new(&dir);
    t1.tune(&pl, &k1, &p, |p| Ok(fake_ms(p))).unwrap();
    t2.tune(&pl, &k2, &p, |p| Ok(fake_ms(p))).unwrap();
    let both = Autotuner::new(&dir);
    assert!(both.entry(&k1).is_some() && both.entry(&k2).is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_cache_directory_comes_from_the_environment() {
    let dir = temp_dir("env");
    // SAFETY: no other test in this binary reads or writes this variable.
    unsafe { std::env::set_var(CACHE_ENV, &dir) };
    assert_eq!(default_cache_dir(), dir);
    assert_eq!(Autotuner::from_env().cache_path(), dir.join(CACHE_FILE));
    unsafe { std::env::remove_var(CACHE_ENV) };
    let d = default_cache_dir();
    assert!(d.ends_with("fused-gemm"), "{}", d.display());
}

#[test]
fn the_autotune_switch_comes_from_the_environment() {
    // SAFETY: no other test in this binary reads or writes this variable.
    for (value, on) in [
        ("1", true),
        ("ON", true),
        ("", true),
        ("yes", true),
        ("0", false),
        (" Off ", false),
        ("FALSE", false),
    ] {
        unsafe { std::env::set_var(AUTOTUNE_ENV, value) };
        assert_eq!(autotune_from_env(), on, "{value:?}");
    }
    unsafe { std::env::remove_var(AUTOTUNE_ENV) };
    assert!(autotune_from_env(), "on unless switched off");
}

#[test]
fn hopper_choices_have_keys_of_their_own_and_old_files_still_read() {
    let dir = temp_dir("sm90");
    let p = Problem::gemm(4096, 1024, 4096, DType::Bf16);
    let sm80 = TuneKey::new("NVIDIA H100 80GB HBM3", 90, "k", &p);
    let sm90 = sm80.clone().with_mainloop(Mainloop::Sm90);
    assert_ne!(sm80, sm90);
    assert_eq!(sm80.mainloop, Mainloop::Sm80);
    assert_eq!(
        sm80.to_string(),
        "NVIDIA H100 80GB HBM3|sm_90|k|bf16|m4096|n1024|k4096|aligned"
    );
    assert_eq!(sm90.to_string(), format!("{sm80}|sm90"));

    // A file written before the field existed: its entries are sm_80 ones.
    std::fs::create_dir_all(&dir).unwrap();
    let old = r#"{"version": 1, "entries": {"NVIDIA H100 80GB HBM3|sm_90|k|bf16|m4096|n1024|k4096|aligned": {
        "key": {"device": "NVIDIA H100 80GB HBM3", "compute_capability": 90, "kernel": "k",
                "dtype": "bf16", "m_class": 4096, "n_class": 1024, "k_class": 4096, "aligned": true},
        "tile": [128, 128, 32, 2, 4, 4], "splits": 2, "measured_ms": 0.05, "tuned_on": [4096, 1024, 4096]}}}"#;
    std::fs::write(dir.join(CACHE_FILE), old).unwrap();
    let mut tuner = Autotuner::new(&dir);
    assert!(tuner.warnings().is_empty(), "{:?}", tuner.warnings());
    assert_eq!(tuner.entry(&sm80).unwrap().splits, 2);
    assert!(tuner.entry(&sm90).is_none());

    // A Hopper choice is recorded beside it, saved, and read back by another tuner.
    tuner.record(Entry {
        key: sm90.clone(),
        tile: (128, 256, 64, 8, 1, 4),
        splits: 1,
        measured_ms: 0.041,
        tuned_on: (4096, 1024, 4096),
        timed: vec![
            ((128, 256, 64, 8, 1, 4), 0.041),
            ((128, 128, 64, 4, 1, 6), 0.045),
        ],
    });
    assert!(tuner.warnings().is_empty(), "{:?}", tuner.warnings());
    let reread = Autotuner::new(&dir);
    assert_eq!(reread.entries().count(), 2);
    assert_eq!(reread.entry(&sm90).unwrap().tile, (128, 256, 64, 8, 1, 4));
    assert_eq!(reread.entry(&sm90).unwrap().key.mainloop, Mainloop::Sm90);
    assert_eq!(reread.entry(&sm90).unwrap().timed.len(), 2);
    assert!(reread.entry(&sm80).unwrap().timed.is_empty());
    assert_eq!(reread.entry(&sm80).unwrap().tile, (128, 128, 32, 2, 4, 4));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn another_driver_or_build_is_another_key() {
    let dir = temp_dir("builds");
    let p = Problem::gemm(8192, 28672, 4096, DType::Bf16);
    let key = TuneKey::new("NVIDIA H100 80GB HBM3", 90, "k", &p)
        .with_mainloop(Mainloop::Sm90)
        .with_build(13000, 0x0badf00d);
    assert_eq!(
        key.to_string(),
        "NVIDIA H100 80GB HBM3|sm_90|k|bf16|m8192|n28672|k4096|aligned|sm90|cuda13000|b0badf00d"
    );
    let mut tuner = Autotuner::new(&dir);
    tuner.record(Entry {
        key: key.clone(),
        tile: (256, 256, 64, 16, 1, 4),
        splits: 1,
        measured_ms: 2.6,
        tuned_on: (8192, 28672, 4096),
        timed: Vec::new(),
    });
    let reread = Autotuner::new(&dir);
    assert_eq!(reread.entry(&key).unwrap().tile, (256, 256, 64, 16, 1, 4));
    for other in [
        key.clone().with_build(12080, 0x0badf00d),
        key.clone().with_build(13000, 0x0badf00e),
        key.clone().with_build(0, 0),
    ] {
        assert!(reread.entry(&other).is_none(), "{other}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cache entry naming an impossible tile (zero or absurd fields, as a corrupt or hand-edited
/// file may hold) is not a plan: the lookup finds nothing, and tuning times the candidates
/// again, instead of dividing by zero or overflowing.
#[test]
fn cached_impossible_tiles_are_not_plans() {
    let pl = planner();
    let p = Problem::gemm(512, 512, 512, DType::F16);
    let key = TuneKey::new("H200", 90, "k", &p);
    for (i, tile) in [
        (0, 64, 32, 2, 2, 4),
        (64, 0, 32, 2, 2, 4),
        (64, 64, 0, 2, 2, 4),
        (64, 64, 32, 0, 2, 4),
        (u32::MAX, 64, 32, 2, 2, 4),
        (64, 64, 32, u32::MAX, u32::MAX, 4),
        (64, 64, 32, 2, 2, u32::MAX),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = temp_dir(&format!("impossible{i}"));
        let mut tuner = Autotuner::new(&dir);
        tuner.record(Entry {
            key: key.clone(),
            tile,
            splits: 1,
            measured_ms: 0.01,
            tuned_on: (512, 512, 512),
            timed: Vec::new(),
        });
        let reread = Autotuner::new(&dir);
        assert!(reread.lookup(&pl, &key, &p).is_none(), "{tile:?}");
        let mut reread = reread;
        let timed = Cell::new(0);
        let plan = reread
            .tune(&pl, &key, &p, |c| {
                timed.set(timed.get() + 1);
                Ok(fake_ms(c))
            })
            .unwrap();
        assert!(timed.get() > 0, "{tile:?}: tuned again");
        assert!(plan.tile.check().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
