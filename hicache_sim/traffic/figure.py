"""The ``trace stats`` figure: rate over time, length distributions, reuse distances and the
block-level LRU hit rate against cache capacity."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..output.plots import _save


def stats_figure(arrays: dict, path: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 7.5))
    width, rate = arrays["rate_bin_s"], arrays["rate"]
    ax[0, 0].step(np.arange(len(rate)) * width, rate, where="post")
    ax[0, 0].set(
        xlabel="time since first request (s)", ylabel="requests / s", title=f"arrival rate ({width:.3g} s bins)"
    )

    for key, label in (("prompt", "prompt"), ("answer", "output")):
        v, n = arrays[key]  # each length once, with its count
        v, n = v[v > 0], n[v > 0]
        if len(v):
            bins = np.logspace(0, np.log10(max(2, v.max())), 40)
            ax[0, 1].hist(v, bins=bins, weights=n, histtype="step", label=label)
    ax[0, 1].set(xscale="log", xlabel="tokens", ylabel="requests", title="prompt and output lengths")
    ax[0, 1].legend()

    reuse, n = arrays["reuse_tokens"]  # each distance once (increasing), with its count
    if len(reuse):
        # The empirical CDF through every reuse, sorted: of a run of equal distances only its first and
        # last point are kept (the others lie on the vertical segment between them).
        last = np.cumsum(n)
        first = last - n + 1
        x = np.repeat(np.maximum(reuse, 1), np.where(n > 1, 2, 1))
        y = np.column_stack((first, last)).ravel()[np.column_stack((n > 1, np.ones_like(n, bool))).ravel()]
        ax[1, 0].plot(x, y / last[-1])
    ax[1, 0].set(xscale="log", xlabel="reuse distance (tokens)", ylabel="share of reuses", title="reuse distance CDF")

    ax[1, 1].step(arrays["lru_caps_tokens"], arrays["lru_rates"], where="post", label="block-level LRU")
    ax[1, 1].axhline(arrays["ideal"], color="black", linestyle=":", label=f"ideal {arrays['ideal']:.3f}")
    ax[1, 1].set(
        xscale="log",
        xlabel="cache capacity (tokens)",
        ylabel="token hit rate",
        title="hit rate vs capacity",
        ylim=(0, 1),
    )
    ax[1, 1].legend(loc="upper left")
    fig.suptitle(title)
    _save(fig, path)
