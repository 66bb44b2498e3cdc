#!/usr/bin/env python3
"""Merges the MiniLM benchmark's two halves (fused-gemm's `bench --json` and
pytorch_baseline.py's JSON) into <out>.json and <out>.md, and prints the markdown table.

Either half may be missing (its failure is recorded); the other is still reported.
"""
import argparse
import json
import os
import sys


def load(path):
    if not path or not os.path.isfile(path):
        return None, f"{path}: not produced"
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, f"{path}: {e}"


def fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    """How many times faster `a` is than `b` (b / a), or '-'."""
    if a is None or b is None or a <= 0:
        return "-"
    return f"{b / a:.2f}x"


def markdown(ours, torch, command, errors):
    lines = ["# all-MiniLM-L6-v2 forward pass: fused-gemm vs PyTorch", ""]
    dev = (ours or torch or {}).get("device", "?")
    seq = (ours or torch or {}).get("seq_len", "?")
    lines.append(f"Device: {dev}. Sequence length {seq} (every sequence full). Command: `{command}`.")
    if ours:
        lines.append(f"fused-gemm: {ours['dtype']}, attention heads {ours['heads']}; "
                     f"{ours['method']}.")
    if torch:
        lines.append(f"PyTorch {torch['torch']}, transformers {torch['transformers']}, fp16, "
                     f"attention `{torch.get('attn_implementation')}`, weights file "
                     f"{', '.join(torch.get('weights_file_dtype', []))}; {torch['method']}.")
    lines.append("")
    lines.append("Latency per forward pass (ms, median) and throughput of the fastest variant:")
    lines.append("")
    lines.append("| batch | ours eager | ours CUDA graph | ours end-to-end | PyTorch eager | "
                 "torch.compile | PyTorch CUDA graph | ours sentences/s | best PyTorch "
                 "sentences/s | ours vs eager | vs compile | vs CUDA graph |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    o_rows = {r["batch"]: r for r in (ours or {}).get("rows", [])}
    t_rows = {r["batch"]: r for r in (torch or {}).get("rows", [])}
    for b in sorted(set(o_rows) | set(t_rows)):
        o, t = o_rows.get(b, {}), t_rows.get(b, {})
        ours_best = min([v for v in (o.get("eager_ms"), o.get("graph_ms")) if v], default=None)
        t_vals = [v for v in (t.get("eager_ms"), t.get("compile_ms"), t.get("graph_ms")) if v]
        t_best = min(t_vals, default=None)
        lines.append(
            f"| {b} | {fmt(o.get('eager_ms'))} | {fmt(o.get('graph_ms'))} | "
            f"{fmt(o.get('end_to_end_ms'))} | {fmt(t.get('eager_ms'))} | "
            f"{fmt(t.get('compile_ms'))} | {fmt(t.get('graph_ms'))} | "
            f"{fmt(b / ours_best * 1e3 if ours_best else None, 0)} | "
            f"{fmt(b / t_best * 1e3 if t_best else None, 0)} | "
            f"{ratio(ours_best, t.get('eager_ms'))} | {ratio(ours_best, t.get('compile_ms'))} | "
            f"{ratio(ours_best, t.get('graph_ms'))} |")
    lines.append("")
    lines.append("`ours vs X` = X's time / our best time (above 1: we are faster). "
                 "End-to-end = upload of token ids + forward + download of the embeddings, host "
                 "clock.")
    if ours and ours.get("rows"):
        lines.append("")
        lines.append("One layer of ours, each kernel launched alone (ms, median; the GEMM plan):")
        lines.append("")
        batches = [r["batch"] for r in ours["rows"]]
        lines.append("| kernel | " + " | ".join(f"batch {b}" for b in batches) + " |")
        lines.append("|---|" + "---:|" * len(batches))
        steps = [s["step"] for s in ours["rows"][0]["layer"]]
        for i, name in enumerate(steps):
            cells = []
            for r in ours["rows"]:
                s = r["layer"][i]
                plan = f" ({s['plan']})" if s.get("plan") else ""
                cells.append(f"{s['ms']:.4f}{plan}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("| kernels of the whole forward (embeddings + 6 layers + pooling) | "
                     + " | ".join(f"{r['kernel_sum_ms']:.3f}" for r in ours["rows"]) + " |")
        if ours.get("graph_error"):
            lines.append("")
            lines.append(f"CUDA graphs were off: {ours['graph_error']}")
    notes = list(errors) + list((torch or {}).get("skipped", []))
    if torch:
        comp = [f"batch {r['batch']}: {r['compile_s']:.0f} s" for r in torch["rows"]
                if r.get("compile_s") is not None]
        if comp:
            notes.append("torch.compile compile times: " + ", ".join(comp))
    if notes:
        lines.append("")
        lines.extend(f"- {n}" for n in notes)
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--out", required=True, help="path prefix: writes <out>.json and <out>.md")
    ap.add_argument("--command", default="bench/minilm/bench.sh")
    args = ap.parse_args()
    ours, e1 = load(args.ours)
    torch, e2 = load(args.torch)
    errors = [e for e in (e1, e2) if e]
    md = markdown(ours, torch, args.command, errors)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(dict(command=args.command, fused_gemm=ours, pytorch=torch, errors=errors), f,
                  indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(md)
    sys.stdout.write(md)
    return 0 if ours else 1


if __name__ == "__main__":
    sys.exit(main())
