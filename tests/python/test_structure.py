"""The package's structure: no import cycle, one table of URL schemes, a loader that never asks
which source it has, the Source protocol on every source, transform converters keyed by class,
and a package docstring that maps every module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader import _order, _schemes, _source, transforms as T

PACKAGE = Path(rl.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
# The modules of the DataLoader and its backends: what must work for any source.
LOADER = ("dataloader", "_backend", "_native", "_generic", "_planning", "_checkpoint",
          "_distributed", "_staging", "_options")


def parse(name: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{name}.py").read_text(), filename=f"{name}.py")


def package_imports(name: str) -> set:
    """The package modules ``name`` imports, at the top or inside functions (a cycle through a
    function-level import is still a cycle)."""
    found = set()
    for node in ast.walk(parse(name)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ringloader."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("ringloader."))
    return {m for m in found if m in MODULES and m != name}


def find_cycle(graph: dict) -> list:
    """A list of modules forming a cycle, or [] when the graph has none."""
    state: dict = {}
    path: list = []

    def visit(node: str) -> list:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def test_no_import_cycle_in_the_package():
    graph = {m: package_imports(m) for m in MODULES}
    assert graph["webdataset"] >= {"_order"}  # the graph does see imports
    assert find_cycle(graph) == []


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_the_package_docstring_maps_every_module():
    lines = [line for line in rl.__doc__.splitlines() if line.startswith("* ``")]
    mapped = [line.split("``")[1] for line in lines]
    assert sorted(mapped) == sorted(MODULES + ["_C"])  # each once, nothing stale


def string_calls(name: str, method: str) -> list:
    """String literals passed to ``.method(...)`` calls in module ``name``."""
    out = []
    for node in ast.walk(parse(name)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == method:
            out += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return out


def test_url_schemes_are_classified_in_one_place():
    prefixes = [s.prefix for s in _schemes.SCHEMES]
    for name in MODULES:
        if name in ("_schemes", "bench"):  # bench writes pipe: URLs, it does not read them
            continue
        tested = string_calls(name, "startswith") + string_calls(name, "match")
        assert not [t for t in tested if any(p in t for p in prefixes) or "://" in t], name


def test_the_loader_never_asks_which_source_it_has():
    for name in LOADER:
        names = {n.id for n in ast.walk(parse(name)) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(parse(name)) if isinstance(n, ast.Attribute)}
        assert not names & {"WebDataset", "WebDatasetSampler", "ImageFolder", "FileList",
                            "DatasetFolder"}, name


def test_schemes_table(tmp_path: Path):
    assert _schemes.classify("/data/a.tar") == (_schemes.FILE, "/data/a.tar")
    assert _schemes.classify("file:///data/a.tar") == (_schemes.FILE, "/data/a.tar")
    scheme, target = _schemes.classify("pipe:cat a.tar")
    assert scheme is _schemes.PIPE and scheme.streamed and target == "pipe:cat a.tar"
    with pytest.raises(ValueError, match="'pipe: ' *: pipe: needs a command"):
        _schemes.classify("pipe: ", "shard")
    for url, scheme in (("http://h/a.tar", _schemes.HTTP), ("https://h/a.tar", _schemes.HTTPS),
                        ("s3://b/a.tar", _schemes.S3)):
        assert _schemes.classify(url) == (scheme, url) and scheme.remote and not scheme.streamed
        assert _schemes.remote(url) is scheme
    assert _schemes.remote("/data/a.tar") is None and _schemes.remote("pipe:cat a") is None
    with pytest.raises(ValueError, match=r"WebDataset url 'ftp://h/a.tar': only local paths.*s3://"):
        _schemes.classify("ftp://h/a.tar", "WebDataset url")
    # A name found on disk is never a command.
    assert _schemes.local("pipe:rm x") == "./pipe:rm x" and _schemes.local("a/b") == "a/b"
    assert _schemes.is_command("pipe:ls") and not _schemes.is_command("./pipe:ls")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    from imagegen import jpeg_bytes

    root = tmp_path / "tree"
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(3):
            (root / f"c{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(16, 16, seed=c * 3 + i))
    return root


def test_every_source_implements_the_protocol(tmp_path: Path, tree: Path):
    from ringloader.pack import pack

    folder = rl.ImageFolder(tree)
    files = rl.FileList([str(p) for p in sorted(tree.rglob("*.jpg"))], [0, 0, 0, 1, 1, 1])
    pack(str(tree), str(tmp_path / "shards"), shard_size=2000)
    shards = sorted(str(p) for p in (tmp_path / "shards").glob("*.tar"))
    web = rl.WebDataset(shards)
    for source in (folder, files, rl.DatasetFolder(tree, extensions=(".jpg",)), web):
        assert isinstance(source, _source.Source)
        assert len(source.sample_table) == len(source) == 6
        assert f"{len(source)} samples" in source.describe()
        assert not source.streamed
        source.check_unchanged()
    assert folder.shard_sizes is None and folder.byte_ranges() == {}
    assert folder.default_sampler(2, 1, True, 0, False) is None  # torch's own samplers
    assert sum(web.shard_sizes) == 6 and len(web.shard_sizes) == len(shards) > 1
    assert f"{len(shards)} local shards" in web.describe()
    sampler = web.default_sampler(None, None, True, 5, False, torch.Generator().manual_seed(9))
    assert isinstance(sampler, _order.ShardOrder) and (sampler.rank, sampler.num_replicas) == (0, 1)
    assert sampler.seed == 9  # a generator's initial seed wins, as the loader documents
    # A sample error names the WebDataset member; a folder's is left as it is.
    error = rl.SampleError("bad")
    error.index = 4
    explained = _source.explain_error(error, [folder, web])
    assert explained is error
    error.index = 6 + 4
    explained = _source.explain_error(error, [folder, web])
    assert explained is not error and web.members[4] in str(explained) and explained.index == 10


def test_transform_converters_are_keyed_by_class():
    import torchvision.transforms as v1  # v1 only: v2's import alone takes seconds

    assert T.to_steps(v1.CenterCrop(8)) == T.CenterCrop(8).steps()
    assert T._converter(v1.RandomCrop) is T._converter(v1.Pad) is not None
    assert T._converter(v1.Grayscale) is T._converter(v1.RandomGrayscale) is not None
    assert T._converter(v1.RandomChoice) is None
    # A class of the library without a converter, and a subclass of a supported one, are refused
    # by name: the key is the class itself.
    with pytest.raises(TypeError, match="torchvision.transforms.transforms.RandomChoice has no native"):
        T.to_steps(v1.RandomChoice([v1.CenterCrop(8)]))

    class Mine(v1.CenterCrop):
        pass

    Mine.__module__ = "torchvision.transforms.mine"
    with pytest.raises(TypeError, match="torchvision.transforms.mine.Mine has no native equivalent"):
        T.to_steps(Mine(8))


def test_the_facade_delegates_to_one_backend(tree: Path):
    import gc

    from ringloader._backend import Backend
    from ringloader._generic import GenericBackend
    from ringloader._native import NativeBackend

    fixed = T.Compose([T.Resize(8), T.CenterCrop(8)])
    native = rl.DataLoader(rl.ImageFolder(tree, transform=fixed), batch_size=2)
    generic = rl.DataLoader(torch.utils.data.TensorDataset(torch.arange(6)), batch_size=2)
    assert type(native._backend) is NativeBackend and native.native
    assert type(generic._backend) is GenericBackend and not generic.native
    for loader in (native, generic):
        assert isinstance(loader._backend, Backend)
        assert len(loader) == 3 and loader.batch_size == 2 and not loader.drop_last
        assert loader.dataset is loader._backend.dataset
        assert len(list(loader)) == 3
        assert loader.state_dict() == {"version": 1, "epoch": 1, "delivered": 0, "complete": True}
    # An iterator holds the backend: dropping the loader does not stop its pipeline.
    batches = iter(rl.DataLoader(rl.ImageFolder(tree, transform=fixed), batch_size=4))
    gc.collect()
    images, labels = next(batches)
    assert images.shape == (4, 3, 8, 8) and labels.tolist() == [0, 0, 0, 1]
