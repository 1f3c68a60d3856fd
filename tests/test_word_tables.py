"""The guards' word tables (issue #25): jieba's dictionary and the English lists as
tries, built once per machine.  Same words and tags as jieba, a damaged table
rebuilt, an unwritable home served from memory, and the memory a worker saves."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tricache.runtime import tables
from tricache.semantic.guards.segmenter import tagger

from conftest import SHARED_DATA


def _chinese_texts(limit: int) -> list[str]:
    """Questions from the shared labelled sets; where they are absent, sentences strung from
    jieba's own dictionary (never a skip: the comparison runs either way)."""
    texts: list[str] = []
    for name in ("lcqmc/lcqmc_test_5k.tsv", "afqmc/afqmc_dev.tsv"):
        if (SHARED_DATA / name).exists():
            with (SHARED_DATA / name).open(encoding="utf-8") as f:
                for row in csv.reader(f, delimiter="\t"):
                    texts += [c for c in row[:2] if any("\u4e00" <= ch <= "\u9fff" for ch in c)]
    if len(texts) < limit:
        import jieba

        lines = Path(jieba.__file__).with_name("dict.txt").read_text("utf-8").splitlines()
        words = [line.split(" ")[0] for line in lines]
        rng = random.Random(0)
        texts += ["".join(rng.choices(words, k=rng.randint(3, 9))) for _ in range(limit)]
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


_APP = """
    import json, jieba, jieba.posseg as pg
    jieba.setLogLevel(60)
    out = [[list(p) for p in pg.lcut(t)] for t in ("我爱北京天安门", "周杰伦的新歌", "量子纠缠态")]
    jieba.add_word("量子纠缠态", freq=50, tag="nz")
    out.append([list(p) for p in pg.lcut("量子纠缠态是什么")])
    tags = pg.dt.word_tag_tab
    out.append([len(tags), tags.get("北京"), tags.get(1, "D"), "中国" in tags])
    del tags["北京"]
    out.append([len(tags), tags.get("北京"), sorted(tags.items())[:3]])
    print(json.dumps(out))
    """


def test_an_apps_own_jieba_answers_as_before(tmp_path: Path) -> None:
    """Loaded before the app's jieba, tricache swaps the default tagger's tag dict for a dict
    over its table; the app's calls, ``add_word``, ``len``, ``del`` and iteration answer as
    jieba's own dict does."""
    plain = _run(_APP, tmp_path / "home")
    swapped = _run(
        "from tricache.semantic.guards.segmenter import tagger\n"
        "tagger()\n"
        "import jieba.posseg as pg\n"
        "assert type(pg.dt.word_tag_tab).__name__ == '_Tags'\n" + textwrap.dedent(_APP),
        tmp_path / "home",
    )
    assert json.loads(swapped) == json.loads(plain)
    assert ["量子纠缠态", "nz"] in json.loads(swapped)[3]


def test_an_app_that_changed_jiebas_tags_first_keeps_them(tmp_path: Path) -> None:
    """A tag an app set before tricache loaded (the same number of words: no length tells)
    is never swapped away: tricache leaves a ``jieba.posseg`` it did not import alone."""
    out = _run(
        """
        import jieba, jieba.posseg as pg
        jieba.setLogLevel(60)
        jieba.add_word("中国", tag="zz")
        pg.lcut("我爱中国")
        from tricache.semantic.guards.segmenter import tagger
        tagger()
        print(pg.lcut("我爱中国")[-1].flag, type(pg.dt.word_tag_tab).__name__)
        """,
        tmp_path / "home",
    )
    assert out.split() == ["zz", "dict"]


def _words(tmp_path: Path) -> tuple[Path, object]:
    source = tmp_path / "words.txt"
    source.write_text("alpha beta gamma")
    return source, lambda: source.read_text().split()


def test_a_damaged_table_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRICACHE_HOME", str(tmp_path))
    source, words = _words(tmp_path)
    assert "beta" in tables.word_table("test", [source], words)  # type: ignore[arg-type]
    (path,) = (tmp_path / "tables").glob("test-*.marisa")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte reads without an error and answers wrong
    path.write_bytes(bytes(data))

    table = tables.word_table("test", [source], words)  # type: ignore[arg-type]

    assert all(w in table for w in ("alpha", "beta", "gamma")) and "delta" not in table
    (rebuilt,) = (tmp_path / "tables").glob("test-*.marisa")
    assert rebuilt.read_bytes() != bytes(data)


def test_another_tables_file_in_its_place_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid table under another table's name, with its own digest: refused and rebuilt."""
    monkeypatch.setenv("TRICACHE_HOME", str(tmp_path))
    source, words = _words(tmp_path)
    tables.word_table("one", [source], words)  # type: ignore[arg-type]
    tables.word_table("two", [source], lambda: ["omega"])
    (one,) = (tmp_path / "tables").glob("one-*.marisa")
    (two,) = (tmp_path / "tables").glob("two-*.marisa")
    stem_one = one.name.rsplit("-", 1)[0]
    one.unlink()
    (tmp_path / "tables" / f"{stem_one}-{two.name.rsplit('-', 1)[1]}").write_bytes(two.read_bytes())

    table = tables.word_table("one", [source], words)  # type: ignore[arg-type]

    assert "alpha" in table and "omega" not in table


def test_a_table_changed_on_disk_after_loading_cannot_hurt_the_process(tmp_path: Path) -> None:
    """The table is read into memory, not mapped: a file truncated in place under a mapping
    kills the process (SIGBUS)."""
    out = _run(
        """
        import glob, os
        from tricache.semantic.guards.segmenter import tagger
        t = tagger()
        for path in glob.glob(os.environ["TRICACHE_HOME"] + "/tables/jieba-*.marisa"):
            os.truncate(path, 4096)
        print(" ".join(p.word for p in t.lcut("中华人民共和国成立了")))
        """,
        tmp_path / "home",
    )
    assert out.split() == ["中华人民共和国", "成立", "了"]


def test_a_full_disk_builds_the_table_in_memory(tmp_path: Path) -> None:
    """Saving fails (a file size limit stands in for a full disk): the process keeps its copy."""
    code = """
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        from tricache.semantic.guards import checks
        checks.warm_up()
        print(checks.analyze("北京大学在哪里").tokens)
        """
    assert "北京大学" in _run(code, tmp_path / "home")


def test_odd_words_are_no_words() -> None:
    from tricache.key import words

    assert not words.is_english_word("\ud800")  # a lone surrogate
    assert not words.is_lower_case_word("\ud800s")
    assert not words.is_english_word("")
    assert words.is_english_word("house")


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
    assert table.get("beta") == (2,)
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


# the tables the package ships (issue #33: the first process as fast as the later ones) -----
def test_the_shipped_tables_are_the_ones_the_installed_sources_build(tmp_path: Path) -> None:
    """Built afresh from this machine's jieba and English lists, every table is byte for byte
    the shipped one; when a source changes, this fails: ``python -m
    tricache.runtime.prebuild`` writes them again."""
    out = _run(
        f"""
        from pathlib import Path
        from tricache.runtime.prebuild import prebuild
        for path in prebuild(Path({str(tmp_path / "fresh")!r})):
            print(path.name)
        """,
        tmp_path / "home",
    )
    fresh = sorted(out.split())
    shipped = sorted(p.name for p in tables.PREBUILT.glob("*.marisa"))
    assert len(fresh) == 3 and fresh == shipped, "run: python -m tricache.runtime.prebuild"
    for name in fresh:
        assert (tmp_path / "fresh" / name).read_bytes() == (tables.PREBUILT / name).read_bytes()


def test_the_first_process_on_a_machine_builds_nothing(tmp_path: Path) -> None:
    out = _run(
        """
        from tricache.runtime import tables
        from tricache.runtime.prebuild import _read_every_table
        _read_every_table()
        print(sorted(tables.served()), tables._built)
        """,
        tmp_path / "fresh-home",
    )
    assert out.strip() == "['english-words', 'jieba', 'lower-case-words'] []"
    assert len(list((tmp_path / "fresh-home" / "tables").glob("*.marisa"))) == 3  # copied


def test_a_damaged_shipped_table_is_built_instead(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for path in tables.PREBUILT.glob("*.marisa"):
        data = bytearray(path.read_bytes())
        if path.name.startswith("jieba-"):
            data[len(data) // 2] ^= 0xFF
        (shipped / path.name).write_bytes(bytes(data))
    out = _run(
        f"""
        from pathlib import Path
        from tricache.runtime import tables
        tables.PREBUILT = Path({str(shipped)!r})
        from tricache.semantic.guards.segmenter import tagger
        cut = " ".join(p.word for p in tagger().lcut("中华人民共和国成立了"))
        print(cut, "|", tables._built)
        """,
        tmp_path / "home",
    )
    assert out.strip() == "中华人民共和国 成立 了 | ['jieba']"
