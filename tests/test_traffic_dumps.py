"""SGLang's request dumps (``--dump-requests-folder``, ``--crash-dump-folder``): pickles of SGLang's own
objects, read without SGLang and without running anything they name. The dumps are made here the way
SGLang makes them: its request dataclass pickled under SGLang's module path, in the layout its code
writes (``{"server_args", "requests": [(obj, out, created, finished)]}``, crash dumps in a folder per
host)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import sys
import types
from pathlib import Path

import pytest
from conftest import assert_user_error, invoke

IO_STRUCT = "sglang.srt.managers.io_struct"


@dataclasses.dataclass
class GenerateReqInput:
    text: str | list | None = None
    input_ids: list | None = None
    sampling_params: dict | None = None
    rid: str | None = None
    stream: bool = False


@dataclasses.dataclass
class ServerArgs:
    model_path: str = "Qwen/Qwen3-8B"
    page_size: int = 64
    enable_hierarchical_cache: bool = True


class RunsACommand:
    """What a hostile pickle would hold: unpickling it normally runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@contextlib.contextmanager
def sglang_modules():
    """SGLang's module path, holding the dataclasses above, for as long as the block runs."""
    names = ["sglang", "sglang.srt", "sglang.srt.managers", IO_STRUCT, "sglang.srt.server_args"]
    mods = {n: types.ModuleType(n) for n in names}
    for cls, mod in ((GenerateReqInput, IO_STRUCT), (ServerArgs, "sglang.srt.server_args")):
        cls.__module__, cls.__qualname__ = mod, cls.__name__
        setattr(mods[mod], cls.__name__, cls)
    sys.modules.update(mods)
    try:
        yield
    finally:
        for name in mods:
            del sys.modules[name]
        for cls in (GenerateReqInput, ServerArgs):
            cls.__module__ = __name__


def _pickle_as_sglang(data) -> bytes:
    with sglang_modules():
        return pickle.dumps(data)


def out(n_out: int, n_in: int) -> dict:
    return {"text": "(answer)", "meta_info": {"id": "x", "prompt_tokens": n_in, "completion_tokens": n_out,
                                               "cached_tokens": 0, "e2e_latency": 0.5}}  # fmt: skip


def write_dumps(folder: Path, server_args=None) -> Path:
    ids = list(range(5, 45))  # 40 server token ids
    t0 = 1_793_613_600.0
    first = [
        (GenerateReqInput(input_ids=ids, rid="a"), out(12, 40), t0 + 0.25, t0 + 1.0),
        (GenerateReqInput(text="Summarise the host memory of the server.", rid="b"), out(7, 9), t0 + 2.0, t0 + 2.5),
        (GenerateReqInput(text=["one", "two"], rid="c"), [out(1, 1), out(1, 1)], t0 + 3.0, t0 + 3.2),
    ]
    second = [(GenerateReqInput(input_ids=[*ids, 100, 101, 102], rid="d"), out(30, 43), t0 + 4.0, t0 + 6.0)]
    folder.mkdir()
    (folder / "2026-11-02_10-00-03.pkl").write_bytes(
        _pickle_as_sglang({"server_args": server_args or ServerArgs(), "requests": first})
    )
    (folder / "node-7").mkdir()
    (folder / "node-7" / "crash_dump_2026-11-02_10-00-06.pkl").write_bytes(
        _pickle_as_sglang({"server_args": None, "requests": second, "launch_command": "python -m sglang.launch_server"})
    )
    return folder


def test_dump_folder_becomes_a_trace_with_the_servers_ids_and_created_times(tmp_path):
    dumps = write_dumps(tmp_path / "dumps")
    assert "sglang" not in sys.modules  # read without SGLang
    r = invoke("trace", "convert", dumps, "--out", tmp_path / "t.jsonl", "--block-size", 16)
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [ln["timestamp"] for ln in lines] == [0, 1750, 3750]
    assert [ln["output_length"] for ln in lines] == [12, 7, 30]
    assert lines[0]["input_length"] == 40 and lines[2]["input_length"] == 43
    assert lines[2]["hash_ids"][:2] == lines[0]["hash_ids"][:2] and lines[2]["hash_ids"][2] != lines[0]["hash_ids"][2]
    assert "2026-11-02_10-00-03.pkl request 3: a batched request" in r.output
    assert "approximate" in r.output  # request b's text went through the byte-level fallback


def test_a_dump_file_alone_and_strict(tmp_path):
    dumps = write_dumps(tmp_path / "dumps")
    one = dumps / "node-7" / "crash_dump_2026-11-02_10-00-06.pkl"
    r = invoke("trace", "convert", one, "--out", tmp_path / "one.jsonl", "--block-size", 16)
    assert r.exit_code == 0, r.output
    assert "1 requests" in r.output
    r = invoke("trace", "convert", dumps, "--out", tmp_path / "s.jsonl", "--strict")
    assert_user_error(r, "2026-11-02_10-00-03.pkl request 3", "batched", "--strict")
    assert not (tmp_path / "s.jsonl").exists()


def test_nothing_a_dump_names_is_run(tmp_path):
    marker = tmp_path / "ran"
    dumps = write_dumps(tmp_path / "dumps", server_args=RunsACommand(marker))
    assert not marker.exists()
    r = invoke("trace", "convert", dumps, "--out", tmp_path / "t.jsonl", "--block-size", 16)
    assert r.exit_code == 0, r.output
    assert not marker.exists()
    with sglang_modules():
        pickle.loads((dumps / "2026-11-02_10-00-03.pkl").read_bytes())  # the plain unpickler would run it ...
    assert marker.exists()  # ... so the file really was hostile


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (b"\x80\x04\x95", ["d.pkl", "not a readable SGLang request dump"]),
        (pickle.dumps([1, 2, 3]), ["d.pkl", "a mapping with a 'requests' list"]),
    ],
    ids=["truncated", "not-a-dump"],
)
def test_bad_dumps(tmp_path, content, fragments):
    (tmp_path / "d.pkl").write_bytes(content)
    assert_user_error(invoke("trace", "convert", tmp_path / "d.pkl", "--out", tmp_path / "t.jsonl"), *fragments)
    assert not (tmp_path / "t.jsonl").exists()


def test_stand_ins_keep_slot_state_too():
    from hicache_sim.traffic.dumps import Inert, fields

    obj = Inert()
    obj.__setstate__(({"text": "hi"}, {"input_ids": [1, 2]}))  # (__dict__, __slots__ values)
    assert fields(obj) == {"text": "hi", "input_ids": [1, 2]}


# A few bytes that make a plain unpickler allocate what they declare (sizes kept at 256 MiB so that the old
# code's failure is cheap; the same bytes with 2**31 took 2 GB): a bytearray built from a count, a bytes
# object whose declared length exceeds the file (allocated before it is read), a memo slot far past any
# the pickle could have filled (the memo table grows to it).
BOMBS = {
    "bytearray-count": b"\x80\x04\x8c\x08builtins\x8c\tbytearray\x93J\x00\x00\x00\x10\x85R.",
    "binbytes8-length": b"\x80\x05\x8e" + (1 << 28).to_bytes(8, "little") + b"xx.",
    "bytearray8-length": b"\x80\x05\x96" + (1 << 28).to_bytes(8, "little") + b"xx.",
    "memo-index": b"\x80\x04N" + b"r" + (1 << 24).to_bytes(4, "little") + b".",
}


@pytest.mark.parametrize("content", list(BOMBS.values()), ids=list(BOMBS))
def test_a_small_hostile_dump_is_refused_in_bounded_memory(tmp_path, content):
    import tracemalloc

    from hicache_sim.traffic.dumps import read_dump
    from hicache_sim.workloads.errors import WorkloadError

    (tmp_path / "d.pkl").write_bytes(content)
    tracemalloc.start()
    try:
        with pytest.raises(WorkloadError, match=r"d\.pkl"):
            read_dump(tmp_path / "d.pkl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak:,} bytes allocated to refuse a {len(content)}-byte file"
    assert_user_error(invoke("trace", "convert", tmp_path / "d.pkl", "--out", tmp_path / "t.jsonl"), "d.pkl")
    assert not (tmp_path / "t.jsonl").exists()


def test_a_dump_with_bytes_and_bytearrays_still_reads():
    """The bounds refuse only what no file of this size can hold: real bytes fields pass (protocols 3-5,
    where bytes are bytes: SGLang pickles with Python 3's default)."""
    import io

    from hicache_sim.traffic.dumps import _InertUnpickler, check_pickle

    data = {"requests": [], "blob": b"x" * 100_000, "ba": bytearray(b"abc"), "big": bytearray(70_000)}
    for protocol in (3, 4, 5):
        raw = pickle.dumps(data, protocol=protocol)
        check_pickle(raw, "d.pkl")
        assert _InertUnpickler(io.BytesIO(raw)).load() == data
