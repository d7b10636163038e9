"""How tests/data/tiny-bpe/tokenizer.json was made: a byte-level BPE of 400 tokens trained with the
``tokenizers`` package on the English text below (any text encodes: byte-level means no unknown
token). Rerun with ``python tests/data/tiny-bpe/make_tokenizer.py`` (tokenizers 0.23.3 made the
committed file; training is deterministic for a given version)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

TEXT = """
The cache keeps the key and value tensors of every prompt token so that a later request sharing the
prefix skips its prefill. A host pool in CPU memory holds pages evicted from the GPU; a storage tier
behind it holds more. Requests arrive over time, each with a prompt and an answer. A conversation
sends its whole history again with every turn, so each turn shares the previous turn as a prefix.
You are a helpful assistant. Answer briefly and cite the page you read. What is the capital of
France? Paris is the capital of France. How large is the host memory of this server? It has two
terabytes of memory and eight GPUs connected over PCIe.
"""


def main() -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TEXT] * 4, trainer)
    tok.save(str(Path(__file__).with_name("tokenizer.json")))


if __name__ == "__main__":
    main()
