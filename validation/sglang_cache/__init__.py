"""SGLang 0.5.23's own cache code driven over the Mooncake traces: the conformance targets.

``python -m validation.sglang_cache install`` makes the driver's virtual env, ``run`` drives
SGLang row by row and writes ``targets.json``; docs/reference/sglang-conformance.md says how.
"""
