#!/usr/bin/env python3
"""Markdown tables of the encoder benchmark (bench/minilm/bench.sh) from its JSON files.

Reads, in DIR, `{model}-{fused,deferred}.json` (`fused-gemm bench --json`) and
`{model}-torch.json` (`pytorch_baseline.py --json`) for each model given, and prints per model
the forward-pass table (ours with each LayerNorm placement, PyTorch eager, torch.compile and
CUDA graph, PyTorch's best over ours) and the per-GEMM breakdown of one layer against the
plain GEMM of each step's shape. A missing file leaves its columns empty ("-").

    python3 bench/minilm/table.py DIR minilm bert
"""
import json
import os
import sys

PLACEMENTS = ("fused", "deferred")
GEMM_STEPS = (
    "qkv_projection+bias",
    "attn_out+bias+residual+layernorm",
    "ffn_up+bias+gelu",
    "ffn_down+bias+residual+layernorm",
)


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def ms(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def ours_ms(row):
    """The replayed graph where there is one, else the eager pass."""
    return row["graph_ms"] if row.get("graph_ms") is not None else row["eager_ms"]


def forward_table(ours, torch):
    batches = sorted({r["batch"] for o in ours.values() if o for r in o["rows"]}
                     | {r["batch"] for r in (torch or {}).get("rows", [])})
    lines = ["| batch | " + " | ".join(f"ours, {p}" for p in PLACEMENTS)
             + " | PyTorch eager | torch.compile | PyTorch CUDA graph | PyTorch's best ÷ ours, "
             + " | PyTorch's best ÷ ours, ".join(PLACEMENTS) + " |",
             "|---:|" + "---:|" * (len(PLACEMENTS) * 2 + 3)]
    for b in batches:
        mine = {}
        for p in PLACEMENTS:
            row = next((r for r in (ours[p] or {}).get("rows", []) if r["batch"] == b), None)
            mine[p] = ours_ms(row) if row else None
        t = next((r for r in (torch or {}).get("rows", []) if r["batch"] == b), {})
        theirs = [t.get("eager_ms"), t.get("compile_ms"), t.get("graph_ms")]
        best = min((v for v in theirs if v is not None), default=None)
        ratios = [ms(best / mine[p], 2) if best and mine[p] else "-" for p in PLACEMENTS]
        lines.append(f"| {b} | " + " | ".join(ms(mine[p]) for p in PLACEMENTS) + " | "
                     + " | ".join(ms(v) for v in theirs) + " | " + " | ".join(ratios) + " |")
    return lines


def layer_table(ours):
    """The largest batch's breakdown, each GEMM step over its plain GEMM."""
    lines = []
    rows = {p: (ours[p] or {}).get("rows", []) for p in PLACEMENTS}
    batch = max((r["batch"] for rs in rows.values() for r in rs), default=None)
    if batch is None:
        return lines
    steps = {}
    for p in PLACEMENTS:
        row = next((r for r in rows[p] if r["batch"] == batch), None)
        if row:
            steps[p] = {s["step"]: s for s in row["layer"]}
            layer = row.get("layer_index", 0)
    lines.append(f"Layer {layer} at batch {batch}, each GEMM alone (ms) and over the plain GEMM "
                 "of its shape and weights:")
    lines.append("")
    lines.append("| step | " + " | ".join(f"{p} | ÷ GEMM" for p in PLACEMENTS) + " |")
    lines.append("|---|" + "---:|---:|" * len(PLACEMENTS))
    for name in GEMM_STEPS:
        cells = []
        for p in PLACEMENTS:
            s = steps.get(p, {}).get(name)
            plain = s.get("plain_gemm_ms") if s else None
            cells += [ms(s["ms"], 4) if s else "-",
                      ms(s["ms"] / plain, 2) if s and plain else "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    folder, models = sys.argv[1], sys.argv[2:]
    for model in models:
        ours = {p: load(os.path.join(folder, f"{model}-{p}.json")) for p in PLACEMENTS}
        torch = load(os.path.join(folder, f"{model}-torch.json"))
        if not any(ours.values()) and not torch:
            print(f"table.py: no results for {model} in {folder}", file=sys.stderr)
            return 1
        first = next((o for o in ours.values() if o), None)
        head = f"## {model}"
        if first:
            head += f" ({first['dtype']}, seq {first['seq_len']}, {first['device']})"
        print(head)
        print()
        print("\n".join(forward_table(ours, torch)))
        print()
        print("\n".join(layer_table(ours)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
