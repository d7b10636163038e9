"""Result folders that never cost a user a file.

A folder hicache-sim writes carries a marker file (``.hicache-sim.json``) naming what wrote it. Only
such a folder may be replaced; an existing path that is a file, a device, or a folder holding anything
else is refused *before* any work runs, as is the current folder or one of its parents. The target is
probed for writability up front, so a read-only file system fails in one line instead of after a long
simulation. Folders are built beside their target under a temporary name that carries the writer's
pid, then swapped in; temporary folders a killed run left in the same parent (their pid no longer alive,
whatever folder they were for) are removed. A run holds its folder with a lock file beside it
(:func:`hold_folder`), so a second run into it at once is refused instead of replacing the result.
New files and folders get the user's umask (``tempfile`` would give 0600/0700).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

MARKER = ".hicache-sim.json"
_TMP_TAG = ".hicache-tmp-"


class OutputError(ValueError):
    """An output path hicache-sim must not or cannot write: one line naming the path and why."""


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def apply_umask(path: Path, *, directory: bool) -> None:
    """Give ``path`` the permissions a plain ``mkdir``/``open`` would (tempfile creates 0700/0600)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def read_marker(folder: Path) -> dict | None:
    """The marker of a folder hicache-sim wrote, or None."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("written_by") == "hicache-sim" else None


def write_marker(folder: Path, kind: str, files: Iterable[str] = ()) -> None:
    """Mark ``folder`` as hicache-sim's own (kind: run, sweep, files). A ``files`` folder also lists the
    files hicache-sim put there (the only ones it may replace). No versions: tracked copies stay stable."""
    data: dict = {"written_by": "hicache-sim", "kind": kind}
    if files:
        data["files"] = sorted(set(files))
    (folder / MARKER).write_text(json.dumps(data, sort_keys=True) + "\n", encoding="utf-8")
    apply_umask(folder / MARKER, directory=False)


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_writable(folder: Path, flag: str, shown: str) -> None:
    """Create and remove a temporary folder inside ``folder``: the only test that root, ACLs and
    read-only mounts all answer truthfully."""
    try:
        probe = tempfile.mkdtemp(prefix=f"{_TMP_TAG}probe-", dir=folder)
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise OutputError(f"{flag} {shown}: cannot write in {folder} ({reason.lower()})") from None
    os.rmdir(probe)


def check_target(path: str | Path, kind: str, *, flag: str = "--out") -> Path:
    """Check, before any work, that hicache-sim may write its ``kind`` folder at ``path``.

    Allowed: a new path whose nearest existing parent is a writable folder; an empty folder; a folder
    whose marker says hicache-sim wrote a ``kind`` folder there. Refused: anything else. Returns the
    absolute path to write.
    """
    shown = str(path)
    target = _folder_target(path, flag)
    if target.is_dir():
        entries = [e for e in os.listdir(target) if not e.startswith(_TMP_TAG)]
        if entries:
            marker = read_marker(target)
            if marker is None:
                raise OutputError(
                    f"{flag} {shown}: folder holds files hicache-sim did not write "
                    f"(no {MARKER}); name a new or empty folder"
                )
            if marker.get("kind") != kind:
                raise OutputError(
                    f"{flag} {shown}: holds a hicache-sim {marker.get('kind')} folder, not a "
                    f"{kind} folder; name another folder"
                )
        _probe_writable(target, flag, shown)
        if target.parent != target:
            _probe_writable(target.parent, flag, shown)
        return target
    _probe_new(target, flag, shown)
    return target


def _folder_target(path: str | Path, flag: str) -> Path:
    """The absolute folder ``path`` names; refused when it is the current folder (or a parent), a
    symlink, or an existing path that is not a folder."""
    target = Path(os.path.abspath(path))
    real = Path(os.path.realpath(target))
    cwd = Path(os.path.realpath(Path.cwd()))
    if real == cwd or real in cwd.parents:
        raise OutputError(f"{flag} {path}: is the current folder or one of its parents; name a new folder")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise OutputError(f"{flag} {path}: exists and is not a folder; name a new folder")
    return target


def _probe_new(target: Path, flag: str, shown: str) -> None:
    """A path that does not exist yet: its nearest existing parent must be a writable folder."""
    parent = _nearest_existing(target.parent)
    if not parent.is_dir():
        raise OutputError(f"{flag} {shown}: {parent} is not a folder")
    _probe_writable(parent, flag, shown)


def check_files_target(path: str | Path, names: Iterable[str], *, flag: str = "--out") -> Path:
    """Check, before any work, that hicache-sim may put the files ``names`` into the folder ``path``
    (replay, validate-model: verbs that add files to a folder others share, such as a calibration
    folder). The folder may hold anything else; a file of the same name is replaced only when the
    folder's marker lists it as hicache-sim's. Returns the absolute folder; seal it afterwards with
    :func:`mark_files`."""
    shown = str(path)
    target = _folder_target(path, flag)
    if not target.is_dir():
        _probe_new(target, flag, shown)
        return target
    marker = read_marker(target)
    ours = set(marker.get("files", [])) if marker and marker.get("kind") == "files" else set()
    if marker is not None and marker.get("kind") != "files":
        raise OutputError(f"{flag} {shown}: holds a hicache-sim {marker.get('kind')} folder; name another folder")
    clash = sorted(n for n in names if (target / n).exists() and n not in ours)
    if clash:
        raise OutputError(
            f"{flag} {shown}: {clash[0]} exists and hicache-sim did not write it; name a new or empty folder"
        )
    _probe_writable(target, flag, shown)
    return target


def mark_files(folder: Path, names: Iterable[str]) -> None:
    """Record ``names`` in ``folder``'s marker as files hicache-sim wrote (kept with earlier ones)."""
    marker = read_marker(folder)
    earlier = marker.get("files", []) if marker and marker.get("kind") == "files" else []
    write_marker(folder, "files", [*earlier, *names])


def check_file_target(path: str | Path, is_ours: Callable[[Path], bool], *, flag: str = "--out") -> Path:
    """Check, before any work, that hicache-sim may write the single file ``path``: a new file in a
    writable folder, or an existing file ``is_ours`` recognises as one hicache-sim wrote."""
    shown = str(path)
    target = Path(os.path.abspath(path))
    if target.is_symlink() or (target.exists() and not target.is_file()):
        kind = "a folder" if target.is_dir() else "not a regular file"
        raise OutputError(f"{flag} {shown}: is {kind}; give a new file name")
    if target.exists():
        if not is_ours(target):
            raise OutputError(f"{flag} {shown}: exists and hicache-sim did not write it; give a new file name")
        _probe_writable(target.parent, flag, shown)
    else:
        _probe_new(target, flag, shown)
    return target


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(parent: Path, name: str | None = None) -> list[Path]:
    """Remove temporary folders in ``parent`` (for ``name``, or for any name when None) whose writer
    process is gone (a killed run); a live writer's folder is never touched."""
    removed = []
    stem = re.escape(name) if name is not None else ".+?"
    pattern = re.compile(rf"^\.{stem}{re.escape(_TMP_TAG)}(\d+)-")
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            m = pattern.match(entry.name)
            if m and entry.is_dir() and not entry.is_symlink() and not _pid_alive(int(m.group(1))):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def _users_entries(folder: Path, written: list[str]) -> list[str]:
    """The entries of the marked ``folder`` hicache-sim did not write, kept across a rewrite. Its marker
    lists what hicache-sim wrote; a marker from before that list counts what it writes now as its own.
    A user's entry where hicache-sim now writes one is refused in one line (nothing is replaced)."""
    marker = read_marker(folder) or {}
    listed = marker.get("files")
    ours = set(listed) if isinstance(listed, list) else set(written)
    keep = sorted(e for e in os.listdir(folder) if e != MARKER and e not in ours and not e.startswith(_TMP_TAG))
    clash = [e for e in keep if e in written]
    if clash:
        raise OutputError(
            f"{folder / clash[0]}: hicache-sim did not write it and now writes a file of that name; move it away"
        )
    return keep


_LOCK_TAG = ".hicache-lock"
_LOCK_GRACE_S = 10.0  # a lock without a pid yet is being written; older than this, it is left by a crash


def _lock_owner(lock: Path) -> int | None:
    """The pid in ``lock``; 0 when the lock is gone, -1 when it holds no pid and is older than the
    grace (left by a crash), None when it holds no pid yet."""
    try:
        text = lock.read_text(encoding="ascii").strip()
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return 0
    except (OSError, ValueError):
        return None
    if text.isdigit():
        return int(text)
    return -1 if age > _LOCK_GRACE_S else None


def _try_exclusive(fd: int) -> bool:
    """An exclusive, non-blocking lock on the open file ``fd`` (released by the OS when the holder dies);
    True where the platform has none (``fcntl``: POSIX), the pid inside then being the only guard."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (a holder that finished unlinks it)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def hold_folder(target: Path, *, flag: str = "--out", shown: str | Path | None = None) -> Iterator[Path]:
    """Hold ``target`` for this process while it computes and writes it: a lock file ``.NAME.hicache-lock``
    in its parent, under an exclusive ``flock`` held as long as the run and holding the pid, removed at
    the end. Two runs racing for the folder (a stale lock included) cannot both win: the OS grants the
    ``flock`` to one, and a lock file a finished holder unlinked meanwhile is opened again. A file whose
    pid is another live process (a holder that predates the ``flock``) is refused too; the lock of a dead
    pid is taken over. Parent folders created for the lock are removed again when nothing was written."""
    target = Path(target)
    shown = target if shown is None else shown
    created = []
    for p in reversed([target.parent, *target.parent.parents]):
        if not p.exists():
            with contextlib.suppress(FileExistsError):
                p.mkdir()
                created.append(p)
    lock = target.parent / f".{target.name}{_LOCK_TAG}"
    mine = f"{os.getpid()}\n"
    fd = -1
    try:
        for _ in range(20):
            fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o666 & ~_umask())
            held = _try_exclusive(fd)
            owner = _lock_owner(lock) if held else None
            if held and not _same_file(fd, lock):  # its holder finished and unlinked it: open it again
                os.close(fd)
                fd = -1
                continue
            live = owner is not None and owner > 0 and owner != os.getpid() and _pid_alive(owner)
            if not held or live:
                os.close(fd)
                fd = -1
                who = f"pid {owner}" if owner and owner > 0 else "one starting"
                raise OutputError(
                    f"{flag} {shown}: another hicache-sim run ({who}) is writing it (lock {lock}); "
                    "wait for it or name another folder"
                )
            os.ftruncate(fd, 0)
            os.pwrite(fd, mine.encode("ascii"), 0)
            break
        else:
            raise OutputError(f"{flag} {shown}: cannot take the lock {lock}; try again")
        try:
            yield target
        finally:
            with contextlib.suppress(OSError):
                if _same_file(fd, lock):
                    lock.unlink()  # while still holding it: a waiter that opened it sees it gone
            os.close(fd)
            fd = -1
    finally:
        if fd >= 0:
            os.close(fd)
        for p in reversed(created):
            with contextlib.suppress(OSError):
                p.rmdir()


@contextlib.contextmanager
def staged_folder(out_dir: str | Path, kind: str) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; on success mark it and swap it in for ``out_dir``.

    The caller must have passed ``out_dir`` through :func:`check_target`. On any exception the
    temporary folder is removed and ``out_dir`` is left as it was.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(out_dir.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}{_TMP_TAG}{os.getpid()}-", dir=out_dir.parent))
    try:
        apply_umask(tmp, directory=True)
        yield tmp
        written = os.listdir(tmp)
        write_marker(tmp, kind, written)
        for f in tmp.rglob("*"):
            apply_umask(f, directory=f.is_dir())
        if out_dir.exists():
            keep = _users_entries(out_dir, written)
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}{_TMP_TAG}{os.getpid()}-old-", dir=out_dir.parent))
            os.rmdir(old)
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            for entry in keep:
                os.replace(old / entry, out_dir / entry)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def prepare_folder(out_dir: str | Path, kind: str) -> Path:
    """Create (or keep) ``out_dir`` as a marked ``kind`` folder written in place (sweeps resume into it).
    The caller must have passed it through :func:`check_target`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if read_marker(out_dir) is None:
        write_marker(out_dir, kind)
    return out_dir


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write through ``write(tmp)`` beside ``path`` (a temporary name tagged with this pid, so concurrent
    writers never share one), apply the umask, then rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}{_TMP_TAG}{os.getpid()}-", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        apply_umask(tmp, directory=False)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """:func:`atomic_write` of a UTF-8 text."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
