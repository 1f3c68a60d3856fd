"""Small input faults of the first minute (#24): each is a clear error or warning, not a
silent import, an unfounded recommendation, a traceback, a stray folder or file, or noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner, Result

from tricache import Cache
from tricache.faq.store import FaqEntry, FaqStore, read_entries
from tricache.semantic.audit import AuditLog
from tricache.tools.cli import app
from tricache.tools.evaluate import Pair, calibrate, too_few_pairs

runner = CliRunner()


def _error(result: Result) -> str:
    """The one line a failed command printed (exit status 2)."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tricache: error: "), lines
    return lines[0]


# 1. empty questions and answers ------------------------------------------------------------
@pytest.mark.parametrize(
    "name, text",
    [
        ("faq.csv", "question,answer\nHow do I reset it?,Use the link.\n,No question.\n"
                    "What is X?,  \n"),
        ("faq.jsonl", '\n{"question": "How do I reset it?", "answer": "Use the link."}\n'
                      '{"question": "", "answer": "No question."}\n'
                      '{"question": "What is X?", "answer": "  "}\n'),
    ],
    ids=["csv", "jsonl"],
)  # fmt: skip
def test_faq_rows_with_an_empty_field_are_refused_by_line(
    tmp_path: Path, name: str, text: str
) -> None:
    faq_file = tmp_path / name
    faq_file.write_text(text, encoding="utf-8")
    db = tmp_path / "c.sqlite3"
    line = _error(runner.invoke(app, ["faq", "import", str(faq_file), "--path", str(db)]))
    assert name in line and "2 bad rows, nothing was imported" in line
    assert "line 3: empty question" in line and "line 4: empty answer" in line
    with (
        Cache(path=tmp_path / "api.sqlite3") as cache,
        pytest.raises(ValueError, match="line 3: empty question"),
    ):
        cache.import_faq(faq_file)
    result = runner.invoke(app, ["faq", "search", "How do I reset it?", "--path", str(db)])
    assert "the FAQ is empty" in result.output  # the good row was not imported either


def test_many_bad_rows_name_the_first_few(tmp_path: Path) -> None:
    faq_file = tmp_path / "faq.csv"
    faq_file.write_text("question,answer\n" + "q,\n" * 8, encoding="utf-8")
    with pytest.raises(ValueError, match=r"8 bad rows.*line 6: empty answer; and 3 more$"):
        read_entries(faq_file)


def test_the_python_api_refuses_empty_entries_and_adds_none(tmp_path: Path) -> None:
    store = FaqStore(tmp_path / "faq.sqlite3")
    good = FaqEntry("How do I reset my password?", "Use the link.")
    with pytest.raises(ValueError, match=r"entries\[1\] \(''\): empty question and answer"):
        store.add([good, FaqEntry("", " ")])
    with pytest.raises(ValueError, match=r"entries\[0\] \('Why\?'\): empty answer"):
        store.add(iter([FaqEntry("Why?", "")]))
    assert store.count() == 0 and store.version() == 0
    with Cache(path=tmp_path / "c.sqlite3") as cache:
        with pytest.raises(ValueError, match="nothing was added"):
            cache.add_faq([FaqEntry("   ", "An answer.")])
        assert cache.faq is None
        assert cache.bump_kb_version() == 1  # the refused entries bumped nothing


# 2. calibrate on too few pairs ---------------------------------------------------------------
def test_calibrate_on_two_pairs_warns_that_it_is_not_reliable(tmp_path: Path) -> None:
    pairs = tmp_path / "two.tsv"
    pairs.write_text(
        "q1\tq2\tlabel\nHow do I reset my password?\tHow can I reset my password?\t1\n"
        "How do I enable dark mode?\tHow do I disable dark mode?\t0\n",
        encoding="utf-8",
    )
    result = runner.invoke(app, ["calibrate", str(pairs), "--target-precision", "0.9"])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "warning: not reliable: only 2 labelled pairs (1 same, 1 different)" in output
    result = runner.invoke(app, ["calibrate", str(pairs), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pairs"] == 2 and report["reliable"] is False
    assert "only 2 labelled pairs" in report["warning"]
    assert "tricache: warning: only 2" in result.stderr


class _Unit:
    """A stand-in embedder: a question's vector is fixed by its text."""

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = [np.random.default_rng(sum(map(ord, t))).normal(size=8) for t in texts]
        return np.array([r / np.linalg.norm(r) for r in rows])


def test_the_minimum_is_pairs_and_each_label() -> None:
    def pairs(same: int, different: int) -> list[Pair]:
        return [Pair(f"a{i}", f"b{i}", 1) for i in range(same)] + [
            Pair(f"c{i}", f"d{i}", 0) for i in range(different)
        ]

    assert too_few_pairs(pairs(25, 25)) is None
    assert "only 49 labelled pairs" in str(too_few_pairs(pairs(25, 24)))
    assert "(91 same, 9 different)" in str(too_few_pairs(pairs(91, 9)))
    assert "(9 same, 91 different)" in str(too_few_pairs(pairs(9, 91)))
    assert calibrate(pairs(25, 25), _Unit(), guards=()).warning is None
    assert calibrate(pairs(1, 1), _Unit(), guards=()).warning is not None


# 3. undecodable files ------------------------------------------------------------------------
LATIN1 = {  # each with a byte that is not UTF-8 (é in Latin-1) on line 2
    "faq.csv": "question,answer\nCafé ouvert ?,Oui.\n",
    "faq.jsonl": '\n{"question": "Café ouvert ?", "answer": "Oui."}\n',
    "pairs.tsv": "q1\tq2\tlabel\nCafé ouvert ?\tLe café est ouvert ?\t1\n",
    "pairs.csv": "q1,q2,label\nCafé ouvert ?,Le café est ouvert ?,1\n",
    "config.json": '{\n"model_type": "café"}\n',
    "lengths.txt": "12\n30 é\n",
}


@pytest.mark.parametrize(
    "args, name",
    [
        (["faq", "import", "{d}/faq.csv", "--path", "{d}/s.sqlite3"], "faq.csv"),
        (["faq", "import", "{d}/faq.jsonl", "--path", "{d}/s.sqlite3"], "faq.jsonl"),
        (["eval-pairs", "{d}/pairs.tsv"], "pairs.tsv"),
        (["calibrate", "{d}/pairs.csv"], "pairs.csv"),
        (["kv-budget", "{d}"], "config.json"),
        (["kv-budget", "{d}/ok.json", "--prompt-lengths", "{d}/lengths.txt"], "lengths.txt"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else v,
)
def test_an_undecodable_file_is_named(tmp_path: Path, args: list[str], name: str) -> None:
    for file, text in LATIN1.items():
        (tmp_path / file).write_bytes(text.encode("latin-1"))
    (tmp_path / "ok.json").write_text(
        '{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2}', encoding="utf-8"
    )
    line = _error(runner.invoke(app, [a.replace("{d}", str(tmp_path)) for a in args]))
    assert f"{tmp_path / name}: not UTF-8 text (line 2: byte 0xe9)" in line, line
    assert not (tmp_path / "s.sqlite3").exists()


def test_a_utf8_file_with_a_bom_is_read(tmp_path: Path) -> None:
    faq_file = tmp_path / "excel.csv"
    faq_file.write_text("question,answer\nCafé ouvert ?,Oui.\n", encoding="utf-8-sig")
    assert read_entries(faq_file) == [FaqEntry("Café ouvert ?", "Oui.")]


# 4. --chart and --plot create no folders -----------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--chart", "{d}/missing/deeper/chart.png"],
        ["calibrate", "{d}/pairs.tsv", "--plot", "{d}/missing/deeper/curve.png"],
        ["audit", "--path", "{d}/audit.sqlite3", "--plot", "{d}/missing/deeper/t.png"],
    ],
    ids=lambda args: args[0],
)
def test_a_missing_output_folder_is_an_error_not_created(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "pairs.tsv").write_text("q1\tq2\tlabel\na\tb\t1\n", encoding="utf-8")
    AuditLog(tmp_path / "audit.sqlite3").close()
    line = _error(runner.invoke(app, [a.replace("{d}", str(tmp_path)) for a in args]))
    assert f"no such folder: {tmp_path / 'missing' / 'deeper'}" in line
    assert not (tmp_path / "missing").exists()


# 5. the demo writes nothing into the working directory ---------------------------------------
def test_the_demo_writes_no_chart_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    result = runner.invoke(app, ["demo", "--requests", "20", "--llm-latency", "0"])
    assert result.exit_code == 0, result.output
    assert list(cwd.iterdir()) == []
    assert "--chart" in result.output  # and says how to get one


# 6. build_tiny_llama is silent ---------------------------------------------------------------
def test_build_tiny_llama_prints_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from tricache.kv.tiny import build_tiny_llama

    capfd.readouterr()
    assert (build_tiny_llama(tmp_path / "llama") / "config.json").exists()
    out, err = capfd.readouterr()
    assert out == ""  # the tokenizer trainer's progress printed blank lines here
    assert "it/s" not in err and "%|" not in err  # no progress bars
