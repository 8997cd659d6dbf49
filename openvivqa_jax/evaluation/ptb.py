"""The original toolkit's text processing: Stanford PTBTokenizer + punctuation removal (pycocoevalcap).

The ``pycocoevalcap`` text mode of :func:`openvivqa_jax.evaluation.score` prepares every string as
pycocoevalcap 1.2 (``tokenizer/ptbtokenizer.py``) does before its BLEU, METEOR, ROUGE-L and CIDEr
scorers, so that scores computed with the original toolkit are reproduced exactly:

1. one string per line (the toolkit replaces ``\\n`` by a space; we replace every line break,
   :data:`~openvivqa_jax.text.normalize.LINE_BREAKS`, because another one would shift the jar's lines);
2. the Stanford CoreNLP 3.4.1 ``PTBTokenizer`` with ``-preserveLines -lowerCase``, run from the jar
   that ships inside pycocoevalcap (Java needed, as for METEOR);
3. the tokens ``'' ' `` ` -LRB- -RRB- -LCB- -RCB- . ? ! , : - -- ... ;`` removed.

No Vietnamese normalization happens: ``Toà`` stays ``toà`` (the default mode writes ``tòa``), prices
and Unicode forms are left as written.

Raises :class:`~openvivqa_jax.evaluation.meteor.MeteorUnavailable` (the Java-tool error of this
package) when Java or the jar is missing, the jar fails, or its output does not line up with the input.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence

from openvivqa_jax.evaluation.meteor import MeteorUnavailable, find_java, find_pycocoevalcap_jar
from openvivqa_jax.text.normalize import LINE_BREAKS

__all__ = ["PUNCTUATIONS", "find_corenlp_jar", "ptb_tokenize"]

#: Tokens pycocoevalcap removes after PTB tokenization.
PUNCTUATIONS = frozenset(["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-",
                          "--", "...", ";"])
_JAR_NAME = "stanford-corenlp-3.4.1.jar"
_LINE_BREAK_RE = re.compile("[" + re.escape(LINE_BREAKS) + "]")


def find_corenlp_jar(jar: str | os.PathLike | None = None) -> str:
    """Locates the Stanford CoreNLP 3.4.1 jar: ``jar``, ``$OPENVIVQA_CORENLP_JAR``, then pycocoevalcap's.

    Raises:
      MeteorUnavailable: no jar found (the message lists where it looked).
    """
    return find_pycocoevalcap_jar(jar, "OPENVIVQA_CORENLP_JAR", ("tokenizer", _JAR_NAME),
                                  f"Stanford CoreNLP jar {_JAR_NAME}")


def ptb_tokenize(texts: Sequence[str], *, java: str | os.PathLike | None = None,
                 jar: str | os.PathLike | None = None, timeout: float = 300.0) -> list[str]:
    """Tokenizes ``texts`` as pycocoevalcap's ``PTBTokenizer.tokenize`` does (module doc).

    Args:
      texts: ``(items,)`` raw strings (any case, punctuation, Unicode form).
      java: Java binary (default ``$OPENVIVQA_JAVA`` or ``java`` on PATH).
      jar: the CoreNLP jar (default: :func:`find_corenlp_jar`).
      timeout: seconds allowed for the jar.

    Returns:
      ``(items,)`` strings of lowercased tokens separated by single spaces, punctuation tokens removed.

    Raises:
      MeteorUnavailable: no Java or jar, the jar failed or timed out, or it returned fewer lines.
    """
    if not texts:
        return []
    java_bin = find_java(java)
    jar_path = find_corenlp_jar(jar)
    lines = [_LINE_BREAK_RE.sub(" ", t) for t in texts]
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines).encode("utf-8"))
        path = f.name
    cmd = [java_bin, "-cp", jar_path, "edu.stanford.nlp.process.PTBTokenizer", "-preserveLines", "-lowerCase", path]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise MeteorUnavailable(f"PTBTokenizer timed out after {timeout:g} s on {len(texts)} strings") from None
    except OSError as e:
        raise MeteorUnavailable(f"cannot start {java_bin!r}: {e}") from None
    finally:
        os.remove(path)
    if proc.returncode != 0:
        tail = " / ".join(proc.stderr.decode("utf-8", errors="replace").strip().splitlines()[-3:])
        raise MeteorUnavailable(f"PTBTokenizer failed (exit code {proc.returncode}): {tail or 'no stderr'}")
    out = proc.stdout.decode("utf-8").split("\n")
    if len(out) < len(texts):
        raise MeteorUnavailable(f"PTBTokenizer returned {len(out)} lines for {len(texts)} strings")
    return [" ".join(w for w in line.rstrip().split(" ") if w and w not in PUNCTUATIONS) for line in out[: len(texts)]]
