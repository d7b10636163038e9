"""The running decode batch, event-driven on a global decode-step counter.

Every running request takes part in every decode step (continuous batching), so its KV length and
output count follow from the step counter and the values it joined with. A request's next page
boundary and its last step are heap entries keyed by step number: a decode step costs O(requests
that cross a page boundary or finish), not O(batch). Sums for the step time (KV tokens read) and
for the scheduler's budget (remaining output) are kept incrementally.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from .requests import SimRequest


class DecodeBatch:
    """Members, step counter, page-boundary and finish heaps, incremental sums."""

    def __init__(self, page_size: int, clip_tokens: int) -> None:
        self.page = page_size
        self.clip = clip_tokens
        self.step = 0  # decode steps completed
        self.members: dict[SimRequest, None] = {}
        self._kv_base = 0  # sum of kv0 - join_step
        self._remain_base = 0  # sum of out_target - gen0 + join_step
        self._long: dict[SimRequest, None] = {}  # members that joined with more than ``clip`` tokens to go
        self._pages: list[tuple[int, int, SimRequest, int]] = []
        self._finish: list[tuple[int, int, SimRequest, int]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[SimRequest]:
        return iter(self.members)

    def __contains__(self, r: SimRequest) -> bool:
        return r in self.members

    # ------------------------------------------------------------------------------ members

    def join(self, r: SimRequest) -> None:
        """``r`` finished its prefill: it decodes from the next step on."""
        r.state = "decode"
        r.join_step = self.step
        r.kv0 = r.seq_tokens
        r.gen0 = r.generated
        r.epoch += 1
        self.members[r] = None
        self._kv_base += r.kv0 - r.join_step
        self._remain_base += r.out_target - r.gen0 + r.join_step
        if r.out_target - r.gen0 > self.clip:
            self._long[r] = None
        self._push(self._finish, r.join_step + r.out_target - r.gen0, r)
        assert r.st is not None, "a request decodes after its admission"
        held = len(r.st.pages) * self.page
        self._push(self._pages, r.join_step + 1 + max(0, held - r.kv0), r)

    def leave(self, r: SimRequest) -> None:
        """``r`` leaves (finished, retracted or rejected); its ``generated`` is brought up to date."""
        r.generated = self.generated(r)
        del self.members[r]
        self._kv_base -= r.kv0 - r.join_step
        self._remain_base -= r.out_target - r.gen0 + r.join_step
        self._long.pop(r, None)
        r.epoch += 1

    def generated(self, r: SimRequest) -> int:
        """Output tokens of a member so far."""
        return r.gen0 + self.step - r.join_step

    # ------------------------------------------------------------------------------- steps

    def due_pages(self) -> list[SimRequest]:
        """Members that need one more page for the next step (removed from the page heap)."""
        g = self.step + 1
        out = []
        heap = self._pages
        while heap and heap[0][0] <= g:
            _s, _q, r, ep = heapq.heappop(heap)
            if r.epoch == ep and r in self.members:
                out.append(r)
        return out

    def page_allocated(self, r: SimRequest) -> None:
        """``r`` got its page for the next step: its next boundary is a page of tokens later."""
        self._push(self._pages, self.step + 1 + self.page, r)

    def page_deferred(self, r: SimRequest) -> None:
        """``r`` did not get its page: ask again before the next step."""
        self._push(self._pages, self.step + 1, r)

    def quiet_steps(self) -> int:
        """How many decode steps may follow the one about to run with nothing to do between them: no
        member finishes after any of them and none needs a page before the next. Stale heap entries
        only make the count smaller (safe)."""
        f = self._finish[0][0] - self.step - 1 if self._finish else 1 << 62
        p = self._pages[0][0] - self.step - 2 if self._pages else 1 << 62
        return max(0, min(f, p))

    def kv_tokens_next(self) -> int:
        """KV tokens the next step attends to (every member's cache plus its current token)."""
        return self._kv_base + len(self.members) * (self.step + 1)

    def advance(self) -> list[SimRequest]:
        """One decode step ran: count it; return the members that produced their last token (they
        are removed from the batch)."""
        self.step += 1
        done = []
        heap = self._finish
        while heap and heap[0][0] <= self.step:
            _s, _q, r, ep = heapq.heappop(heap)
            if r.epoch == ep and r in self.members:
                self.leave(r)
                done.append(r)
        return done

    def skip(self, n: int) -> None:
        """``n`` decode steps ran in which no member finished (see :meth:`quiet_steps`)."""
        self.step += n

    # ------------------------------------------------------------------------- scheduling

    def reserved_tokens(self) -> int:
        """Output tokens the members may still write, each clipped at ``clip`` (O(long members))."""
        g = self.step
        total = self._remain_base - len(self.members) * g
        for r in self._long:
            rem = r.out_target - r.gen0 + r.join_step - g
            if rem > self.clip:
                total -= rem - self.clip
        return total

    def victim(self) -> SimRequest | None:
        """SGLang's retraction order: fewest output tokens first, then the longest prompt, then the
        last in batch order (SGLang sorts the batch by (output, -prompt) descending, stably, and pops
        the end; members are kept in the order they joined, as SGLang's batch appends them)."""
        best = None
        best_key = None
        for r in self.members:
            key = (self.generated(r), -r.req.input_tokens)
            if best_key is None or key <= best_key:
                best, best_key = r, key
        return best

    def progress(self) -> tuple[int, int]:
        """(output tokens generated, output tokens wanted) over the members."""
        return sum(self.generated(r) for r in self.members), sum(r.out_target for r in self.members)

    def _push(self, heap: list, step: int, r: SimRequest) -> None:
        self._seq += 1
        heapq.heappush(heap, (step, self._seq, r, r.epoch))
