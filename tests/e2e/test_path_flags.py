"""Every entry point's path flags, driven by one table (:data:`TABLE`): each command line, run as a user runs it,
refuses a missing input, a file where a folder is expected (or a folder where a file is), and a folder it cannot
write, with one ``error:`` line naming the flag and the path, exit status 2, before any work and leaving
nothing behind; a missing output folder is created.

The passing runs stop right after the check (``OPENVIVQA_CHECK_PATHS_ONLY=1``, :mod:`openvivqa_jax.paths`), so
no case does a command's work. A new entry point cannot skip the table: every module and script with a command
line (argparse or absl flags) in ``openvivqa_jax/``, ``tfds_builders/`` and ``benchmarks/``, every command the
READMEs and the launch scripts run, and every flag whose name looks like a path must be in it.

The tests run as root in CI containers, where a ``chmod 555`` folder is still writable. The read-only cases run
the command in a process that has dropped the capabilities that let root ignore mode bits
(:func:`conftest.mode_bits_preexec`), so it meets the folder as an ordinary user does; the checker itself finds
writability by trying to create a file, never by ``os.access``.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, mode_bits_bind_subprocesses, mode_bits_preexec, subprocess_env
from openvivqa_jax import paths as P
from openvivqa_jax.paths import PathKind

PY = sys.executable


@dataclasses.dataclass(frozen=True)
class Row:
    """One way to run an entry point, and its path flags.

    Attributes:
      command: what follows the interpreter: ``("-m", "<module>")`` or ``("benchmarks/<script>.py",)``.
      paths: flag -> :class:`~openvivqa_jax.paths.PathKind`.
      args: other arguments every run of this row passes.
      required: path flags every run passes (with a good value unless the case is about that flag).
      needs: flag -> what its cases also pass: other path flags (by name) or literal ``--flag=value`` arguments.
      good: flag -> a good value other than the table's stand-in (a path relative to the repository).
      label: flag -> how its error line names it, for a flag whose documented line names no flag.
      not_paths: flags of the entry point whose names look like paths but are not.
      no_paths: why an entry point has no path flag (its row then has none).
    """

    command: tuple[str, ...]
    paths: dict[str, PathKind] = dataclasses.field(default_factory=dict)
    args: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    needs: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    good: dict[str, str] = dataclasses.field(default_factory=dict)
    label: dict[str, str] = dataclasses.field(default_factory=dict)
    not_paths: tuple[str, ...] = ()
    no_paths: str = ""


def _m(module: str) -> tuple[str, ...]:
    return ("-m", module)


def _b(script: str) -> tuple[str, ...]:
    return (f"benchmarks/{script}",)


I, D, ANY, RUN, OPT = P.INPUT_FILE, P.INPUT_DIR, P.INPUT, P.RUN_DIR, P.OPTIONAL_INPUT_DIR
OD, NEW, DATA, OF, PROG = P.OUTPUT_DIR, P.NEW_OUTPUT_DIR, P.DATA_DIR, P.OUTPUT_FILE, P.PROGRAM

#: Which kinds of path a command only reads (inputs) and which it writes, creates or builds into (outputs). Every
#: output flag of a row is tried with the value of each input flag of the same type (:func:`test_output_is_not_an_input`);
#: a new kind fails :func:`test_every_kind_is_an_input_or_an_output` until it is classified here.
ROLES: dict[PathKind, str] = {I: "input", D: "input", ANY: "input", OPT: "input", PROG: "input",
                              RUN: "output", OD: "output", NEW: "output", DATA: "output", OF: "output"}

#: Every entry point and its path flags: the one table the tests below run.
TABLE: dict[str, Row] = {
    "main": Row(_m("openvivqa_jax.main"), {
        "--config": I, "--workdir": OD, "--config.data.data_dir": DATA, "--config.data.model_ready_dir": OD,
        "--config.data.manual_dir": OPT},
        required=("--config", "--workdir"), good={"--config": "configs/tiny.py"},
        label={"--config": "config file"},
        needs={"--config.data.model_ready_dir": ("--config.data.model_ready=True",)}),
    "main --mode=evaluate": Row(_m("openvivqa_jax.main"), {"--workdir": RUN}, args=("--config=configs/tiny.py",
                                                                                     "--mode=evaluate"),
                                required=("--workdir",)),
    "main --mode=prepare": Row(_m("openvivqa_jax.main"), {"--config.data.data_dir": DATA,
                                                          "--config.data.manual_dir": OPT},
                               args=("--config=configs/tiny.py", "--mode=prepare")),
    "evaluate": Row(_m("openvivqa_jax.evaluate"), {
        "--predictions": I, "--references": I, "--meteor_jar": I, "--java": PROG, "--vectors": I,
        "--relevance_model": D, "--image_features": I, "--json": OF}, required=("--predictions",)),
    "predict": Row(_m("openvivqa_jax.predict"), {
        "--workdir": D, "--image": I, "--questions": I, "--image_dir": D, "--output": OF, "--ocr": I, "--plot": OF,
        "--plot_dir": OD}, required=("--workdir",), not_paths=("--ocr_passes", "--no_ocr_filter", "--json")),
    "analyze": Row(_m("openvivqa_jax.analyze"), {
        "--config": I, "--input": I, "--data_dir": DATA, "--manual_dir": D, "--ocr_file": I, "--agreement": I,
        "--out": OD}, required=("--out", "--agreement"), needs={"--ocr_file": ("--input",)},
        not_paths=("--builder_config",)),
    "plot": Row(_m("openvivqa_jax.plot"), {"--workdir": D, "--output": OF}, required=("--workdir",)),
    "param_count": Row(_m("openvivqa_jax.param_count"), {"--config_dir": D}),
    "fasttext_train": Row(_m("openvivqa_jax.text.fasttext_train"), {"--config": I, "--out": OF},
                          required=("--config", "--out")),
    "reading predict": Row(_m("openvivqa_jax.reading.predict"), {"--workdir": D, "--input": I, "--output": OD},
                           required=("--workdir", "--input", "--output")),
    "accelerator detect": Row(_m("openvivqa_jax.accelerator"), no_paths="reads the machine (nvidia-smi, /dev) "
                              "and prints one word; launch/setup.sh runs it before anything is installed"),
    "accelerator": Row(_b("accelerator.py"), no_paths="measures in memory and prints JSON"),
    "beam_build": Row(_b("beam_build.py"), {"--workdir": OD}),
    "build_ocr": Row(_b("build_ocr.py"), {"--examples": D}),
    "decode": Row(_b("decode.py"), {"--ids_out": OF}),
    "input_pipeline": Row(_b("input_pipeline.py"), {
        "--standin": D, "--data_dir": DATA, "--workdir": D, "--cache_root": OD}, not_paths=("--keep_cache",)),
    "make_release_standin": Row(_b("make_release_standin.py"), {"--out": NEW}, args=("--images=2",),
                                required=("--out",), not_paths=("--features",)),
    "metrics": Row(_b("metrics.py"), no_paths="writes only temporary files of its own"),
    "ocr_engines": Row(_b("ocr_engines.py"), {"--examples": D}),
    "proposals": Row(_b("proposals.py"), no_paths="renders its scenes in memory and prints JSON",
                     not_paths=("--image_size",)),
    "relevance_evjvqa_standin": Row(_b("relevance_evjvqa_standin.py"), {"--out": OD}, required=("--out",)),
    "relevance_probe": Row(_b("relevance_probe.py"), {"--relevance_model": D, "--data_dir": DATA, "--predictions": I},
                           required=("--relevance_model",), not_paths=("--builder_config",)),
    "scaling": Row(_b("scaling.py"), {"--reuse": I}),
    "torch_reference": Row(_b("torch_reference.py"), not_paths=("--model",),
                           no_paths="takes its sizes as JSON text; it runs in the PyTorch interpreter of "
                                    "vs_reference.py, which has neither this package nor absl"),
    "train_step": Row(_b("train_step.py"), no_paths="measures in memory and prints JSON"),
    "main_job": Row(_b("main_job.py"), {"--workdir": OD, "--data_dir": DATA, "--log": OF}, required=("--workdir",),
                    not_paths=("--config",)),
    "vision_probe": Row(_b("vision_probe.py"), {"--workdir": D}, not_paths=("--image_size", "--pixel_features")),
    "vs_reference": Row(_b("vs_reference.py"), {"--torch_python": PROG}),
    "second_world": Row(_b("second_world.py"), {"--out": NEW}, args=("--train_images=1", "--dev_images=1",
                                                                    "--test_images=1"), required=("--out",),
                        not_paths=("--no_ocr",)),
    "second_world_probe": Row(_b("second_world_probe.py"), {"--world": D}, required=("--world",)),
    "zoo_table": Row(_b("zoo_table.py"), {"--out": OD, "--data_dir": DATA}, required=("--out",)),
}

#: Shell wrappers the READMEs name, and the entry point each one runs.
WRAPPERS = {"benchmarks/accelerator.sh": "benchmarks/accelerator.py"}

#: The cases each kind of path is refused in; a passing run (the path created where it is an output) is added.
CASES: dict[PathKind, tuple[str, ...]] = {
    I: ("missing", "folder"), D: ("missing", "file"), ANY: ("missing",), RUN: ("missing", "file", "read_only"),
    OD: ("file", "under_file", "read_only"), NEW: ("file", "not_empty", "read_only"),
    DATA: ("file", "read_only"), OF: ("folder", "under_file", "read_only"), PROG: ("missing", "folder"),
    OPT: ("file",),
}

#: What a refusal's line says, by case.
NEEDLES = {"missing": "not found", "folder": "is a folder", "file": "is a file", "under_file": "is a file",
           "read_only": "Permission denied", "not_empty": "not empty"}


def _entry_id(row: Row) -> str:
    """``openvivqa_jax.main`` or ``benchmarks/decode.py``: the entry point a row runs."""
    return row.command[1] if row.command[0] == "-m" else row.command[0]


def _good_value(row: Row, flag: str, kind: PathKind, w) -> str:
    """A value of ``flag`` that passes, made under the workspace ``w`` (an output: a path still to create)."""
    if flag in row.good:
        return row.good[flag]
    slot = w / "good" / flag.strip("-").replace(".", "_")
    if kind in (OD, NEW, DATA):
        return str(slot / "new" / "folder")
    if kind is OF:
        return str(slot / "new" / "out.json")
    slot.mkdir(parents=True, exist_ok=True)
    if kind in (D, RUN, OPT):
        return str(slot)
    if kind is PROG:
        (slot / "prog").write_text("#!/bin/sh\n")
        os.chmod(slot / "prog", 0o755)
        return str(slot / "prog")
    (slot / "in.json").write_text("{}")
    return str(slot / "in.json")


def _bad_value(case: str, w) -> str:
    """A value of the refused ``case`` under the workspace ``w``."""
    bad = w / "bad"
    (bad / "a_folder").mkdir(parents=True, exist_ok=True)
    (bad / "a_folder" / "something").write_text("x")
    (bad / "a_file").write_text("x")
    ro = bad / "read_only"
    ro.mkdir(exist_ok=True)
    return {"missing": str(bad / "no_such_thing"), "folder": str(bad / "a_folder"), "file": str(bad / "a_file"),
            "under_file": str(bad / "a_file" / "sub"), "not_empty": str(bad / "a_folder"),
            "read_only": str(ro)}[case]


def _read_only_value(kind: PathKind, ro: str) -> str:
    """The path of ``kind`` that the read-only folder ``ro`` makes unusable: the folder itself where it is
    written into, a folder or file to create inside it otherwise."""
    return {OF: os.path.join(ro, "out.json"), DATA: os.path.join(ro, "new")}.get(kind, ro)


def _argv(row: Row, w, flag: str | None, value: str | None, more: dict[str, str] | None = None) -> list[str]:
    """The command line of one case: ``flag`` set to ``value`` (and each flag of ``more`` to its value), with the
    row's arguments, required flags and the flags' needs."""
    chosen = dict.fromkeys(row.required)
    given = {**({flag: value} if flag else {}), **(more or {})}
    for f, v in given.items():
        chosen[f] = v
        for need in row.needs.get(f, ()):
            if "=" not in need:
                chosen.setdefault(need, None)
    argv = [PY, *row.command, *row.args]
    for f, v in chosen.items():
        argv.append(f"{f}={v if v is not None else _good_value(row, f, row.paths[f], w)}")
    for f in given:
        argv += [n for n in row.needs.get(f, ()) if "=" in n and n not in argv]
    return argv


def _tree(folder) -> list[str]:
    out = []
    for d, dirs, files in os.walk(folder):
        out += [os.path.relpath(os.path.join(d, n), folder) for n in dirs + files]
    return sorted(out)


def _run(argv: list[str], only_paths: bool = False, read_only: bool = False) -> subprocess.CompletedProcess:
    extra = {P.CHECK_ONLY_ENV: "1"} if only_paths else {P.CHECK_ONLY_ENV: ""}
    return subprocess.run(argv, cwd=ROOT, env=subprocess_env(extra=extra), capture_output=True, text=True,
                          timeout=300, preexec_fn=mode_bits_preexec() if read_only else None)


def _cases():
    for name, row in TABLE.items():
        for flag, kind in row.paths.items():
            yield pytest.param(name, flag, "passes", id=f"{name} {flag} passes")
            for case in CASES[kind]:
                yield pytest.param(name, flag, case, id=f"{name} {flag} {case}")


@pytest.mark.slow  # about 150 processes: a minute or two on two cores
@pytest.mark.parametrize("name, flag, case", list(_cases()))
def test_path_flag(tmp_path, name, flag, case):
    row, kind = TABLE[name], TABLE[name].paths[flag]
    if case == "passes":
        value = _good_value(row, flag, kind, tmp_path)
        res = _run(_argv(row, tmp_path, flag, value), only_paths=True)
        assert res.returncode == 0, res.stderr[-3000:]
        if flag not in row.label:
            (ok,) = [ln for ln in res.stderr.splitlines() if ln.startswith("paths ok: ")]
            assert f"{flag} {value}" in ok, ok
        if kind in (OD, NEW, DATA):
            assert os.path.isdir(value), "a missing output folder is created"
        if kind is OF:
            assert os.path.isdir(os.path.dirname(value)) and not os.path.exists(value)
        return
    read_only = case == "read_only"
    if read_only:
        why = mode_bits_bind_subprocesses()
        if why:
            pytest.skip(why)
    value = _bad_value(case, tmp_path)
    if read_only:
        value = _read_only_value(kind, value)
    argv = _argv(row, tmp_path, flag, value)
    before = _tree(tmp_path)
    ro = tmp_path / "bad" / "read_only"
    os.chmod(ro, 0o555)
    try:
        res = _run(argv, read_only=read_only)
    finally:
        os.chmod(ro, 0o755)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-3000:]
    assert row.label.get(flag, flag) in lines[0] and value in lines[0], lines[0]
    if flag not in row.label:
        assert NEEDLES[case] in lines[0], lines[0]
    assert res.stdout == ""
    assert _tree(tmp_path) == before, "a refused command leaves nothing behind"


# ------------------------------------------------------------------------------- an output that is an input
#: How an output flag is given the input's path: the very string, ``./``-relative, a symbolic link, a hard link.
SPELLINGS = ("same", "dot_relative", "symlink", "hardlink")


def _collisions():
    """Every (output flag, input flag) pair of a row whose paths can be one (a file and a file, a folder and a
    folder); each pair as given and in one other spelling (taken in turn, so that each spelling is tried)."""
    n = 0
    for name, row in TABLE.items():
        for out, ko in row.paths.items():
            for inp, ki in row.paths.items():
                if ROLES[ko] != "output" or ROLES[ki] != "input" or ki.folder not in (None, ko.folder):
                    continue
                other = [s for s in SPELLINGS[1:] if not (ko.folder and s == "hardlink")]
                for spelling in ("same", other[n % len(other)]):
                    yield pytest.param(name, out, inp, spelling, id=f"{name} {out}={inp} {spelling}")
                n += 1


def _spelled(path: str, spelling: str, w) -> str:
    """``path`` (an existing input) spelled as ``spelling`` says, made under the workspace ``w`` where needed."""
    if spelling == "dot_relative":
        return "./" + os.path.relpath(path, ROOT)
    if spelling in ("symlink", "hardlink"):
        link = w / f"{spelling}-{os.path.basename(path)}"
        (os.symlink if spelling == "symlink" else os.link)(path, link)
        return str(link)
    return path


def _contents(path: str):
    if os.path.isdir(path):
        return sorted(os.listdir(path))
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.slow  # about 50 processes: a minute or two on two cores
@pytest.mark.parametrize("name, out, inp, spelling", list(_collisions()))
def test_output_is_not_an_input(tmp_path, name, out, inp, spelling):
    """An output flag given an input flag's path (the same string, ``./``-relative, a link to it) is refused
    before any work with one ``error:`` line naming both flags, exit status 2; the input is left as it was."""
    row = TABLE[name]
    value = _good_value(row, inp, row.paths[inp], tmp_path)
    before = _contents(value)
    out_value = _spelled(value, spelling, tmp_path)
    argv = _argv(row, tmp_path, inp, value, more={out: out_value})
    tree = _tree(tmp_path)
    res = _run(argv)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-3000:]
    word = "folder" if row.paths[out].folder else "file"
    assert f"{out} {out_value}: is the same {word} as {inp} {value}, an input of this command" in lines[0], lines[0]
    assert res.stdout == ""
    assert _contents(value) == before and _tree(tmp_path) == tree, "a refused command leaves everything as it was"


def test_every_kind_is_an_input_or_an_output():
    kinds = {k for row in TABLE.values() for k in row.paths.values()}
    assert kinds <= set(ROLES), f"kinds of path not classified in ROLES: {kinds - set(ROLES)}"
    for kind, role in ROLES.items():
        assert role == ("output" if P.is_output(kind) else "input"), kind
    pairs = list(_collisions())
    assert len({p.values[0] for p in pairs}) >= 8  # main, prepare, evaluate, predict, analyze, fastText, benchmarks
    assert {("predict", "--output", "--questions"), ("predict", "--plot", "--image"),
            ("evaluate", "--json", "--predictions"), ("evaluate", "--json", "--references"),
            ("main", "--workdir", "--config.data.manual_dir")} <= {p.values[:3] for p in pairs}


# ------------------------------------------------------------------------------------ nothing escapes the table
_COMMAND_LINE = re.compile(r"""__name__\s*==\s*["']__main__["']|ArgumentParser\(|flags\.DEFINE_|DEFINE_config_file\(""")
_ARGPARSE_FLAG = re.compile(r"""add_argument\(\s*((?:["']--?[\w-]+["']\s*,\s*)*["']--?[\w-]+["'])""")
_ABSL_FLAG = re.compile(r"""(?:flags|config_flags)\.DEFINE_\w+\(\s*["'](\w+)["']""")
#: Words of a flag's name that say it may be a path (a flag named so is in the table as a path or as not one).
_PATH_WORDS = {"dir", "path", "file", "out", "output", "root", "workdir", "standin", "examples", "model", "features",
               "predictions", "references", "questions", "image", "json", "plot", "vectors", "jar", "java", "python",
               "config", "reuse", "input", "agreement", "ocr", "cache", "ids", "manual", "data"}


def _source(entry: str) -> str:
    rel = entry if entry.endswith(".py") else entry.replace(".", "/") + ".py"
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _command_lines() -> set[str]:
    found = set()
    for folder in ("openvivqa_jax", "tfds_builders"):
        for path in glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True):
            with open(path, encoding="utf-8") as f:
                if _COMMAND_LINE.search(f.read()):
                    found.add(os.path.relpath(path, ROOT)[:-3].replace(os.sep, "."))
    for path in glob.glob(os.path.join(ROOT, "benchmarks", "*.py")):
        with open(path, encoding="utf-8") as f:
            if _COMMAND_LINE.search(f.read()):
                found.add(os.path.relpath(path, ROOT))
    return found


def test_every_command_line_is_in_the_table():
    entries = {_entry_id(r) for r in TABLE.values()}
    found = _command_lines()
    assert len(found) >= 20
    missing = sorted(found - entries)
    assert not missing, f"command lines missing from TABLE (add each with its path flags): {missing}"
    assert not sorted(entries - found), "TABLE names entry points that are not there"


def test_every_command_the_docs_and_launch_scripts_run_is_in_the_table():
    entries = {_entry_id(r) for r in TABLE.values()}
    named = set()
    texts = {}
    for pattern in ("README.md", "benchmarks/README.md", "launch/README.md", "docs/*.md", "launch/*.sh",
                    "launch/*.sbatch", "launch/*.ipynb", "benchmarks/*.sh"):
        for path in glob.glob(os.path.join(ROOT, pattern)):
            with open(path, encoding="utf-8") as f:
                texts[os.path.relpath(path, ROOT)] = f.read()
    for text in texts.values():
        named.update(re.findall(r"python3?\s+-m\s+(openvivqa_jax[\w.]*)", text))
        named.update(WRAPPERS.get(m, m) for m in re.findall(r"(benchmarks/\w+\.(?:py|sh))\b", text))
    assert {"openvivqa_jax.main", "openvivqa_jax.evaluate", "benchmarks/input_pipeline.py"} <= named
    assert not sorted(named - entries), "commands named in the docs or scripts but missing from TABLE"
    # The launch scripts read command lines only through entry points (whose paths are checked): no inline
    # Python of theirs parses flags.
    for path, text in texts.items():
        if path.startswith("launch/") and not path.endswith((".md", ".ipynb")):
            assert not re.search(r"sys\.argv|FLAGS\(|ArgumentParser|DEFINE_", text), f"{path} parses flags inline"


def test_every_flag_that_looks_like_a_path_is_classified():
    by_entry: dict[str, set[str]] = {}
    classified: dict[str, set[str]] = {}
    for row in TABLE.values():
        e = _entry_id(row)
        classified.setdefault(e, set()).update(row.paths, row.not_paths)
        if row.no_paths:
            assert not row.paths, e
    for e in classified:
        src = _source(e)
        flags = set()
        for group in _ARGPARSE_FLAG.findall(src):
            flags.update(re.findall(r"""["'](--?[\w-]+)["']""", group))
        flags.update(f"--{n}" for n in _ABSL_FLAG.findall(src))
        by_entry[e] = flags
        looks = {f for f in flags if set(f.strip("-").split("_")) & _PATH_WORDS}
        assert not sorted(looks - classified[e]), f"{e}: flags that look like paths, not in TABLE"
        declared = {f for f in classified[e] if not f.startswith("--config.")}
        assert not sorted(declared - flags), f"{e}: TABLE names flags the command line does not have"
    assert by_entry["benchmarks/input_pipeline.py"] >= {"--standin", "--cache_root", "--data_dir"}


def test_the_issue_command_stops_at_once_with_one_line(tmp_path):
    """The command of the report, with a cache root that cannot be made (a file in its way): one line within a
    second or two of the process start, nothing built."""
    import time

    (tmp_path / "c").write_text("x")
    (tmp_path / "s").mkdir()
    t0 = time.perf_counter()
    res = subprocess.run([PY, "benchmarks/input_pipeline.py", "--standin", str(tmp_path / "s"), "--data_dir",
                          str(tmp_path / "d"), "--cache_root", str(tmp_path / "c" / "does-not-exist"), "--variants",
                          "cnn,features"], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                         timeout=120)
    wall = time.perf_counter() - t0
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip() == (f"error: PathError: --cache_root {tmp_path}/c/does-not-exist: cannot create the "
                                  f"folder: {tmp_path}/c is a file")
    assert sorted(os.listdir(tmp_path)) == ["c", "s"]  # the data dir was not made either
    assert wall < 30  # no TFDS build: the process start and the check (about 0.5 s on an idle machine)


def test_benchmark_flag_values_are_one_line_usage_errors(tmp_path):
    cases = [(("benchmarks/make_release_standin.py", "--images=0", f"--out={tmp_path / 'o'}"),
              "error: UsageError: --images must be 1..11199 (the release's size), got 0"),
             (("benchmarks/scaling.py", "--models=nope", "--devices="),
              "error: FlagError: --models 'nope': unknown ['nope']; expected a comma-separated subset of "
              "('mlpag', 'm4c')")]
    for argv, line in cases:
        res = subprocess.run([PY, *argv], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 2 and res.stderr.strip() == line, res.stderr[-2000:]
    assert not (tmp_path / "o").exists()
