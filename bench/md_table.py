"""One markdown table for every benchmark report: a header from the column names, each cell formatted."""

from __future__ import annotations


def markdown_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """``columns``: (key, format string) pairs, in order; each row a dict holding every key."""
    head = "| " + " | ".join(c for c, _ in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(fmt.format(r[c]) for c, fmt in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])
