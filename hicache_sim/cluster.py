"""A sweep's points on a Dask distributed cluster, in bounded time whatever is at the address.

Dask's own connect bounds the TCP connection by its timeout but not the handshake after it: a port
that accepts and stays silent (an HTTP server waiting for a request) held the client for ever, and
one that greets first (an SSH or SMTP banner) had its first 8 bytes read as a frame length (an
allocation of exabytes, a traceback). So :func:`connect_dask` first runs Dask's own handshake under
a deadline of its own, and only then makes the client. While points run, :func:`run_on_cluster`
counts the cluster's workers whenever nothing finishes: a cluster that has had none for the timeout
(its last worker left, and none came back) stops the sweep instead of leaving it waiting in silence.

Imported only when a sweep names ``--dask-scheduler`` (dask is an optional dependency).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from .workers import sigint_ignored

#: Seconds between two looks at the futures while no point finishes (how late a point is saved).
POLL_S = 0.05
#: Seconds between two counts of the cluster's workers while no point finishes.
WORKER_COUNT_S = 0.5


class ClusterError(RuntimeError):
    """The Dask scheduler did not answer as one, or its cluster has no worker left: one line."""


class ClusterStopped(ClusterError):
    """The cluster stopped running the points (their tasks cancelled, or no worker left)."""


class NoWorkers(ClusterStopped):
    """The cluster has had no worker for ``idle_s`` seconds while points were left."""

    def __init__(self, address: str, idle_s: float) -> None:
        super().__init__(
            f"--dask-scheduler {address}: the cluster has had no worker for {idle_s:g} s with points left "
            "(its last worker left); start workers, or raise --dask-timeout to wait longer"
        )
        self.address, self.idle_s = address, idle_s


#: Loggers through which Dask reports its own recoveries (a result rescheduled after its worker left, a
#: gather cut short when the client closes): the sweep says what became of its points in one line.
DASK_LOGGERS = ("distributed", "tornado", "asyncio")


@contextmanager
def quiet_dask_logs() -> Iterator[None]:
    """Dask's own log lines off while a sweep runs on the cluster and closes its client (levels restored)."""
    # A record propagates to its parents' handlers whatever their level: each logger below these names
    # that has a level of its own (Dask's configuration sets some) is quieted too.
    names = [n for n in list(logging.Logger.manager.loggerDict) if n.split(".")[0] in DASK_LOGGERS]
    loggers = [logging.getLogger(name) for name in sorted({*DASK_LOGGERS, *names})]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def close(client) -> None:
    """Close ``client`` without Dask's log lines about the gathers its closing cuts short."""
    with quiet_dask_logs(), sigint_ignored():
        client.close()


def _first_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return (text or type(e).__name__)[:120]


def _check_listening(address: str, timeout_s: float, where: str) -> None:
    """Raise :class:`ClusterError` when nothing accepts a TCP connection at ``address`` (Dask's own
    connect retries a refused port until its deadline, which would then read as a silent listener)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "tls") or parts.hostname is None or parts.port is None:
        return  # another transport (inproc, ucx, ws): Dask's handshake alone decides
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=timeout_s).close()
    except OSError as e:
        raise ClusterError(f"{where}: no scheduler answered within {timeout_s:g} s ({_first_line(e)})") from None


def check_handshake(address: str, timeout_s: float) -> None:
    """Raise :class:`ClusterError` unless a Dask scheduler at ``address`` completes Dask's handshake
    within ``timeout_s``. Runs in a thread with its own event loop (a notebook's may be running here)."""
    from distributed.comm import connect

    async def handshake() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=timeout_s), timeout_s)
        await comm.close()

    where = f"--dask-scheduler {address}"
    _check_listening(address, timeout_s, where)
    with ThreadPoolExecutor(1) as ex:
        try:
            ex.submit(asyncio.run, handshake()).result()
        except (asyncio.TimeoutError, TimeoutError):
            raise ClusterError(
                f"{where}: no Dask handshake within {timeout_s:g} s (something listens there but does not "
                "answer as a Dask scheduler, e.g. an HTTP port; the scheduler's port is usually 8786)"
            ) from None
        except MemoryError:  # the peer's first bytes read as the length of a Dask frame
            raise ClusterError(
                f"{where}: the port answered with something that is not a Dask handshake (a banner or another "
                "protocol; the scheduler's port is usually 8786)"
            ) from None
        except (OSError, ValueError) as e:
            raise ClusterError(f"{where}: no scheduler answered within {timeout_s:g} s ({_first_line(e)})") from None
        except Exception as e:  # a reply Dask cannot decode (msgpack, a bad frame): not a scheduler
            raise ClusterError(f"{where}: the port did not answer as a Dask scheduler ({_first_line(e)})") from None


def connect_dask(address: str, timeout_s: float = 10.0):
    """A Dask client, or :class:`ClusterError` saying why not, within about ``timeout_s`` (twice at most:
    the handshake, then the client's own connection)."""
    from dask.distributed import Client

    check_handshake(address, timeout_s)
    try:
        return Client(address, timeout=f"{timeout_s}s")
    except (OSError, TimeoutError, ValueError) as e:
        raise ClusterError(
            f"--dask-scheduler {address}: no scheduler answered within {timeout_s:g} s ({_first_line(e)})"
        ) from None


class _WorkerWatch:
    """Counts the cluster's workers (at most every ``WORKER_COUNT_S``) and raises :class:`NoWorkers`
    once there has been none for ``limit_s``."""

    def __init__(self, client, address: str, limit_s: float) -> None:
        self.client, self.address, self.limit_s = client, address, limit_s
        self.next_count = 0.0
        self.none_since: float | None = None

    def workers(self) -> int:
        try:
            return len(self.client.nthreads())
        except (OSError, TimeoutError):  # the scheduler itself is gone: no worker either
            return 0

    def check(self) -> None:
        now = time.monotonic()
        if now < self.next_count:
            return
        self.next_count = now + WORKER_COUNT_S
        if self.workers():
            self.none_since = None
            return
        self.none_since = now if self.none_since is None else self.none_since
        if now - self.none_since >= self.limit_s:
            raise NoWorkers(self.address, self.limit_s)


def run_on_cluster(
    client, address: str, calls: list[tuple[Any, tuple]], done: Callable[[Any, Any], None], idle_limit_s: float
) -> None:
    """Submit ``calls`` (key, (function, *args)) and call ``done(key, result)`` as each finishes.

    Ctrl-C, :class:`NoWorkers` after ``idle_limit_s`` without a worker, or a task the cluster cancelled
    cancels every task not yet finished (one running on a worker ends there and is dropped) before it
    propagates."""
    from dask.distributed import as_completed

    futs: dict = {}
    with quiet_dask_logs():
        try:
            for key, (fn, *args) in calls:
                futs[client.submit(fn, *args, pure=False)] = key
            # Results are gathered on the client's event loop, never here: a result held by a worker that
            # has left is computed again (Dask reschedules it), and waiting for it here would block the watch.
            ready = as_completed(futs, with_results=True)
            watch = _WorkerWatch(client, address, idle_limit_s)
            while not ready.is_empty():
                if not ready.has_ready():
                    watch.check()
                    time.sleep(POLL_S)
                    continue
                fut, result = next(ready)  # a point that failed raises its error here
                if fut.cancelled():
                    raise ClusterStopped(f"--dask-scheduler {address}: the cluster cancelled a point's task")
                done(futs[fut], result)
        except (KeyboardInterrupt, ClusterStopped):
            with sigint_ignored():
                client.cancel([f for f in futs if not f.done()])
            raise
