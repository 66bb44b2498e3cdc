#!/usr/bin/env python3
"""PyTorch side of the whole-model rows of the comparison (bench/compare/run.sh runs this).

The same weights as the Rust tool (the model directory's model.safetensors, f32 or the f16 copy
written by `fused-gemm convert-model`) loaded into transformers' BertModel, fp16 on the GPU,
followed by sentence-transformers' mean pooling and L2 normalization. Inputs as the Rust side:
B sequences of T tokens ([CLS], random ids in 1000..30000, [SEP]), attention mask all ones.

Measured per batch size, median of CUDA-event times per forward pass, repetitions queued back
to back after warm-up (the Rust side's method):
  eager_ms     the module run op by op (transformers' default attention implementation),
  graph_ms     torch.cuda.CUDAGraph replay of the eager forward,
  compile_ms   torch.compile(forward, dynamic=False) (inductor, default mode, one compile per
               batch size), compile time in compile_s.
torch.compile runs last, and only while the time budget (--budget-s) lasts: a skipped
measurement is recorded with its reason.

No network is used: config.json and model.safetensors are read from --model-dir.
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--batch-sizes", default="1,32,256")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--target-ms", type=float, default=300.0,
                    help="device time per measurement (sets repetitions, 5..500)")
    ap.add_argument("--budget-s", type=float, default=140.0,
                    help="wall-clock budget of this script; torch.compile is skipped past it")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--json", required=True, help="write the results here")
    args = ap.parse_args()
    t0 = time.time()

    import torch
    import torch.nn.functional as F
    import transformers
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    dev = "cuda"
    cfg = BertConfig.from_json_file(os.path.join(args.model_dir, "config.json"))
    model = BertModel(cfg, add_pooling_layer=False)
    state = load_file(os.path.join(args.model_dir, "model.safetensors"))
    weights_dtype = sorted({str(v.dtype) for v in state.values() if v.is_floating_point()})
    state = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # The pooler is not used by sentence-transformers; position_ids / token_type_ids are
    # buffers some versions save and others do not.
    unexpected = [k for k in unexpected if not k.startswith("pooler.") and not k.endswith("_ids")]
    missing = [k for k in missing if not k.endswith("_ids")]
    if missing or unexpected:
        sys.exit(f"pytorch_baseline: weights do not match BertModel: missing {missing}, "
                 f"unexpected {unexpected}")
    model = model.to(dev, torch.float16).eval()
    attn = getattr(model.config, "_attn_implementation", None)

    def forward(ids, mask):
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(out.dtype)
            e = (out * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return F.normalize(e, p=2, dim=1)

    def time_ms(fn, reps, warmup=3):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        for s, e in events:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        t = sorted(s.elapsed_time(e) for s, e in events)
        return t[len(t) // 2]

    def reps_for(one_ms):
        return int(min(500, max(5, args.target_ms / max(one_ms, 1e-3))))

    gen = torch.Generator().manual_seed(args.seed)
    rows, skipped = [], []
    inputs = {}

    def save():
        """Writes what is measured so far (a later timeout keeps it)."""
        result = dict(
            tool="pytorch",
            device=torch.cuda.get_device_name(),
            torch=torch.__version__,
            transformers=transformers.__version__,
            dtype="fp16",
            weights_file_dtype=weights_dtype,
            attn_implementation=attn,
            seq_len=args.seq_len,
            method="median of CUDA-event times per forward pass, repetitions back to back, "
                   "after warm-up; mean pooling + L2 normalization included",
            rows=rows,
            skipped=skipped,
            wall_s=time.time() - t0,
        )
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, args.json)

    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        ids = torch.randint(1000, 30000, (bs, args.seq_len), generator=gen)
        ids[:, 0], ids[:, -1] = 101, 102
        ids = ids.to(dev)
        mask = torch.ones_like(ids)
        inputs[bs] = (ids, mask)
        out = forward(ids, mask)
        if not torch.isfinite(out).all():
            sys.exit(f"pytorch_baseline: non-finite embeddings at batch {bs}")
        reps = reps_for(time_ms(lambda: forward(ids, mask), 1, warmup=2))
        eager = time_ms(lambda: forward(ids, mask), reps)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                forward(ids, mask)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            forward(ids, mask)
        graph = time_ms(g.replay, reps)
        del g
        row = dict(batch=bs, seq_len=args.seq_len, reps=reps, eager_ms=eager, graph_ms=graph,
                   compile_ms=None, compile_s=None)
        rows.append(row)
        print(f"pytorch batch {bs}: eager {eager:.3f} ms, CUDA graph {graph:.3f} ms "
              f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)

    save()
    if args.skip_compile:
        skipped.append("torch.compile: --skip-compile")
    else:
        # Static shapes: one specialized compile per batch size (the fastest torch.compile
        # can do; the default would switch to dynamic shapes at the second batch size).
        compiled = torch.compile(forward, dynamic=False)
        for row in rows:
            used = time.time() - t0
            if used > args.budget_s:
                skipped.append(f"torch.compile at batch {row['batch']}: time budget "
                               f"{args.budget_s:.0f} s used up ({used:.0f} s)")
                continue
            ids, mask = inputs[row["batch"]]
            tc = time.time()
            compiled(ids, mask)
            compiled(ids, mask)
            torch.cuda.synchronize()
            row["compile_s"] = time.time() - tc
            row["compile_ms"] = time_ms(lambda: compiled(ids, mask), row["reps"])
            print(f"pytorch batch {row['batch']}: torch.compile {row['compile_ms']:.3f} ms "
                  f"(compiled in {row['compile_s']:.0f} s; {time.time() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
            save()

    save()


if __name__ == "__main__":
    main()
