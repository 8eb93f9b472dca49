"""Each rank near its GPU and on CPUs of its own: the rank's GPU -> PCI bus id -> NUMA node on
recorded sysfs trees of real topologies (node_trees) and the CPU share each rank gets (two
ranks under torchrun on this machine, decoding on disjoint CPUs: test_node_budget)."""

from __future__ import annotations

import pytest

from ringloader import _C
from ringloader.core import _node

import node_trees as trees


@pytest.fixture(autouse=True)
def whole_machine(monkeypatch):
    """The share rule only divides masks that are not already a rank's slice: the fake machines'
    ranks see the whole (fake) machine."""
    monkeypatch.setattr(_node, "mask_cpus", lambda: 80)
    monkeypatch.setattr(_node, "machine_cpus", lambda: 80)


def ranks(rank, size):
    return _node.LocalRanks(rank, size, "LOCAL_RANK/LOCAL_WORLD_SIZE")


def test_two_socket_server_rank_five_goes_to_gpu_five_on_node_one_and_shares_it_with_three(tmp_path):
    root = str(trees.two_socket_8gpu(tmp_path))
    gpus = _node.rank_gpus(ranks(5, 8), root, env={})
    assert [(g.index, g.bus_id, g.node) for g in gpus][4:6] == [(4, "0000:85:00.0", 1), (5, "0000:86:00.0", 1)]
    assert gpus[5].source == "LOCAL_RANK=5 -> GPU 5 (/proc/driver/nvidia/gpus)"
    options = _node.rank_placement(ranks(5, 8), "auto", None, root=root, env={})
    # Ranks 4-7 sit on node 1: rank 5 is the second of four there.
    assert options == {"numa_gpu_bus_id": "0000:86:00.0", "numa_share_index": 1, "numa_share_count": 4}
    shares = [_C.share_of_cpus("20-39,60-79", i, 4) for i in range(4)]
    # Disjoint, all of the node, each rank's cores with their SMT siblings (n and n + 40).
    assert shares == ["20-24,60-64", "25-29,65-69", "30-34,70-74", "35-39,75-79"]
    # The native placement on that tree: node 1, the share of its CPUs (here within all 80).
    s = _C.choose_auto_threads({"numa": "auto", "numa_sysfs_root": f"{root}/sys", **options})
    assert s["usable_cpus"] <= 10


def test_without_a_driver_the_pci_tree_finds_the_gpus_and_cuda_visible_devices_renumbers(tmp_path):
    root = str(trees.two_socket_8gpu(tmp_path, driver=False))
    ids, where = _node.gpu_bus_ids(root)
    assert len(ids) == 8 and where.startswith("/sys/bus/pci/devices")
    assert _node.visible(ids, {"CUDA_VISIBLE_DEVICES": "4,5"}) == ["0000:85:00.0", "0000:86:00.0"]
    assert _node.visible(ids, {"CUDA_VISIBLE_DEVICES": ""}) == []
    gpus = _node.rank_gpus(ranks(1, 2), root, env={"CUDA_VISIBLE_DEVICES": "4,5"})
    assert [(g.bus_id, g.node) for g in gpus] == [("0000:85:00.0", 1), ("0000:86:00.0", 1)]


def test_gh200_one_rank_goes_to_its_gpus_node_and_is_not_divided(tmp_path):
    root = str(trees.gh200(tmp_path))
    assert _node.rank_placement(None, "auto", None, root=root, env={}) == {"numa_gpu_bus_id": "0009:01:00.0"}
    assert _node.rank_placement(ranks(0, 1), "auto", None, root=root, env={}) == {"numa_gpu_bus_id": "0009:01:00.0"}
    # numa off (the default): nothing at all for one process.
    assert _node.rank_placement(None, None, None, root=root, env={}) == {}


def test_workstation_gpus_of_unknown_node_share_the_whole_machine(tmp_path):
    root = str(trees.workstation_4gpu(tmp_path))
    options = _node.rank_placement(ranks(2, 4), "auto", None, root=root, env={})
    assert options == {"numa_gpu_bus_id": "0000:41:00.0", "numa_share_index": 2, "numa_share_count": 4}


def test_sub_numa_clustering_each_rank_alone_on_its_gpus_node(tmp_path):
    root = str(trees.snc4_8gpu(tmp_path))
    for r in (0, 3, 7):
        options = _node.rank_placement(ranks(r, 8), "auto", None, root=root, env={})
        assert options["numa_gpu_bus_id"] == _node.rank_gpus(ranks(r, 8), root, env={})[r].bus_id
        assert "numa_share_count" not in options  # the node is this rank's alone
    # A staging device is placed natively; without numa="auto" the ranks still get disjoint CPUs.
    assert _node.rank_placement(ranks(3, 8), "auto", "cuda:3", root=root, env={}) == {}
    assert _node.rank_placement(ranks(3, 8), None, None, root=root, env={}) == \
        {"numa_share_index": 3, "numa_share_count": 8}
    assert _node.rank_placement(ranks(3, 8), None, None, divide=False, root=root, env={}) == {}


def test_the_loader_places_itself_by_the_ranks_own_gpu(monkeypatch, image_tree):
    import ringloader as rl
    from ringloader import transforms as T

    for size, rank in _node.LAUNCHERS:
        monkeypatch.delenv(size, raising=False)
        monkeypatch.delenv(rank, raising=False)
    # This machine has no GPU: give the process one whose node sysfs does not know.
    monkeypatch.setattr(_node, "rank_gpus", lambda ranks, root="", env=None: [
        _node.RankGpu(0, "0000:3b:00.0", -1, "the current CUDA device -> GPU 0 (faked)")])
    ds = rl.ImageFolder(str(image_tree), transform=T.Compose([T.Resize(32), T.CenterCrop(32)]))
    placed = rl.DataLoader(ds, batch_size=4, numa="auto").describe()
    assert "numa=auto: the node of GPU 0000:3b:00.0 is unknown" in placed, placed
    assert "GPU 0000:3b:00.0" not in rl.DataLoader(ds, batch_size=4).describe()  # numa=None: not asked


def test_numa_is_auto_by_default_when_batches_go_to_a_gpu():
    # "auto" is the default with a GPU device (a rank's threads and slots near its GPU); "off"
    # opts out; without a device nothing changes.
    from ringloader.core._options import _check_numa

    assert _check_numa(None, "cuda:3") == "auto" and _check_numa(None, "cuda") == "auto"
    assert _check_numa(None, "cpu") is None and _check_numa(None) is None
    assert _check_numa("off", "cuda:0") is None and _check_numa("off") is None
    assert _check_numa("auto", "cpu") == "auto" and _check_numa(1, "cuda:0") == 1
    with pytest.raises(ValueError, match="numa must be None, 'auto', 'off' or a node number"):
        _check_numa("on", "cpu")
