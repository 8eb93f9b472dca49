"""The Source protocol is the whole contract between the loader and its sources: every member the
backends use on a source is declared in ``_source.Source`` (or ``NativeDataset``, which adds the
transform) with a default, the backends read them directly (never by ``getattr``, which would
hide a member the protocol does not declare), import no module of the sources layer (they ask
the sources, through the protocol), and every source class answers each of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import ringloader as rl
from ringloader.core import _source
from ringloader.sources.datasets import NativeDataset

from test_structure import LOADER, SOURCES, package_imports

PACKAGE = Path(rl.__file__).parent
# An expression the loader iterates to get its sources.
SOURCES_EXPR = re.compile(r"(_folders|\bfolders\b|view\[0\]|\bstreamed\b|\bsources\b)")


def _constructor_attributes(cls: type) -> set:
    """The ``self.x = ...`` names of ``cls.__init__``: what every instance of it has."""
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    return {t.attr for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}


DECLARED = set(dir(_source.Source)) | set(dir(NativeDataset)) | _constructor_attributes(NativeDataset)


def _tree(name: str) -> ast.Module:
    return ast.parse(SOURCES[name].read_text(), filename=f"{name}.py")


def members_used_on_sources(name: str) -> dict:
    """Attribute names read on the loop variable of every loop or comprehension over the
    loader's sources in module ``name``, with where."""
    found: dict = {}
    for node in ast.walk(_tree(name)):
        loops = []
        if isinstance(node, ast.For):
            loops = [(node.target, node.iter, node.body)]
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            loops = [(g.target, g.iter, [node]) for g in node.generators]
        for target, over, body in loops:
            if not isinstance(target, ast.Name) or not SOURCES_EXPR.search(ast.unparse(over)):
                continue
            for part in body:
                for sub in ast.walk(part):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                            and sub.value.id == target.id:
                        found.setdefault(sub.attr, []).append(f"{name}.py:{sub.lineno}")
    return found


def test_the_finder_sees_members_read_on_sources():
    tree = ast.parse("for f in self._folders:\n    f.begin_reads(x)\n    g.other\n"
                     "y = [s.streamed for s in view[0]]\n")
    found: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For):
            found.update({a.attr: 1 for a in ast.walk(node) if isinstance(a, ast.Attribute)
                          and isinstance(a.value, ast.Name) and a.value.id == node.target.id})
    assert set(found) == {"begin_reads"}
    assert "streamed" in members_used_on_sources("loader._native")


def test_the_loader_uses_only_declared_members_of_a_source():
    used: dict = {}
    for name in LOADER:
        for member, where in members_used_on_sources(name).items():
            used.setdefault(member, []).extend(where)
    undeclared = {m: w for m, w in used.items() if m not in DECLARED}
    assert undeclared == {}, f"declare these members in _source.Source, with a default: {undeclared}"
    # ... among them the ones only some sources give
    assert {"fallback_reasons", "view_transforms", "structured"} <= set(used)


# Finding the source that stands for a Dataset which is no ringloader source (a torchvision
# folder, a user's Dataset of image references), and what torch's path needs of a Dataset it
# runs (``TorchPath``), is the sources layer's: the loader calls those functions of
# ``_user_source`` (``find_source``, ``torch_path_of``) from one module, the only source module
# a loader module may import.
FINDER = ("loader._native_sources", "sources._user_source")


def source_modules_imported(name: str) -> set:
    """The modules of the sources layer (its folder, test_structure.LAYERS) that module ``name``
    imports."""
    return {m for m in package_imports(name) if m.startswith("sources.")}


def test_the_loader_imports_no_source_module():
    allowed = {FINDER[0]: {FINDER[1]}}
    found = {name: source_modules_imported(name) for name in LOADER}
    over = {name: sorted(m - allowed.get(name, set())) for name, m in found.items()
            if m - allowed.get(name, set())}
    assert over == {}, (f"loader modules import source modules: {over}; declare what they ask in "
                        "_source.Source and ask the sources")
    assert found[FINDER[0]] == {FINDER[1]}  # the check sees imports: the finder's is there


def _source_names(name: str) -> set:
    """Names that hold a source in module ``name``: the loop variables over its sources, and
    ``source``/``folder``."""
    names = {"source", "folder"}
    for node in ast.walk(_tree(name)):
        loops = [(node.target, node.iter)] if isinstance(node, ast.For) else [
            (g.target, g.iter) for g in getattr(node, "generators", [])]
        names |= {t.id for t, over in loops
                  if isinstance(t, ast.Name) and SOURCES_EXPR.search(ast.unparse(over))}
    return names


def test_the_loader_never_probes_a_source_member_by_getattr():
    """No member read by ``getattr``/``hasattr`` on a source, declared or not: a declared one is
    read directly, and one the protocol does not declare (a source's private attribute) is not
    the loader's to probe."""
    members = {m for m in DECLARED if not m.startswith("__")}
    # the loader's modules, and the Batcher it rebuilds a structured source's batches with
    for name in LOADER + ("sources._batcher",):
        holders = _source_names(name)
        for node in ast.walk(_tree(name)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in holders \
                    and isinstance(node.args[1], ast.Constant):
                what = node.args[1].value
                assert what not in members, (
                    f"{name}.py:{node.lineno} reads {what!r} by {node.func.id}: it is a Source "
                    "member, read it directly")
                pytest.fail(f"{name}.py:{node.lineno} probes {what!r} by {node.func.id}, which the "
                            "Source protocol does not declare: declare it in _source.Source (with a "
                            "default) or use a member that is declared")


@pytest.fixture
def sources(tmp_path: Path) -> list:
    from imagegen import jpeg_bytes
    from torchvision.transforms import v2

    from ringloader.pack import pack

    root = tmp_path / "tree"
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(3):
            (root / f"c{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(16, 16, seed=c * 3 + i))
    files = sorted(str(p) for p in root.rglob("*.jpg"))
    pack(str(root), str(tmp_path / "shards"), shard_size=2000)
    shards = sorted(str(p) for p in (tmp_path / "shards").glob("*.tar"))

    class Refs(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            return rl.ImageFile(files[i], transform=v2.Compose([v2.Resize((8, 8)), v2.PILToTensor()])), i % 2

    user = rl.DataLoader(Refs(), batch_size=2)._backend._folders[0]
    import torchvision

    from ringloader.sources._torchvision_folder import TorchvisionFolder

    theirs = TorchvisionFolder(torchvision.datasets.ImageFolder(str(root)))
    return [rl.ImageFolder(root), rl.FileList(files, [0, 0, 0, 1, 1, 1]),
            rl.DatasetFolder(root, extensions=(".jpg",)), rl.WebDataset(shards), user, theirs]


def test_every_source_class_answers_every_declared_member(sources):
    """One conformance run over each source class: the members the loader reads, with the
    types it expects."""
    assert {type(s).__name__ for s in sources} == {"ImageFolder", "FileList", "DatasetFolder",
                                                    "WebDataset", "UserSource", "TorchvisionFolder"}
    for source in sources:
        name = type(source).__name__
        assert isinstance(source, _source.Source), name
        assert len(source.sample_table) == len(source) == 6, name
        assert isinstance(source.streamed, bool) and not source.streamed, name
        assert source.stream_kind is None or isinstance(source.stream_kind, str), name
        assert source.read_ahead_off is None, name  # local files: the next epoch reads ahead
        assert isinstance(source.reads_by_plan, bool), name
        assert source.feed_budget is None, name
        assert source.link_estimates() == [], name
        assert source.begin_reads(np.arange(len(source))) is False, name
        assert source.begin_feed(None, None) is None, name
        assert source.stop_feed(None) is None, name
        assert source.describe_sample(0) is None or name == "WebDataset", name
        assert source.refused is None, name
        assert source.serves_torch_dataset is (name == "TorchvisionFolder"), name
        assert source.dataset is None or name == "UserSource", name
        assert source.structured is (name == "UserSource"), name
        assert (source.batcher(sources, False, False) is None) is (name != "UserSource"), name
        assert source.memory is None and source.more_files is None, name  # files, one a sample
        assert source.name_row(0) is None, name  # every sample has a path
        reasons = source.fallback_reasons()  # no transform: a PIL image a sample, per sample
        assert all(isinstance(r, str) for r in reasons) and bool(reasons) is source.per_sample, name
        assert len(source.view_transforms) == 1, name
        assert name == "UserSource" or source.view_transforms == [source.transform], name
        assert isinstance(source.byte_ranges(), dict), name
        assert f"{len(source)} samples" in source.describe(), name
        source.check_unchanged()
    web, user = sources[3], sources[4]
    assert web.reads_by_plan and user.reads_by_plan
    assert not any(s.reads_by_plan for s in sources[:3] + sources[5:])
    assert web.describe_sample(0) == f"shard {web.urls[0]}, member {web.members[0]}"
    assert user.dataset is not None and len(user.dataset) == 6
    assert user.fallback_reasons() == [] and sources[0].per_sample  # a Resize and a tensor: batched
    assert "the transform is None" in sources[0].fallback_reasons()[0]
