"""The manual (docs/, mkdocs.yml) builds strictly and the README front page keeps its promises.

`mkdocs build --strict` fails on a page missing from the nav, a link to a missing page or
anchor, a snippet (the csrc/README.md include) that is not there, and a docstring that
mkdocstrings cannot render, so the manual cannot rot quietly. The pictures are produced by
bench/plots.py, which reruns measurements (too slow here): this only checks that every image
a page shows is a PNG in the tree."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")

# The README opens with the two commands people copy (.ci/run runs the second, scripts/test.sh).
OPENING = """# ringloader

```bash
bash scripts/bench.sh    # main job: set up, build, make the sample dataset, compare ringloader with torch's DataLoader
bash scripts/test.sh     # every test: C++ (ctest), the installed C++ package, Python (pytest), sanitizers, 60 s of fuzzing
```
"""


def test_mkdocs_builds_strictly(tmp_path: Path):
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    # Every page of the nav is rendered, the API reference holds every public name, and the
    # internals page includes csrc/README.md's map.
    for page in DOCS.glob("*.md"):
        out = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert out.is_file(), f"{page.name} was not rendered"
    import ringloader

    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    missing = [name for name in ringloader.__all__ if f'id="ringloader.{name}"' not in api]
    assert not missing, f"docs/api.md does not document {missing}"
    internals = (site / "internals" / "index.html").read_text(encoding="utf-8")
    first_heading = re.search(r"^## (.+)$", (REPO / "csrc" / "README.md").read_text(encoding="utf-8"), re.M)
    assert first_heading.group(1) in internals


def test_every_image_shown_is_a_committed_png():
    shown = [(page, ref) for page in DOCS.glob("*.md") for ref in IMAGE.findall(page.read_text(encoding="utf-8"))]
    assert any(page.name == "performance.md" for page, _ in shown), "the performance page shows no plot"
    for page, ref in shown:
        path = (page.parent / ref).resolve()
        assert path.is_file(), f"{page.name} shows {ref}, which is not in docs/"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{ref} is not a PNG"


def test_the_readme_opens_with_the_two_commands_and_stays_short():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text.startswith(OPENING)
    assert len(text.splitlines()) <= 150


def test_the_readme_links_resolve():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if "://" not in t]
    assert any(t.startswith("docs/") for t in targets)
    broken = [t for t in targets if not (REPO / t).exists()]
    assert not broken, f"README.md links to missing files: {broken}"


def test_plots_refuse_a_busy_machine_unless_forced(monkeypatch):
    # The manual's pictures are drawn only on a quiet machine (a loaded one showed the other work,
    # not the loaders): above --max-load per usable CPU the script refuses, --force draws anyway.
    import importlib.util

    spec = importlib.util.spec_from_file_location("rl_plots", REPO / "bench" / "plots.py")
    plots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plots)
    monkeypatch.setattr(plots.os, "getloadavg", lambda: (3.0, 2.0, 1.0))
    import pytest

    with pytest.raises(plots.BusyMachine, match=r"load average 3.00 over 2 usable CPUs.*--force"):
        plots.check_load(2, 0.3, force=False)
    assert plots.check_load(2, 0.3, force=True) == 3.0
    assert plots.check_load(16, 0.3, force=False) == 3.0
