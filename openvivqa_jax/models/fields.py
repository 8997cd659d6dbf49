"""The ``config.model`` fields each model of the zoo reads, found in its source; no JAX imported.

A config is made for one model: ``configs/synthetic/fst.py`` has FST's ``append_question`` and ``lstm_dim``,
MLPAG's config has neither. Naming another model (``--config.model.name=fst`` on an MLPAG config) would fail
only when the model is built, after the dataset and the tokenizer, with ``AttributeError: 'append_question'``.
:func:`missing_fields` says which fields a config lacks for its model before any work starts
(:func:`openvivqa_jax.config_check.check_config`).

The fields are not listed by hand (a list would drift from the code): :func:`required_fields` reads the
model's constructor with :mod:`ast` and follows the config through the functions and classes it is handed to
(``vision_encoder(cfg, ...)``, ``super().__init__(cfg, ...)``, ``self._set_sizes(cfg, ...)``, a local alias
``v = cfg.vision``), inside this package. A field read as an attribute (``cfg.lstm_dim``, ``cfg.vision.kind``)
is required; one read with ``cfg.get("x", default)`` is optional, and so are the attributes of a section read
with ``get`` (``g = cfg.get("visual_glimpses")``; ``g.num`` then needs ``num`` only where the section is there).
A field read in a branch only (``if self.append_question: ... cfg.lstm_dim``) counts as required: every shipped
config has the fields of its model, which ``tests/unit/test_model_fields.py`` checks, together with the
converse (each model builds from a config holding only the fields found here).
"""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Iterator

__all__ = ["required_fields", "missing_fields", "config_files_for"]

_PACKAGE = "openvivqa_jax"
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Methods of a ``ConfigDict`` section that read it without naming a field.
_SECTION_METHODS = {"get", "items", "keys", "values", "unlocked", "to_dict", "copy_and_resolve_references",
                    "get_ref", "lock", "unlock"}


@functools.lru_cache(maxsize=None)
def _module(name: str) -> ast.Module | None:
    """The parsed source of module ``name`` of this package (None for another package or no source)."""
    if name != _PACKAGE and not name.startswith(_PACKAGE + "."):
        return None
    base = os.path.join(os.path.dirname(_PACKAGE_DIR), *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return ast.parse(f.read(), path)
    return None


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module name of ``from <node.module> import ...`` inside ``module``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    is_package = _module(module) is not None and os.path.isfile(
        os.path.join(os.path.dirname(_PACKAGE_DIR), *parts, "__init__.py"))
    base = parts if is_package else parts[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=None)
def _names(module: str) -> dict[str, tuple[str, ast.AST]]:
    """Top-level functions and classes visible in ``module``: its own and those it imports from this package,
    as ``{name: (defining module, node)}``."""
    tree = _module(module)
    out: dict[str, tuple[str, ast.AST]] = {}
    if tree is None:
        return out
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = (module, node)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                found = _names(source).get(alias.name) if _module(source) is not None else None
                if found:
                    out.setdefault(alias.asname or alias.name, found)
    return out


def _method(module: str, cls: ast.ClassDef, name: str, skip_own: bool = False):
    """``(module, FunctionDef)`` of method ``name`` on ``cls`` or its first base (in this package) that has it."""
    if not skip_own:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return module, node
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in _names(module):
            mod, node = _names(module)[base.id]
            if isinstance(node, ast.ClassDef):
                found = _method(mod, node, name)
                if found:
                    return found
    return None


class _Reader:
    """Collects the fields read from the config as it flows through functions (module doc)."""

    def __init__(self):
        self.required: set[str] = set()
        self.seen: set[tuple] = set()

    def function(self, module: str, fn: ast.FunctionDef, env: dict[str, tuple[str, bool]], cls=None) -> None:
        """Reads ``fn`` with ``env``: ``{local name: (dotted prefix, optional section)}``."""
        key = (module, fn.lineno, fn.name, tuple(sorted(env.items())))
        if key in self.seen:
            return
        self.seen.add(key)
        env = dict(env)
        for node in ast.walk(fn):  # assignments first: an alias is known wherever it is used
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found = self._section(node.value, env)
                if found is not None:
                    env[node.targets[0].id] = found
        methods = {id(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}  # x.f(...): f is a method, no field
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self._attribute(node.value if id(node) in methods else node, env)
            elif isinstance(node, ast.Call):
                self._call(module, node, env, cls)

    def _chain(self, node: ast.AST, env) -> tuple[tuple[str, bool], list[str]] | None:
        """``((prefix, optional), [attr, ...])`` of ``name.a.b`` with ``name`` in ``env``; None otherwise."""
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id], attrs[::-1]
        return None

    def _section(self, value: ast.AST, env) -> tuple[str, bool] | None:
        """The config section an expression evaluates to (``cfg.vision``, ``cfg.get("counter") or {}``)."""
        if isinstance(value, ast.BoolOp):
            value = value.values[0]
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get"
                and value.args and isinstance(value.args[0], ast.Constant) and isinstance(value.args[0].value, str)):
            found = self._chain(value.func.value, env)
            if found is not None:
                (prefix, _), attrs = found
                return _join(prefix, *attrs, value.args[0].value), True
            return None
        found = self._chain(value, env)
        if found is None:
            return None
        (prefix, optional), attrs = found
        if attrs and attrs[-1] in _SECTION_METHODS:
            return None
        return _join(prefix, *attrs), optional

    def _attribute(self, node: ast.AST, env) -> None:
        found = self._chain(node, env)
        if found is None:
            return
        (prefix, optional), attrs = found
        if attrs:
            field = _join(prefix, *attrs)
            self.required.add(("?" if optional else "") + field)

    def _call(self, module: str, call: ast.Call, env, cls) -> None:
        """Follows the config into the function or class ``call`` runs, when an argument is a config section."""
        passed = [(i, None, self._section(a, env)) for i, a in enumerate(call.args)]
        passed += [(None, k.arg, self._section(k.value, env)) for k in call.keywords if k.arg]
        passed = [p for p in passed if p[2] is not None]
        if not passed:
            return
        target = self._callee(module, call.func, cls)
        if target is None:
            return
        mod, fn, owner, bound = target
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args][1 if bound else 0:]
        names = params + [a.arg for a in fn.args.kwonlyargs]
        sub = {}
        for i, k, section in passed:
            name = params[i] if i is not None and i < len(params) else k if k in names else None
            if name:
                sub[name] = section
        if sub:
            self.function(mod, fn, sub, owner)

    def _callee(self, module: str, func: ast.AST, cls):
        """``(module, FunctionDef, its class or None, bound)`` that a call runs; None outside this package."""
        if isinstance(func, ast.Name) and func.id in _names(module):
            mod, node = _names(module)[func.id]
            if isinstance(node, ast.FunctionDef):
                return mod, node, None, False
            found = _method(mod, node, "__init__")
            return (found[0], found[1], (mod, node), True) if found else None
        if isinstance(func, ast.Attribute) and cls is not None:
            owner_mod, owner = cls
            if isinstance(func.value, ast.Name) and func.value.id == "self":
                found = _method(owner_mod, owner, func.attr)
            elif (isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
                  and func.value.func.id == "super"):
                found = _method(owner_mod, owner, func.attr, skip_own=True)
            else:
                return None
            return (found[0], found[1], cls, True) if found else None
        return None


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _class(name: str) -> tuple[str, ast.ClassDef]:
    """``(module, ClassDef)`` of model ``name`` in :data:`openvivqa_jax.models.MODEL_REGISTRY`.

    Raises:
      KeyError: an unknown model name.
    """
    from openvivqa_jax.models import MODEL_REGISTRY

    module, cls = MODEL_REGISTRY[name].split(":")
    module = f"{_PACKAGE}.models{module}" if module.startswith(".") else module
    node = _names(module)[cls][1]
    return module, node


@functools.lru_cache(maxsize=None)
def required_fields(name: str) -> tuple[str, ...]:
    """The ``config.model`` fields (dotted, e.g. ``"vision.kind"``) that model ``name``'s constructor reads.

    A field under a section the constructor reads with ``get`` starts with ``?`` (``"?counter.weight"``): it is
    needed only where that section is there.

    Raises:
      KeyError: an unknown model name.
    """
    module, cls = _class(name)
    init = _method(module, cls, "__init__")
    reader = _Reader()
    if init:
        params = [a.arg for a in init[1].args.posonlyargs + init[1].args.args]
        reader.function(init[0], init[1], {params[1]: ("", False)}, (module, cls))
    return tuple(sorted(reader.required))


def _has(cfg, dotted: str) -> bool:
    node = cfg
    for part in dotted.split("."):
        if node is None or not hasattr(node, "keys") or part not in node:
            return False
        node = node[part]
    return True


def missing_fields(model_cfg) -> list[str]:
    """The fields of :func:`required_fields` that ``model_cfg`` (``config.model``) lacks, dotted, sorted; ``[]``
    when it has them all or names no known model."""
    from openvivqa_jax.models import MODEL_REGISTRY

    name = model_cfg.get("name") if hasattr(model_cfg, "get") else None
    if name not in MODEL_REGISTRY:
        return []
    missing = []
    for field in required_fields(name):
        if field.startswith("?"):
            field = field[1:]
            if not _has(model_cfg, field.rsplit(".", 1)[0]):
                continue
        if not _has(model_cfg, field):
            missing.append(field)
    return sorted(set(missing))


def config_files_for(name: str, builder: str | None = None) -> list[str]:
    """The shipped config files made for model ``name`` (``configs/<dataset>/<name>.py``, relative to the
    checkout), the one for the dataset ``builder`` first; ``[]`` where the configs folder is not beside the
    package (an installed wheel)."""
    root = os.path.join(os.path.dirname(_PACKAGE_DIR), "configs")
    found = sorted(os.path.join("configs", d, f"{name}.py") for d in _listdir(root)
                   if os.path.isfile(os.path.join(root, d, f"{name}.py")))
    key = (builder or "").replace("_", "")

    def rank(path: str) -> tuple[int, str]:
        folder = path.split(os.sep)[1]
        return (0 if key and (key == folder or key.startswith(folder)) else 1, path)

    return sorted(found, key=rank)


def _listdir(path: str) -> Iterator[str]:
    try:
        yield from sorted(os.listdir(path))
    except OSError:
        return
