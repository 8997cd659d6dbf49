""".ci/check_extras.py (run by .ci/run at install time, not by the tests, which stay offline): its list of
extras is setup.py's, it reads pip's installation report (a plugin missing, or resolved to an sdist, is an error)
and it fails loudly, naming the extra, when pip cannot resolve one. pip itself is replaced by stand-ins here."""

from __future__ import annotations

import ast
import importlib.util
import os

from conftest import ROOT


def _module():
    spec = importlib.util.spec_from_file_location("check_extras", os.path.join(ROOT, ".ci", "check_extras.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _setup_accelerators() -> dict:
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    node = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "ACCELERATORS" for t in n.targets))
    return ast.literal_eval(node)


def _item(name: str, version: str, url: str) -> dict:
    return {"metadata": {"name": name, "version": version}, "download_info": {"url": url}}


def test_the_extras_checked_are_setup_pys_accelerator_extras():
    extras = _setup_accelerators()
    assert set(_module().EXTRAS) == set(extras) == {"cuda", "cuda13", "tpu"}
    assert extras["cuda"] == ["jax[cuda12]>=0.4.35"] and extras["tpu"] == ["jax[tpu]>=0.5.1"]


def test_a_report_must_hold_each_plugin_as_a_wheel():
    mod = _module()
    whl = "https://files.example/x-1-py3-none-any.whl"
    report = {"install": [_item("jax", "0.12.0.1", whl), _item("jaxlib", "0.12.0.1", whl),
                          _item("jax_cuda12_plugin", "0.12.0.1", whl), _item("jax-cuda12-pjrt", "0.12.0.1", whl),
                          _item("nvidia-cudnn-cu12", "9.28", whl), _item("libtpu", "0.0.50", "https://x/libtpu.tar.gz")]}
    line, problems = mod.check_report(report, "cuda")
    assert problems == []
    assert line == ("extra [cuda] resolves: jax 0.12.0.1, jaxlib 0.12.0.1, jax-cuda12-plugin 0.12.0.1, "
                    "jax-cuda12-pjrt 0.12.0.1 (and 1 NVIDIA library wheels in all)")
    _, problems = mod.check_report(report, "tpu")
    assert problems == ["extra [tpu]: libtpu 0.0.50 resolves to https://x/libtpu.tar.gz, not a wheel"]
    _, problems = mod.check_report(report, "cuda13")
    assert problems[0] == "extra [cuda13]: jax-cuda13-plugin is not in the resolution"


def test_an_extra_that_does_not_resolve_fails_naming_it(monkeypatch, capsys):
    mod = _module()
    calls = []

    def fake_resolve(root, extras):
        calls.append(tuple(extras))
        if "tpu" in extras:
            return None, "ERROR: No matching distribution found for libtpu==0.0.99"
        return {"install": []}, ""

    monkeypatch.setattr(mod, "resolve", fake_resolve)
    assert mod.main(["--root", ROOT]) == 1
    assert calls == [("cuda", "cuda13", "tpu"), ("cuda",), ("cuda13",), ("tpu",)]
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: the extras [cuda,cuda13,tpu] together do not resolve: ERROR: No matching distribution "
                   "found for libtpu==0.0.99",
                   "error: extra [tpu] does not resolve: ERROR: No matching distribution found for libtpu==0.0.99"]
