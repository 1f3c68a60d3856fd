"""What a user pays to start: ``pip install ".[langchain]"`` into a fresh virtual environment
(time, disk, the largest packages), then the first and a later process on a machine (a fresh
``TRICACHE_HOME``): opening a cache with its semantic tier and one lookup.

    python benchmarks/install_cost.py     # writes benchmarks/results/install_cost.md

The install time depends on the package index (here a local mirror: downloads are not what a
user over the network waits for); the disk and the process times do not.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "install_cost.md"

_FIRST_USE = """
import time
t = time.perf_counter()
from tricache import Cache
cache = Cache(path="cache.sqlite3", warm=True)
cache.lookup(cache.request("How do I reset my password?"))
print(f"{time.perf_counter() - t:.2f}")
cache.close()
"""


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="tricache-install-"))
    try:
        source = work / "src"  # the committed tree, as a user's clone
        subprocess.run(["git", "clone", "-q", str(ROOT), str(source)], check=True)
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        bare = _size(venv)
        began = time.perf_counter()
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-cache-dir", f"{source}[langchain]"],
            check=True,
            capture_output=True,
        )
        took = time.perf_counter() - began
        site = next((venv / "lib").glob("python*/site-packages"))
        folders = [p for p in site.iterdir() if p.is_dir() and "dist-info" not in p.name]
        packages = sorted(((_size(p), p.name) for p in folders), reverse=True)
        home = work / "home"
        home.mkdir()
        runs = []
        for _ in range(3):  # the first on this machine, then two later ones
            done = subprocess.run(
                [str(python), "-c", _FIRST_USE],
                cwd=home,
                env={"TRICACHE_HOME": str(home), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(float(done.stdout.split()[-1]))
        mib = 2**20
        lines = [
            "# Install cost",
            "",
            "Command: `python benchmarks/install_cost.py` (a fresh venv, Python "
            f"{sys.version_info.major}.{sys.version_info.minor}, this machine's package index)",
            "",
            '## pip install ".[langchain]"',
            "",
            "| | |",
            "|---|---|",
            f"| install time | {took:.0f} s |",
            f"| disk added to the venv | {(_size(venv) - bare) / mib:.0f} MiB |",
            "| largest packages | "
            + ", ".join(f"{name} {size / mib:.0f} MiB" for size, name in packages[:6])
            + " |",
            "",
            "## The first process on a machine",
            "",
            "Open a cache with its semantic tier (`warm=True`) and look one question up:",
            "",
            "| process | seconds |",
            "|---|---:|",
            f"| first on the machine (fresh TRICACHE_HOME) | {runs[0]:.2f} |",
            f"| second | {runs[1]:.2f} |",
            f"| third | {runs[2]:.2f} |",
            "",
        ]
        OUT.write_text("\n".join(lines), encoding="utf-8")
        print("\n".join(lines))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
