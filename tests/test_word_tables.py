"""The guards' word tables (issue #25): jieba's dictionary and the English lists as
memory-mapped tries, built once per machine.  Same words and tags as jieba, a damaged table
rebuilt, an unwritable home served from memory, and the memory a worker saves."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tricache.runtime import tables
from tricache.semantic.guards.segmenter import tagger

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _chinese_texts(limit: int) -> list[str]:
    texts: list[str] = []
    for name in ("lcqmc/lcqmc_test_5k.tsv", "afqmc/afqmc_dev.tsv"):
        with (DATA / name).open(encoding="utf-8") as f:
            for row in csv.reader(f, delimiter="\t"):
                texts += [c for c in row[:2] if any("\u4e00" <= ch <= "\u9fff" for ch in c)]
    return texts[:limit]


def _run(code: str, home: Path) -> str:
    env = {**os.environ, "TRICACHE_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_compact_tagger_cuts_and_tags_as_jieba_does(tmp_path: Path) -> None:
    texts = [*_chinese_texts(3000), "区块链技术怎么学", "先加载分词词典", "AT&T的c#怎么用", ""]
    (tmp_path / "texts.json").write_text(json.dumps(texts, ensure_ascii=False))
    # jieba alone, in a process that never imported tricache
    plain = _run(
        f"""
        import json, jieba, jieba.posseg as pg
        jieba.setLogLevel(60)
        texts = json.load(open({str(tmp_path / "texts.json")!r}))
        cuts = [pg.lcut(t, HMM=h) for h in (True, False) for t in texts]
        print(json.dumps([[list(p) for p in cut] for cut in cuts]))
        """,
        tmp_path / "home",
    )
    ours = tagger()
    expected = json.loads(plain)
    got = [[[p.word, p.flag] for p in ours.lcut(t, HMM=h)] for h in (True, False) for t in texts]
    assert got == expected
    assert sum(len(cut) for cut in got) > 20_000  # the comparison covered real text


def test_an_apps_own_jieba_answers_as_before(tmp_path: Path) -> None:
    """The default ``jieba.posseg`` tagger reads the compact table once tricache loaded it;
    its answers, and ``add_word`` with a tag, are jieba's own."""
    code = """
        import json, jieba, jieba.posseg as pg
        jieba.setLogLevel(60)
        if {load}:
            from tricache.semantic.guards.segmenter import tagger
            tagger()
            assert type(pg.dt.word_tag_tab).__name__ == "_Tags", type(pg.dt.word_tag_tab)
        texts = ("我爱北京天安门", "周杰伦的新歌", "量子纠缠态")
        out = [[list(p) for p in pg.lcut(t)] for t in texts]
        jieba.add_word("量子纠缠态", freq=50, tag="nz")
        out.append([list(p) for p in pg.lcut("量子纠缠态是什么")])
        print(json.dumps(out))
        """
    plain = _run(code.format(load=False), tmp_path / "home")
    loaded = _run(code.format(load=True), tmp_path / "home")
    assert json.loads(loaded) == json.loads(plain)
    assert ["量子纠缠态", "nz"] in json.loads(loaded)[-1]


def test_a_damaged_table_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRICACHE_HOME", str(tmp_path))
    source = tmp_path / "words.txt"
    source.write_text("alpha beta gamma")
    words = lambda: source.read_text().split()  # noqa: E731
    assert "beta" in tables.word_table("test", [source], words)
    (path,) = (tmp_path / "tables").glob("test-*.marisa")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte maps without an error and answers wrong
    path.write_bytes(bytes(data))

    table = tables.word_table("test", [source], words)

    assert sorted(table.keys()) == ["alpha", "beta", "gamma"]
    (rebuilt,) = (tmp_path / "tables").glob("test-*.marisa")
    assert rebuilt.read_bytes() != bytes(data)


def test_a_table_is_built_once_and_follows_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRICACHE_HOME", str(tmp_path))
    source = tmp_path / "words.txt"
    source.write_text("alpha")
    builds: list[int] = []

    def words() -> list[str]:
        builds.append(1)
        return source.read_text().split()

    assert "alpha" in tables.word_table("test", [source], words)
    assert "alpha" in tables.word_table("test", [source], words)
    assert len(builds) == 1
    source.write_text("alpha delta")  # a new dictionary (a package upgrade): a new table
    assert "delta" in tables.word_table("test", [source], words)
    assert len(builds) == 2


def test_an_unwritable_home_builds_the_table_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("TRICACHE_HOME", str(blocker))
    source = tmp_path / "words.txt"
    source.write_text("alpha beta")
    table = tables.record_table("test", [source], "<I", lambda: [("alpha", (1,)), ("beta", (2,))])
    assert table.get("beta") == [(2,)]
    assert table.get("gamma") is None


def test_the_guards_hold_little_memory_per_process(tmp_path: Path) -> None:
    """Loading every word list and jieba's tagger grew a worker by ~150 MiB before the tables
    (jieba's dicts ~93 MiB, the English sets ~30 MiB); now by what the tries map."""
    code = """
        def rss():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
        from tricache.semantic.guards import checks
        before = rss()
        checks.warm_up()
        print(rss() - before)
        """
    _run(code, tmp_path / "home")  # the first process builds the tables
    grown = float(_run(code, tmp_path / "home"))
    assert grown < 50, f"the guards grew a process by {grown:.0f} MiB"
