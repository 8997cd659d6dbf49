"""Where model-ready records live and what names them: one cache, keyed by everything the records are made from.

The records of a split (:mod:`openvivqa_jax.data.model_ready`) depend on the dataset build, the tokenizer, the
preprocessing settings and the code that makes them, not on the run: the seeds of one config, and any configs
that preprocess alike, read one copy. Each entry is a folder named by a digest of its key (:func:`cache_key`)::

    <root>/<builder>/<config>/<version>/<split>-<first 16 hex digits of the key's BLAKE2b>/

The key has five parts, compared one by one when a new entry is built beside others (:func:`nearest_other`):

* ``dataset``: builder, config, version, split, its size, and name / size / modification time of the split's
  data files and ``dataset_info.json`` (a rebuilt dataset is another key);
* ``tokenizer``: the BLAKE2b digest of the SentencePiece model file and its size (two workdirs whose tokenizers
  are byte-identical share their records);
* ``settings``: every attribute of the run's :class:`~openvivqa_jax.data.pipeline.Preprocessor` (read from the
  object, not from a list, so an attribute added to it enters the key by itself; :data:`NOT_IN_KEY` names the
  few that are not inputs, and an attribute of a type the key cannot hold raises instead of being skipped);
* ``code``: a digest of the code of the preprocessing modules (:func:`code_digest`: ``model_ready`` and every
  module of ``openvivqa_jax.data`` and ``openvivqa_jax.text`` it imports, directly or not; their syntax trees
  without docstrings, so an edit of a comment or a docstring keeps the key) and the records' layout version;
* ``libraries``: the versions of the third-party libraries those modules compute with (Pillow's resize,
  scikit-image's segmentation, SentencePiece, NumPy, ...; :func:`library_versions`).

The root (:func:`cache_root`): ``data.model_ready_dir`` when set; else ``$OPENVIVQA_CACHE_DIR/model_ready``;
else ``<data_dir>/model_ready``, next to the dataset the records are made from (shared as the dataset is); else,
when that folder cannot be written (another user's dataset), ``$XDG_CACHE_HOME/openvivqa_jax/model_ready``
(``~/.cache/...``). A run's workdir holds ``model_ready.json``, a reference to its entries (path and key per
split; :func:`write_reference`), not a copy.

Two processes building one entry at once: the second waits on the entry's lock file (``<entry>.lock``,
filelock) and then reuses what the first built; a build writes a temporary sibling folder and renames it into
place, so a reader never sees half an entry even where the file system does not honour the lock.

Imports neither JAX nor TensorFlow.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.metadata
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from openvivqa_jax import jsonio

__all__ = ["KEY_PARTS", "NOT_IN_KEY", "CACHE_ENV", "REFERENCE_FILE", "cache_root", "cache_key", "key_digest",
           "entry_path", "code_digest", "tree_digest", "library_versions", "nearest_other", "write_reference",
           "file_digest", "settings"]

#: The parts of a key, in the order a difference is reported.
KEY_PARTS = ("dataset", "tokenizer", "settings", "code", "libraries")
#: Environment variable: the cache folder of every run that sets no ``data.model_ready_dir``.
CACHE_ENV = "OPENVIVQA_CACHE_DIR"
#: The workdir's reference to its entries.
REFERENCE_FILE = "model_ready.json"
#: Attributes of the Preprocessor that are not inputs of the records, and why.
NOT_IN_KEY: Mapping[str, str] = {
    "cfg": "read only by Preprocessor.__init__, into the attributes that are in the key",
    "tok": "the key's tokenizer part (the model file's digest)",
    "counter": "the run's counters of cut and skipped inputs: an output",
    "_image": "an lru_cache around _decode_image (its size changes no array)",
    "_proposals": "an lru_cache around _proposals_uncached",
    "_dictionary_mask": "an lru_cache around _dictionary_mask_uncached",
}
#: Third-party modules the preprocessing code imports that move the arrays without computing them.
_NOT_COMPUTING = {"jax": "device placement of batches", "grain": "the iteration order (the same in both paths)",
                  "absl": "logging", "filelock": "the entry's lock"}
#: Packages whose modules make the records (the code part of the key follows imports into these only).
_CODE_PACKAGES = ("openvivqa_jax.data", "openvivqa_jax.text")
_LONG = 64  # lists longer than this enter the key as their length and digest
_CHUNK = 1 << 22


def file_digest(path: str) -> str:
    """BLAKE2b (128-bit) of a file's bytes, hex."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ key
def _path_identity(value: str) -> dict | None:
    """Size and modification time of the file (or of each file of the folder) ``value`` names; None if none."""
    path = os.path.expanduser(value)
    if os.path.isfile(path):
        st = os.stat(path)
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if os.path.isdir(path):
        return {name: [st.st_size, st.st_mtime_ns] for name in sorted(os.listdir(path))
                if os.path.isfile(os.path.join(path, name)) and (st := os.stat(os.path.join(path, name)))}
    return None


def _value(value: Any, where: str) -> Any:
    """``value`` as JSON the key can hold (module doc, ``settings``).

    Raises:
      TypeError: a value of a type with no rule here (so that nothing enters the key unread).
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        ident = _path_identity(value) if os.sep in value or value.startswith("~") else None
        return {"path": value, "identity": ident} if ident is not None else value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return {"shape": list(value.shape), "dtype": value.dtype.str,
                "blake2b": hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=16).hexdigest()}
    if isinstance(value, (bytes, bytearray)):
        return {"blake2b": hashlib.blake2b(bytes(value), digest_size=16).hexdigest()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_value(v, f"{where}[{i}]") for i, v in enumerate(sorted(value) if isinstance(value, (set, frozenset))
                                                                   else value)]
        if len(items) > _LONG:
            text = json.dumps(items, sort_keys=True, ensure_ascii=False).encode()
            return {"len": len(items), "blake2b": hashlib.blake2b(text, digest_size=16).hexdigest()}
        return items
    if isinstance(value, Mapping):
        return {str(k): _value(v, f"{where}[{k!r}]") for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if hasattr(value, "model_path") and hasattr(value, "vocab_size"):  # a SentencePiece Tokenizer
        return {"sentencepiece_model": file_digest(value.model_path), "vocab_size": int(value.vocab_size)}
    if callable(value):
        raise TypeError(f"model-ready key: {where} is a function; name it in NOT_IN_KEY with the reason, or keep "
                        "what it depends on in attribute values")
    if hasattr(value, "__dict__"):  # an object the Preprocessor holds: its public state, by the same rules
        state = {k: v for k, v in vars(value).items() if not k.startswith("_") and not callable(v)}
        return {"class": f"{type(value).__module__}.{type(value).__qualname__}",
                **{k: _value(v, f"{where}.{k}") for k, v in sorted(state.items())}}
    raise TypeError(f"model-ready key: {where} is a {type(value).__name__}, which the key has no rule for "
                    "(openvivqa_jax/data/model_ready_cache.py _value)")


def settings(pre) -> dict:
    """The ``settings`` part of the key: every attribute of ``pre`` but :data:`NOT_IN_KEY` (module doc).

    Raises:
      TypeError: an attribute of a type the key has no rule for.
    """
    return {k: _value(v, f"Preprocessor.{k}") for k, v in sorted(vars(pre).items()) if k not in NOT_IN_KEY}


def _module_file(name: str) -> str | None:
    """The source file of ``openvivqa_jax.<...>`` module ``name`` in this checkout, or None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    base = os.path.join(root, *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _imports(tree: ast.AST) -> set[str]:
    """Absolute module names an import statement of ``tree`` runs (``from a import b`` also names ``a.b``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


@functools.lru_cache(maxsize=1)
def _code_modules() -> tuple[tuple[str, str, frozenset], ...]:
    """``(module, digest of its syntax tree without docstrings, third-party top-level imports)`` of every module
    :func:`code_digest` covers, in name order."""
    todo, seen, out = ["openvivqa_jax.data.model_ready"], set(), []
    while todo:
        name = todo.pop()
        path = _module_file(name) if name not in seen else None
        seen.add(name)
        if path is None:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        names = _imports(tree)
        todo.extend(n for n in names if n.startswith(_CODE_PACKAGES))
        third = frozenset(n.split(".")[0] for n in names if not n.startswith("openvivqa_jax")
                          and n.split(".")[0] not in sys.stdlib_module_names and n != "__future__")
        out.append((name, tree_digest(tree), third))
    return tuple(sorted(out))


def tree_digest(tree: ast.AST | str) -> str:
    """BLAKE2b (128-bit, hex) of a module's syntax tree (or source) without its docstrings: comments, docstrings
    and layout do not change it, code does."""
    if isinstance(tree, str):
        tree = ast.parse(tree)
    dump = ast.dump(_without_docstrings(tree), annotate_fields=False, include_attributes=False)
    return hashlib.blake2b(dump.encode(), digest_size=16).hexdigest()


def code_digest() -> dict:
    """The ``code`` part of the key: ``{module: digest}`` of the preprocessing modules (module doc)."""
    return {name: digest for name, digest, _ in _code_modules()}


@functools.lru_cache(maxsize=1)
def library_versions() -> dict:
    """The ``libraries`` part of the key: ``{distribution: version}`` of the third-party libraries the
    preprocessing modules import, but those that only move arrays (:data:`_NOT_COMPUTING`)."""
    names = sorted(set().union(*(third for _, _, third in _code_modules())) - set(_NOT_COMPUTING))
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # an import name that is not its distribution's (PIL)
            try:
                out[name] = str(getattr(importlib.import_module(name), "__version__", None))
            except ImportError:
                out[name] = None
    return out


def cache_key(builder, split: str, num_examples: int, pre, layout: int) -> dict:
    """What the records of ``split`` are made from, in the parts of :data:`KEY_PARTS` (module doc).

    Args:
      builder: the prepared TFDS builder; split: the split name; num_examples: its size.
      pre: the run's Preprocessor; layout: the records' format version (``model_ready.FORMAT``).

    Raises:
      TypeError: a Preprocessor attribute the key has no rule for (:func:`settings`).
    """
    data_dir = str(builder.data_dir)
    files = []
    if os.path.isdir(data_dir):
        for name in sorted(os.listdir(data_dir)):
            if f"-{split}." in name or name == "dataset_info.json":
                st = os.stat(os.path.join(data_dir, name))
                files.append([name, st.st_size, st.st_mtime_ns])
    config = getattr(builder, "builder_config", None)
    dataset = {"builder": builder.name, "config": getattr(config, "name", None), "version": str(builder.info.version),
               "split": split, "num_examples": int(num_examples), "data_dir": data_dir, "files": files}
    tokenizer = {"model": file_digest(pre.tok.model_path), "vocab_size": int(pre.tok.vocab_size)}
    return {"dataset": dataset, "tokenizer": tokenizer, "settings": settings(pre),
            "code": {"layout": int(layout), "modules": code_digest()}, "libraries": library_versions()}


def key_digest(key: dict) -> str:
    """The BLAKE2b (128-bit) hex digest of a key's canonical JSON."""
    text = json.dumps(key, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


# ------------------------------------------------------------------------------------------------ where
def _safe(part: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(part)) or "_"


def entry_path(root: str, key: dict) -> str:
    """The entry folder of ``key`` under ``root`` (module doc)."""
    d = key["dataset"]
    return os.path.join(os.path.abspath(os.path.expanduser(root)), _safe(d["builder"]), _safe(d["config"] or "default"),
                        _safe(d["version"]), f"{_safe(d['split'])}-{key_digest(key)[:16]}")


def _writable(folder: str) -> bool:
    """Whether a file can be created in ``folder`` (made with its parents when missing); found by trying."""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".write-check-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def cache_root(model_ready_dir: str | None, data_dir: str, environ: Mapping[str, str] | None = None,
               writable: Callable[[str], bool] = _writable) -> tuple[str, str]:
    """``(root, why)``: the cache folder a run uses and the phrase saying where it comes from (module doc).

    Args:
      model_ready_dir: ``data.model_ready_dir`` (None or ``""``: not set).
      data_dir: the TFDS data folder of the dataset.
      environ: the environment (default ``os.environ``); writable: the writability test (tests pass stand-ins).
    """
    env = os.environ if environ is None else environ
    if model_ready_dir:
        return os.path.abspath(os.path.expanduser(model_ready_dir)), "data.model_ready_dir"
    if env.get(CACHE_ENV):
        return os.path.join(os.path.abspath(os.path.expanduser(env[CACHE_ENV])), "model_ready"), f"${CACHE_ENV}"
    beside = os.path.join(os.path.abspath(os.path.expanduser(data_dir)), "model_ready")
    if "://" not in data_dir and writable(beside):
        return beside, "next to the dataset"
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return (os.path.join(os.path.abspath(cache), "openvivqa_jax", "model_ready"),
            f"the user's cache folder, as {beside} cannot be written")


def nearest_other(path: str, key: dict) -> str:
    """For a new entry at ``path``: which parts of the key the newest other entry of the same split (same
    builder, config and version) differs in, as a phrase (``""`` when there is none)."""
    folder, name = os.path.split(path)
    split = name.rsplit("-", 1)[0]
    best = None
    if os.path.isdir(folder):
        for other in os.listdir(folder):
            mpath = os.path.join(folder, other, "manifest.json")
            if other != name and other.rsplit("-", 1)[0] == split and "." not in other and os.path.isfile(mpath):
                t = os.path.getmtime(mpath)
                if best is None or t > best[0]:
                    best = (t, os.path.join(folder, other), mpath)
    if best is None:
        return ""
    try:
        old = jsonio.read_json(best[2], error=ValueError).get("fingerprint") or {}
    except (ValueError, AttributeError):  # unreadable, or not a manifest: nothing to compare with
        return ""
    parts = [p for p in KEY_PARTS if old.get(p) != key.get(p)]
    detail = {p: sorted(k for k in set(old.get(p) or {}) | set(key[p]) if (old.get(p) or {}).get(k) != key[p].get(k))
              for p in ("settings", "dataset") if p in parts}
    said = [f"{p} ({', '.join(detail[p])})" if detail.get(p) else p for p in parts]
    return f"; the newest other entry of this split, {best[1]}, was made from other {', '.join(said) or 'inputs'}"


def write_reference(workdir: str, split: str, path: str, key: dict, built_now: bool) -> None:
    """Records in ``<workdir>/model_ready.json`` which cache entry the run reads for ``split`` (path and key
    digest, and whether this run built it); written to a temporary file and renamed, so a reader never sees
    half of it."""
    ref_path = os.path.join(workdir, REFERENCE_FILE)
    try:
        ref = dict(jsonio.read_json(ref_path, error=ValueError)) if os.path.exists(ref_path) else {}
    except (ValueError, TypeError):  # unreadable or not an object: written anew
        ref = {}
    ref[split] = {"path": path, "key": key_digest(key), "built_by_this_run": bool(built_now)}
    os.makedirs(workdir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".model_ready-", suffix=".json", dir=workdir)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1, sort_keys=True)
    os.replace(tmp, ref_path)
