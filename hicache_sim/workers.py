"""Local worker processes that Ctrl-C does not reach: only the parent acts on SIGINT, cancelling what is
queued and terminating the workers, so an interrupted sweep (or advise's timed pair) stops at once and
leaves no process behind. Below ``sweep`` and ``output``: both use it, neither imports the other for it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C reaches the whole foreground process group, and only the parent acts
    on it (it terminates the workers); SIGINT was held back from fork until now (see :class:`_Pool`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's terminate() ends a worker at once
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextmanager
def sigint_held() -> Iterator[None]:
    """Hold SIGINT back in this thread while the body runs (a worker being started, a point being
    saved); one that arrives meanwhile is raised as KeyboardInterrupt right after it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore further Ctrl-C while stopping (a second one must not interrupt the clean-up)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class _Pool(ProcessPoolExecutor):
    """A process pool whose workers ignore SIGINT: each is started with SIGINT blocked (inherited over
    fork) and its initializer ignores it before unblocking, so Ctrl-C never lands in a worker."""

    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers=max_workers, initializer=_ignore_sigint)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with sigint_held():  # workers start in the first submit(s)
            return super().submit(fn, *args, **kwargs)

    def stop(self) -> None:
        """Cancel every queued call, terminate the workers (a running point is dropped) and wait for
        them and the pool's thread to end; SIGINT is ignored meanwhile."""
        with sigint_ignored():
            procs = list((getattr(self, "_processes", None) or {}).values())
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            for proc in procs:
                proc.join(5.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            self.shutdown(wait=True, cancel_futures=True)  # the manager thread sees the dead workers and ends


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """``workers`` local processes that ignore Ctrl-C. When the body raises (KeyboardInterrupt or an
    error), queued calls are cancelled and the workers terminated before it propagates: nothing keeps
    running and no process is left; a normal exit waits for the calls as usual."""
    ex = _Pool(workers)
    try:
        yield ex
    except BaseException:
        ex.stop()
        raise
    ex.shutdown(wait=True)
