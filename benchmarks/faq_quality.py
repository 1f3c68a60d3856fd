"""FAQ fallback quality: StackFAQ paraphrased queries (must get their entry's answer) and CLINC150
queries (out of scope for that FAQ: must get none), per threshold.

Only each entry's original question is imported; the 1,249 annotator paraphrases are the test.

    python benchmarks/faq_quality.py [--thresholds 0.70,0.75,0.80,0.85]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

from tricache.faq.store import FaqEntry, FaqStore
from tricache.semantic.embed import get_embedder

DATA = Path(__file__).parents[2] / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--thresholds", default="0.70,0.75,0.80,0.85,0.90")
    parser.add_argument("--embedder", default="use-m")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    with (DATA / "stackfaq/stackfaq_kb.jsonl").open(encoding="utf-8") as f:
        kb = [json.loads(line) for line in f]
    with (DATA / "clinc150/clinc150_test.tsv").open(encoding="utf-8") as f:
        oos = [row["text"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    queries = [(q, entry["id"]) for entry in kb for q in entry["paraphrased_queries"]]
    store = FaqStore(Path(tempfile.mkdtemp()) / "faq.sqlite3", embedder=get_embedder(args.embedder))
    store.add([FaqEntry(entry["question"], entry["answers"][0]) for entry in kb])
    ids = {entry["question"]: entry["id"] for entry in kb}  # the questions are distinct
    lines = [
        "| threshold | StackFAQ top-1 accuracy | StackFAQ served wrong | CLINC150 served (wrong) |",
        "|---:|---:|---:|---:|",
    ]
    started = time.perf_counter()
    for threshold in (float(t) for t in args.thresholds.split(",")):
        store.threshold = threshold
        right = wrong = 0
        for query, entry_id in queries:
            match = store.answer(query)
            if match is not None:
                right += ids[match.question] == entry_id
                wrong += ids[match.question] != entry_id
        served_oos = sum(store.answer(q) is not None for q in oos)
        lines.append(
            f"| {threshold:.2f} | {right / len(queries):.3f} | {wrong / len(queries):.3f} | "
            f"{served_oos / len(oos):.4f} |"
        )
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    lookups = len(args.thresholds.split(",")) * (len(queries) + len(oos))
    per_query_ms = (time.perf_counter() - started) / lookups * 1e3
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/faq_quality.py " + " ".join(sys.argv[1:])
    (args.out / "faq_quality.md").write_text(
        f"# FAQ fallback quality\n\nCommand: `{command.strip()}`\n\n"
        f"{time.strftime('%Y-%m-%d')}; embedder {args.embedder}; {len(kb)} StackFAQ entries "
        f"(original questions only), {len(queries)} paraphrased queries, {len(oos)} CLINC150 "
        f"queries (none of them about these FAQ topics); {per_query_ms:.1f} ms per query.\n\n"
        f"{table}\n"
    )
    print(table)


if __name__ == "__main__":
    main()
