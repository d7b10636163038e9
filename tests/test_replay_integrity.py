"""Replay integrity: every layout x io backend, MHA and MLA, moves every bit of every page to the right
slot, in SGLang's host layout; a corrupted copy is caught and the page named."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from hicache_sim.replay import Executor, IntegrityError, KVShape, allocate_pools, check_round_trip  # noqa: E402
from hicache_sim.replay.integrity import fill_device, page_pattern, verify_device, verify_host  # noqa: E402

LAYOUTS = ("layer_first", "page_first", "page_first_direct")
SHAPES = {
    "mha": KVShape(num_layers=3, kv_factor=2, heads=2, head_dim=8, page_size=4),
    "mla": KVShape(num_layers=3, kv_factor=1, heads=1, head_dim=12, page_size=4),
}


def _int_view(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


@pytest.mark.parametrize("per_layer", [True, False], ids=["h2d_per_layer", "h2d_whole"])
@pytest.mark.parametrize("attention", ["mha", "mla"])
@pytest.mark.parametrize("io_backend", ["kernel", "direct"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_is_bit_exact(layout, io_backend, attention, per_layer):
    shape = SHAPES[attention]
    pools = allocate_pools(shape, layout, 48, 40, "cpu")
    # a staging cap of 5 pages forces chunked kernel transfers too
    ex = Executor(pools, io_backend, max_staging_bytes=5 * shape.page_bytes)
    for seed in (0, 1, 2):  # different random page permutations each time
        rep = check_round_trip(ex, pages=20, seed=seed, per_layer=per_layer)
        assert rep.pages == 20 and rep.layout == layout and rep.io_backend == io_backend


@pytest.mark.parametrize("dtype", ["fp16", "fp32", "fp8"])
def test_round_trip_other_dtypes(dtype):
    shape = KVShape(num_layers=2, kv_factor=2, heads=1, head_dim=8, page_size=4, dtype=dtype)
    ex = Executor(allocate_pools(shape, "page_first", 16, 16, "cpu"), "kernel")
    check_round_trip(ex, pages=8)


def test_round_trip_in_a_pool_too_small_for_disjoint_slots():
    shape = SHAPES["mha"]
    ex = Executor(allocate_pools(shape, "layer_first", 10, 10, "cpu"), "direct")
    assert check_round_trip(ex, pages=8).pages == 8  # loads into a shifted permutation of the slots


@pytest.mark.parametrize("io_backend", ["kernel", "direct"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_corrupted_copy_is_detected_and_the_page_named(layout, io_backend):
    shape = SHAPES["mha"]
    pools = allocate_pools(shape, layout, 32, 32, "cpu")
    ex = Executor(pools, io_backend)
    keys = torch.tensor([0x1000 + i for i in range(6)], dtype=torch.int64)
    src, host, dst = [1, 5, 9, 13, 17, 21], [30, 2, 7, 11, 19, 25], [0, 3, 6, 10, 20, 31]
    fill_device(pools, src, keys)
    ex.d2h(src, host)
    verify_host(pools, host, keys)
    _int_view(pools.host_page_native(host[3]))[1, 2, 3, 1, 5] ^= 1  # flip one bit of page key 0x1003 (V, layer 2)
    ex.h2d(host, dst, per_layer=True)
    with pytest.raises(IntegrityError, match=r"page key 0x1003 \(device slot 10\): 1 of \d+ elements differ"):
        verify_device(pools, dst, keys)


def test_host_layout_is_checked_against_sglang_indexing():
    shape = SHAPES["mha"]
    pools = allocate_pools(shape, "page_first", 16, 16, "cpu")
    ex = Executor(pools, "kernel")
    keys = torch.tensor([7, 8], dtype=torch.int64)
    fill_device(pools, [0, 1], keys)
    ex.d2h([0, 1], [4, 9])
    # swap two layers of host page 9 in the native buffer: the round trip alone might not see it
    t = 9 * shape.page_size
    native = pools.host_buf[:, t : t + shape.page_size]
    native[:, :, [0, 1]] = native[:, :, [1, 0]].clone()
    with pytest.raises(IntegrityError, match=r"page key 0x8 \(host slot 9, layout page_first\)"):
        verify_host(pools, [4, 9], keys)


def test_tamper_hook_fails_the_round_trip():
    ex = Executor(allocate_pools(SHAPES["mla"], "page_first_direct", 16, 16, "cpu"), "direct")

    def tamper(pools, host_slots):
        _int_view(pools.host_page_native(host_slots[0])).view(-1)[0] ^= 1

    with pytest.raises(IntegrityError, match=r"page key -?0x[0-9a-f]+ \(device slot \d+\)"):
        check_round_trip(ex, pages=4, tamper=tamper)


def test_pattern_differs_per_page_and_element():
    pat = page_pattern(torch.tensor([1, 2], dtype=torch.int64), 1000, 2)
    assert pat.dtype == torch.int16
    assert not torch.equal(pat[0], pat[1])
    assert len(set(pat[0].tolist())) > 900  # nearly every element distinct within a page


def test_sglang_shapes_per_layout():
    mha, mla = SHAPES["mha"], SHAPES["mla"]
    n, p, L = 5, mha.page_size, mha.num_layers
    expect = {
        "layer_first": (2, L, n * p, 2, 8),
        "page_first": (2, n * p, L, 2, 8),
        "page_first_direct": (2, n, L, p, 2, 8),
    }
    for layout, host in expect.items():
        shapes = allocate_pools(mha, layout, n, n, "cpu").sglang_shapes()
        assert shapes == {"device": (2, L, n * p, 2, 8), "host": host}
    mla_shapes = allocate_pools(mla, "page_first", n, n, "cpu").sglang_shapes()
    assert mla_shapes == {"device": (L, n * p, 1, 12), "host": (n * p, L, 1, 12)}  # no K/V axis


def test_the_harness_performs_every_layout_calibration_measures():
    """The harness's layout table is the calibration's list (``MEM_LAYOUTS``): a layout added to one
    and not the other would be measured with no pool to copy, or allocated and never calibrated."""
    from hicache_sim.hardware.presets import MEM_LAYOUTS
    from hicache_sim.replay.pools import REPLAY_LAYOUTS

    assert tuple(REPLAY_LAYOUTS) == MEM_LAYOUTS == LAYOUTS


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_direct_copy_moves_the_pieces_the_transfer_model_counts(layout):
    """The harness copies K and V of one layer's page as two pieces, and the transfer model
    (``HOST_LAYOUTS``' pieces) counts two for an MHA page in every layout the harness performs: what
    calibration measures is what the simulator charges."""
    from hicache_sim.hardware.presets import HOST_LAYOUTS

    mha = SHAPES["mha"]
    pieces = HOST_LAYOUTS.get(layout).pieces(mha.kv_factor, mha.page_size, mha.heads)
    assert mha.kv_factor == pieces


def test_pools_are_capped_in_bytes():
    shape = SHAPES["mha"]
    pools = allocate_pools(shape, "layer_first", 10_000, 10_000, "cpu", max_pool_bytes=7 * shape.page_bytes)
    assert (pools.device_pages, pools.host_pages) == (7, 7)
    assert pools.device_buf.numel() * pools.device_buf.element_size() == 7 * shape.page_bytes


def test_import_without_torch_names_the_extra():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "try:\n    import hicache_sim.replay\nexcept ImportError as e:\n    print(e)\n"
        "import hicache_sim.calibration.fit, hicache_sim.calibration.validate  # torch-free\n"
        "from typer.testing import CliRunner\n"
        "from hicache_sim.cli import app\n"
        "r = CliRunner().invoke(app, ['replay', '--sweep'])\n"
        "print('exit', r.exit_code, r.output.strip().splitlines())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert "pip install 'hicache-sim[replay]'" in lines[0]
    assert lines[1].startswith('exit 2 ["error: hicache_sim.replay needs torch') and "Traceback" not in out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("io_backend", ["kernel", "direct"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_on_cuda(layout, io_backend):
    pools = allocate_pools(SHAPES["mha"], layout, 64, 64, "cuda")
    assert pools.pinned and pools.device_buf.is_cuda
    ex = Executor(pools, io_backend)
    check_round_trip(ex, pages=24, per_layer=True)
    check_round_trip(ex, pages=24, per_layer=False, seed=1)
