"""Write hicache_sim/data/sglang/server_args-<version>.json: every flag ``sglang.launch_server`` accepts,
with the values its parser accepts, read from an unpacked SGLang wheel (``pip download sglang==V
--no-deps``, unzip).

SGLang 0.5.2x declares its flags as annotated dataclass fields (``sglang/srt/arg_groups/fields/*.py``, in
0.5.1x ``sglang/srt/server_args.py`` itself:
``name: A[type, Arg(aliases=..., action=..., choices=..., type_parser=...)] = default``; the flag is
``--name-with-dashes``) plus a few ``parser.add_argument`` calls in ``sglang/srt/server_args.py``; SGLang
0.5.2 and earlier declare every flag with ``parser.add_argument`` in ``server_args.py`` (defaults read
from the ``ServerArgs`` dataclass). This reads both with ``ast`` (nothing of SGLang is imported) and
keeps the interface only: flag, aliases, whether it takes a value, default, the type its value is
converted with, and its choices. Choices named by a constant (``RADIX_EVICTION_POLICY_CHOICES``, an
imported list, ``Backend.ALL``, ``A + [b]``, ``list(D.keys())``) are followed through the wheel's own
modules; choices computed at start-up (plugins, registries) are kept as their expression under
``choices_from`` and are not checked.

    python tools/extract_sglang_flags.py UNPACKED_WHEEL_DIR VERSION
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

NO_VALUE_ACTIONS = {
    "store_true",
    "store_false",
    "DeprecatedAction",
    "DeprecatedStoreTrueAction",
    "DeprecatedStoreConstAction",
}
# argparse ``type=`` callables (or SGLang's ``type_parser``) by the name the flag list records.
TYPE_NAMES = {
    "int": "int",
    "float": "float",
    "str": "str",
    "json.loads": "json",
    "orjson.loads": "json",
    "json_list_type": "json",
    "human_readable_int": "human_int",
    "nullable_str": "str",
    "parse_cuda_graph_backend_arg": "str",
}


class Unresolved(Exception):
    """A choices expression that is not a constant of the wheel's source."""


class Modules:
    """The wheel's modules by dotted name, parsed once: their top-level constants, classes and imports,
    enough to follow a ``choices=`` expression to its list."""

    def __init__(self, root: Path):
        self.root = root
        self._cache: dict[str, dict[str, ast.AST | tuple[str, str]]] = {}

    def names(self, module: str) -> dict[str, ast.AST | tuple[str, str]]:
        if module not in self._cache:
            path = self.root / (module.replace(".", "/") + ".py")
            if not path.is_file():
                path = self.root / module.replace(".", "/") / "__init__.py"
            table: dict[str, ast.AST | tuple[str, str]] = {}
            if path.is_file():
                for st in ast.parse(path.read_text(encoding="utf-8")).body:
                    if isinstance(st, ast.Assign):
                        for t in st.targets:
                            if isinstance(t, ast.Name):
                                table[t.id] = st.value
                    elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                        table[st.target.id] = st.value
                    elif isinstance(st, ast.ClassDef):
                        table[st.name] = st
                    elif isinstance(st, ast.ImportFrom) and st.module and st.level == 0:
                        for a in st.names:
                            table[a.asname or a.name] = (st.module, a.name)
            self._cache[module] = table
        return self._cache[module]

    def extended(self, module: str, name: str) -> bool:
        """Whether the module defining ``name`` exposes ``name.extend`` / ``.append`` / ``.add`` (SGLang's
        ``add_*_choices`` hooks: a plugin loaded before the flags are parsed may add values)."""
        try:
            where, _ = self.lookup(module, name)
        except Unresolved:
            return False
        path = self.root / (where.replace(".", "/") + ".py")
        if not path.is_file():
            return False
        return any(
            isinstance(n, ast.Attribute)
            and n.attr in ("extend", "append", "add")
            and isinstance(n.value, ast.Name)
            and n.value.id == name
            for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST]:
        """(module, node) where ``name`` is defined, following ``from X import name``."""
        entry = self.names(module).get(name)
        if isinstance(entry, tuple) and depth < 8:
            return self.lookup(entry[0], entry[1], depth + 1)
        if entry is None or isinstance(entry, tuple):
            raise Unresolved(name)
        return module, entry

    def value(self, module: str, node: ast.AST, scope: ast.ClassDef | None = None):
        """The constant ``node`` stands for in ``module`` (a class body's names first, in ``scope``)."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = [self.value(module, e, scope) for e in node.elts]
            return sorted(set(items), key=str) if isinstance(node, ast.Set) else items
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return list(self.value(module, node.left, scope)) + list(self.value(module, node.right, scope))
        if isinstance(node, ast.Name):
            if scope is not None:
                for st in scope.body:
                    if isinstance(st, ast.Assign) and any(getattr(t, "id", None) == node.id for t in st.targets):
                        return self.value(module, st.value, scope)
            where, found = self.lookup(module, node.id)
            if isinstance(found, ast.ClassDef):
                raise Unresolved(node.id)
            return self.value(where, found)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            where, cls = self.lookup(module, node.value.id)
            if isinstance(cls, ast.ClassDef):
                for st in cls.body:
                    targets = st.targets if isinstance(st, ast.Assign) else [getattr(st, "target", None)]
                    if any(getattr(t, "id", None) == node.attr for t in targets) and st.value is not None:
                        return self.value(where, st.value, cls)
            raise Unresolved(ast.unparse(node))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
            if node.func.id in ("set", "frozenset"):
                return sorted(set(self.value(module, node.args[0], scope)), key=str)
            if node.func.id in ("list", "tuple", "sorted"):
                inner = self.value(module, node.args[0], scope)
                return sorted(inner, key=str) if node.func.id == "sorted" else list(inner)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "keys":
            return list(self._dict(module, node.func.value, scope))
        if isinstance(node, ast.Dict):
            return self._dict(module, node, scope)
        raise Unresolved(ast.unparse(node))

    def _dict(self, module: str, node: ast.AST, scope: ast.ClassDef | None) -> dict:
        if isinstance(node, ast.Dict):
            if any(k is None or not isinstance(k, ast.Constant) for k in node.keys):
                raise Unresolved(ast.unparse(node))
            return {k.value: None for k in node.keys}
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            where, cls = self.lookup(module, node.value.id)
            if isinstance(cls, ast.ClassDef):
                for st in cls.body:
                    targets = st.targets if isinstance(st, ast.Assign) else [getattr(st, "target", None)]
                    if any(getattr(t, "id", None) == node.attr for t in targets) and st.value is not None:
                        return self._dict(where, st.value, cls)
        if isinstance(node, ast.Name):
            where, found = self.lookup(module, node.id)
            return self._dict(where, found, None)
        raise Unresolved(ast.unparse(node))


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
        explicit_value = isinstance(nargs, ast.Constant) and nargs.value is None  # nargs=None: one value
        if name in NO_VALUE_ACTIONS and not explicit_value:
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


def _scalar(type_node: ast.AST | None) -> ast.AST | None:
    """The annotation a value is converted by: ``Optional[X]`` / ``X | None`` and ``List[X]`` unwrapped."""
    node = type_node
    for _ in range(3):
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) in ("Optional", "List", "list"):
            node = node.slice
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            node = node.left if not (isinstance(node.left, ast.Constant) and node.left.value is None) else node.right
        elif isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Union":
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            rest = [e for e in parts if not (isinstance(e, ast.Constant) and e.value is None)]
            node = rest[0] if len(rest) == 1 else node
            if len(rest) != 1:
                break
        else:
            break
    return node


def _literal_values(type_node: ast.AST | None) -> list | None:
    node = _scalar(type_node)
    if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
        values = ast.literal_eval(node.slice)
        return list(values) if isinstance(values, tuple) else [values]
    return None


def _type_name(parser, type_node: ast.AST | None, arity: str) -> str | None:
    """The name of the conversion a value goes through (None for a switch): ``type_parser`` / ``type=``
    when given, else the annotation's scalar type (argparse converts anything else as text)."""
    if arity == "none":
        return None
    if parser is not None:
        src = ast.unparse(parser)
        return TYPE_NAMES.get(src, src)
    values = _literal_values(type_node)
    name = type(values[0]).__name__ if values else getattr(_scalar(type_node), "id", None)
    return name if name in ("int", "float") else "str"


def _choices(modules: Modules, module: str, node, type_node: ast.AST | None) -> dict:
    """``{"choices": [...]}`` (values as the parser compares them), ``{"choices": None, "choices_from":
    expression}`` for choices known only at start-up, or ``{"choices": None}`` for none."""
    if node is None:
        return {"choices": _literal_values(type_node)}
    try:
        values = modules.value(module, node)
    except Unresolved:
        return {"choices": None, "choices_from": ast.unparse(node)}
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    extensible = any(modules.extended(module, n) for n in names)
    return {"choices": list(values), **({"extensible": True} if extensible else {})}


def field_flags(modules: Modules, module: str, path: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
            aliases, action, nargs, cli_name, parser, choices = [], None, None, None, None, None
            if isinstance(meta, ast.Call):
                if _literal(_kw(meta, "no_cli")) is True:
                    continue
                aliases = _literal(_kw(meta, "aliases")) or []
                action, nargs = _kw(meta, "action"), _kw(meta, "nargs")
                extra = _kw(meta, "action_kwargs")  # a custom action's own nargs / type
                if isinstance(extra, ast.Dict):
                    given = {_literal(k): v for k, v in zip(extra.keys, extra.values, strict=True) if k is not None}
                    nargs = given.get("nargs", nargs)
                    parser = given.get("type")
                cli_name = _literal(_kw(meta, "cli_name"))
                parser, choices = parser or _kw(meta, "type_parser"), _kw(meta, "choices")
            elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)):
                continue
            name = st.target.id
            flag = cli_name or "--" + name.replace("_", "-")
            arity = _arity(type_src, action, nargs)
            if arity == "many" and action is None and nargs is None and parser is not None:
                arity = "one"  # a list parsed from one value (json_list_type): SGLang adds no nargs
            out[flag] = {
                "dest": name,
                "arity": arity,
                "default": _literal(st.value) if st.value is not None else None,
                "aliases": list(aliases),
                "type": _type_name(parser, elts[0], arity),
                **(_choices(modules, module, choices, elts[0]) if arity != "none" else {"choices": None}),
            }
    return out


def _dataclass_defaults(tree: ast.Module) -> dict[str, object]:
    """``ServerArgs`` field -> default (SGLang 0.5.2 and earlier: ``default=ServerArgs.name``)."""
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                    out[st.target.id] = _literal(st.value)
    return out


def _deprecated(modules: Modules, module: str, call: ast.Call) -> dict:
    """``{"deprecated": {"action": ..., "new_flag": ..., "const": ...}}`` for a flag SGLang registers with
    one of its Deprecated* actions (its own rename table: ``new_flag`` is what it now reads the flag as);
    ``{}`` otherwise."""
    action = _kw(call, "action")
    name = ast.unparse(action).split(".")[-1] if action is not None else ""
    if not name.startswith("Deprecated"):
        return {}
    out: dict[str, object] = {"action": name, "new_flag": _literal(_kw(call, "new_flag"))}
    const = _kw(call, "const_value")
    if const is not None:
        try:
            out["const"] = modules.value(module, const)
        except Unresolved:
            out["const"] = ast.unparse(const)
    return {"deprecated": out}


def manual_flags(modules: Modules, module: str, path: Path, declared: dict[str, object]) -> dict[str, dict]:
    """Flags added by ``parser.add_argument``; ``declared``: field defaults by dest, for SGLang 0.5.2x's
    ``default=_declared_default(name)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defaults = {**declared, **_dataclass_defaults(tree)}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            names = [_literal(a) for a in node.args if isinstance(a, ast.Constant)]
            if not names or not str(names[0]).startswith("--"):
                continue
            dest = _literal(_kw(node, "dest")) or names[0].lstrip("-").replace("-", "_")
            arity = _arity("str", _kw(node, "action"), _kw(node, "nargs"))
            default = _kw(node, "default")
            if isinstance(default, ast.Attribute) and getattr(default.value, "id", None) == "ServerArgs":
                value = defaults.get(default.attr)
            elif isinstance(default, ast.Call) and getattr(default.func, "id", None) == "_declared_default":
                value = defaults.get(_literal(default.args[0]))
            else:
                value = _literal(default)
            out[names[0]] = {
                "dest": dest,
                "arity": arity,
                "default": value,
                "aliases": names[1:],
                "type": _type_name(_kw(node, "type"), None, arity),
                **(_choices(modules, module, _kw(node, "choices"), None) if arity != "none" else {"choices": None}),
                **_deprecated(modules, module, node),
            }
    return out


def main(root: str, version: str) -> None:
    base = Path(root)
    srt = base / "sglang" / "srt"
    modules = Modules(base)
    flags: dict[str, dict] = {}
    for f in sorted((srt / "arg_groups" / "fields").glob("*.py")):
        flags.update(field_flags(modules, f"sglang.srt.arg_groups.fields.{f.stem}", f))
    flags.update(field_flags(modules, "sglang.srt.server_args", srt / "server_args.py"))
    declared = {f["dest"]: f["default"] for f in flags.values()}
    flags.update(manual_flags(modules, "sglang.srt.server_args", srt / "server_args.py", declared))
    target = Path(__file__).resolve().parent.parent / "hicache_sim" / "data" / "sglang" / f"server_args-{version}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "sglang_version": version,
        "source": f"sglang {version} wheel: sglang/srt/arg_groups/fields/*.py and sglang/srt/server_args.py "
        "(made by tools/extract_sglang_flags.py)",
        "command": f"pip download --no-deps sglang=={version} -d WHEEL && unzip -q WHEEL/*.whl -d SRC && "
        f"python tools/extract_sglang_flags.py SRC {version}",
        "flags": dict(sorted(flags.items())),
    }
    target.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"{len(flags)} flags -> {target}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
