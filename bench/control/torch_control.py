#!/usr/bin/env python3
"""PyTorch baselines of the control-flow benchmark (bench/src/bin/control.rs), same shapes.

Workloads, bf16 on the GPU (cuDNN's LSTM falls back to fp16 if it rejects bf16; the dtype used
is recorded):
  lstm   an LSTM cell, hidden 256 (input 256), T = 100 and 1,000 steps, batch 1 and 64:
           cudnn_ms      nn.LSTM over the whole sequence (one cuDNN call),
           host_loop_ms  nn.LSTMCell called once per step from Python (eager host loop);
  gated  16 residual MLP blocks at batch 1, width d = 256 / 512 / 1024 (hidden width d):
           gate_i = mean(x·g_i) > θ_i read on the host with .item() (a sync), then
           x = x + (relu(x·W1ᵀ + b1)·W2ᵀ + b2) if the block runs; the skipped fraction is
           forced to 0, 25, 50, 75, 100 % with θ = ±inf on evenly spread blocks (the Rust
           side's Gating::fraction):
           host_branch_ms eager with host-read gates,
           compile_ms     torch.compile of one block's body (the .item() branch stays on the
                          host; --skip-compile to leave it out);
  exit   MiniLM-L6 shapes with early exit at batch 1: 6 post-norm encoder layers (d 384, 12
         heads, FFN 1536, GELU; nn.TransformerEncoderLayer) with a 4-class head after each;
         after every head the largest softmax probability is read on the host with .item()
         (a sync) and compared with the layer's threshold; exits forced after layer 1, 2, 3,
         4 or 6 with thresholds 0 / +inf (the Rust side's ExitPolicy::AtLayer), sequence
         lengths 12, 100, 300:
           host_branch_ms eager with host-read exits.

Each time is the median of CUDA-event times (torch.cuda.Event) of --reps runs after warm-up.
Prints one JSON object and writes it to --json if given.
"""
import argparse
import json
import statistics
import sys
import time


def median_ms(fn, reps, warmup):
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def skip_pattern(blocks, fraction):
    n_skip = round(min(max(fraction, 0.0), 1.0) * blocks)
    return [(i + 1) * n_skip // blocks > i * n_skip // blocks for i in range(blocks)]


def lstm_cases(args, torch, rows):
    dev = "cuda"
    h = 256
    for steps in args.steps:
        for batch in (1, 64):
            row = {"workload": f"LSTM cell h{h} b{batch} T{steps}"}
            x = torch.randn(steps, batch, h, device=dev)
            for dtype in (torch.bfloat16, torch.float16):
                try:
                    lstm = torch.nn.LSTM(h, h).to(dev, dtype)
                    xs = x.to(dtype)
                    with torch.no_grad():
                        lstm(xs)
                        row["cudnn_ms"] = median_ms(lambda: lstm(xs), args.reps, args.warmup)
                    row["cudnn_dtype"] = str(dtype)
                    break
                except RuntimeError as e:
                    row["cudnn_error"] = str(e)[:200]
            cell = torch.nn.LSTMCell(h, h).to(dev, torch.bfloat16)
            xb = x.to(torch.bfloat16)

            def host_loop():
                hx = torch.zeros(batch, h, device=dev, dtype=torch.bfloat16)
                cx = torch.zeros(batch, h, device=dev, dtype=torch.bfloat16)
                for t in range(steps):
                    hx, cx = cell(xb[t], (hx, cx))
                return hx

            with torch.no_grad():
                reps = max(5, args.reps // (10 if steps >= 1000 else 1))
                row["host_loop_ms"] = median_ms(host_loop, reps, 1)
            row["launches_host_loop"] = "≥ T (one LSTMCell per step)"
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)


def gated_cases(args, torch, rows):
    dev = "cuda"
    blocks = 16
    for d in args.widths:
        w1 = [torch.randn(d, d, device=dev, dtype=torch.bfloat16) / d**0.5 for _ in range(blocks)]
        b1 = [0.1 * torch.randn(d, device=dev, dtype=torch.bfloat16) for _ in range(blocks)]
        w2 = [0.5 * torch.randn(d, d, device=dev, dtype=torch.bfloat16) / d**0.5 for _ in range(blocks)]
        b2 = [0.1 * torch.randn(d, device=dev, dtype=torch.bfloat16) for _ in range(blocks)]
        g = [torch.randn(d, device=dev, dtype=torch.bfloat16) / d**0.5 for _ in range(blocks)]
        x0 = torch.randn(1, d, device=dev, dtype=torch.bfloat16)

        def body(x, i):
            return torch.nn.functional.linear(
                torch.relu(torch.nn.functional.linear(x, w1[i], b1[i])), w2[i], b2[i]) + x

        compiled = None
        if not args.skip_compile:
            try:
                compiled = torch.compile(body, dynamic=False)
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                print(f"torch.compile unavailable: {e}", file=sys.stderr)

        for f in args.fractions:
            skip = skip_pattern(blocks, f)
            thr = [float("inf") if s else float("-inf") for s in skip]
            row = {"workload": f"16 gated MLP blocks d{d} b1 skip{f * 100:.0f}%",
                   "skipped": sum(skip), "host_syncs": blocks}

            def forward(fn):
                x = x0
                for i in range(blocks):
                    gate = (x.float() @ g[i].float()).mean().item()
                    if gate > thr[i]:
                        x = fn(x, i)
                return x

            with torch.no_grad():
                row["host_branch_ms"] = median_ms(lambda: forward(body), args.reps, args.warmup)
                if compiled is not None:
                    try:
                        t0 = time.time()
                        forward(compiled)
                        torch.cuda.synchronize()
                        row["compile_s"] = time.time() - t0
                        row["compile_ms"] = median_ms(lambda: forward(compiled), args.reps,
                                                      args.warmup)
                    except Exception as e:  # noqa: BLE001 - recorded, not fatal
                        row["compile_error"] = str(e)[:200]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)


def exit_cases(args, torch, rows):
    dev = "cuda"
    d, heads, ffn, n_layers, labels = 384, 12, 1536, 6, 4
    layers = [torch.nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=False,
                                               layer_norm_eps=1e-12).to(dev, torch.bfloat16).eval()
              for _ in range(n_layers)]
    head = [torch.nn.Linear(d, labels).to(dev, torch.bfloat16) for _ in range(n_layers)]
    for length in args.exit_lengths:
        x0 = torch.randn(1, length, d, device=dev, dtype=torch.bfloat16)
        for e in args.exit_layers:
            thr = [0.0 if i == e else float("inf") for i in range(n_layers)]
            row = {"workload": f"MiniLM-L6 early exit b1 len{length} exit@{e + 1}",
                   "host_syncs": e + 1}

            def forward():
                x = x0
                for i in range(n_layers):
                    x = layers[i](x)
                    p = torch.softmax(head[i](x[:, 0]).float(), dim=-1).max().item()
                    if p >= thr[i] or i == n_layers - 1:
                        return x
                return x

            with torch.no_grad():
                row["host_branch_ms"] = median_ms(forward, args.reps, args.warmup)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--widths", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    ap.add_argument("--exit-lengths", type=int, nargs="+", default=[12, 100, 300])
    ap.add_argument("--exit-layers", type=int, nargs="+", default=[0, 1, 2, 3, 5],
                    help="0-based layer whose head exits")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    import torch

    torch.manual_seed(args.seed)
    rows = []
    lstm_cases(args, torch, rows)
    gated_cases(args, torch, rows)
    exit_cases(args, torch, rows)
    out = {
        "command": "python3 bench/control/torch_control.py " + " ".join(sys.argv[1:]),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "rows": rows,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
