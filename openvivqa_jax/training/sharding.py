"""Mesh construction and parameter sharding from regex rules (the big_vision habit, docs/design.md §8).

Models never mention devices. A config lists ``sharding_rules``: ``(regex, spec)`` pairs matched
against the parameter path (``"decoder/layers/0/self_attn/query/kernel"``); ``spec`` is a tuple of
mesh axis names or None per array dimension. The first matching rule wins; unmatched parameters are
replicated. A dimension that does not divide by its mesh axis size is replicated instead (logged).
With ``fsdp=True`` the largest still-unsharded dimension divisible by the ``data`` axis is also
sharded along ``data`` (ZeRO-3 style).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

__all__ = ["mesh_context", "create_mesh", "path_str", "spec_for", "param_shardings", "batch_sharding", "replicated"]


def mesh_context(mesh: Mesh):
    """Context manager making ``mesh`` current: ``jax.set_mesh`` where it exists, else the mesh itself."""
    return jax.set_mesh(mesh) if hasattr(jax, "set_mesh") else mesh


def create_mesh(shape: Sequence[int], axes: Sequence[str] = ("data", "model"), devices=None) -> Mesh:
    """A device mesh of ``shape`` over ``axes``; one ``-1`` entry takes the remaining devices.

    A shape without ``-1`` that needs fewer devices than exist uses the first ones (e.g. a (1, 1) mesh
    to predict on one device of eight).

    Raises:
      ValueError: if the shape does not fit the number of devices.
    """
    devices = jax.devices() if devices is None else devices
    n = len(devices)
    shape = list(shape)
    if shape.count(-1) > 1:
        raise ValueError(f"mesh shape {shape} has more than one -1")
    known = int(np.prod([s for s in shape if s != -1]))
    if -1 in shape:
        if n % known:
            raise ValueError(f"mesh shape {shape} does not divide the {n} devices")
        shape[shape.index(-1)] = n // known
    if int(np.prod(shape)) < n and -1 not in list(shape):
        devices = list(devices)[: int(np.prod(shape))]
        n = len(devices)
    if int(np.prod(shape)) != n:
        raise ValueError(f"mesh shape {tuple(shape)} needs {int(np.prod(shape))} devices, {n} are available")
    # Auto axes: XLA's SPMD partitioner propagates shardings from the annotated inputs/outputs; models
    # carry no sharding annotations of their own.
    return jax.make_mesh(tuple(shape), tuple(axes), devices=devices,
                         axis_types=(jax.sharding.AxisType.Auto,) * len(axes))


def path_str(path) -> str:
    """``jax.tree_util`` key path -> ``"a/b/0/c"``."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def spec_for(path: str, shape: Sequence[int], rules, mesh: Mesh, fsdp: bool = False) -> P:
    """The ``PartitionSpec`` of one parameter (see the module docstring)."""
    spec: list = [None] * len(shape)
    for pattern, rule in rules:
        if re.fullmatch(pattern, path) or re.search(pattern, path):
            rule = tuple(rule)
            if len(rule) != len(shape):
                continue
            spec = list(rule)
            break
    for i, ax in enumerate(spec):
        if ax is not None and shape[i] % mesh.shape[ax]:
            logging.warning("sharding: %s dim %d (%d) not divisible by mesh axis %s (%d); replicated",
                            path, i, shape[i], ax, mesh.shape[ax])
            spec[i] = None
    if fsdp and "data" in mesh.shape and mesh.shape["data"] > 1:
        order = sorted(range(len(shape)), key=lambda i: -shape[i])
        for i in order:
            if spec[i] is None and shape[i] % mesh.shape["data"] == 0 and "data" not in spec:
                spec[i] = "data"
                break
    return P(*spec)


def param_shardings(params, mesh: Mesh, rules=(), fsdp: bool = False):
    """A tree of ``NamedSharding`` matching ``params`` (arrays or ``ShapeDtypeStruct`` s)."""
    return jax.tree_util.tree_map_with_path(
        lambda p, x: NamedSharding(mesh, spec_for(path_str(p), x.shape, rules, mesh, fsdp)), params)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis along ``data``; everything else replicated."""
    return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
    """Fully replicated sharding on ``mesh``."""
    return NamedSharding(mesh, P())
