"""``python -m validation.server_logs``: every vendored log through the log fit; writes
results/validation/server_logs.md and .json (same logs, same bytes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import HOLDOUT, SEED, LogCheck, as_json, check_log, log_dirs

OUT = Path(__file__).resolve().parents[2] / "results" / "validation"


def _pct(pair: list[float]) -> str:
    return f"{pair[0]:.1f} % / {pair[1]:.1f} %"


def render(checks: list[LogCheck]) -> str:
    """The markdown report: one section per log."""
    lines = [
        "# Public SGLang server logs through the log fit",
        "",
        "`python -m validation.server_logs` (issue 27 items 1 and 4): each log under `validation/server_logs/` "
        f"through `hicache-sim calibrate LOG --scenario S` (held out: {HOLDOUT:.0%} of each kind's intervals, "
        f"seed {SEED}). Errors are of one step's time, |simulated / measured - 1|, median / p90 over the "
        "held-out intervals, with the scenario's own knobs (preset) and with the fitted ones.",
        "",
        "| log | scheduler lines (decode / prefill) | intervals (fitted + held out) | pinned | "
        "held-out error, preset | held-out error, fitted | benchmark result |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        pinned = ", ".join(f"{k} {c.start[k]:.4g} -> {v:.4g}" for k, v in c.pinned.items()) or "nothing"
        ivs = ", ".join(f"{k} {c.n_fit.get(k, 0)} + {c.n_holdout.get(k, 0)}" for k, n in c.intervals.items() if n)
        pre = "; ".join(f"{k} {_pct(v)}" for k, v in c.preset_holdout_ape.items()) or "-"
        post = "; ".join(f"{k} {_pct(v)}" for k, v in c.holdout_ape.items()) or "-"
        bench = c.benchmark or "none published"
        lines.append(
            f"| [{c.name}]({c.url}) | {c.scheduler_lines['decode']} / {c.scheduler_lines['prefill']} | {ivs} | "
            f"{pinned} | {pre} | {post} | {bench} |"
        )
    for c in checks:
        lines += ["", f"## {c.name}", "", c.title, "", f"Source: {c.url}", "", "States:"]
        lines += [f"- {s}" for s in c.states]
        lines += ["", "Assumed:"] + [f"- {s}" for s in c.assumed]
        lines += ["", "Line pairs not used:"] + [f"- {n} x {why}" for why, n in c.skipped.items()]
        lines += ["", "Not pinned by this log:"] + [f"- `{k}`: {why}" for k, why in c.not_pinned.items()]
        lines += [
            "",
            "Held-out intervals (step time, ms):",
            "",
            "| line | kind | shape | measured | preset | fitted |",
            "|---|---|---|---|---|---|",
        ]
        for h in c.held_out:
            shape = " x ".join(f"{x:g}" for x in h.shape)
            lines.append(
                f"| {h.lineno} | {h.kind} | {shape} | {h.measured_ms:.2f} | {h.preset_ms:.2f} | {h.fitted_ms:.2f} |"
            )
        if c.decode_terms_ms:
            lines += ["", "The preset decode step at the median interval's shape, term by term (ms):", ""]
            lines += [f"- {k}: {v:.2f}" for k, v in c.decode_terms_ms.items()]
        if c.kv_slope:
            s = c.kv_slope
            lines += [
                "",
                f"Step time over KV tokens, batch {s['batch']:g}, {s['kv_min']:.0f} to {s['kv_max']:.0f} KV tokens "
                "(least squares over the decode intervals; us per 1k KV tokens, and ms at the mean KV):",
                "",
                "| | slope | at the mean |",
                "|---|---|---|",
            ]
            for name in ("measured", "preset", "fitted"):
                lines.append(f"| {name} | {s[f'{name}_us_per_1k']:.1f} | {s[f'{name}_ms_at_mean']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Check every log, write the two result files, print the summary table."""
    checks = [check_log(d) for d in log_dirs()]
    OUT.mkdir(parents=True, exist_ok=True)
    md = render(checks)
    (OUT / "server_logs.md").write_text(md)
    (OUT / "server_logs.json").write_text(json.dumps(as_json(checks), indent=1, sort_keys=True) + "\n")
    sys.stdout.write(md.split("\n## ", 1)[0])
    print(f"wrote {OUT / 'server_logs.md'} and .json")
    return 0


raise SystemExit(main())
