"""The path checker of every entry point (``openvivqa_jax.paths``), in process: each kind's refusals and their
one-line messages, nothing created before every path passed, the created folders removed again when the command
fails, ``~`` expanded, and (in a subprocess that meets mode bits as an ordinary user, also under root) folders
that cannot be written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import mode_bits_bind_subprocesses, mode_bits_preexec, subprocess_env
from openvivqa_jax import paths
from openvivqa_jax.errors import USAGE_EXIT_CODE, UsageError, UserError


@pytest.fixture
def here(tmp_path, monkeypatch):
    """``tmp_path`` as the current folder, holding the file ``f`` and the folder ``d``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    yield tmp_path
    paths.remove_created()


def _error(flag, value, kind) -> str:
    with pytest.raises(paths.PathError) as e:
        paths.check_paths([(flag, value, kind)])
    return str(e.value)


def test_path_error_is_a_usage_error():
    assert issubclass(paths.PathError, UsageError) and issubclass(paths.PathError, UserError)
    assert paths.PathError.exit_code == USAGE_EXIT_CODE == 2


@pytest.mark.parametrize("kind, value, message", [
    (paths.INPUT_FILE, "nope.json", "--x nope.json: file not found"),
    (paths.INPUT_FILE, "d", "--x d: is a folder, not a file (expected an input file)"),
    (paths.INPUT_DIR, "nope", "--x nope: folder not found"),
    (paths.INPUT_DIR, "f", "--x f: is a file, not a folder (expected an input folder)"),
    (paths.INPUT, "nope", "--x nope: path not found"),
    (paths.RUN_DIR, "nope", "--x nope: folder not found"),
    (paths.OUTPUT_DIR, "f", "--x f: is a file, not a folder (expected an output folder)"),
    (paths.OUTPUT_DIR, "f/a/b", "--x f/a/b: cannot create the folder: {here}/f is a file"),
    (paths.DATA_DIR, "f", "--x f: is a file, not a folder (expected a data folder)"),
    (paths.OUTPUT_FILE, "d", "--x d: is a folder, not a file (expected an output file)"),
    (paths.OUTPUT_FILE, "f/x.json", "--x f/x.json: cannot create its folder: {here}/f is a file"),
    (paths.NEW_OUTPUT_DIR, ".", "--x .: exists and is not empty; give a new or empty folder"),
    (paths.PROGRAM, "no-such-program-here", "--x no-such-program-here: no such program on PATH"),
    (paths.PROGRAM, "./f", "--x ./f: is not executable"),
    (paths.PROGRAM, "./nope", "--x ./nope: file not found"),
])
def test_refusals_name_the_flag_and_the_path(here, kind, value, message):
    assert _error("--x", value, kind) == message.format(here=here)
    assert sorted(os.listdir(here)) == ["d", "f"]  # nothing made


def test_a_missing_input_suggests_the_nearest_name(here):
    (here / "train.json").write_text("{}")
    assert _error("--x", "trian.json", paths.INPUT_FILE) == "--x trian.json: file not found; did you mean train.json?"


def test_what_passes(here):
    (here / "tool").write_text("#!/bin/sh\n")
    os.chmod(here / "tool", 0o755)
    # Inputs and outputs in two calls: one call refuses an output that is one of its inputs (test below).
    specs = [("--a", "f", paths.INPUT_FILE), ("--b", "d", paths.INPUT_DIR), ("--c", "f", paths.INPUT),
             ("--i", "./tool", paths.PROGRAM), ("--j", "sh", paths.PROGRAM), ("--k", None, paths.INPUT_FILE),
             ("--l", "", paths.INPUT_DIR), ("--n", ["f", "d"], paths.INPUT), ("--o", "d", paths.OPTIONAL_INPUT_DIR),
             ("--p", "missing", paths.OPTIONAL_INPUT_DIR)]
    assert paths.check_paths(specs) == ["f", "d", "f", "./tool", "sh", None, "", ["f", "d"], "d", "missing"]
    specs = [("--d", "d", paths.RUN_DIR), ("--e", "d", paths.OUTPUT_DIR), ("--f", "d", paths.NEW_OUTPUT_DIR),
             ("--g", "d/x.json", paths.OUTPUT_FILE), ("--h", "f", paths.OUTPUT_FILE),
             ("--m", "gs://bucket/tfds", paths.DATA_DIR)]
    assert paths.check_paths(specs) == ["d", "d", "d", "d/x.json", "f", "gs://bucket/tfds"]
    assert (here / "f").read_text() == "x"  # the writability check of a file leaves it as it was
    assert sorted(os.listdir(here)) == ["d", "f", "tool"]  # no check file left behind


def test_an_output_that_is_an_input_is_refused(here):
    """The same file or folder by name, ``./``, a symbolic or a hard link, or a file the command reads without a
    flag; an output inside an input folder, another file, or two outputs are fine."""
    os.symlink(here / "f", here / "f_link")
    os.link(here / "f", here / "f_hard")
    for value in ("f", "./f", str(here / "f"), "f_link", "f_hard", "d/../f"):
        with pytest.raises(paths.PathError, match=rf"^--out {re.escape(value)}: is the same file as --in f, an input "
                                                  "of this command; writing the output would replace it"):
            paths.check_paths([("--in", "f", paths.INPUT_FILE), ("--out", value, paths.OUTPUT_FILE)])
    with pytest.raises(paths.PathError, match=r"^--dir \./d: is the same folder as --manual d, an input"):
        paths.check_paths([("--manual", "d", paths.OPTIONAL_INPUT_DIR), ("--dir", "./d", paths.DATA_DIR)])
    with pytest.raises(paths.PathError, match=r"^--out d/x: is the same file as the run's x, an input"):
        (here / "d" / "x").write_text("{}")
        paths.check_paths([("--out", "d/x", paths.OUTPUT_FILE)], reads=[("the run's x", str(here / "d" / "x"))])
    assert paths.check_paths([("--in", "d", paths.INPUT_DIR), ("--out", "d/new.json", paths.OUTPUT_FILE),
                              ("--also", "d/new.json", paths.OUTPUT_FILE), ("--f", "f", paths.INPUT_FILE)],
                             reads=[("a file not there", str(here / "d" / "none"))]) == [
        "d", "d/new.json", "d/new.json", "f"]
    assert sorted(os.listdir(here)) == ["d", "f", "f_hard", "f_link"]


def test_missing_outputs_are_created_only_when_every_path_passes(here):
    specs = [("--out", "new/a", paths.OUTPUT_DIR), ("--json", "res/x.json", paths.OUTPUT_FILE),
             ("--data", "tfds", paths.DATA_DIR), ("--in", "nope.json", paths.INPUT_FILE)]
    with pytest.raises(paths.PathError, match="--in nope.json: file not found"):
        paths.check_paths(specs)
    assert sorted(os.listdir(here)) == ["d", "f"]
    assert paths.check_paths(specs[:3]) == ["new/a", "res/x.json", "tfds"]
    assert (here / "new" / "a").is_dir() and (here / "res").is_dir() and (here / "tfds").is_dir()
    assert not (here / "res" / "x.json").exists()
    (here / "res" / "x.json").write_text("{}")  # the command wrote its output there
    removed = paths.remove_created()
    assert sorted(os.path.relpath(p, here) for p in removed) == ["new", "new/a", "tfds"]
    assert sorted(os.listdir(here)) == ["d", "f", "res"]  # a folder holding output stays
    assert paths.remove_created() == []


def test_check_args_writes_back_the_expanded_paths(here, monkeypatch):
    import argparse

    monkeypatch.setenv("HOME", str(here))
    args = argparse.Namespace(in_file="~/f", out=None, many=["~/d", "d"])
    extra = paths.check_args(args, {"--in-file": paths.INPUT_FILE, "--out": paths.OUTPUT_DIR,
                                    "--many": paths.INPUT_DIR}, extra=[("--other", "~/d", paths.INPUT_DIR)])
    assert (args.in_file, args.out, args.many) == (f"{here}/f", None, [f"{here}/d", "d"])
    assert extra == [f"{here}/d"]
    with pytest.raises(paths.PathError, match=r"^--many ~/nope: folder not found$"):
        paths.check_args(argparse.Namespace(many=["d", "~/nope"]), {"--many": paths.INPUT_DIR})


def test_a_broken_link_is_named(here):
    os.symlink(here / "gone", here / "link")
    assert _error("--x", "link", paths.OUTPUT_DIR) == f"--x link: a link to {here}/gone, which does not exist"


def test_paths_only_mode_stops_after_the_check(here, monkeypatch, capsys):
    monkeypatch.setenv(paths.CHECK_ONLY_ENV, "1")
    with pytest.raises(SystemExit) as e:
        paths.check_paths([("--in", "f", paths.INPUT_FILE), ("--out", "o/p", paths.OUTPUT_DIR)])
    assert e.value.code == 0
    assert capsys.readouterr().err == "paths ok: --in f, --out o/p (created)\n"
    assert (here / "o" / "p").is_dir()
    monkeypatch.setenv(paths.CHECK_ONLY_ENV, "0")  # 0: off
    assert paths.check_paths([("--in", "f", paths.INPUT_FILE)]) == ["f"]


def test_run_main_removes_the_folders_of_a_failed_command(here, capsys):
    from openvivqa_jax.cli import run_main

    def fails():
        paths.check_paths([("--out", "o/p", paths.OUTPUT_DIR)])
        raise UserError("the config is wrong")

    assert run_main(fails, sigterm=False) == 1
    assert capsys.readouterr().err.strip() == "error: UserError: the config is wrong"
    assert not (here / "o").exists()

    def refused():
        paths.check_paths([("--out", "o/p", paths.OUTPUT_DIR), ("--in", "f", paths.INPUT_DIR)])

    assert run_main(refused, sigterm=False) == 2
    assert capsys.readouterr().err.strip() == ("error: PathError: --in f: is a file, not a folder "
                                               "(expected an input folder)")
    assert not (here / "o").exists()

    def works():
        paths.check_paths([("--out", "o/p", paths.OUTPUT_DIR)])

    assert run_main(works, sigterm=False) == 0
    assert (here / "o" / "p").is_dir()


_UNWRITABLE = """
import sys
from openvivqa_jax import paths
for value, kind in [("ro", paths.OUTPUT_DIR), ("ro/new", paths.OUTPUT_DIR), ("ro/new", paths.DATA_DIR),
                    ("ro/x.json", paths.OUTPUT_FILE), ("ro", paths.RUN_DIR), ("ro", paths.INPUT_DIR),
                    ("ro", paths.DATA_DIR)]:
    try:
        paths.check_paths([("--x", value, kind)])
        print("ok")
    except paths.PathError as e:
        print(e)
"""


def test_a_folder_that_cannot_be_written(tmp_path):
    """``chmod 555``, met by a subprocess that cannot override mode bits (also when the tests run as root):
    every kind that writes refuses it, by trying to write there; reading it and a data folder that exists
    (a built dataset is only read) pass."""
    why = mode_bits_bind_subprocesses()
    if why:
        pytest.skip(why)
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o555)
    try:
        res = subprocess.run([sys.executable, "-c", _UNWRITABLE], cwd=tmp_path, env=subprocess_env(),
                             capture_output=True, text=True, timeout=60, preexec_fn=mode_bits_preexec())
    finally:
        os.chmod(tmp_path / "ro", 0o755)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "--x ro: cannot be written (Permission denied)",
        f"--x ro/new: cannot create the folder in {tmp_path}/ro (Permission denied)",
        f"--x ro/new: cannot create the folder in {tmp_path}/ro (Permission denied)",
        f"--x ro/x.json: cannot write in {tmp_path}/ro (Permission denied)",
        "--x ro: cannot be written (Permission denied)",
        "ok",
        "ok",
    ]
    assert os.listdir(tmp_path / "ro") == []
