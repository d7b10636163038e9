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
        v = arrays[key]
        v = v[v > 0]
        if len(v):
            bins = np.logspace(0, np.log10(max(2, v.max())), 40)
            ax[0, 1].hist(v, bins=bins, histtype="step", label=label)
    ax[0, 1].set(xscale="log", xlabel="tokens", ylabel="requests", title="prompt and output lengths")
    ax[0, 1].legend()

    reuse = np.sort(arrays["reuse_tokens"])
    if len(reuse):
        ax[1, 0].plot(np.maximum(reuse, 1), np.arange(1, len(reuse) + 1) / len(reuse))
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
