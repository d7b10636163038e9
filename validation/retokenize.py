"""Prompt lengths the server sees for bench_multiturn's ``--disable-random-sample`` prompts.

With ``--disable-random-sample`` bench_multiturn builds each prompt from ``request_length`` consecutive
vocabulary ids starting at a random offset (numpy, seeded by ``--seed``: per call, the input lengths,
the output lengths, then one offset per prompt), decodes them to text and sends the text; the server
tokenises it again, and the count differs from ``request_length``: decoded pieces merge or split
under the tokenizer's own rules. The first call draws the ``num_clients`` first prompts, the second the
``num_clients x (num_rounds - 1)`` sub-questions. This script prints the mean server-side length of
each, the numbers a validation case's ``request_length`` and ``sub_question_input_length`` take.

Needs the ``tokenizers`` package and the model's ``tokenizer.json`` (not vendored: it is not needed to
run the validation, only to re-derive the two numbers the case states)::

    python -m validation.retokenize TOKENIZER_JSON --request-length 2048 --num-clients 80 --num-rounds 10
"""

from __future__ import annotations

import argparse

import numpy as np


def prompts(vocab: int, length: int, count: int, decode) -> list[str]:
    """One bench_multiturn sampling call: ``count`` texts of ``length`` consecutive ids from random
    offsets, drawn from numpy's global generator in the benchmark's order (output length 1)."""
    lengths = np.random.randint(length, length + 1, size=count)
    np.random.randint(1, 2, size=count)
    offsets = np.random.randint(0, vocab, size=count)
    return [decode([int((offsets[i] + i + j) % vocab) for j in range(lengths[i])]) for i in range(count)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer_json")
    ap.add_argument("--request-length", type=int, default=2048)
    ap.add_argument("--num-clients", type=int, default=80)
    ap.add_argument("--num-rounds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=151643, help="tokenizer.vocab_size (Qwen2/Qwen3: 151643)")
    args = ap.parse_args(argv)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer_json)

    def decode(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=False)

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    np.random.seed(args.seed)
    first = prompts(args.vocab_size, args.request_length, args.num_clients, decode)
    subs = prompts(args.vocab_size, args.request_length, args.num_clients * max(args.num_rounds - 1, 1), decode)
    for name, texts in (("first prompts", first), ("sub-questions", subs)):
        n = np.array([count(t) for t in texts])
        print(f"{name}: mean {n.mean():.1f} tokens (min {n.min()}, max {n.max()}) for {args.request_length} ids")


if __name__ == "__main__":
    main()
