"""The package's structure: no import cycle, one table of URL schemes, a loader that never asks
which source it has, the Source protocol on every source, transform converters keyed by class,
a docstring in each package that maps its modules, and no module or function growing past its
size limit.

Modules are named by their dotted path inside the package (``bench.harness``; a subpackage by
its folder, ``bench``, for its ``__init__.py``), so subpackages are covered like the top level."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import ringloader as rl
from ringloader.core import _order, _schemes, _source
from ringloader.transforms import _steps
from ringloader import transforms as T

PACKAGE = Path(rl.__file__).parent


def module_name(path: Path) -> str:
    """``bench/harness.py`` -> ``bench.harness``; ``bench/__init__.py`` -> ``bench``; the
    package's own ``__init__.py`` -> ``""``."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
MODULES = sorted(name for name in SOURCES if name)
PACKAGES = sorted({""} | {module_name(p) for p in PACKAGE.rglob("__init__.py")})
# The modules of the DataLoader and its backends: what must work for any source.
LOADER = ("loader.dataloader", "loader._backend", "loader._native", "loader._native_sources",
          "loader._native_epoch", "loader._native_report", "loader._generic", "loader._planning",
          "core._checkpoint", "core._distributed", "loader._staging", "core._options")


def parse(name: str) -> ast.Module:
    path = SOURCES[name]
    return ast.parse(path.read_text(), filename=str(path.relative_to(PACKAGE)))


def is_package(name: str) -> bool:
    return name in SOURCES and SOURCES[name].name == "__init__.py"


def resolve(name: str, node: ast.ImportFrom) -> list:
    """The dotted names (inside the package) that ``node``, in module ``name``, may import:
    ``from .x import y`` gives ``x`` and ``x.y`` (y may be a module), relative to ``name``'s
    own package; ``from ringloader.x import y`` the same from the top."""
    if node.level:
        here = name.split(".") if name and is_package(name) else name.split(".")[:-1]
        if node.level - 1 > len(here):
            return []
        base = here[:len(here) - (node.level - 1)]
    elif (node.module or "").split(".")[0] == "ringloader":
        base = []
    else:
        return []
    module = [p for p in (node.module or "").split(".") if p]
    if not node.level:
        module = module[1:]
    return [".".join(base + module + [a.name]) for a in node.names] + \
        ([".".join(base + module)] if module else [])


def owner(dotted: str) -> str:
    """The package module that holds ``dotted`` (itself, or the longest module it lies in)."""
    parts = dotted.split(".")
    while parts and ".".join(parts) not in SOURCES:
        parts.pop()
    return ".".join(parts)


def package_imports(name: str) -> set:
    """The package modules ``name`` imports, at the top or inside functions (a cycle through a
    function-level import is still a cycle), relative imports resolved from ``name``'s own
    package (``from ..datasets import X`` in ``bench.harness`` is ``datasets``)."""
    found = set()
    for node in ast.walk(parse(name)):
        if isinstance(node, ast.ImportFrom):
            found.update(owner(d) for d in resolve(name, node))
        elif isinstance(node, ast.Import):
            found.update(owner(a.name[len("ringloader."):]) for a in node.names
                         if a.name.startswith("ringloader."))
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
    assert graph["sources.webdataset"] >= {"core._order"}  # the graph does see imports
    # ... and a subpackage's, up to the package's own modules
    assert "sources.datasets" in set().union(*(graph[m] for m in MODULES if m.split(".")[0] == "bench"))
    assert find_cycle(graph) == []


def test_imports_resolve_from_the_modules_own_package():
    def imports(name: str, line: str) -> set:
        return {owner(d) for d in resolve(name, ast.parse(line).body[0])} & set(MODULES)

    # In bench/__init__.py and bench/__main__.py alike "." is the bench package, ".." the top.
    for name in ("bench", "bench.__main__"):
        assert imports(name, "from ..sources.datasets import IMG_EXTENSIONS") == {"sources.datasets"}
        assert imports(name, "from . import __main__") == {"bench.__main__"}
        assert imports(name, "from .. import _C, pack") == {"pack"}  # _C is no Python module
    assert imports("loader.dataloader", "from ..sources.datasets import ImageFolder") == {"sources.datasets"}
    assert imports("loader.dataloader", "from .. import _C, transforms") == {"transforms"}
    assert imports("loader.dataloader", "from ._native import NativeBackend") == {"loader._native"}
    assert imports("loader.dataloader", "from ringloader.bench import main") == {"bench"}
    assert imports("loader.dataloader", "from torch import nn") == set()


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


#: The package's layers, lowest first: a module imports only from its own layer and those below.
#: Each layer is a folder of the package (its docstring maps its modules): foundation in
#: ``core`` (files, sizes, URL schemes, node and options, orders and checkpoints, ranks, the
#: Source protocol and the sample table it hands the loader, the shard index and remote
#: downloads), then ``transforms`` (native steps, the converters of torchvision's and timm's
#: classes, clip sampling), ``sources`` (the datasets and the references a user's Dataset
#: returns, and their reading), ``loader`` (the DataLoader, its backends, epoch planning). The
#: modules at the top, and ``bench``, are the tools (the command, the benchmarks, pack, doctor,
#: the sample data) and the package itself, above every folder.
LAYERS = ("core", "transforms", "sources", "loader")
#: What the top level holds besides the folders: the tools, the public paths, the version.
TOP = {"__main__", "_cli", "_pack_sources", "_public_paths", "_synthetic_images", "_version",
       "bench", "doctor", "pack", "sample_data"}


def layer_of(module: str) -> int:
    """The index of ``module``'s layer: its folder's place in LAYERS; a module outside the
    folders is a tool, above them all."""
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else len(LAYERS)


def upward_imports(graph: dict) -> list:
    """Every (importer, imported) pair whose imported module lies in a higher layer."""
    return sorted((m, n) for m in graph for n in graph[m] if layer_of(n) > layer_of(m))


def test_the_layers_are_the_folders_and_imports_only_go_downward():
    assert set(LAYERS) <= set(PACKAGES)
    counts = {layer: sum(m.startswith(layer + ".") for m in MODULES) for layer in LAYERS}
    assert all(n >= 4 for n in counts.values()), counts
    top = {m for m in MODULES if "." not in m} - set(LAYERS)
    assert top - TOP == set(), f"the top level is for tools: put these in a layer folder: {top - TOP}"
    graph = {m: package_imports(m) for m in MODULES}
    assert upward_imports(graph) == []


def test_the_layer_check_sees_an_upward_import():
    assert upward_imports({"core._order": {"loader.dataloader"}, "loader.dataloader": {"core._order"}}) == \
        [("core._order", "loader.dataloader")]
    assert upward_imports({"bench.harness": {"sources.datasets"}}) == []
    assert upward_imports({"transforms": {"sources.datasets"}}) == [("transforms", "sources.datasets")]



def mapped_modules(package: str) -> list:
    """The names the ``* ``name``: ...`` lines of ``package``'s docstring map."""
    doc = ast.get_docstring(parse(package)) if package else rl.__doc__
    return [line.split("``")[1] for line in (doc or "").splitlines() if line.startswith("* ``")]


def test_each_package_docstring_maps_its_modules():
    assert "bench" in PACKAGES  # a subpackage is mapped too, in its own docstring
    for package in PACKAGES:
        prefix = f"{package}." if package else ""
        children = [m[len(prefix):] for m in MODULES
                    if m.startswith(prefix) and "." not in m[len(prefix):]]
        extra = ["_C"] if not package else []  # the extension module
        # each once, nothing stale
        assert sorted(mapped_modules(package)) == sorted(children + extra), package or "ringloader"


#: The size limits of a module and of a function (its ``def`` line to its last line).
MODULE_LINES, FUNCTION_LINES = 600, 150
#: The modules and functions over those limits when the limits came, each with its size then.
#: These lists may only shrink: none may grow, and one that gets under the limit leaves its list.
LONG_MODULES = {}
LONG_FUNCTIONS: dict = {}


def function_lines(name: str) -> dict:
    """``{"module:Class.method": lines}`` for every function of module ``name``, nested ones
    too (an outer function's lines include its nested functions')."""
    found = {}

    def visit(body: list, prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[f"{name}:{prefix}{node.name}"] = node.end_lineno - node.lineno + 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(node.body, f"{prefix}{node.name}.")

    visit(parse(name).body, "")
    return found


def check_ratchet(sizes: dict, limit: int, allowed: dict) -> list:
    """What breaks the ratchet: a size over ``limit`` not in ``allowed``, one in ``allowed``
    grown past its recorded size, or one in ``allowed`` now within the limit (to be removed)."""
    problems = [f"{k}: {n} lines, over {limit}" for k, n in sizes.items()
                if n > limit and k not in allowed]
    for k, recorded in allowed.items():
        if sizes.get(k, 0) > recorded:
            problems.append(f"{k}: {sizes[k]} lines, grown past its recorded {recorded}")
        elif sizes.get(k, 0) <= limit:
            problems.append(f"{k}: {sizes.get(k, 'gone')} lines now: remove it from the list")
    return problems


def test_the_size_ratchet_sees_growth_and_shrinking():
    assert check_ratchet({"a": 10, "b": 30}, 20, {"b": 30}) == []
    assert check_ratchet({"a": 21, "b": 30}, 20, {"b": 30}) == ["a: 21 lines, over 20"]
    assert check_ratchet({"b": 31}, 20, {"b": 30}) == ["b: 31 lines, grown past its recorded 30"]
    assert check_ratchet({"b": 20}, 20, {"b": 30}) == ["b: 20 lines now: remove it from the list"]


def test_no_module_grows_past_its_size_limit():
    sizes = {m: len(SOURCES[m].read_text().splitlines()) for m in MODULES}
    assert sizes["bench.harness"] > 100  # the subpackage's modules are counted
    assert check_ratchet(sizes, MODULE_LINES, LONG_MODULES) == []


def test_no_function_grows_past_its_size_limit():
    sizes = {}
    for m in MODULES:
        sizes.update(function_lines(m))
    assert sizes["loader.dataloader:DataLoader.__init__"] > 10
    assert check_ratchet(sizes, FUNCTION_LINES, LONG_FUNCTIONS) == []


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
        if name == "core._schemes" or name.split(".")[0] == "bench":
            continue  # bench writes pipe: and http:// URLs, it does not read them
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
    assert _steps._converter(v1.RandomCrop) is _steps._converter(v1.Pad) is not None
    assert _steps._converter(v1.Grayscale) is _steps._converter(v1.RandomGrayscale) is not None
    assert _steps._converter(v1.RandomChoice) is None
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

    from ringloader.loader._backend import Backend
    from ringloader.loader._generic import GenericBackend
    from ringloader.loader._native import NativeBackend

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


def test_the_public_modules_keep_their_short_paths():
    """``ringloader.webdataset`` and the other public modules folded into the layer folders import
    by their short paths as before: the same module objects, in a fresh interpreter too (where
    the short path is the first thing imported)."""
    import importlib
    import subprocess
    import sys

    from ringloader import _public_paths

    assert {"webdataset", "datasets", "dataloader", "video", "clips"} <= set(_public_paths.PUBLIC_PATHS)
    for short, place in _public_paths.PUBLIC_PATHS.items():
        module = importlib.import_module(f"ringloader.{place}")
        assert importlib.import_module(f"ringloader.{short}") is module
        assert getattr(rl, short) is module
    # messages and pickles name the short path of a public class
    assert rl.Parquet.__module__ == "ringloader.hf" and rl.WebDataset.__module__ == "ringloader.webdataset"
    import pickle
    assert pickle.loads(pickle.dumps(rl.VideoFolder)) is rl.VideoFolder
    code = ("from ringloader.webdataset import WebDataset; import ringloader.dataloader as d; "
            "import ringloader; assert WebDataset is ringloader.WebDataset; "
            "assert d.DataLoader is ringloader.DataLoader")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_python_builds_typed_steps_from_the_one_declaration():
    """Converters build ``_steps.Step``s, checked against the C++ table of step kinds as they are
    built: no step dict literal in the transforms layer, an undeclared parameter refused at once
    naming the kind and the key, and the steps of a chain are Steps that pickle as Steps."""
    import pickle

    from ringloader import _C

    literals = []
    for name in MODULES:
        if name.split(".")[0] != "transforms":
            continue
        for node in ast.walk(parse(name)):
            # a dict with a "kind" key, or a "kind" keyword (dict(kind=...), d.update(kind=...))
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "kind"
                                                  for k in node.keys) \
                    or isinstance(node, ast.keyword) and node.arg == "kind" \
                    and name != "transforms._steps":  # where Step itself sets its kind
                literals.append(f"{name}:{getattr(node, 'lineno', '?')}")
    assert literals == [], f"build these steps with _steps.Step: {literals}"
    declared = {kind: params for kind, _, params in _C.step_kinds()}
    assert {"resize", "random_resized_crop", "color_jitter", "augmix"} <= set(declared)
    assert "size_h" in declared["resize"] and "ranges" in declared["color_jitter"]
    with pytest.raises(TypeError, match=r"'resize' \(Resize\) has no parameter 'size'"):
        _steps.Step("resize", size=256)
    step = _steps.Step("resize", size_h=256, size_w=0)
    with pytest.raises(TypeError, match="has no parameter 'p'"):
        step.update(p=0.5)
    with pytest.raises(TypeError, match="has no parameter 'p'"):
        step |= {"p": 0.5}  # dict's |= would bypass __setitem__
    with pytest.raises(TypeError, match="kind of a native step"):
        step["kind"] = "center_crop"  # its parameters were checked against 'resize'
    assert step == {"kind": "resize", "size_h": 256, "size_w": 0}
    with pytest.raises(ValueError, match="unknown native step kind 'resise'"):
        _steps.Step("resise")
    import torchvision.transforms as tv

    chain = T.from_torchvision(tv.Compose([tv.RandomResizedCrop(224), tv.ColorJitter(0.4, 0.4, 0.4),
                                           tv.ToTensor()]))
    assert chain and all(isinstance(s, _steps.Step) for s in chain)
    # A converter that starts from a dict without its kind escapes the literal check above.
    policies = _steps.to_steps(tv.Compose([tv.RandAugment(), tv.TrivialAugmentWide(), tv.AutoAugment()]))
    assert [type(s) for s in policies] == [_steps.Step] * 3, policies
    copy = pickle.loads(pickle.dumps(chain))
    assert copy == chain and all(isinstance(s, _steps.Step) for s in copy)


def test_docstrings_name_module_paths_that_exist():
    """A ``ringloader.x.y`` named in the package's docstrings and messages is importable (a
    module, or a name reached from one): the folders moved the private modules
    (``ringloader._order`` is ``ringloader.core._order``), and a reader follows the name."""
    import importlib
    import re

    def resolves(dotted: str) -> bool:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for part in parts[i:]:
                    obj = getattr(obj, part)
            except AttributeError:
                return False
            return True
        return False

    named = {(name, f"{module}.py")
             for module, path in SOURCES.items() if module
             for name in re.findall(r"``~?(ringloader(?:\.\w+)+)``", path.read_text())}
    assert sorted((where, name) for name, where in named if not resolves(name)) == []
