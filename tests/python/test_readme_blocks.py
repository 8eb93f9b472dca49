"""Every Python code block of the README and of the manual (docs/*.md) runs, so the examples
cannot drift from the code.

A block runs in a fresh interpreter, in a scratch folder, after a prelude that gives it what a
reader would have: ``rl`` and ``T`` imported, ``root`` (a small ImageFolder), ``ds`` (an
``rl.ImageFolder`` of it with a float output), ``rank``/``world``.
Paths under ``/data/`` are rewritten into the scratch folder, where the block's data is made
first (an image folder, or WebDataset shards for a ``.tar`` pattern). A block preceded by an HTML
comment ``<!-- not run: REASON -->`` is skipped with that reason. (The C++ blocks are compiled
against the installed package by ``scripts/test_cpp_package.sh``.)"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from imagegen import write_tree
from imagegen import jpeg_bytes

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:<!--\s*not run:\s*(?P<skip>.*?)\s*-->\s*\n)?```python\n(?P<code>.*?)```", re.S)
DATA_PATH = re.compile(r"""(["'])/data/([^"']*)\1""")
BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")


def blocks(path: Path) -> list[tuple[int, str, str | None]]:
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("skip"))
            for m in FENCE.finditer(text)]


def make_shards(pattern: Path) -> None:
    """One tiny shard per name of a brace pattern (webdataset layout: KEY.jpg + KEY.cls)."""
    m = BRACES.search(pattern.name)
    first, last = m.group(1), m.group(2)
    pattern.parent.mkdir(parents=True, exist_ok=True)
    for n in range(int(first), int(last) + 1):
        name = pattern.name[:m.start()] + str(n).zfill(len(first)) + pattern.name[m.end():]
        with tarfile.open(pattern.parent / name, "w") as tar:
            for i in range(2):
                for ext, data in (("jpg", jpeg_bytes(40, 30, seed=n * 2 + i)), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"s{n:06d}_{i}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def localise(code: str, scratch: Path) -> str:
    """Rewrites /data/... paths into `scratch` and makes what they name."""
    def swap(m: re.Match) -> str:
        target = scratch / "data" / m.group(2)
        if target.name.endswith(".tar"):
            make_shards(target)
        else:
            write_tree(target, num_classes=2, per_class=3)
        return m.group(1) + str(target) + m.group(1)

    return DATA_PATH.sub(swap, code)


CASES = [(path.relative_to(REPO).as_posix(), line, code, skip) for path in DOCS for line, code, skip in blocks(path)]


def test_the_readme_and_the_manual_have_python_blocks():
    where = {name for name, _, _, _ in CASES}
    assert "README.md" in where and any(name.startswith("docs/") for name in where), where


@pytest.mark.parametrize("name,line,code,skip", CASES, ids=[f"{name}:{line}" for name, line, _, _ in CASES])
def test_readme_python_block_runs(tmp_path: Path, name: str, line: int, code: str, skip: str | None):
    if skip:
        pytest.skip(skip)
    root = write_tree(tmp_path / "root", num_classes=2, per_class=4)
    prelude = textwrap.dedent(f"""
        import ringloader as rl
        from ringloader import transforms as T
        root, rank, world = {str(root)!r}, 0, 1
        ds = rl.ImageFolder(root, transform=T.Compose([T.RandomResizedCrop(224), T.ToTensor()]))
    """)
    script = prelude + localise(code, tmp_path)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, f"{name}:{line} failed:\n{code}\n{done.stderr[-3000:]}"
