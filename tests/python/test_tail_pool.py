"""The threads a batch's Joint tails run on (``sources._tail_pool``): the draws made ahead under
the seeded generators give exactly what v2's own ``forward`` gives with those seeds, the rows run
side by side keep their order and their errors, and the caller's torch thread count is kept."""

from __future__ import annotations

import threading

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from ringloader.core._sample_keys import _run_seeded, one_intra_op_thread
from ringloader.sources import _tail_pool

CHAINS = {
    "dino": lambda: [v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                     v2.RandomGrayscale(p=0.2), v2.GaussianBlur(9, sigma=(0.1, 2.0)),
                     v2.RandomSolarize(128, p=0.2)],
    "ssd": lambda: [v2.RandomPhotometricDistort(p=0.5)],
    "values": lambda: [v2.RandomPhotometricDistort(p=1.0), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])],
    "others": lambda: [v2.RandomPosterize(4, p=0.5), v2.RandomEqualize(p=0.5),
                       v2.RandomAutocontrast(p=0.5), v2.RandomAdjustSharpness(2.0, p=0.5),
                       v2.RandomInvert(p=0.5)],
}


@pytest.mark.parametrize("name", list(CHAINS))
@pytest.mark.parametrize("kind", ["image", "plain"])
def test_draws_made_ahead_equal_v2s_forward(name, kind):
    """For 40 seeds each: ``drawn_run`` equals v2's Compose run with the generators seeded
    (max |diff| 0), on a tv_tensors.Image and on a plain tensor; the chains draw differently
    for different seeds."""
    compose = v2.Compose(CHAINS[name]())
    assert _tail_pool._ahead(list(compose.transforms))
    image = torch.randint(0, 256, (3, 37, 53), dtype=torch.uint8, generator=torch.Generator()
                          .manual_seed(1))
    value = tv_tensors.Image(image) if kind == "image" else image
    outs = []
    with one_intra_op_thread():
        for seed in range(40):
            want = _run_seeded(compose, value.clone(), seed)
            got = _tail_pool.drawn_run(compose, value.clone(), seed)
            assert type(got) is type(want) and torch.equal(got, want), seed
            outs.append(got)
    assert any(not torch.equal(outs[0], o) for o in outs[1:])


def test_a_step_that_changes_what_later_steps_draw_from_runs_under_the_lock():
    """Grayscale to one channel changes the channel count the distort's permutation draws
    from, and a step of the user's own has its own forward: the whole chain runs seeded, as
    v2 runs it."""
    class Own(v2.Transform):
        def forward(self, x):
            return x + torch.randint(0, 2, (1,), dtype=x.dtype)

    image = torch.randint(0, 256, (3, 20, 30), dtype=torch.uint8)
    for steps in ([v2.Grayscale(1), v2.RandomPhotometricDistort(p=1.0)], [Own()]):
        compose = v2.Compose(steps)
        assert not _tail_pool._ahead(steps)
        for seed in range(5):
            assert torch.equal(_tail_pool.drawn_run(compose, image.clone(), seed),
                               _run_seeded(compose, image.clone(), seed))


def test_rows_run_side_by_side_in_order_and_an_error_comes_back(monkeypatch):
    """run_all gives each item's result in the items' order, runs them on the pool's threads
    (not the caller's), and raises the first error after every item has finished."""
    monkeypatch.setattr(_tail_pool, "_threads", lambda: 2)
    caller = threading.get_ident()
    ran = []

    def fn(i):
        ran.append(threading.get_ident())
        if i == 3:
            raise ValueError("row 3")
        return i * i

    with one_intra_op_thread():
        assert _tail_pool.run_all(fn, list(range(3))) == [0, 1, 4]
        assert caller not in ran
        with pytest.raises(ValueError, match="row 3"):
            _tail_pool.run_all(fn, list(range(8)))
    assert len(ran) == 11


def test_the_callers_thread_count_is_kept():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_intra_op_thread():
            assert torch.get_num_threads() == 1
            assert _tail_pool.run_all(lambda i: torch.get_num_threads(), [0, 1, 2]) == [1, 1, 1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_a_forked_child_runs_rows_on_threads_of_its_own(monkeypatch):
    """After a fork the parent's pool threads are gone: the child starts its own."""
    import multiprocessing

    monkeypatch.setattr(_tail_pool, "_threads", lambda: 2)
    with one_intra_op_thread():
        assert _tail_pool.run_all(lambda i: i + 1, [1, 2]) == [2, 3]  # the parent's pool
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(_in_child, ()).get(timeout=60) == [1, 4, 9]


def _in_child():
    _tail_pool._threads = lambda: 2
    with one_intra_op_thread():
        return _tail_pool.run_all(lambda i: i * i, [1, 2, 3])


def test_a_fork_waits_for_the_seeded_lock_another_thread_holds():
    """A thread holds the seeded generators' lock (a tail thread mid-draw) while another forks:
    the fork waits for it, so the child's first seeded run does not deadlock on a lock held by
    a thread the child does not have."""
    import multiprocessing
    import time

    from ringloader.core import _sample_keys

    held = threading.Event()

    def hold():
        with _sample_keys._SEEDED:
            held.set()
            time.sleep(0.5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(_seeded_in_child, ()).get(timeout=60) == 7
    holder.join()


def _seeded_in_child():
    return _run_seeded(lambda v: v + 1, 6, 0)
