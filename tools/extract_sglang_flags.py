"""Write hicache_sim/data/sglang/server_args-<version>.json: every flag ``sglang.launch_server`` accepts,
read from an unpacked SGLang wheel (``pip download sglang==V --no-deps``, unzip).

SGLang 0.5.2x declares its flags as annotated dataclass fields (``sglang/srt/arg_groups/fields/*.py``:
``name: A[type, Arg(aliases=..., action=...)] = default``; the flag is ``--name-with-dashes``) plus a few
``parser.add_argument`` calls in ``sglang/srt/server_args.py``. This reads both with ``ast`` (nothing of
SGLang is imported) and keeps the interface only: flag, aliases, whether it takes a value, default.

    python tools/extract_sglang_flags.py UNPACKED_WHEEL_DIR VERSION
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

NO_VALUE_ACTIONS = {"store_true", "store_false", "DeprecatedStoreTrueAction", "DeprecatedStoreConstAction"}


def _kw(call: ast.Call, name: str):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _literal(node):
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def _arity(type_src: str, action, nargs) -> str:
    """'none' (a switch), 'one' or 'many' values."""
    if action is not None:
        name = ast.unparse(action).strip("'\"").split(".")[-1]
        if name in NO_VALUE_ACTIONS:
            return "none"
    if nargs is not None:
        n = _literal(nargs)
        return "one" if n in (None, "?", 1) else "many"
    inner = type_src.removeprefix("Optional[").removesuffix("]")
    if inner == "bool":
        return "none"
    if inner.startswith(("List[", "list[")):
        return "many"
    return "one"


def field_flags(path: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        for st in node.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            ann = st.annotation
            if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) == "A"):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if len(elts) < 2:
                continue
            type_src, meta = ast.unparse(elts[0]), elts[1]
            aliases, action, nargs, cli_name = [], None, None, None
            if isinstance(meta, ast.Call):
                if _literal(_kw(meta, "no_cli")) is True:
                    continue
                aliases = _literal(_kw(meta, "aliases")) or []
                action, nargs = _kw(meta, "action"), _kw(meta, "nargs")
                cli_name = _literal(_kw(meta, "cli_name"))
            elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)):
                continue
            name = st.target.id
            flag = cli_name or "--" + name.replace("_", "-")
            out[flag] = {
                "dest": name,
                "arity": _arity(type_src, action, nargs),
                "default": _literal(st.value) if st.value is not None else None,
                "aliases": list(aliases),
            }
    return out


def manual_flags(path: Path) -> dict[str, dict]:
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            names = [_literal(a) for a in node.args if isinstance(a, ast.Constant)]
            if not names:
                continue
            dest = _literal(_kw(node, "dest")) or names[0].lstrip("-").replace("-", "_")
            out[names[0]] = {
                "dest": dest,
                "arity": _arity("str", _kw(node, "action"), _kw(node, "nargs")),
                "default": None,
                "aliases": names[1:],
            }
    return out


def main(root: str, version: str) -> None:
    srt = Path(root) / "sglang" / "srt"
    flags: dict[str, dict] = {}
    for f in sorted((srt / "arg_groups" / "fields").glob("*.py")):
        flags.update(field_flags(f))
    flags.update(manual_flags(srt / "server_args.py"))
    target = Path(__file__).resolve().parent.parent / "hicache_sim" / "data" / "sglang" / f"server_args-{version}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "sglang_version": version,
        "source": f"sglang {version} wheel: sglang/srt/arg_groups/fields/*.py and sglang/srt/server_args.py "
        "(made by tools/extract_sglang_flags.py)",
        "flags": dict(sorted(flags.items())),
    }
    target.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"{len(flags)} flags -> {target}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
