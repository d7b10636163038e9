"""Every command README.md and results/README.md quote works on a fresh clone, against the committed folders.

The commands are read from the READMEs themselves (shell code blocks, and inline code in prose and
tables), so a new command is covered without editing this file, and a command that goes stale fails:

- A runnable ``hicache-sim`` command runs in-process in a sandbox folder that links to the repository
  and holds a copy of ``results/`` (the committed folders are never written). A file it reads that an
  earlier quoted command writes (``--out s.yaml``) is made by running that command first; a file that
  stands for the user's own (a server log, a benchmark result) comes from ``FIXTURES``; a scenario the
  README describes in a comment (``run my.yaml  # workload: {...}``) is that mapping. A few long runs are
  shortened (``SHORTENED``): what is checked is that the command parses, reads the committed folder and
  exits 0 with the files it says it wrote, not its numbers.
- A ``sweep`` or ``advise`` into a committed folder must resume it: every point reused, and the folder
  byte for byte as committed, nothing added. A point's identity includes a digest of the package's code
  (a development checkout recomputes after any edit, by design); the resume runs with that digest pinned
  to the one the folder's points record, so what is checked is the rest of the identity: today's schema,
  resolution and inputs give exactly the folder that was committed. A folder of an older schema fails.
- A run into a committed folder gives the files that folder has; run as quoted, the same summary.json
  bytes (results/README.md: "Same command, same bytes in summary.json").
- Where a ``$`` block shows what the command prints and the command ran as quoted, those lines are printed.
- A synopsis (``SCENARIO``, ``[--opt]``, ``a|b``, ``...``) is checked for its verb and options.
- ``python`` entry points take minutes here (``python -m validation`` 175 s, ``compare.py`` 100 s, the
  benchmarks longer), so their own argparse parses the quoted arguments and their imports load; nothing
  is computed. Other programs (pip, pytest, dask, curl) are not this project's.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SCENARIO
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
READMES = ("README.md", "results/README.md")
#: First words of a quoted line that make it a command (an environment assignment may precede them).
PROGRAMS = ("hicache-sim", "python", "pip", "dask", "curl")
#: Commands that are not this project's to run, by their first words.
NOT_OURS = {
    "pip": "installs packages (CI's own first step)",
    "dask": "starts a Dask cluster's processes",
    "curl": "reads a live SGLang server",
    "python -m pytest": "the test suite itself (CI runs it)",
    "python -m sglang.launch_server": "SGLang's server",
}
#: Runs shortened here: the trace is cut, all else as quoted. The quoted run takes (2-core machine, wall):
SHORTENED = {
    # 5.4 s: the whole conversation trace, timed
    "hicache-sim run scenarios/mooncake_conversation.yaml --out results/mooncake_conversation": (
        "--set",
        "workload.trace.limit=600",
    ),
    # 4.3 s: the whole trace with a store, timed
    "hicache-sim run scenarios/buffer_only_storage.yaml --out results/buffer_only_storage": (
        "--set",
        "workload.trace.limit=500",
    ),
    # minutes: the whole trace at its own rate on one GPU, saturated (the README's point)
    "hicache-sim run s.yaml": ("--set", "workload.trace.limit=300"),
}
#: Verbs that resume the folder they write: a committed one must come back unchanged.
RESUMING = ("sweep", "advise")
#: Where a verb writes without --out (cli/run.py, cli/sweep.py, cli/advise.py), from the scenario's name.
DEFAULT_OUT = {"run": "{}", "sweep": "{}-sweep", "advise": "{}-advise"}
#: Files hicache-sim writes that git ignores (library versions of the machine that ran it).
IGNORED = ("environment.json",)
#: A relative path the command reads or writes: an extension, no '=' or ':'.
FILE_TOKEN = re.compile(r"^[\w.-]+(?:/[\w.-]+)*\.[A-Za-z]\w*$")
#: Placeholders of a synopsis, in a word: an upper-case name (N, SCENARIO, tcp://SCHEDULER_HOST:8786),
#: an optional part, alternatives, an ellipsis.
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$|(?<![A-Za-z])[A-Z][A-Z_]+(?![a-z])|[\[\]|]|\.\.\.")


@dataclass(frozen=True)
class Quoted:
    """One command as a README quotes it."""

    where: str  # README.md:123
    text: str  # continuation lines joined, the trailing comment removed
    comment: str = ""  # what follows '#' on its line
    shown: tuple[str, ...] | None = None  # what a `$` block shows it printing

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)


def is_synopsis(words: list[str]) -> bool:
    """A line with placeholders: it shows a verb's form, it cannot be run."""
    return any(PLACEHOLDER.search(w) for w in words)


def _program(words: list[str]) -> list[str]:
    """The words after any leading environment assignment (HYPOTHESIS_PROFILE=deep python ...)."""
    while words and re.match(r"^[A-Z_]+=", words[0]):
        words = words[1:]
    return words


def _is_command(line: str) -> bool:
    words = _program(line.split())
    return bool(words) and words[0] in PROGRAMS


def _split_comment(line: str) -> tuple[str, str]:
    m = re.search(r"\s#\s*(.*)$", line)
    return (line[: m.start()].strip(), m.group(1)) if m else (line.strip(), "")


def _joined(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Backslash continuations joined, each line kept with the number of its first line."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for n, line in lines:
        if pending is not None:
            n, line = pending[0], pending[1] + " " + line.strip()
            pending = None
        if line.rstrip().endswith("\\"):
            pending = (n, line.rstrip()[:-1].rstrip())
            continue
        out.append((n, line))
    if pending is not None:
        out.append(pending)
    return out


def _block_commands(name: str, lines: list[tuple[int, str]]) -> list[Quoted]:
    """Commands of one shell block: its `$` lines (each followed by what it prints), else every line
    that starts with a program."""
    lines = _joined(lines)
    if not any(line.startswith("$ ") for _, line in lines):
        return [Quoted(f"{name}:{n}", *_split_comment(line)) for n, line in lines if _is_command(line)]
    out: list[Quoted] = []
    for i, (n, line) in enumerate(lines):
        if not line.startswith("$ "):
            continue
        shown = []
        for _, after in lines[i + 1 :]:
            if after.startswith("$ "):
                break
            shown.append(after.rstrip())
        text, comment = _split_comment(line[2:])
        out.append(Quoted(f"{name}:{n}", text, comment, tuple(shown)))
    return out


def quoted_commands(name: str, text: str) -> list[Quoted]:
    """Every command ``text`` (a README) quotes, in order: shell code blocks and inline code spans."""
    found: list[Quoted] = []
    block: list[tuple[int, str]] | None = None
    shell = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if block is None:
                block, shell = [], line[3:].strip() in ("", "sh", "bash", "shell", "console")
            else:
                found += _block_commands(name, block) if shell else []
                block = None
            continue
        if block is not None:
            block.append((n, line))
            continue
        for span in re.findall(r"`([^`]+)`", line):
            span = span.replace("\\|", "|")  # a table cell escapes its pipes
            if _is_command(span):
                found.append(Quoted(f"{name}:{n}", *_split_comment(span)))
    out = []
    for q in found:  # `a && b` is two commands
        parts = q.text.split(" && ")
        out += [Quoted(q.where, p.strip(), q.comment, q.shown if p is parts[-1] else None) for p in parts]
    return out


def all_quoted() -> list[Quoted]:
    """The commands of both READMEs, each text once (where it is first quoted), in reading order."""
    seen: dict[str, Quoted] = {}
    for name in READMES:
        for q in quoted_commands(name, (ROOT / name).read_text(encoding="utf-8")):
            seen.setdefault(q.text, q)
    return list(seen.values())


QUOTED = all_quoted()


# ------------------------------------------------------------------------------------ fixtures


def _tiny(box: Path, name: str) -> None:
    (box / name).write_text(yaml.safe_dump({**TINY_SCENARIO, "mode": "timed"}), encoding="utf-8")


def _server_log(box: Path) -> None:
    """A server log the simulator wrote for known knobs (tests/test_calibrate_log.py), of deploy.yaml."""
    from test_calibrate_log import TRUE, simulated_log

    scenario = {**TINY_SCENARIO, "mode": "timed"}
    (box / "server.log").write_text(simulated_log(TRUE, scenario=scenario), encoding="utf-8")
    _tiny(box, "deploy.yaml")


def _bench_result(scenario_name: str) -> Callable[[Path], None]:
    """bench_serving's printed result block of the simulated run (tests/test_calibrate_bench.py), and the
    scenario of that benchmark."""

    def make(box: Path) -> None:
        from test_calibrate_bench import SERVING_SCENARIO, TRUE, serving_block, simulated

        from hicache_sim.calibration.benchresult import SERVING

        (box / "bench.txt").write_text(serving_block(simulated(SERVING_SCENARIO, SERVING, TRUE).figures))
        (box / scenario_name).write_text(yaml.safe_dump(SERVING_SCENARIO), encoding="utf-8")

    return make


def _metrics_of_run(folder: str) -> Callable[[Path], None]:
    """A /metrics snapshot with the run's own figures (tests/test_drift.py)."""

    def make(box: Path) -> None:
        from hicache_sim.sglang.metrics import SimFigures, expose

        (box / "metrics.txt").write_text(expose(SimFigures.from_run_dir(box / folder)), encoding="utf-8")

    return make


def _metrics_of_scenario(box: Path) -> None:
    from hicache_sim.runner import simulate
    from hicache_sim.scenario import build_scenario
    from hicache_sim.sglang.metrics import SimFigures, expose

    _tiny(box, "deploy.yaml")
    out = simulate(build_scenario({**TINY_SCENARIO, "mode": "timed"}, "deploy"))
    (box / "metrics.txt").write_text(expose(SimFigures.from_output("deploy", out)), encoding="utf-8")


#: Inputs that stand for the user's own files, per quoted command: made as the test of that verb makes them.
FIXTURES: dict[str, Callable[[Path], None]] = {
    "hicache-sim calibrate server.log --scenario deploy.yaml --out calibration.yaml": _server_log,
    "hicache-sim drift metrics.txt --run results/default": _metrics_of_run("results/default"),
    "hicache-sim calibrate bench.txt --scenario deploy.yaml --check --out check.yaml": _bench_result("deploy.yaml"),
    "hicache-sim calibrate bench.txt --scenario deploy.yaml --out calibration.yaml": _bench_result("deploy.yaml"),
    "hicache-sim calibrate bench.txt --scenario bench.yaml --check --out check.yaml": _bench_result("bench.yaml"),
    "hicache-sim drift metrics.txt --scenario deploy.yaml": _metrics_of_scenario,
}


# ------------------------------------------------------------------------------------ the sandbox


def sandbox(tmp: Path) -> Path:
    """A folder that looks like the repository: a copy of results/, links to everything else."""
    box = tmp / "clone"
    box.mkdir()
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name == "results":
            continue
        (box / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    shutil.copytree(ROOT / "results", box / "results", symlinks=True)
    return box


def digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) -> digest of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _verb(words: list[str]):
    """(click command, the words naming it) of a ``hicache-sim`` command line."""
    import typer

    from hicache_sim.cli import app

    cmd, path = typer.main.get_command(app), []
    for w in words[1:]:
        sub = getattr(cmd, "commands", {}).get(w)
        if sub is None:
            break
        cmd, path = sub, [*path, w]
    return cmd, path


def _options(cmd) -> set[str]:
    return {"--help"} | {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


def _own_words(words: list[str]) -> list[str]:
    """The words up to a bare ``--`` (what follows belongs to the SGLang command)."""
    return words[: words.index("--")] if "--" in words else words


def check_synopsis(q: Quoted) -> None:
    """The verb exists and takes every option the line names."""
    words = q.words
    cmd, path = _verb(words)
    if len(words) > 1 and not path and not words[1].startswith("-"):
        raise AssertionError(f"{q.where}: `{q.text}`: hicache-sim has no verb {words[1]!r}")
    unknown = []
    for w in _own_words(words)[1 + len(path) :]:
        opt = w.strip("[]|").split("=", 1)[0]
        if opt.startswith("--") and opt not in _options(cmd):
            unknown.append(opt)
    assert not unknown, f"{q.where}: `{q.text}`: {' '.join(path)} takes no {', '.join(unknown)}"


def _option(words: list[str], name: str) -> str | None:
    own = _own_words(words)
    return own[own.index(name) + 1] if name in own[:-1] else None


def _positional(words: list[str], cmd, skip: int) -> list[str]:
    """The positional words after the verb (option values skipped)."""
    flags = {o for p in cmd.params if getattr(p, "is_flag", False) for o in p.opts}
    out, own, i = [], _own_words(words), skip
    while i < len(own):
        if own[i].startswith("-"):
            i += 1 if own[i] in flags or "=" in own[i] else 2
            continue
        out.append(own[i])
        i += 1
    return out


def target_folder(words: list[str], box: Path) -> Path | None:
    """The folder a run, sweep or advise writes (its --out, else its default from the scenario's name)."""
    cmd, path = _verb(words)
    if not path or path[0] not in DEFAULT_OUT:
        return None
    out = _option(words, "--out")
    if out is not None:
        return Path(out)
    from hicache_sim.scenario import build_scenario, load_scenario_data

    args = _positional(words, cmd, 1 + len(path))
    source = args[0] if args else "builtin:default"
    data = load_scenario_data(source if source.startswith("builtin:") else box / source)
    name = build_scenario({k: v for k, v in data.items() if k != "sweep"}, source).name
    return Path("results") / DEFAULT_OUT[path[0]].format(name)


def _inputs(q: Quoted) -> list[str]:
    """Relative paths the command reads: its file-like words (not its --out), and the string values of a
    scenario its comment describes."""
    words = _own_words(q.words)
    out = _option(words, "--out")
    names = [w for w in words[1:] if FILE_TOKEN.match(w) and w != out]
    described = _described(q)
    if described is not None:
        stack: list = [described]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                stack += list(v.values())
            elif isinstance(v, str) and FILE_TOKEN.match(v):
                names.append(v)
    return names


def _described(q: Quoted) -> dict | None:
    """The mapping the command's comment gives (``# workload: {kind: trace, ...}``), if it is one."""
    if not q.comment:
        return None
    try:
        data = yaml.safe_load(q.comment)
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def provide_inputs(q: Quoted, box: Path, monkeypatch, made: set[str]) -> None:
    """Make every file ``q`` reads that the sandbox lacks: its fixture, the earlier quoted command that
    writes it (run first), or the scenario its comment describes; otherwise fail naming the file."""
    if q.text in FIXTURES and q.text not in made:
        FIXTURES[q.text](box)
        made.add(q.text)
    for name in _inputs(q):
        if (box / name).exists():
            continue
        before = QUOTED[: QUOTED.index(q)] if q in QUOTED else QUOTED
        maker = next((p for p in reversed(before) if _option(p.words, "--out") == name), None)
        if maker is not None:
            provide_inputs(maker, box, monkeypatch, made)
            r = invoke_in(box, monkeypatch, maker.words[1:] + list(SHORTENED.get(maker.text, ())))
            assert r.exit_code == 0, f"{maker.where}: `{maker.text}` (it writes {name}) exited {r.exit_code}"
            continue
        described = _described(q)
        if described is not None and name == next((w for w in q.words[1:] if w.endswith(".yaml")), None):
            (box / name).write_text(yaml.safe_dump(described), encoding="utf-8")  # what it reads comes next
            continue
        raise AssertionError(
            f"{q.where}: `{q.text}` reads {name}, which neither the repository, an earlier quoted command "
            "(--out) nor FIXTURES in tests/test_readme_commands.py provides"
        )


def invoke_in(box: Path, monkeypatch, args: list[str]):
    from hicache_sim.cli import app

    monkeypatch.chdir(box)
    return CliRunner().invoke(app, args)


def recorded_code(folder: Path) -> str | None:
    """The code digest every point under ``folder`` records (None: no points); several fail."""
    codes = {json.loads(p.read_text(encoding="utf-8"))["identity"]["code"] for p in folder.rglob("points/*.json")}
    assert len(codes) <= 1, f"{folder}: points of {len(codes)} code versions (not remade from an empty folder)"
    return codes.pop() if codes else None


def wrote(output: str) -> list[str]:
    """The paths the command says it wrote (``wrote a, b (sweeps in c, d)``, ``wrote t.jsonl: 6 requests``)."""
    paths = []
    for line in output.splitlines():
        if line.startswith("wrote "):
            listed = re.split(r" \(|: ", line[6:], maxsplit=1)[0]
            paths += [p.strip() for p in re.split(r", | and ", listed)]
    return paths


def check_runs(q: Quoted, box: Path, monkeypatch) -> None:
    """Run ``q`` in ``box``: exit 0, every file it says it wrote there, the committed folder it resumes
    unchanged (or rewrites: with the files it had), nothing else in results/ touched."""
    from hicache_sim.output import identity

    check_synopsis(q)
    words = q.words
    _, path = _verb(words)
    verb = path[0] if path else None
    provide_inputs(q, box, monkeypatch, set())
    folder = target_folder(words, box)
    committed = folder is not None and (ROOT / folder).is_dir()
    if committed and verb in RESUMING:
        code = recorded_code(box / folder)
        if code is not None:
            monkeypatch.setattr(identity, "code_fingerprint", lambda: code)
    before = digests(box / "results")
    extra = list(SHORTENED.get(q.text, ()))
    r = invoke_in(box, monkeypatch, words[1:] + extra)
    said = f"{q.where}: `{q.text}`"
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(r.exception))[-3000:]
        raise AssertionError(f"{said} raised:\n{tb}")
    remake = (
        f"\n{folder} is a committed folder this command resumes: remake it from an empty folder by its command "
        "(results/README.md)"
        if committed and verb in RESUMING
        else ""
    )
    assert r.exit_code == 0, f"{said} exited with code {r.exit_code}:\n{r.output[-3000:]}{remake}"
    missing = [p for p in wrote(r.output) if not (box / p).exists()]
    assert not missing, f"{said} said it wrote {missing}, which are not there"
    after = digests(box / "results")
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    inside = f"{folder}/".removeprefix("results/") if folder is not None else None
    writes = inside if inside is not None and not (committed and verb in RESUMING) else None  # may change
    stray = [k for k in changed if Path(k).name not in IGNORED and not (writes and k.startswith(writes))]
    assert not stray, f"{said} changed {len(stray)} file(s) of the committed results (first: {stray[:5]})" + (
        "; a resume must reuse every point and rewrite nothing" + remake if verb in RESUMING else ""
    )
    if committed and verb == "run":
        had = {k for k in before if k.startswith(inside) and Path(k).name not in IGNORED}
        gone = sorted(k for k in had if k not in after)
        assert not gone, f"{said} no longer writes {gone}, which the committed folder has"
        if not extra and q.text not in FIXTURES:
            summary = f"{inside}summary.json"
            assert before.get(summary) == after.get(summary), f"{said}: summary.json differs from the committed one"
    if q.shown and not extra and q.text not in FIXTURES:
        printed = [ln.rstrip() for ln in r.output.splitlines()]
        shown = [ln for ln in q.shown if ln and ln != "..."]
        assert [ln for ln in printed if ln in shown] == shown, (
            f"{said}: the README shows it printing lines it does not print (in that order):\n"
            + "\n".join(ln for ln in shown if ln not in printed)
        )


def entry_file(words: list[str], box: Path) -> tuple[Path, str | None]:
    """The file ``python`` would run (a script, a module, a package's __main__.py) and the package its
    relative imports resolve in."""
    if words[1] != "-m":
        return box / words[1], None
    spec = importlib.util.find_spec(words[2])
    assert spec is not None and spec.origin, f"no module {words[2]}"
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / "__main__.py", words[2]
    return Path(spec.origin), words[2].rpartition(".")[0] or None


def check_imports(path: Path, package: str | None, said: str) -> None:
    """Every import at the top of ``path`` loads and every name it takes exists; the file is not run."""
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            mod = importlib.import_module("." * node.level + (node.module or ""), package if node.level else None)
            for alias in node.names:
                if alias.name == "*" or hasattr(mod, alias.name):
                    continue
                try:
                    importlib.import_module(f"{mod.__name__}.{alias.name}")
                except ImportError:
                    raise AssertionError(f"{said}: {mod.__name__} has no {alias.name}") from None


class _Parsed(Exception):
    """Raised by argparse, patched, once it has accepted the arguments."""


def check_python(q: Quoted, box: Path, monkeypatch) -> None:
    """The entry point exists, its imports load, and its argparse accepts the quoted arguments; nothing
    is computed. A file that calls parse_args runs until that call (argparse patched to stop there); any
    other is not run at all (its imports are resolved) and must be quoted without arguments."""
    words = _program(q.words)
    said = f"{q.where}: `{q.text}`"
    path, package = entry_file(words, box)
    args = words[3:] if words[1] == "-m" else words[2:]
    source = path.read_text(encoding="utf-8")
    if words[1] != "-m":
        monkeypatch.syspath_prepend(str(path.parent))  # as python does for a script
    if is_synopsis(args):  # the entry point names each option
        absent = [w for w in args if w.startswith("--") and f'"{w}"' not in source]
        assert not absent, f"{said}: {path.name} takes no {absent}"
        check_imports(path, package, said)
        return
    if "parse_args(" not in source:
        assert not args, f"{said}: {path.name} reads no arguments with argparse"
        check_imports(path, package, said)
        return
    original = argparse.ArgumentParser.parse_args

    def parse(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse)
    monkeypatch.chdir(box)
    monkeypatch.setattr(sys, "argv", [str(path), *args])
    try:
        if words[1] == "-m":
            runpy.run_module(words[2], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(path), run_name="__main__")
    except _Parsed:
        return
    except SystemExit as e:
        raise AssertionError(f"{said}: its arguments are refused (exit {e.code})") from None
    raise AssertionError(f"{said}: ran to its end without parsing its arguments")


def kind(q: Quoted) -> str:
    """How a quoted command is checked: not-ours, python, mention, synopsis or run."""
    words = _program(q.words)
    for prefix in NOT_OURS:
        if words[: len(prefix.split())] == prefix.split():
            return "not-ours"
    if words[0] == "python":
        return "python"
    if is_synopsis(words[1:]):
        return "synopsis"
    cmd, path = _verb(words)
    required = [p for p in cmd.params if p.param_type_name == "argument" and p.required]
    if len(words) == 1 + len(path) and required:
        return "mention"  # `hicache-sim sweep` in prose: the verb named
    return "run"


@pytest.fixture(scope="module", autouse=True)
def results_untouched():
    """The committed results are never written: git status of results/ and every byte stay as they were."""

    def status() -> str:
        r = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "results"], capture_output=True, text=True
        )
        return r.stdout if r.returncode == 0 else "(no git)"

    before = (status(), digests(ROOT / "results"))
    yield
    assert (status(), digests(ROOT / "results")) == before, "a README command wrote into the committed results/"


# ------------------------------------------------------------------------------------ the tests


def test_the_readmes_quote_what_this_test_expects():
    """The parser finds the commands (a README reshaped into something it misses fails here), and each
    table entry names a command the READMEs still quote."""
    kinds = {q.text: kind(q) for q in QUOTED}
    assert sum(k == "run" for k in kinds.values()) >= 15, kinds
    assert {"synopsis", "python", "not-ours", "mention"} <= set(kinds.values()), kinds
    stale = [t for t in (*SHORTENED, *FIXTURES) if t not in kinds]
    assert not stale, f"tables name commands no README quotes any more: {stale}"


@pytest.mark.parametrize("q", QUOTED, ids=[q.where for q in QUOTED])
def test_quoted_command(q, tmp_path, monkeypatch):
    k = kind(q)
    if k == "not-ours":
        return
    if k in ("synopsis", "mention"):
        check_synopsis(q)
        return
    box = sandbox(tmp_path)
    if k == "python":
        check_python(q, box, monkeypatch)
    else:
        check_runs(q, box, monkeypatch)


def _resuming() -> list[Quoted]:
    """One quoted sweep or advise command per committed folder it resumes."""
    out, seen = [], set()
    for q in QUOTED:
        if kind(q) != "run" or (_verb(q.words)[1] or [None])[0] not in RESUMING:
            continue
        folder = target_folder(q.words, ROOT)
        if folder is not None and (ROOT / folder).is_dir() and folder not in seen:
            seen.add(folder)
            out.append(q)
    return out


RESUMED = _resuming()


def test_every_committed_sweep_and_advise_folder_is_resumed_by_a_quoted_command():
    quoted = {target_folder(q.words, ROOT) for q in RESUMED}
    folders = {p.parent.parent.relative_to(ROOT) for p in (ROOT / "results").rglob("points/*.json")}
    owners = {f for f in folders if not any(f == q or q in f.parents for q in quoted)}
    assert not owners, f"committed sweep folders no quoted command resumes: {sorted(map(str, owners))}"


def _older_schema(manifest: Path) -> None:
    """The base scenario as an older schema recorded it: its last hardware field did not exist yet."""
    data = json.loads(manifest.read_text(encoding="utf-8"))
    hardware = data["base_scenario"]["hardware"]
    hardware.pop(sorted(hardware)[-1])
    manifest.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _other_resolution(point: Path) -> None:
    """A point whose resolved scenario differs from today's (a default that resolved otherwise then)."""
    data = json.loads(point.read_text(encoding="utf-8"))
    data["identity"]["scenario"] = "0" * 16
    point.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    ("damage", "files", "expect"),
    [
        (_older_schema, "sweep.json", "exited with code 2"),
        (_other_resolution, "points/*.json", "a resume must reuse every point"),
    ],
    ids=["older-schema", "other-resolution"],
)
@pytest.mark.parametrize("q", RESUMED, ids=[q.where for q in RESUMED])
def test_a_stale_committed_folder_fails_this_check(q, damage, files, expect, tmp_path, monkeypatch):
    """A copy of the folder damaged as an older schema or resolution would have made it: the check fails."""
    box = sandbox(tmp_path)
    damage(sorted((box / target_folder(q.words, box)).rglob(files))[0])
    with pytest.raises(AssertionError, match=expect):
        check_runs(q, box, monkeypatch)


def test_python_entry_points_are_checked_without_running(tmp_path, monkeypatch):
    """The parse-only check refuses an option the script does not take (so it reads the arguments)."""
    box = sandbox(tmp_path)
    q = next(q for q in QUOTED if kind(q) == "python" and "--" in q.text and not is_synopsis(q.words))
    bad = Quoted(q.where, q.text + " --no-such-option")
    with pytest.raises(AssertionError, match="refused"):
        check_python(bad, box, monkeypatch)
