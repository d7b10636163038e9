"""Tokenisers for ``trace convert``: a local ``tokenizer.json`` (the ``tokenizers`` package), a local
model folder (``transformers``, when installed), or a built-in byte-level fallback whose token
counts are approximate. Nothing is ever downloaded: a name that is not a local path is refused."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..workloads.errors import WorkloadError

BYTES_PER_TOKEN = 4  # the fallback's rule: about 4 bytes of English per BPE token


@dataclass(frozen=True)
class Tokenizer:
    """``encode(text) -> token ids`` without special tokens added, and a name saying what it is."""

    name: str
    encode: Callable[[str], list[int]]
    exact: bool


def byte_fallback(bytes_per_token: int = BYTES_PER_TOKEN) -> Tokenizer:
    """Approximate tokens: the UTF-8 bytes in groups of ``bytes_per_token`` (the last group may be
    short), each group one token id. Equal text prefixes give equal token prefixes (up to the last
    partial group), so prefix reuse survives; lengths are only about those of a real BPE."""

    def encode(text: str) -> list[int]:
        data = text.encode("utf-8")
        return [
            int.from_bytes(data[i : i + bytes_per_token], "little") + (len(data[i : i + bytes_per_token]) << 40)
            for i in range(0, len(data), bytes_per_token)
        ]

    return Tokenizer(f"byte-level fallback ({bytes_per_token} UTF-8 bytes per token, approximate)", encode, False)


def _from_tokenizer_json(path: Path) -> Tokenizer:
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise WorkloadError(
            str(path),
            None,
            "reading a tokenizer.json needs the 'tokenizers' package: pip install 'hicache-sim[tokenize]'",
        ) from None
    try:
        tok = HFTokenizer.from_file(str(path))
    except Exception as e:  # the package's own parse errors have no common base class
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise WorkloadError(
            str(path), None, f"not a tokenizer.json the 'tokenizers' package can read ({first})"
        ) from None

    def encode(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    return Tokenizer(str(path), encode, True)


def _from_model_folder(path: Path) -> Tokenizer:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise WorkloadError(
            str(path),
            None,
            "folder has no tokenizer.json; reading other tokenizer files needs the 'transformers' package",
        ) from None
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # transformers raises OSError, ValueError, KeyError ... for a bad folder
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise WorkloadError(
            str(path), None, f"transformers cannot load a tokenizer from this folder ({first})"
        ) from None

    def encode(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    return Tokenizer(str(path), encode, True)


def load_tokenizer(spec: str | Path | None) -> Tokenizer:
    """The tokenizer ``--tokenizer`` names: a ``tokenizer.json`` file, a folder holding one, or a model
    folder ``transformers`` reads offline; None: the byte-level fallback."""
    if spec is None:
        return byte_fallback()
    path = Path(spec)
    if path.is_file():
        return _from_tokenizer_json(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return _from_tokenizer_json(path / "tokenizer.json")
        return _from_model_folder(path)
    raise WorkloadError(
        str(spec),
        None,
        "--tokenizer: no such file or folder (give a local tokenizer.json or model folder; nothing is downloaded)",
    )
