"""The host memory SGLang 0.5.23 would read on this machine (``--node-memory local``).

SGLang sizes and checks its host pools against ``available_host_memory_bytes``
(``mem_cache/host_memory.py``): ``psutil.virtual_memory().available``, which on Linux is
``MemAvailable`` of ``/proc/meminfo``, lowered to the headroom of the process's memory cgroup when
one limits it. The headroom is found by walking from the process's cgroup (``/proc/self/cgroup``,
located through ``/proc/self/mountinfo``) up to the mount's root: at every level, every limit
(cgroup v2 ``memory.max`` and ``memory.high``; v1 ``memory.limit_in_bytes``; ``max`` means none) less
what the group uses (v2 ``memory.current``, v1 ``memory.usage_in_bytes``) without its file cache
(v2 ``active_file + inactive_file``, v1 ``total_active_file + total_inactive_file`` of
``memory.stat``: reclaimable, as ``MemAvailable`` counts it; no credit when a v2 child group protects
memory with ``memory.min``, or has no ``memory.min`` to read); the smallest of those wins. SGLang's
auto-sizing refuses to start when the process belongs to a cgroup it cannot locate; so does this reader.

Read here before SGLang starts, the figure includes what SGLang's own processes will take by the
time each rank builds its pool: a check against it is optimistic by that share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

GIB = 1 << 30


class LocalMemoryError(ValueError):
    """This machine's memory cannot be read as SGLang reads it (the message says what is missing)."""


@dataclass(frozen=True)
class CgroupLimit:
    """The binding cgroup limit: where, which file, the limit and the usage it is lowered by (bytes)."""

    directory: Path
    file: str
    limit: int
    usage: int

    @property
    def headroom(self) -> int:
        return max(0, self.limit - self.usage)


@dataclass(frozen=True)
class LocalMemory:
    """``MemAvailable`` and the cgroup headroom (None: no limit) of this machine, bytes; SGLang takes the
    smaller."""

    mem_available: int
    cgroup: CgroupLimit | None

    @property
    def bytes(self) -> int:
        return self.mem_available if self.cgroup is None else min(self.mem_available, self.cgroup.headroom)

    @property
    def uses_cgroup(self) -> bool:
        return self.cgroup is not None and self.cgroup.headroom < self.mem_available

    def describe(self) -> str:
        """Which figure was used and why, in one sentence."""
        avail = f"MemAvailable {self.mem_available / GIB:.1f} GiB (/proc/meminfo)"
        if self.cgroup is None or (self.cgroup.limit >= 1 << 60 and not self.uses_cgroup):
            return f"local: {avail}; no cgroup memory limit"  # v1 writes its "unlimited" as ~8 EiB
        c = self.cgroup
        group = (
            f"cgroup {c.directory / c.file} {c.limit / GIB:.1f} GiB less {c.usage / GIB:.1f} GiB in use "
            f"(file cache excluded) = {c.headroom / GIB:.1f} GiB"
        )
        if self.uses_cgroup:
            return f"local: {group}, below {avail}: the cgroup's headroom is used"
        return f"local: {avail}, below the {group}: MemAvailable is used"


#: The procfs root read (a folder of fake files in tests); the cgroup files are wherever its mountinfo says.
PROC = Path("/proc")


def read_local_memory(proc: Path | None = None) -> LocalMemory:
    """What SGLang 0.5.23 reads as available host memory on this machine (``proc``: default ``PROC``)."""
    proc = PROC if proc is None else proc
    return LocalMemory(_mem_available(proc / "meminfo"), cgroup_headroom(proc))


def _text(path: Path) -> str:
    """A kernel file's text; LocalMemoryError naming it when it cannot be read as text."""
    try:
        return path.read_text()
    except OSError as e:
        raise LocalMemoryError(f"cannot read {path} ({(e.strerror or type(e).__name__).lower()})") from None
    except UnicodeDecodeError as e:
        raise LocalMemoryError(f"cannot read {path} (not text: byte {e.start})") from None


def _int(path: Path, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LocalMemoryError(f"{path}: expected an integer, got {text!r}") from None


def _mem_available(meminfo: Path) -> int:
    text = _text(meminfo)
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, flags=re.M)
    if m is None:
        raise LocalMemoryError(f"{meminfo} has no 'MemAvailable: N kB' line (Linux 3.14 or later prints it)")
    return int(m.group(1)) * 1024


def _unescape(field: str) -> str:
    """mountinfo writes a space in a path as ``\\040`` (octal escapes)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _memberships(cgroup_text: str) -> dict[str, PurePosixPath]:
    """The process's cgroup path by file system: ``cgroup2`` (the unified line ``0::/path``) and
    ``cgroup`` (the v1 line whose controllers include memory)."""
    out: dict[str, PurePosixPath] = {}
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            out["cgroup2"] = PurePosixPath(path)
        elif "memory" in controllers.split(","):
            out["cgroup"] = PurePosixPath(path)
    return out


def _read_int(path: Path) -> int | None:
    """An integer file, None when absent or ``max``."""
    if not path.exists():
        return None
    value = _text(path).strip()
    return None if value == "max" else _int(path, value)


def _file_cache(directory: Path, v2: bool) -> int:
    """The group's reclaimable file pages (``memory.stat``), 0 when a v2 child protects memory."""
    path = directory / "memory.stat"
    stat = {}
    for line in _text(path).splitlines():
        key, _, value = line.partition(" ")
        stat[key] = _int(path, value)
    keys = ("active_file", "inactive_file") if v2 else ("total_active_file", "total_inactive_file")
    cache = sum(stat.get(k, 0) for k in keys)
    if v2 and cache and _protected_below(directory):
        return 0
    return cache


def _protected_below(directory: Path) -> bool:
    """A descendant group whose ``memory.min`` is not 0, or cannot be read (absent too: the memory
    controller is off below), may hold pages reclaim cannot take: then no file cache is credited."""
    pending = [directory]
    try:
        while pending:
            for child in pending.pop().iterdir():
                if child.is_dir():
                    if int((child / "memory.min").read_text().strip()) != 0:
                        return True
                    pending.append(child)
    except (OSError, ValueError):
        return True
    return False


def _limits_up(directory: Path, mount: Path, v2: bool) -> list[CgroupLimit]:
    """Every limit from ``directory`` up to the mount's root, each with its group's usage."""
    names = ("memory.max", "memory.high") if v2 else ("memory.limit_in_bytes",)
    usage_name = "memory.current" if v2 else "memory.usage_in_bytes"
    found = []
    while True:
        usage = None
        for name in names:
            limit = _read_int(directory / name)
            if limit is None:
                continue
            if usage is None:
                path = directory / usage_name
                usage = max(0, _int(path, _text(path).strip()) - _file_cache(directory, v2))
            found.append(CgroupLimit(directory, name, limit, usage))
        if directory == mount or directory.parent == directory:
            return found
        directory = directory.parent


def cgroup_headroom(proc: Path) -> CgroupLimit | None:
    """The tightest cgroup limit over the process's memory cgroups and their ancestors (None: no limit,
    or no procfs). LocalMemoryError when the process is in a cgroup no mount shows (SGLang's auto-sizing
    refuses to start there)."""
    cgroup, mountinfo = proc / "self" / "cgroup", proc / "self" / "mountinfo"
    if not (cgroup.exists() and mountinfo.exists()):
        return None
    memberships, mounts = _memberships(_text(cgroup)), _text(mountinfo)
    limits: list[CgroupLimit] = []
    located = False
    for line in mounts.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        fs, options = tail[0], tail[2]
        if fs not in memberships or (fs == "cgroup" and "memory" not in options.split(",")):
            continue
        root, mount = PurePosixPath(_unescape(fields[3])), Path(_unescape(fields[4]))
        member = memberships[fs]
        if member.is_relative_to(root):
            relative = member.relative_to(root)
        elif root != PurePosixPath("/"):  # a cgroup namespace shows the path from its own root
            relative = member.relative_to("/")
        else:
            continue
        if ".." in relative.parts:
            raise LocalMemoryError(f"cannot resolve the memory cgroup path {member} (it climbs out of {root})")
        directory = mount / relative
        if not directory.is_dir():
            continue
        located = True
        limits += _limits_up(directory, mount, fs == "cgroup2")
    if memberships and not located:
        raise LocalMemoryError(
            "the process's memory cgroup is not under any mount in /proc/self/mountinfo; SGLang's auto-sizing "
            "refuses to start there: give --node-memory GIB"
        )
    return min(limits, key=lambda c: c.headroom, default=None)
