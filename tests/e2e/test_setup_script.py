"""launch/setup.sh finds a Python >= 3.12 where ``python3.12`` is a pyenv shim that exits 127 (the version is
installed but not selected), where the system has ``python3.12``, and says in one ``error:`` line what it tried
when there is none. Each case runs the script with a PATH of stand-ins only (a shim that fails as pyenv's does, a
``pyenv`` that names a versions folder, links to this test's own Python 3.12) and ``--dry-run``, so nothing is
installed; one slow case makes the virtual environment (``--no-install``) and checks its interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "launch", "setup.sh")
#: This test's interpreter, through its links and virtual environment: a real Python 3.12 installation.
REAL_PY = os.path.realpath(getattr(sys, "_base_executable", sys.executable))

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 12) or shutil.which("bash") is None,
                                reason="needs bash and a Python 3.12 to stand for the interpreters it finds")


def _script(path, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return str(path)


def _pyenv_shim(folder, name: str) -> str:
    """A pyenv shim of a version that is installed but not selected: pyenv's message and status 127."""
    return _script(folder / name, f"#!/bin/sh\necho 'pyenv: {name}: command not found' >&2\n"
                                  f"echo '\nThe `{name}` command exists in these Python versions:\n  3.12.1' >&2\n"
                                  "exit 127\n")


def _version_folder(root, version: str) -> str:
    (root / "versions" / version / "bin").mkdir(parents=True)
    link = root / "versions" / version / "bin" / "python"
    link.symlink_to(REAL_PY)
    return str(link)


def _run(tmp_path, bin_dir, *args, extra_env=None):
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
    env.update(extra_env or {})
    return subprocess.run([shutil.which("bash"), SCRIPT, *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))


def _lines(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


def test_a_pyenv_shim_that_exits_127_is_passed_over_for_the_newest_installed_3_12(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = _pyenv_shim(bin_dir, "python3.12")
    root = tmp_path / "pyenv_root"
    _script(bin_dir / "pyenv", f"#!/bin/sh\n[ \"$1\" = root ] && echo '{root}'\n")
    _version_folder(root, "3.11.7")
    _version_folder(root, "3.12.0")
    newest = _version_folder(root, "3.12.10")  # 10 > 9 > 1: compared as numbers, not as text
    _version_folder(root, "3.12.9")
    res = _run(tmp_path, bin_dir, "--dry-run")
    assert res.returncode == 0, res.stderr
    version = "%d.%d.%d" % sys.version_info[:3]
    assert _lines(res.stdout, "setup: Python") == [f"setup: Python {version} at {newest}"]
    assert f"setup: passed over {shim}: exits 127 (pyenv: python3.12: command not found)" in res.stdout
    # The machine has no accelerator stand-in: the CPU install of the README's line, into the checkout's .venv.
    assert f'setup: accelerator cpu -> pip install -e "{ROOT}[test]" into {ROOT}/.venv' in res.stdout
    assert _lines(res.stdout, "would run:") == [f"would run: {newest} -m venv {ROOT}/.venv",
                                                f"would run: {ROOT}/.venv/bin/python -m pip install --upgrade pip",
                                                f'would run: {ROOT}/.venv/bin/python -m pip install -e "{ROOT}[test]"']
    assert res.stderr == ""


def test_the_systems_python3_12_on_path_is_used_first(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3.12").symlink_to(REAL_PY)
    root = tmp_path / "home" / ".pyenv"  # a pyenv folder is there too, but PATH comes first
    _version_folder(root, "3.12.1")
    res = _run(tmp_path, bin_dir, "--dry-run", "--accelerator", "cuda", "--extras", "")
    assert res.returncode == 0, res.stderr
    assert _lines(res.stdout, "setup: Python")[0].endswith(f" at {bin_dir / 'python3.12'}")
    assert f'setup: accelerator cuda -> pip install -e "{ROOT}[cuda]"' in res.stdout


def test_no_usable_python_is_one_error_line_naming_what_was_tried(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = _pyenv_shim(bin_dir, "python3.12")
    # Debian's python3 without python3-venv: runs, but has no ensurepip.
    nopip = _script(bin_dir / "python3", "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'ensurepip'\" >&2\n"
                                         "exit 1\n")
    res = _run(tmp_path, bin_dir, "--dry-run")
    assert res.returncode == 1
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: no Python >= 3.12 found (tried: ")
    assert f"{shim}: exits 127 (pyenv: python3.12: command not found)" in res.stderr
    assert f"{nopip}: has no venv/ensurepip (Debian/Ubuntu: apt-get install python3.X-venv)" in res.stderr
    assert "PYTHON=/path/to/python3.12" in res.stderr


def test_python_named_in_the_environment_wins_and_a_bad_flag_is_refused(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3.12").symlink_to(REAL_PY)
    chosen = _script(tmp_path / "mypython", f"#!/bin/sh\nexec {REAL_PY} \"$@\"\n")
    res = _run(tmp_path, bin_dir, "--dry-run", extra_env={"PYTHON": chosen})
    assert res.returncode == 0, res.stderr
    assert _lines(res.stdout, "setup: Python")[0].endswith(f" at {chosen}")
    res = _run(tmp_path, bin_dir, "--accelerator", "rocm")
    assert res.returncode == 1 and res.stderr.splitlines()[-1] == (
        "error: --accelerator rocm: expected auto, cpu, cuda, cuda13 or tpu")


@pytest.mark.slow  # makes a virtual environment with pip (ensurepip): 5-20 s on 2 busy cores
def test_no_install_makes_the_virtual_environment_with_the_interpreter_it_found(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _pyenv_shim(bin_dir, "python3.12")
    root = tmp_path / "pyenv_root"
    _script(bin_dir / "pyenv", f"#!/bin/sh\n[ \"$1\" = root ] && echo '{root}'\n")
    _version_folder(root, "3.12.1")
    venv = tmp_path / "venv"
    res = _run(tmp_path, bin_dir, "--no-install", "--venv", str(venv))
    assert res.returncode == 0, res.stderr
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys, pip; print(sys.version_info[:2], "
                          "sys.prefix != sys.base_prefix)"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "(3, 12) True", out.stderr
    assert f"setup: made {venv} (Python " in res.stdout
