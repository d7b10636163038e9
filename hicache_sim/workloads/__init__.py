"""Workloads: request records, trace loaders and synthetic generators."""

from .records import Request, expand_blocks

__all__ = ["Request", "expand_blocks"]
