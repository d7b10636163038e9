"""The frozen request record every workload yields, and how token counts map onto pages."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request as the simulator sees it.

    ``page_keys`` are the prompt's pages: equal keys at equal positions mean equal KV (prefix-chained
    ids, as Mooncake ``hash_ids``). ``input_tokens`` may be less than ``len(page_keys) * page_size``:
    the last page then holds ``input_tokens - (len(page_keys) - 1) * page_size`` tokens.
    ``session``/``turn`` tie multi-turn requests together (a closed-loop client waits for turn t
    before sending t + 1). ``finish_keys`` are the whole pages of prompt + answer (minus the last
    token) that SGLang caches when the request finishes, where the answer's content is known
    (synthetic conversations); empty when it is not (traces), and then only the prompt is cached.
    """

    rid: str
    arrival_s: float
    input_tokens: int
    output_tokens: int
    page_keys: tuple[int, ...]
    priority: int = 0
    session: str | None = None
    turn: int = 0
    finish_keys: tuple[int, ...] = ()

    def page_tokens(self, page_size: int, k: int) -> int:
        """Tokens in the first ``k`` pages (the last page may be partial)."""
        return page_tokens(self.input_tokens, len(self.page_keys), page_size, k)

    def match_limit(self, page_size: int, reserve_last_token: bool) -> int:
        """Pages the scheduler may match: all, or (SGLang) never the page holding the last token."""
        n = len(self.page_keys)
        if not reserve_last_token:
            return n
        return min(n, max(0, (self.input_tokens - 1) // page_size))


def page_tokens(input_tokens: int, n_pages: int, page_size: int, k: int) -> int:
    """Tokens in the first ``k`` of a prompt's ``n_pages`` pages (``Request.page_tokens`` from the counts
    alone: a runner keeps them, not the request)."""
    if k <= 0:
        return 0
    return min(k * page_size, input_tokens) if k >= n_pages else k * page_size


def expand_blocks(
    hash_ids: list[int], input_tokens: int, block_size: int, page_size: int, partial_pages: str
) -> tuple[int, ...]:
    """Page keys for a request given as ``block_size``-token blocks (Mooncake, Bailian).

    A block becomes ``block_size // page_size`` pages keyed ``id * per_block + j`` (distinct ints,
    still prefix-chained). The last block holds ``input_tokens - block_size * (n - 1)`` tokens: with
    ``keep`` its partial page is a page, with ``drop`` only whole pages remain (SGLang never caches an
    unaligned tail). ``page_size`` must divide ``block_size``.
    """
    per_block = block_size // page_size
    if not hash_ids:
        return ()
    tail_tokens = input_tokens - block_size * (len(hash_ids) - 1)
    tail_tokens = max(0, min(block_size, tail_tokens))
    if partial_pages == "keep":
        tail_pages = -(-tail_tokens // page_size)
    else:
        tail_pages = tail_tokens // page_size
    if per_block == 1:
        return tuple(hash_ids if tail_pages else hash_ids[:-1])
    keys = [h * per_block + j for h in hash_ids[:-1] for j in range(per_block)]
    last = hash_ids[-1]
    keys.extend(last * per_block + j for j in range(tail_pages))
    return tuple(keys)
