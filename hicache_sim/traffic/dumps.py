"""SGLang's request dumps, read without SGLang and without running anything they name.

``--dump-requests-folder DIR`` (every ``--dump-requests-threshold`` finished requests) and
``--crash-dump-folder DIR`` (the last five minutes before a crash, under a folder per host) write
pickles of ``{"server_args": ..., "requests": [(obj, out, created_time, finished_time), ...]}``: the
request object, its output dict (``meta_info`` with ``completion_tokens``) and wall-clock arrival and
finish times in seconds. Unpickling would normally import SGLang and may call anything the file
names, so every class the file names becomes an inert stand-in that only keeps its fields; nothing
is imported, called or executed beyond building plain containers.

Memory stays bounded by the file: before unpickling, every length a pickle declares must fit in the
bytes after it (the unpickler allocates a declared bytes object before reading it) and every memo slot
must be one the opcodes before it could have filled (the memo table grows to the slot); a
``bytearray`` is built from bytes, never from a count.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from pathlib import Path

from ..workloads.errors import WorkloadError


def _deque(items=(), maxlen=None) -> list:
    return list(items)


def _bytearray(source=b"", *args) -> bytearray:
    """``bytearray`` as pickles call it (bytes, or a str and its encoding), never ``bytearray(count)``."""
    if not isinstance(source, (bytes, bytearray, str)):
        raise pickle.UnpicklingError(
            f"bytearray({type(source).__name__}): a pickle builds one from bytes, never a count"
        )
    return bytearray(source, *args)


def _reconstructor(cls, base=None, state=None):  # copyreg's, for protocol 0/1 pickles
    return cls.__new__(cls) if isinstance(cls, type) and issubclass(cls, Inert) else Inert()


_PLAIN = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "bytearray"): _bytearray,
    ("collections", "OrderedDict"): dict,
    ("collections", "deque"): _deque,
    ("copyreg", "_reconstructor"): _reconstructor,
}


class Inert:
    """A stand-in for a class named in a dump: calling it, building it or setting its state only
    records fields (``fields``) and arguments (``args``)."""

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args, obj.fields = args, {}
        return obj

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, __slots__ values)
            for part in state:
                if isinstance(part, dict):
                    self.fields.update(part)
        elif isinstance(state, dict):
            self.fields.update(state)

    def __setitem__(self, key, value) -> None:  # a stand-in for a dict subclass
        self.fields[key] = value

    def append(self, value) -> None:  # a stand-in for a list subclass
        self.fields.setdefault("items", []).append(value)

    def extend(self, values) -> None:
        self.fields.setdefault("items", []).extend(values)


class _InertUnpickler(pickle.Unpickler):
    def __init__(self, f) -> None:
        super().__init__(f)
        self._made: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str):
        if (module, name) in _PLAIN:
            return _PLAIN[(module, name)]
        key = (module, name)
        if key not in self._made:
            self._made[key] = type(name, (Inert,), {"__module__": f"inert.{module}"})
        return self._made[key]

    def persistent_load(self, pid):  # tensor storages and the like: not needed, not read
        return None


def fields(obj) -> dict:
    """A dump object's fields: a dict as it is, a stand-in's recorded fields, else nothing."""
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, Inert):
        return obj.fields
    return {}


_MEMO_PUTS = frozenset(("PUT", "BINPUT", "LONG_BINPUT"))


def check_pickle(raw: bytes, path: str) -> None:
    """Refuse a pickle that declares more than it holds (see the module docstring): a length past the
    end of the file, or a memo slot beyond the number of opcodes before it (Python's picklers number
    them from 0). Walks the opcodes without building anything; ``WorkloadError`` naming the byte."""
    try:
        for n, (op, arg, pos) in enumerate(pickletools.genops(raw)):
            if op.name in _MEMO_PUTS and arg > n:
                raise ValueError(f"memo slot {arg} at byte {pos}, after only {n} opcodes")
    except ValueError as e:  # genops: "expected N bytes in a bytes8, but only M remain", unknown opcodes
        raise WorkloadError(path, None, f"not a readable SGLang request dump ({e})") from None


def read_dump(path: Path) -> list[tuple]:
    """The ``(obj, out, created, finished)`` tuples of one dump file."""
    raw = path.read_bytes()
    check_pickle(raw, str(path))
    try:
        data = _InertUnpickler(io.BytesIO(raw)).load()
    except Exception as e:  # a truncated or foreign pickle fails in many ways
        raise WorkloadError(str(path), None, f"not a readable SGLang request dump ({type(e).__name__}: {e})") from None
    requests = data.get("requests") if isinstance(data, dict) else None
    if not isinstance(requests, list):
        raise WorkloadError(str(path), None, "expected an SGLang request dump: a mapping with a 'requests' list")
    return requests


def dump_files(path: Path) -> list[Path]:
    """A dump file, or every ``*.pkl`` under a dump folder (crash dumps sit in a folder per host)."""
    return [path] if path.is_file() else sorted(p for p in path.rglob("*.pkl") if p.is_file())
