"""METEOR through the Meteor 1.5 jar, driven over its ``-stdio`` protocol with a timeout.

Meteor (Denkowski & Lavie 2014) has no pure-Python equivalent, so we run the jar that pycocoevalcap
1.2 ships (``pycocoevalcap/meteor/meteor-1.5.jar``, found with ``importlib`` without importing the
package) or a jar given by the user. pycocoevalcap's own wrapper is not used: it blocks forever on a
``readline`` when the jar dies or gets a malformed line. This driver:

- starts ``java -Xmx2G -jar meteor-1.5.jar - - -stdio -l en [-norm]`` in the jar's directory (its
  paraphrase table ``data/paraphrase-en.gz`` lives there), exactly the command pycocoevalcap runs;
- writes one ``SCORE ||| ref_1 ||| ... ||| ref_k ||| hypothesis`` line per question from a writer
  thread, reads the statistics lines from a reader thread, and then sends one
  ``EVAL ||| stats_1 ||| ... ||| stats_n`` line per group of questions (overall, text QA, non-text QA);
  the jar answers with one score per question and then the corpus score computed from the summed
  statistics, which is the number pycocoevalcap reports;
- enforces one deadline for the whole exchange (``timeout`` seconds, default 300); on a timeout, a
  missing Java runtime, a missing jar or a crashed JVM it kills the process and raises
  :class:`MeteorUnavailable`, which the evaluator turns into ``None`` scores and a note.

Two modes (docs/design.md §9):

- ``"METEOR"``: with ``-norm``, as published papers ran it (pycocoevalcap's setting);
- ``"METEOR-vi"``: without ``-norm``. Meteor's ``-norm`` tokenizer treats ``ơ``, ``ư`` and the
  precomposed letters U+1EA0–U+1EF9 (``ạ`` ... ``ỹ``) as separators, so ``cửa tiệm`` becomes many
  tokens; the Vietnamese-safe mode keeps our whitespace tokens (the text is already normalized and
  lowercased by :mod:`openvivqa_jax.evaluation.sanitize`).

The Java binary is ``java`` on ``PATH`` unless the ``OPENVIVQA_JAVA`` environment variable or the
``java`` argument names another; the jar may also be given with ``OPENVIVQA_METEOR_JAR``.
Input strings must be sanitized (no line breaks, no ``|||``).
"""

from __future__ import annotations

import importlib.util
import os
import queue
import shutil
import subprocess
import tempfile
import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from absl import logging

from openvivqa_jax.errors import UserError

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MODES",
    "MeteorUnavailable",
    "find_java",
    "find_meteor_jar",
    "find_pycocoevalcap_jar",
    "meteor_scores",
    "meteor_scores_all_modes",
    "meteor_progress",
]

# Where meteor_scores_all_modes reports its progress (meteor_progress); None: nowhere.
_PROGRESS: contextvars.ContextVar = contextvars.ContextVar("meteor_progress", default=None)


@contextlib.contextmanager
def meteor_progress(stream) -> Iterator[None]:
    """Within the block, :func:`meteor_scores_all_modes` writes one line to ``stream`` (a text file, e.g.
    ``sys.stderr``) when a mode's jar starts and one with its seconds when it ends: the Java scorer loads its
    paraphrase table for 10-20 s, which a command line otherwise spends silent."""
    token = _PROGRESS.set(stream)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def _progress(line: str) -> None:
    stream = _PROGRESS.get()
    if stream is not None:
        print(line, file=stream, flush=True)

#: Seconds allowed for one whole jar exchange (JVM start, paraphrase table load, scoring).
DEFAULT_TIMEOUT_S = 300.0

#: Metric name -> extra jar flags.
MODES: dict[str, tuple[str, ...]] = {"METEOR": ("-norm",), "METEOR-vi": ()}

_JAR_NAME = "meteor-1.5.jar"


class MeteorUnavailable(UserError, RuntimeError):
    """METEOR cannot be computed here (no Java, no jar, JVM crash or timeout); the message says why.

    Attributes:
      item: index of the first question left without a score when the jar failed part-way (None when it
        never started); the evaluator names that question in its note.
    """

    def __init__(self, message: str, item: int | None = None):
        super().__init__(message)
        self.item = item


def _failure_cause(stderr: str, returncode: int | None) -> str:
    """A short cause from the jar's stderr and exit code (out of memory, killed, stack overflow)."""
    if "OutOfMemoryError" in stderr:
        return "out of memory (java.lang.OutOfMemoryError; the JVM runs with -Xmx2G)"
    if "StackOverflowError" in stderr:
        return "stack overflow (java.lang.StackOverflowError; a very long string?)"
    if returncode in (-9, 137):
        return "killed by signal 9 (often the system running out of memory)"
    if returncode is not None and returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def find_pycocoevalcap_jar(explicit: str | os.PathLike | None, env_var: str, inside: tuple[str, ...], what: str,
                           hint: str = "") -> str:
    """Locates a jar: ``explicit``, then ``$env_var``, then ``inside`` an installed pycocoevalcap (found with
    ``importlib.util.find_spec``, which does not import it). Used for the Meteor 1.5 and CoreNLP jars.

    Args:
      explicit: a path given by the caller, or None.
      env_var: the environment variable that may name the jar.
      inside: the jar's path inside the pycocoevalcap package, e.g. ``("meteor", "meteor-1.5.jar")``.
      what: the jar's name in the error message; hint: appended to it.

    Returns:
      The absolute path of an existing jar file.

    Raises:
      MeteorUnavailable: if no jar is found (the message lists where it looked).
    """
    tried = []
    for cand in (explicit, os.environ.get(env_var)):
        if cand:
            cand = os.path.abspath(os.fspath(cand))
            if os.path.isfile(cand):
                return cand
            tried.append(cand)
    try:
        spec = importlib.util.find_spec("pycocoevalcap")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cand = os.path.join(loc, *inside)
            if os.path.isfile(cand):
                return cand
            tried.append(cand)
    else:
        tried.append("pycocoevalcap (not installed)")
    raise MeteorUnavailable(f"{what} not found (looked at: {', '.join(tried)}){hint}")


def find_meteor_jar(meteor_jar: str | os.PathLike | None = None) -> str:
    """Locates the Meteor 1.5 jar.

    Order: the ``meteor_jar`` argument, ``$OPENVIVQA_METEOR_JAR``, then the jar inside an installed
    pycocoevalcap (located with ``importlib.util.find_spec``, which does not import it).

    Returns:
      The absolute path of an existing jar file.

    Raises:
      MeteorUnavailable: if no jar is found (the message lists where it looked).
    """
    return find_pycocoevalcap_jar(meteor_jar, "OPENVIVQA_METEOR_JAR", ("meteor", _JAR_NAME), "Meteor 1.5 jar",
                                  hint="; pass --meteor_jar")


def find_java(java: str | os.PathLike | None = None) -> str:
    """Locates the Java runtime: the ``java`` argument, ``$OPENVIVQA_JAVA``, then ``java`` on PATH.

    Raises:
      MeteorUnavailable: if the named binary does not exist or no ``java`` is on PATH.
    """
    cand = java or os.environ.get("OPENVIVQA_JAVA")
    if cand:
        cand = os.fspath(cand)
        found = shutil.which(cand) if os.sep not in cand else (cand if os.access(cand, os.X_OK) else None)
        if not found:
            raise MeteorUnavailable(f"Java runtime not found at {cand!r}")
        return found
    found = shutil.which("java")
    if not found:
        raise MeteorUnavailable("Java runtime not found (no 'java' on PATH; set OPENVIVQA_JAVA)")
    return found


class _JarSession:
    """One running jar process with a reader thread and a deadline."""

    def __init__(self, java: str, jar: str, flags: Sequence[str], deadline: float):
        self.deadline = deadline
        self.timeout = max(0.0, deadline - time.monotonic())
        self.cmd = [java, "-Xmx2G", "-jar", jar, "-", "-", "-stdio", "-l", "en", *flags]
        self.stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=os.path.dirname(jar),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
            )
        except OSError as e:
            self.stderr.close()
            raise MeteorUnavailable(f"cannot start {self.cmd[0]!r}: {e}") from None
        self.closed = False
        self.lines: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            for raw in self.proc.stdout:
                self.lines.put(raw.decode("utf-8", errors="replace").strip())
        except (OSError, ValueError):
            pass
        self.lines.put(None)

    def write(self, lines: Sequence[str]) -> threading.Thread:
        """Writes ``lines`` from a background thread (the jar may block on a full stdout pipe)."""

        def _write() -> None:
            try:
                for line in lines:
                    self.proc.stdin.write((line + "\n").encode("utf-8"))
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass  # the reader sees EOF and reports the crash

        t = threading.Thread(target=_write, daemon=True)
        t.start()
        return t

    def read(self, n: int, what: str) -> list[str]:
        """Reads ``n`` lines; a failure says which line (``MeteorUnavailable.item``) and why."""
        out = []
        while len(out) < n:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise MeteorUnavailable(f"timed out after {self.timeout:g} s while reading "
                                        f"{what} ({len(out)} of {n} lines)", item=len(out))
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise MeteorUnavailable(f"Meteor jar exited while reading {what} ({len(out)} of {n} lines): "
                                        f"{self._stderr_tail()}", item=len(out))
            out.append(line)
        return out

    def _stderr_tail(self) -> str:
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        self.stderr.seek(0)
        text = self.stderr.read().decode("utf-8", errors="replace").strip()
        tail = text.splitlines()[-3:]
        return f"{_failure_cause(text, self.proc.returncode)}; stderr: " + (" / ".join(tail) or "none")

    def close(self) -> None:
        """Kills the jar (it only exits on EOF otherwise) and releases the pipes; idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logging.warning("Meteor jar (pid %d) did not exit after kill", self.proc.pid)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except (OSError, ValueError):
                pass
        self.stderr.close()


def _check_inputs(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} reference lists")
    for i, (h, rs) in enumerate(zip(hyps, refs)):
        if not rs:
            raise ValueError(f"item {i}: no reference")
        for s in (h, *rs):
            if "|||" in s or "\n" in s or "\r" in s:
                raise ValueError(f"item {i}: string not sanitized for the Meteor protocol: {s!r}")


def _exchange(
    session: _JarSession, n: int, groups: Mapping[str, Sequence[int]]
) -> tuple[list[float], dict[str, float], list[list[float]]]:
    """Reads the statistics, sends the EVAL lines and reads the scores (SCORE lines already sent)."""
    stats = session.read(n, "statistics")
    per_q_stats: list[list[float]] = []
    for line in stats:
        try:
            per_q_stats.append([float(x) for x in line.split()])
        except ValueError:
            raise MeteorUnavailable(f"unexpected Meteor output {line[:80]!r}") from None
    requests = [("overall", list(range(n)))]
    requests += [(name, list(idx)) for name, idx in groups.items() if len(idx) and name != "overall"]
    session.write(["EVAL ||| " + " ||| ".join(stats[i] for i in idx) for _, idx in requests])
    per_question: list[float] = []
    per_group: dict[str, float] = {}
    for name, idx in requests:
        try:
            lines = session.read(len(idx) + 1, f"EVAL scores ({name})")
        except MeteorUnavailable as e:
            if name != "overall":  # a group's lines are not in question order
                e.item = None
            raise
        try:
            values = [float(x) for x in lines]
        except ValueError:
            raise MeteorUnavailable(f"unexpected Meteor output in {lines[:2]!r}") from None
        if name == "overall":
            per_question = values[:-1]
        per_group[name] = values[-1]
    return per_question, per_group, per_q_stats


def meteor_scores_all_modes(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    groups: Mapping[str, Sequence[int]],
    *,
    modes: Sequence[str] = ("METEOR", "METEOR-vi"),
    java: str | os.PathLike | None = None,
    meteor_jar: str | os.PathLike | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, tuple[list[float], dict[str, float], list[list[float]]] | MeteorUnavailable]:
    """Runs :func:`meteor_scores` for several modes, one jar process after the other.

    Each mode has its own ``timeout``; a failure of one mode does not stop the next.

    Returns:
      mode -> the :func:`meteor_scores` tuple, or the :class:`MeteorUnavailable` explaining why not.

    Raises:
      ValueError: unknown mode or unsanitized input.
    """
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown METEOR mode {mode!r}; expected one of {sorted(MODES)}")
    _check_inputs(hyps, refs)
    out: dict[str, Any] = {}
    try:
        jar = find_meteor_jar(meteor_jar)
        java_bin = find_java(java)
    except MeteorUnavailable as e:
        return {mode: e for mode in modes}
    score_lines = ["SCORE ||| " + " ||| ".join(list(rs) + [h]) for h, rs in zip(hyps, refs)]
    for mode in modes:  # one after the other: two JVMs loading the paraphrase table compete for CPU
        t0 = time.monotonic()
        _progress(f"{mode}: scoring {len(hyps)} answers with the Meteor 1.5 jar (Java; about 10-20 s) ...")
        try:
            session = _JarSession(java_bin, jar, MODES[mode], time.monotonic() + timeout)
        except MeteorUnavailable as e:
            out[mode] = e
            _progress(f"{mode}: not computed ({e})")
            continue
        try:
            session.write(score_lines)
            out[mode] = _exchange(session, len(hyps), groups)
        except MeteorUnavailable as e:
            out[mode] = e
        finally:
            session.close()
        _progress(f"{mode}: {'not computed' if isinstance(out[mode], MeteorUnavailable) else 'done'} in "
                  f"{time.monotonic() - t0:.1f} s")
    return {mode: out[mode] for mode in modes}


def meteor_scores(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    groups: Mapping[str, Sequence[int]],
    *,
    mode: str = "METEOR",
    java: str | os.PathLike | None = None,
    meteor_jar: str | os.PathLike | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> tuple[list[float], dict[str, float], list[list[float]]]:
    """METEOR of every question and of every group, from one jar process.

    Args:
      hyps: ``items`` sanitized hypotheses (no ``|||``, no line breaks; may be empty strings).
      refs: ``items`` non-empty lists of sanitized references.
      groups: extra group name -> indices into ``hyps`` (e.g. ``{"text_qa": [...]}``); empty groups
        are skipped. The group ``"overall"`` (every question) is always computed.
      mode: ``"METEOR"`` (``-norm``) or ``"METEOR-vi"`` (no ``-norm``).
      java: Java binary (default ``$OPENVIVQA_JAVA`` or ``java`` on PATH).
      meteor_jar: the jar (default ``$OPENVIVQA_METEOR_JAR`` or pycocoevalcap's).
      timeout: seconds for the whole exchange.

    Returns:
      ``(per_question, per_group, stats)``: ``(items,)`` segment scores, group name -> corpus METEOR,
      and the jar's sufficient statistics of every question (lists of floats; field 0 is the
      hypothesis length and field 1 the reference length in Meteor's tokens).

    Raises:
      MeteorUnavailable: no Java, no jar, a JVM failure, unparsable output, or the timeout.
      ValueError: unknown ``mode`` or an input line that would break the protocol.
    """
    result = meteor_scores_all_modes(
        hyps, refs, groups, modes=(mode,), java=java, meteor_jar=meteor_jar, timeout=timeout
    )[mode]
    if isinstance(result, MeteorUnavailable):
        raise result
    return result
