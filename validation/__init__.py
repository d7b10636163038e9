"""Validation against published runs: each case in ``cases/`` is a public measurement (SGLang issues and
PRs, the Mooncake paper) quoted with its source, the scenario that reproduces its setup, and what was
inferred or assumed. ``python -m validation`` runs them all and writes ``results/validation/``."""
