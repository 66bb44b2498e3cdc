#!/usr/bin/env python3
"""The PyTorch, CODA and quack side of the comparison: every row of `fused-gemm-bench list
--json`, the same contracts as bench/src/epilogue.rs, timed the way bench/src/timing.rs times
ours, in one process on one GPU.

Columns per row (each checked against an fp32 reference on upcast inputs before it is timed):
  torch-gemm      x @ w.T alone (PyTorch's cuBLAS): the plain GEMM of the shape
  torch-eager     the contract as a PyTorch user writes it (F.linear, F.gelu, F.layer_norm, ...)
  torch-compile   torch.compile(eager, dynamic=False), default mode, within --compile-budget-s
  torch-graph     CUDA-graph replay of eager (one graph per rotation set)
  torch-lt-fused  torch._addmm_activation(bias, x, w.T, use_gelu=True): cuBLASLt's fused
                  bias+GELU(tanh) as PyTorch calls it (GELU rows)
  quack           quack.gemm_interface (gemm, gemm_act, gemm_rms, gemm_norm_act), default config
  coda            coda's gemm_swiglu with quack's default SM90 config (SwiGLU rows)

Timing (as bench/src/timing.rs): a spin kernel holds the GPU while the host queues a batch of
runs; CUDA events between consecutive runs; inputs rotate over sets that together exceed twice
the L2; every column of a row is timed once per round, rounds interleaved; medians over all
rounds.

Usage: torch_rows.py --rows rows.json --json torch.json [--site DIR] [--rounds 5] [--runs 20]
CODA and quack are imported from --site (default $CODA_SITE or /tmp/site) when present;
without them their columns say why. Results are written after every row; started again with
the same --json on the same card, it measures only the rows not there yet.
"""
import argparse
import gc
import importlib
import json
import math
import os
import site
import sys
import time
import traceback

TOL = 1e-2  # bf16, as bench/src/problem.rs: Frobenius and per element


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", required=True, help="fused-gemm-bench list --json output")
    ap.add_argument("--json", required=True, help="write the results here")
    ap.add_argument("--site", default=os.environ.get("CODA_SITE", "/tmp/site"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--compile-budget-s", type=float, default=300.0,
                    help="stop compiling new torch.compile columns after this much compile time")
    ap.add_argument("--max-sets", type=int, default=64)
    return ap.parse_args()


ARGS = parse_args()


def add_site(path):
    """Puts CODA/quack's install folder on sys.path, and stubs the two imports CODA 0.2 makes
    at module level but never uses here (ipdb, fla.utils)."""
    if not os.path.isdir(path):
        return
    sys.path.insert(0, path)
    site.addsitedir(path)
    dsl = os.path.join(path, "nvidia_cutlass_dsl", "dsl_packages")
    if os.path.isdir(dsl):
        sys.path.insert(0, dsl)
    stub = os.path.join(os.environ.get("TMPDIR", "/tmp"), "fused-gemm-compare-stubs")
    os.makedirs(os.path.join(stub, "fla"), exist_ok=True)
    if importlib.util.find_spec("ipdb") is None:
        with open(os.path.join(stub, "ipdb.py"), "w") as f:
            f.write("def set_trace(*a, **k):\n    pass\n")
    if importlib.util.find_spec("fla") is None:
        open(os.path.join(stub, "fla", "__init__.py"), "w").close()
        with open(os.path.join(stub, "fla", "utils.py"), "w") as f:
            f.write("def input_guard(fn):\n    return fn\n"
                    "def autocast_custom_fwd(fn=None, **kw):\n"
                    "    return fn if fn is not None else (lambda f: f)\n"
                    "autocast_custom_bwd = autocast_custom_fwd\n")
    sys.path.append(stub)
    # quack compiles in worker processes that must see the same paths.
    extra = [path, dsl, stub]
    os.environ["PYTHONPATH"] = os.pathsep.join(extra + [os.environ.get("PYTHONPATH", "")])


add_site(ARGS.site)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

DEV = "cuda"
BF16 = torch.bfloat16
torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference is fp32
torch.backends.cudnn.allow_tf32 = False

VERSIONS = {"torch": torch.__version__, "cuda": str(torch.version.cuda),
            "triton": triton.__version__}
MODS = {}
for name, mod in [("quack", "quack.gemm_interface"), ("coda", "coda.core.gemm.functional")]:
    try:
        MODS[name] = importlib.import_module(mod)
        VERSIONS[name] = getattr(importlib.import_module(name), "__version__", "?")
    except Exception as e:  # noqa: BLE001 - any import failure is reported, not fatal
        VERSIONS[name] = f"not available ({type(e).__name__}: {str(e)[:120]})"


def eps_of(epilogue):
    return {"bias-residual-layernorm": 1e-12, "rms-producer": 1e-5}.get(epilogue, 0.0)


def out_cols(epilogue, n):
    return n // 2 if epilogue == "swiglu" else n


def set_bytes(m, n, k, e):
    """Device bytes of one rotation set (as bench/src/problem.rs::set_bytes)."""
    elems = m * k + n * k + m * out_cols(e, n)
    elems += n * (e in ("bias", "bias-gelu", "bias-gelu-tanh", "bias-residual-layernorm"))
    elems += 2 * n * (e == "bias-residual-layernorm")
    elems += m * n * (e in ("bias-residual-layernorm", "rms-producer"))
    elems += m * n * (e == "swiglu")
    return 2 * elems + 4 * m * (e in ("rms-producer", "rms-consumer"))


def uniform(shape, scale=1.0, offset=0.0, dtype=BF16, gen=None):
    return (torch.rand(shape, device=DEV, generator=gen) * 2 - 1).mul_(scale).add_(offset).to(dtype)


def make_set(row, gen):
    """Inputs with the distributions of bench/src/problem.rs."""
    m, n, k, e = row["m"], row["n"], row["k"], row["epilogue"]
    s = {"x": uniform((m, k), gen=gen), "w": uniform((n, k), math.sqrt(3.0 / k), gen=gen)}
    if e in ("bias", "bias-gelu", "bias-gelu-tanh", "bias-residual-layernorm"):
        s["b"] = uniform((n,), 0.5, gen=gen)
    if e in ("bias-residual-layernorm", "rms-producer"):
        s["r"] = uniform((m, n), gen=gen)
    if e == "bias-residual-layernorm":
        s["g"] = uniform((n,), 0.5, 1.0, gen=gen)
        s["beta"] = uniform((n,), 0.5, gen=gen)
    if e == "rms-consumer":
        s["rstd"] = uniform((m,), 0.5, 1.0, dtype=torch.float32, gen=gen)
    if e == "swiglu":
        # The same weights with gate and up de-interleaved into halves, for PyTorch's columns.
        s["w_halves"] = torch.cat([s["w"][0::2], s["w"][1::2]]).contiguous()
    return s


def reference(row, s):
    """(the contract's output, its rstd or None, the plain GEMM), fp32 from upcast inputs."""
    e, n = row["epilogue"], row["n"]
    c = s["x"].float() @ s["w"].float().T
    eps = eps_of(e)
    rstd = None
    if e == "gemm":
        out = c
    elif e == "bias":
        out = c + s["b"].float()
    elif e == "bias-gelu":
        out = F.gelu(c + s["b"].float())
    elif e == "bias-gelu-tanh":
        out = F.gelu(c + s["b"].float(), approximate="tanh")
    elif e == "bias-residual-layernorm":
        out = F.layer_norm(c + s["b"].float() + s["r"].float(), (n,), s["g"].float(),
                           s["beta"].float(), eps)
    elif e == "swiglu":
        out = F.silu(c[:, 0::2]) * c[:, 1::2]
    elif e == "rms-producer":
        out = c + s["r"].float()
        rstd = torch.rsqrt(out.square().mean(-1) + eps)
    elif e == "rms-consumer":
        out = c * s["rstd"][:, None]
    else:
        raise ValueError(f"unknown epilogue {e}")
    return out, rstd, c


# Eager PyTorch (and its CUDA graph) rounds every intermediate to bf16: SwiGLU's silu(gate)
# before the product, for one, adds a second rounding to the output's. Its elements get twice
# the bound of a kernel that keeps intermediates in f32 (seen: 1.1-1.2x the single bound on
# LLaMA SwiGLU rows); a wrong layout or formula is still off by far more.
ROUNDS_INTERMEDIATES = ("torch-eager", "torch-graph")


def agreement(got, want):
    """(relative Frobenius error, worst |got - want| / (atol + rtol|want|)), as
    bench/src/problem.rs::agreement: rtol = TOL, atol = TOL * rms(want); NaN never passes."""
    got, want = got.float(), want.float()
    if not torch.isfinite(got).all():
        return math.inf, math.inf
    diff = (got - want).abs()
    frob = float(diff.norm() / want.norm().clamp_min(1e-30))
    atol = TOL * float(want.square().mean().sqrt())
    worst = float((diff / (atol + TOL * want.abs()).clamp_min(1e-30)).max())
    return frob, worst


# ---- the columns: (key, computes, make(sets) -> run(i) returning the output(s)) ------------


def eager_fn(e, n):
    """The contract as PyTorch code, on one set's tensors."""
    eps = eps_of(e)
    if e == "gemm":
        return lambda s: s["x"] @ s["w"].T
    if e == "bias":
        return lambda s: F.linear(s["x"], s["w"], s["b"])
    if e == "bias-gelu":
        return lambda s: F.gelu(F.linear(s["x"], s["w"], s["b"]))
    if e == "bias-gelu-tanh":
        return lambda s: F.gelu(F.linear(s["x"], s["w"], s["b"]), approximate="tanh")
    if e == "bias-residual-layernorm":
        return lambda s: F.layer_norm(F.linear(s["x"], s["w"], s["b"]) + s["r"], (n,), s["g"],
                                      s["beta"], eps)
    if e == "swiglu":
        def swiglu(s):
            gate, up = F.linear(s["x"], s["w_halves"]).chunk(2, dim=-1)
            return F.silu(gate) * up
        return swiglu
    if e == "rms-producer":
        def producer(s):
            h = F.linear(s["x"], s["w"]) + s["r"]
            return h, torch.rsqrt(h.float().square().mean(-1) + eps)
        return producer
    if e == "rms-consumer":
        return lambda s: F.linear(s["x"], s["w"]).mul_(s["rstd"][:, None])
    raise ValueError(e)


def quack_fn(e):
    """quack's kernel for the contract (default config), or (None, why)."""
    q = MODS.get("quack")
    if q is None:
        return None, f"quack {VERSIONS['quack']}"
    eps = eps_of(e)
    if e == "gemm":
        return (lambda s: q.gemm(s["x"], s["w"].T, tuned=False)), "full"
    if e == "bias":
        return (lambda s: q.gemm(s["x"], s["w"].T, bias=s["b"], tuned=False)), "full"
    if e in ("bias-gelu", "bias-gelu-tanh"):
        f = lambda s: q.gemm_act(s["x"], s["w"].T, bias=s["b"], activation="gelu_tanh_approx",  # noqa: E731
                                 store_preact=False, tuned=False)[1]
        return f, ("full" if e == "bias-gelu-tanh" else "gelu_tanh, not erf")
    if e == "swiglu":
        return (lambda s: q.gemm_act(s["x"], s["w"].T, activation="swiglu", store_preact=False,
                                     tuned=False)[1]), "full"
    if e == "rms-producer":
        return (lambda s: q.gemm_rms(s["x"], s["w"].T, C=s["r"], eps=eps, tuned=False)), "full"
    if e == "rms-consumer":
        return (lambda s: q.gemm_norm_act(s["x"], s["w"].T, rstd=s["rstd"], activation=None,
                                          store_preact=False, tuned=False)[1]), "full"
    return None, "quack has no fused post-LayerNorm epilogue"


def coda_fn(e, m, n):
    """CODA's fused GEMM+SwiGLU with quack's default SM90 config (its public call autotunes
    about 70 configs first), writing the pre-activation and the output as CODA does."""
    if e != "swiglu":
        return None, "CODA 0.2 fuses SwiGLU among these contracts"
    cf = MODS.get("coda")
    if cf is None:
        return None, f"CODA {VERSIONS['coda']}"
    from coda.core.epilogue.utils import preprocess_epi_args
    from coda.core.gemm.gemm_interface import _preprocess_gemm_operands
    from coda.core.gemm.registry import GemmSwiGLU
    from quack.gemm_interface import default_config

    def make(s):
        pre = torch.empty(m, n, device=DEV, dtype=BF16)
        post = torch.empty(m, n // 2, device=DEV, dtype=BF16)
        a3, b3, d3, _ = _preprocess_gemm_operands(A=s["x"], B=s["w"].T, D=pre, C=None)
        epi = preprocess_epi_args(GemmCls=GemmSwiGLU, epi_args={"mAuxOut": post})
        cfg = default_config(s["x"].device)

        def run():
            cf._gemm_swiglu_tuned.fn(A=a3, B=b3, D=d3, post_act=epi["mAuxOut"], config=cfg)
            return post
        return run
    return make, "full"


# ---- timing (as bench/src/timing.rs) -------------------------------------------------------

SPIN_CYCLES_PER_NS = 2.0  # over-estimates the SM clock: the hold only needs to be long enough


def time_batch(run, n_sets, runs, warmup, start):
    """`runs` samples (ms) of run(i) over rotating sets, after `warmup` untimed calls."""
    t0 = time.perf_counter()
    for i in range(warmup):
        run((start + i) % n_sets)
    host_us = (time.perf_counter() - t0) * 1e6 / max(warmup, 1)
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(runs + 1)]
    hold_ns = min((runs * host_us * 1.5 + 50.0) * 1e3, 2e8)
    torch.cuda._sleep(int(hold_ns * SPIN_CYCLES_PER_NS))
    events[0].record()
    for i in range(runs):
        run((start + warmup + i) % n_sets)
        events[i + 1].record()
    torch.cuda.synchronize()
    return [events[i].elapsed_time(events[i + 1]) for i in range(runs)]


def summary(samples):
    s = sorted(samples)
    q = lambda p: s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]  # noqa: E731
    return {"median_ms": q(0.5) if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2,
            "p10_ms": q(0.1), "p90_ms": q(0.9), "runs": len(s)}


# ---- one row ----------------------------------------------------------------------------------

COMPILE_SPENT = [0.0]


def run_row(row, l2_bytes, gen):
    m, n, k, e = row["m"], row["n"], row["k"], row["epilogue"]
    free, _ = torch.cuda.mem_get_info()
    per = set_bytes(m, n, k, e)
    n_sets = max(1, min(ARGS.max_sets, max(2, -(-2 * l2_bytes // per)),
                        int(free * 0.3 // max(per, 1))))
    sets = [make_set(row, gen) for _ in range(n_sets)]
    want, want_rstd, want_gemm = reference(row, sets[0])
    fused = e != "gemm"
    columns = []  # (key, computes, note, run(i) or None)

    def add(key, computes, run, note=""):
        columns.append({"key": key, "computes": computes, "run": run, "note": note})

    add("torch-gemm", "GEMM only" if fused else "full", lambda i: sets[i]["x"] @ sets[i]["w"].T)
    eager = eager_fn(e, n)
    if fused:
        add("torch-eager", "full", lambda i: eager(sets[i]))
        if COMPILE_SPENT[0] < ARGS.compile_budget_s:
            compiled = torch.compile(eager, dynamic=False)
            add("torch-compile", "full", lambda i: compiled(sets[i]))
        else:
            add("torch-compile", "full", None,
                f"skipped: the compile budget of {ARGS.compile_budget_s:.0f} s was spent")
        add("torch-graph", "full", None, "graph")
    if e in ("bias-gelu", "bias-gelu-tanh"):
        add("torch-lt-fused", "full" if e == "bias-gelu-tanh" else "gelu_tanh, not erf",
            lambda i: torch._addmm_activation(sets[i]["b"], sets[i]["x"], sets[i]["w"].T,
                                              use_gelu=True))
    qf, q_computes = quack_fn(e)
    if qf is not None:
        add("quack", q_computes, lambda i: qf(sets[i]), "default config")
    else:
        add("quack", "full", None, q_computes)
    cmake, c_computes = coda_fn(e, m, n)
    if cmake is not None:
        try:
            runners = [cmake(s) for s in sets]
            add("coda", c_computes, lambda i: runners[i](), "quack's default SM90 config")
        except Exception as ex:  # noqa: BLE001
            traceback.print_exc()
            add("coda", c_computes, None, f"error: {type(ex).__name__}: {str(ex)[:200]}")
    else:
        add("coda", "full", None, c_computes)

    # CUDA graphs of eager, one per set, sharing one memory pool.
    for c in columns:
        if c["key"] != "torch-graph":
            continue
        c["note"] = ""
        try:
            pool = torch.cuda.graph_pool_handle()
            graphs, outs = [], []
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for s in sets:
                    for _ in range(2):
                        eager(s)
            torch.cuda.current_stream().wait_stream(stream)
            for s in sets:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    outs.append(eager(s))
                graphs.append(g)

            def replay(i, graphs=graphs, outs=outs):
                graphs[i].replay()
                return outs[i]
            c["run"] = replay
        except Exception as ex:  # noqa: BLE001
            traceback.print_exc()
            c["note"] = f"error: capture failed: {type(ex).__name__}: {str(ex)[:200]}"

    # Check each column once, then time the good ones in interleaved rounds.
    results = []
    for c in columns:
        r = {"column": c["key"], "computes": c["computes"], "note": c["note"]}
        if c["run"] is None:
            r["status"] = "error" if c["note"].startswith("error") else "n/a"
            results.append(r)
            continue
        try:
            t0 = time.perf_counter()
            got = c["run"](0)
            torch.cuda.synchronize()
            if c["key"] == "torch-compile":
                COMPILE_SPENT[0] += time.perf_counter() - t0
                r["compile_s"] = round(time.perf_counter() - t0, 1)
            rstd = None
            if isinstance(got, tuple):
                got, rstd = got
            if c["computes"] == "GEMM only":
                ref = want_gemm
            elif c["computes"] == "gelu_tanh, not erf":
                ref = F.gelu(want_gemm + sets[0]["b"].float(), approximate="tanh")
            else:
                ref = want
            frob, worst = agreement(got, ref)
            if want_rstd is not None and c["computes"] == "full" and e == "rms-producer":
                f2, w2 = agreement(rstd, want_rstd)
                frob, worst = max(frob, f2), max(worst, w2)
            if c["key"] in ROUNDS_INTERMEDIATES:
                worst /= 2.0
            r["err"], r["worst_element"] = frob, worst
            del got, rstd
            r["status"] = "ok" if frob <= TOL and worst <= 1.0 else "wrong"
            if r["status"] == "wrong":
                r["note"] = (r["note"] + "; " if r["note"] else "") + \
                    f"not timed: error {frob:.2e}, worst element {worst:.2f}x its bound"
        except Exception as ex:  # noqa: BLE001
            traceback.print_exc()
            r["status"] = "error"
            r["note"] = f"{type(ex).__name__}: {str(ex)[:300]}"
        results.append(r)
    good = [i for i, r in enumerate(results) if r["status"] == "ok"]
    samples = {i: [] for i in good}
    for rnd in range(ARGS.rounds):
        for j in range(len(good)):
            i = good[(j + rnd) % len(good)]
            if results[i]["status"] != "ok":
                continue
            try:
                samples[i] += time_batch(columns[i]["run"], n_sets, ARGS.runs,
                                         ARGS.warmup if rnd == 0 else 2, rnd * 7)
            except Exception as ex:  # noqa: BLE001
                traceback.print_exc()
                results[i]["status"] = "error"
                results[i]["note"] = f"timing failed: {type(ex).__name__}: {str(ex)[:200]}"
    for i in good:
        if results[i]["status"] == "ok" and samples[i]:
            results[i].update(summary(samples[i]))
    return {"name": row["name"], "rotation_sets": n_sets, "columns": results}


def main():
    with open(ARGS.rows) as f:
        rows = json.load(f)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    out = {
        "tool": "bench/compare/torch_rows.py",
        "device": torch.cuda.get_device_name(0),
        "versions": VERSIONS,
        "method": f"as ours: spin, CUDA events between consecutive runs, rotation over sets of "
                  f">= 2x L2, {ARGS.rounds} interleaved rounds x {ARGS.runs} runs; bf16; "
                  f"torch.compile default mode, dynamic=False; quack and CODA default configs",
        "rows": [],
        "notes": [],
    }
    # A run cut short continues: rows already in --json are kept, not measured again.
    if os.path.isfile(ARGS.json):
        try:
            with open(ARGS.json) as f:
                before = json.load(f)
            if before.get("device") == out["device"]:
                out["rows"] = before.get("rows", [])
                out["notes"] = before.get("notes", [])
        except (OSError, ValueError):
            pass
    done = {r["name"] for r in out["rows"]}
    gen = torch.Generator(device=DEV).manual_seed(1234)
    t0 = time.time()

    def save():
        out["wall_s"] = round(time.time() - t0, 1)
        out["compile_s"] = round(COMPILE_SPENT[0], 1)
        tmp = ARGS.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
        os.replace(tmp, ARGS.json)

    for row in rows:
        if row["name"] in done:
            continue
        t = time.time()
        try:
            out["rows"].append(run_row(row, l2, gen))
            gc.collect()
            torch.cuda.empty_cache()
        except Exception as ex:  # noqa: BLE001 - one row's failure must not lose the others
            traceback.print_exc()
            out["notes"].append(f"{row['name']}: {type(ex).__name__}: {str(ex)[:300]}")
            torch.cuda.empty_cache()
        cols = out["rows"][-1]["columns"] if out["rows"] and out["rows"][-1]["name"] == row["name"] else []
        line = " · ".join(f"{c['column']} {c['median_ms']:.4f}" if "median_ms" in c
                          else f"{c['column']} {c['status']}" for c in cols)
        print(f"{row['name']} ({time.time() - t:.1f} s): {line}", file=sys.stderr, flush=True)
        save()
    if COMPILE_SPENT[0] >= ARGS.compile_budget_s:
        out["notes"].append(f"torch.compile stopped after {COMPILE_SPENT[0]:.0f} s of compiling "
                            f"(budget {ARGS.compile_budget_s:.0f} s)")
    save()


if __name__ == "__main__":
    main()
