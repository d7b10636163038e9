"""hicache-sim: a discrete-event simulator of SGLang's hierarchical KV cache (HiCache)."""

__version__ = "0.1.0"
