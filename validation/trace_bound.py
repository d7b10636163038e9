"""What a token-granular prefix cache would hit on a block-hashed trace (an estimate, not simulated).

A trace's ``hash_ids`` name 512-token blocks: a request whose prefix diverges inside block ``k``
matches ``k`` whole blocks, yet a real cache also matches the tokens of block ``k`` before the
divergence. Those tokens are known in one frequent case: an earlier request R whose blocks ``0..k-1``
are this request's and whose last block is partial (a conversation's previous turn) shares its whole
prompt, so the match reaches R's input length. The estimate credits that, and nothing else."""

from __future__ import annotations

import json

from hicache_sim.scenario.load import resolve_builtin


def token_level_ratio(path: str, *, block_tokens: int) -> float:
    """Token-weighted hit rate of an unbounded cache that also matches an earlier partial last block."""
    seen: set[int] = set()
    partial_end: dict[int, int] = {}  # last whole block id -> longest input ending in a partial block after it
    hit = total = 0
    with open(resolve_builtin(path, "traces")) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            ids, n_in = r["hash_ids"], r["input_length"]
            k = 0
            while k < len(ids) and ids[k] in seen:
                k += 1
            got = n_in if k == len(ids) else k * block_tokens
            if 0 < k < len(ids):
                longer = partial_end.get(ids[k - 1], 0)
                if longer <= n_in:
                    got = max(got, longer)
            hit += got
            total += n_in
            seen.update(ids)
            if len(ids) >= 2 and n_in % block_tokens:
                partial_end[ids[-2]] = max(partial_end.get(ids[-2], 0), n_in)
    return hit / total if total else 0.0
