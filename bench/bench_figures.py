"""Benchmark: where the run figures' CPU goes (issue 12 target 1: figures on by default, "rendered as
cheaply as possible (measure)"). Each measurement is a fresh interpreter timed by ``time.process_time``
inside it; medians (min-max) over ``--repeat`` processes.

- imports: ``matplotlib.pyplot`` against what ``hicache_sim/output/plots.py`` imports (``Figure`` and
  ``FigureCanvasAgg``, no pyplot), and within that the font list (``font_manager._load_fontmanager``
  reading matplotlib's JSON font cache, timed again after the import);
- the default run's two figures (``residency.png``, ``hit_rate.png``, drawn from the committed
  ``results/default`` tables as ``hicache-sim run`` draws them): building the artists, the first draw
  (which loads the font file), the second figure's draw, PNG encoding;
- variants that would change the PNG bytes, drawn and encoded again in the same process: dpi 72
  instead of 110, zlib level 1 instead of Pillow's 6, a fixed legend place instead of ``"best"``, no
  grid; for each the CPU it would save per figure.

    python bench/bench_figures.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "results" / "default"


def _child_imports(which: str) -> dict[str, float]:
    t0 = time.process_time()
    import numpy  # noqa: F401  (a run has it already: not part of the figures' cost)

    t1 = time.process_time()
    if which == "pyplot":
        import matplotlib.pyplot  # noqa: F401
    else:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    t2 = time.process_time()
    import matplotlib.font_manager as fm

    t3 = time.process_time()
    fm._load_fontmanager(try_read_cache=True)
    t4 = time.process_time()
    return {"numpy": t1 - t0, which: t2 - t1, "font list (again)": t4 - t3}


def _tables():
    import numpy as np
    import pyarrow.parquet as pq

    from hicache_sim.output.columns import Columns

    def read(name: str) -> Columns:
        t = pq.read_table(DEFAULT / name)
        return Columns({c: np.asarray(t.column(c).to_numpy(zero_copy_only=False)) for c in t.column_names})

    return read("requests.parquet"), read("timeseries.parquet")


def _child_figures(tmp: Path) -> dict[str, float]:
    """Phases of the two default figures, then the cost of each variant (drawn and encoded again)."""
    req, ts = _tables()
    t0 = time.process_time()
    from hicache_sim.output import plots  # imports Figure and FigureCanvasAgg

    t1 = time.process_time()
    figs = {}
    real_save = plots._save
    plots._save = lambda fig, path, **kw: figs.__setitem__(path.name, fig)  # capture, do not draw
    try:
        plots.residency_figure(ts, tmp / "residency.png", "default: pool residency (instant)")
        plots.hit_rate_figure(req, tmp / "hit_rate.png", "default: hit rate per tier")
    finally:
        plots._save = real_save
    t2 = time.process_time()
    out: dict[str, float] = {"import plots (Figure + Agg)": t1 - t0, "build artists (2 figures)": t2 - t1}
    import io

    import numpy as np
    from PIL import Image

    same = True
    for i, (name, fig) in enumerate(figs.items()):
        a = time.process_time()
        real_save(fig, tmp / name)  # as hicache-sim run saves it: draw, then encode
        b = time.process_time()
        fig.set_dpi(110)
        fig.canvas.draw()  # a second draw: fonts and text layouts cached
        c = time.process_time()
        Image.fromarray(np.asarray(fig.canvas.buffer_rgba())).save(io.BytesIO(), format="png")
        d = time.process_time()
        what = "first figure (loads the font)" if i == 0 else "second figure"
        out[f"savefig, {what}"] = b - a
        out[f"PNG encoding apart, {what}"] = d - c
        out[f"draw again, {what}"] = c - b
        same = same and (tmp / name).read_bytes() == (DEFAULT / name).read_bytes()
    out["bytes equal results/default"] = float(same)

    def cost(fig, **kw) -> float:
        a = time.process_time()
        fig.savefig(tmp / "v.png", **{"dpi": 110, "metadata": {"Software": None}, **kw})
        return time.process_time() - a

    fig = figs["hit_rate.png"]
    fig.set_dpi(100)  # as made
    base = statistics.median(cost(fig) for _ in range(3))
    out["savefig as run (hit_rate)"] = base
    out["dpi 72: saves"] = base - statistics.median(cost(fig, dpi=72) for _ in range(3))
    out["zlib level 1: saves"] = base - statistics.median(cost(fig, pil_kwargs={"compress_level": 1}) for _ in range(3))
    ax = fig.axes[0]
    ax.legend(loc="upper right", fontsize=8)
    out["fixed legend place: saves"] = base - statistics.median(cost(fig) for _ in range(3))
    ax.grid(False)
    out["and no grid: saves"] = base - statistics.median(cost(fig) for _ in range(3))
    return out


def _child(kind: str) -> None:
    import tempfile

    sys.path.insert(0, str(ROOT))
    if kind == "figures":
        with tempfile.TemporaryDirectory() as d:
            res = _child_figures(Path(d))
    else:
        res = _child_imports(kind)
    print(json.dumps(res))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    rows: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for kind in ("pyplot", "figure+agg", "figures"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", kind], cwd=ROOT, check=True, capture_output=True, text=True
            )
            for k, v in json.loads(out.stdout).items():
                rows.setdefault(f"{kind}: {k}" if kind != "figures" else k, []).append(v)
    print("| measurement | CPU s, median (min-max) |\n|---|---|")
    for k, v in rows.items():
        if k == "bytes equal results/default":
            print(f"| PNG bytes equal results/default | {'yes' if min(v) == 1 else 'no'} |")
            continue
        print(f"| {k} | {statistics.median(v):.4f} ({min(v):.4f}-{max(v):.4f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
