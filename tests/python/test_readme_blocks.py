"""Every Python code block of the README and of the manual (docs/*.md) runs as written, so the
examples cannot drift from the code, and every block that is not run says why, truly.

A block runs in a fresh interpreter, in a scratch folder, with nothing defined beforehand: a
reader who copies it gets what the test ran, so it imports what it uses and makes its own
``rank``/``world``. Its paths under ``/data/`` (the reader's data) are rewritten into the
scratch folder, where that data is made first (an image folder, or WebDataset shards for a
``.tar`` pattern). A block preceded by an HTML comment ``<!-- not run: REASON -->`` is skipped
with that reason, and the mark is checked: the block must need something a test here cannot
give it (a name the reader brings, such as a model or a ``datasets.Dataset``; a server or
bucket URL; command-line arguments; a GPU or a process group; a package not installed; or it
is a fragment that does not parse). A marked block that needs none of these could run, and
fails. (The C++ blocks are compiled against the installed package by
``scripts/test_cpp_package.sh``.)"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import io
import re
import subprocess
import sys
import tarfile
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
    script = localise(code, tmp_path)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, f"{name}:{line} failed:\n{code}\n{done.stderr[-3000:]}"


def free_names(tree: ast.AST) -> list[str]:
    """Names the block reads but never binds (imports, assignments, definitions, parameters,
    loop and ``with`` targets, ``except ... as``) and that are not builtins: what the reader
    must bring. Scopes are not told apart, which errs towards fewer free names."""
    bound, read = set(dir(builtins)), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Name):
            (read.append(node.id) if isinstance(node.ctx, ast.Load) else bound.add(node.id))
    return sorted(set(read) - bound)


#: What makes a block impossible to run here, each with a test on its source and syntax tree.
REMOTE_URL = re.compile(r"\b(?:https?|s3)://")
#: Names the manual's blocks use for modules: missing, they are a missing import, which the
#: block could add, not something the reader brings.
MODULE_ALIASES = {"rl", "T", "v1", "v2", "torch", "np", "F", "tud", "datasets", "ringloader", "torchvision"}


def needs(code: str) -> list[str]:
    """What ``code`` needs that a test here cannot give it (empty: it could run)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ["a fragment: it does not parse"]
    found = []
    names = [n for n in free_names(tree) if n not in MODULE_ALIASES]
    if names:
        found.append(f"names the reader brings: {', '.join(names)}")
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if any(REMOTE_URL.search(s) for s in strings):
        found.append("a server or bucket URL")
    if "sys.argv" in code:
        found.append("command-line arguments")
    if re.search(r"\bcuda\b|torch\.distributed|init_process_group|torchrun", code):
        found.append("a GPU or a process group")
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    if missing:
        found.append(f"packages not installed here: {', '.join(missing)}")
    return found


SKIPPED = [case for case in CASES if case[3]]


@pytest.mark.parametrize("name,line,code,skip", SKIPPED, ids=[f"{name}:{line}" for name, line, _, _ in SKIPPED])
def test_a_block_marked_not_run_could_not_run(name: str, line: int, code: str, skip: str):
    assert needs(code), (f"{name}:{line} is marked 'not run: {skip}' but needs nothing a test cannot "
                         f"give it (no name the reader brings, no URL, no arguments, GPU or missing "
                         f"package): remove the mark so that it runs\n{code}")


def test_the_mark_check_tells_blocks_apart():
    # Self-contained blocks could run; each kind of need is recognised.
    assert needs("import ringloader as rl\nds = rl.ImageFolder('/data/x')\n") == []
    assert needs("for x in range(3):\n    y = x\n") == []
    assert needs("ds = rl.HFDataset(hf)\n") == ["names the reader brings: hf"]
    assert needs("ds = rl.ImageFolder('/data/x')\n") == []  # only an import missing: it could run
    assert needs("import ringloader as rl\nrl.WebDataset('s3://b/k.tar')\n") == ["a server or bucket URL"]
    assert needs("import sys\nprint(sys.argv[1])\n") == ["command-line arguments"]
    assert needs("import torch\nx = torch.zeros(1, device='cuda')\n") == ["a GPU or a process group"]
    assert needs("import no_such_package_here\n") == ["packages not installed here: no_such_package_here"]
    assert needs("ds[i] = ...:\n") == ["a fragment: it does not parse"]
