"""Chain hashes per block of prompt tokens, numbered as Mooncake's traces number them.

Block ``i`` of a prompt (tokens ``[i*B, (i+1)*B)``, the last one possibly short) gets the hash of the
previous block's hash and its own tokens, so two prompts share block ``i``'s hash exactly when they
share every token up to the end of block ``i``. Hashes are then renumbered 0, 1, 2, ... in order of
first appearance (the ids Mooncake publishes), which keeps the file small and the numbering
independent of the hash function.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence


def chain_hashes(tokens: Sequence[int], block_size: int) -> list[bytes]:
    """One 16-byte digest per block: blake2b over the previous digest and the block's token ids."""
    out: list[bytes] = []
    prev = b""
    for start in range(0, len(tokens), block_size):
        block = array("q", tokens[start : start + block_size])
        prev = hashlib.blake2b(prev + block.tobytes(), digest_size=16).digest()
        out.append(prev)
    return out


class BlockIds:
    """Digest -> dense id, numbered in order of first appearance."""

    def __init__(self) -> None:
        self._ids: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self, digests: Sequence[bytes]) -> list[int]:
        """The ids of ``digests``, numbering new ones as they come."""
        table = self._ids
        return [table.setdefault(d, len(table)) for d in digests]
