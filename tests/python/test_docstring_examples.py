"""Every public class and function of ``ringloader`` carries an example in its docstring (the
Python API page is built from them), and every example runs as written, in a fresh folder
beside a small sample photo set, as a reader would paste it."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

import ringloader as rl
from ringloader.sample_data import make_sample_dataset

#: Public names that are values, not classes or functions: documented on their pages.
VALUES = {"IMG_EXTENSIONS", "__version__", "transforms"}
NAMES = [name for name in rl.__all__ if name not in VALUES]


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return make_sample_dataset(tmp_path_factory.mktemp("shared") / "photos", num_images=8,
                               num_classes=2)


def test_every_public_name_is_covered():
    assert set(rl.__all__) - VALUES == set(NAMES) and len(NAMES) >= 17


@pytest.mark.parametrize("name", NAMES)
def test_docstring_example_runs(name: str, photos: Path, tmp_path: Path, monkeypatch):
    doc = getattr(rl, name).__doc__ or ""
    assert "Examples:" in doc and ">>>" in doc, f"ringloader.{name} has no example"
    (tmp_path / "photos").symlink_to(photos)  # make_sample_dataset("photos") finds it complete
    monkeypatch.chdir(tmp_path)
    test = doctest.DocTestParser().get_doctest(doc, {}, f"ringloader.{name}", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    report: list = []
    runner.run(test, out=report.append)
    assert runner.failures == 0 and runner.tries >= 3, "".join(report)
