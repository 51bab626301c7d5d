"""The Java transaction programs (tests/clients/java-txn) as subprocesses, for the transaction
tests.

``TxnCheck`` (modes ``copy``, ``produce``, ``read``, ``fence``) and ``WordCount`` (modes ``run``,
``read``) are compiled by tests/clients/java-txn/setup.sh (called from scripts/setup.sh) into
``$KAFKUBE_CACHE`` (default ~/.cache/kafkube). Each run prints one JSON object on stdout; the
helpers here return it parsed, with the exit code and stderr for failure messages. The modes and
their JSON fields are documented at the top of TxnCheck.java and WordCount.java.

A missing JDK or build makes the test fail, not skip: the suite promises these clients work.

Blocking helpers (``copy``, ``produce``, ``read``, ``fence``, ``wordcount``,
``read_word_counts``) wait for the program, bounded by its own ``timeout_s`` plus a grace, and
by default assert that it succeeded (``ok=True``); ``ok=False`` asserts that it failed and
``ok=None`` checks nothing. ``start_copy`` and ``start_wordcount`` return a ``Running`` program,
so that a test can kill brokers meanwhile, then ``wait`` for it (or ``stop`` it with SIGTERM).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from kafkube.harness.checkout import cache_dir
from tests.support import CLIENTS_DIR

JAVA_TXN_DIR = CLIENTS_DIR / "java-txn"
SOURCES = ("TxnCheck.java", "WordCount.java")
# Beyond a program's own --timeout-s: its watchdog ends it at most this much later (client
# calls in flight, KafkaStreams.close), so the JSON is always printed before we kill it.
GRACE_S = 150.0
# Runs with no --timeout-s of their own (read, fence, produce default to 60 s in the program).
DEFAULT_TIMEOUT_S = 60.0
JVM_OPTS = ["-Xmx768m", "-XX:+UseSerialGC"]
COPY_SUFFIX = ":copied"
# WordCount's word separator: Java's \s (space, \t, \n, \x0B, \f, \r).
_WORD_SPLIT = re.compile(r"[ \t\n\x0b\f\r]+")


# --------------------------------------------------------------------------- locating the build


def txn_build_dirs() -> tuple[Path, Path]:
    """(classes dir, jar dir) as written by tests/clients/java-txn/setup.sh."""
    cache = cache_dir()
    return cache / "java-txn-classes", cache / "java-txn-lib"


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def java_command(main: str) -> list[str]:
    """The command prefix that runs ``main`` (TxnCheck or WordCount); fails the test if the
    JDK or the build is missing or stale."""
    hint = "install it with scripts/setup.sh (or: bash tests/clients/java-txn/setup.sh)"
    java = shutil.which("java")
    if java is None:
        pytest.fail(f"the transaction programs need a JDK: no `java` on PATH; {hint}",
                    pytrace=False)
    classes, lib = txn_build_dirs()
    if not (classes / f"{main}.class").is_file():
        pytest.fail(f"{main} is not compiled: {classes}/{main}.class is missing; {hint}",
                    pytrace=False)
    for jar in ("kafka-clients-*.jar", "kafka-streams-*.jar", "rocksdbjni-*.jar"):
        if not list(lib.glob(jar)):
            pytest.fail(f"no {jar} in {lib}; {hint}", pytrace=False)
    inputs = (classes / ".inputs").read_text().split() if (classes / ".inputs").is_file() else []
    wanted = [*(_sha1(JAVA_TXN_DIR / s) for s in SOURCES), _sha1(JAVA_TXN_DIR / "pom.xml")]
    if inputs != wanted:
        pytest.fail(f"the compiled programs in {classes} are stale (a source or pom.xml "
                    f"changed); {hint}", pytrace=False)
    return [java, *JVM_OPTS, "-cp", f"{classes}{os.pathsep}{lib / '*'}", main]


# --------------------------------------------------------------------------- running them


@dataclass
class Result:
    """A finished run: the exit code and the JSON object it printed."""

    argv: list[str]
    code: int
    data: dict[str, Any]
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.data.get("ok") is True

    def describe(self) -> str:
        err = "\n".join(self.stderr.strip().splitlines()[-40:])
        return (f"{' '.join(self.argv)}\nexit code {self.code}\n"
                f"result: {json.dumps(self.data)[:4000]}\nstderr (last lines):\n{err}")


def _argv(main: str, mode: str, options: dict[str, object], flags: Iterable[str]) -> list[str]:
    argv = [main, mode]
    for name, value in options.items():
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    argv += [f"--{f}" for f in flags]
    return argv


class Running:
    """A started program. Its output goes to files (a pipe could fill up and block the JVM);
    ``wait``/``stop`` read them. Always end it with ``wait``, ``stop`` or ``kill``. Start it
    from the test's main thread: the JVM gets SIGKILL when the thread that started it ends
    (setpriv --pdeathsig), so that a killed test run leaves no JVM behind."""

    def __init__(self, argv: list[str], timeout_s: float) -> None:
        command = java_command(argv[0])
        self.argv = argv
        self.timeout_s = timeout_s
        self._closed = False
        self.scratch = Path(tempfile.mkdtemp(prefix="kafkube-txn-java-"))
        self._stdout: IO[bytes] = (self.scratch / "stdout").open("w+b")
        self._stderr: IO[bytes] = (self.scratch / "stderr").open("w+b")
        # java.io.tmpdir of its own: RocksDB unpacks its native library there, and a halted
        # JVM does not delete it.
        tmp = self.scratch / "tmp"
        tmp.mkdir()
        command[1:1] = [f"-Djava.io.tmpdir={tmp}"]
        # setpriv: the JVM gets SIGKILL if the test process dies without cleaning up.
        if shutil.which("setpriv"):
            command[:0] = ["setpriv", "--pdeathsig", "KILL", "--"]
        # A UTF-8 locale, or the JVM decodes non-ASCII arguments as '?'.
        self.proc = subprocess.Popen(command + argv[1:], stdout=self._stdout,
                                     stderr=self._stderr, stdin=subprocess.DEVNULL,
                                     env={**os.environ, "LC_ALL": "C.UTF-8"},
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        """What it wrote to stderr so far."""
        return (self.scratch / "stderr").read_bytes().decode(errors="replace")

    def wait(self, timeout: float | None = None, ok: bool | None = True) -> Result:
        """Wait for it to end (by default its own timeout plus ``GRACE_S``; SIGKILL and fail
        past that) and parse its JSON. ``ok``: as for the blocking helpers."""
        if self._closed:
            raise RuntimeError(f"{' '.join(self.argv)} was already waited for or killed")
        limit = self.timeout_s + GRACE_S if timeout is None else timeout
        try:
            self.proc.wait(limit)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{' '.join(self.argv)} did not finish within {limit:.0f}s; stderr:\n"
                        f"{self.stderr()[-4000:]}")
        return self._finish(ok)

    def stop(self, timeout: float = 90.0, ok: bool | None = None) -> Result:
        """SIGTERM: the program stops at its next step and prints its JSON (WordCount run
        without --expected-words reports ok then; the other modes report interrupted)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        return self.wait(timeout, ok=ok)

    def kill(self) -> None:
        """SIGKILL, no result (a crash of the application)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._close()

    def _close(self) -> None:
        self._closed = True
        self._stdout.close()
        self._stderr.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _finish(self, ok: bool | None) -> Result:
        stdout = (self.scratch / "stdout").read_bytes().decode(errors="replace")
        stderr = self.stderr()
        self._close()
        code = self.proc.returncode
        lines = [line for line in stdout.splitlines() if line.strip()]
        try:
            data = json.loads(lines[-1])
            assert isinstance(data, dict)
        except (IndexError, ValueError, AssertionError):
            pytest.fail(f"{' '.join(self.argv)} printed no JSON object (exit {code})\n"
                        f"stdout: {stdout[-2000:]}\nstderr: {stderr[-4000:]}")
        result = Result(self.argv, code, data, stderr)
        assert len(lines) == 1, "printed more than one line:\n" + result.describe()
        assert data.get("ok") is (code == 0), "exit code and 'ok' disagree:\n" + result.describe()
        if ok is True:
            assert code == 0, "failed:\n" + result.describe()
        elif ok is False:
            assert code == 1, "should have failed:\n" + result.describe()
        return result


def start(main: str, mode: str, options: dict[str, object], flags: Iterable[str] = (),
          timeout_s: float = DEFAULT_TIMEOUT_S) -> Running:
    """Start ``main mode --option value ... --flag ...`` (underscores in option names become
    dashes; ``None`` values are left out)."""
    return Running(_argv(main, mode, options, flags), timeout_s)


def run(main: str, mode: str, options: dict[str, object], flags: Iterable[str] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S, ok: bool | None = True) -> Result:
    """Run a mode to its end (see ``start`` and ``Running.wait``)."""
    return start(main, mode, options, flags, timeout_s).wait(ok=ok)


# --------------------------------------------------------------------------- TxnCheck


def start_copy(bootstrap: str, input_topic: str, output_topic: str, group: str,
               transactional_id: str, expected: int, timeout_s: float, commit_every: int = 100,
               client_timeout_ms: int | None = None, transaction_timeout_ms: int | None = None,
               group_protocol: str | None = None, assign: bool = False) -> Running:
    """Start the transactional consume-transform-produce loop (``TxnCheck copy``): it ends once
    the group's committed offsets reach the input's end offsets (which add up to at least
    ``expected``: the number of input records, written without transactions)."""
    return start("TxnCheck", "copy", {
        "bootstrap": bootstrap, "input": input_topic, "output": output_topic, "group": group,
        "transactional_id": transactional_id, "expected": expected,
        "timeout_s": int(timeout_s), "commit_every": commit_every,
        "client_timeout_ms": client_timeout_ms,
        "transaction_timeout_ms": transaction_timeout_ms, "group_protocol": group_protocol,
    }, ["assign"] if assign else [], timeout_s)


def copy(*args: Any, ok: bool | None = True, **kwargs: Any) -> Result:
    """``start_copy`` and wait for it. JSON: transactions_committed, transactions_aborted,
    producer_recreations, consumer_recreations, records_copied, commit_retries,
    commits_uncertain, offsets_only_commits, errors, committed_offsets, end_offsets,
    elapsed_ms."""
    return start_copy(*args, **kwargs).wait(ok=ok)


def produce(bootstrap: str, topic: str, transactional_id: str, transactions: int,
            per_transaction: int, abort_every: int = 0, first_transaction: int = 0,
            leave_open: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S,
            transaction_timeout_ms: int | None = None, ok: bool | None = True) -> Result:
    """``TxnCheck produce``: transactions of ``per_transaction`` records, every
    ``abort_every``-th aborted; values "committed-t-j" / "aborted-t-j" (and "open-t-j" for the
    transaction left open with ``leave_open``). JSON: transactions_committed,
    transactions_aborted, records_committed, records_aborted, records_open."""
    return run("TxnCheck", "produce", {
        "bootstrap": bootstrap, "topic": topic, "transactional_id": transactional_id,
        "transactions": transactions, "per_transaction": per_transaction,
        "abort_every": abort_every, "first_transaction": first_transaction,
        "timeout_s": int(timeout_s), "transaction_timeout_ms": transaction_timeout_ms,
    }, ["leave-open"] if leave_open else [], timeout_s, ok)


def read(bootstrap: str, topic: str, isolation: str = "read_committed",
         timeout_s: float = DEFAULT_TIMEOUT_S, ok: bool | None = True) -> Result:
    """``TxnCheck read``: the whole topic up to its end offsets for ``isolation``. JSON: count,
    prefixes (value up to its first '-' -> count), duplicates, duplicated, partitions,
    end_offsets, and values (sorted; fewer than 1000) or values_count and values_sha1 (see
    ``values_sha1``)."""
    return run("TxnCheck", "read", {"bootstrap": bootstrap, "topic": topic,
                                    "isolation": isolation, "timeout_s": int(timeout_s)},
               (), timeout_s, ok)


def fence(bootstrap: str, topic: str, transactional_id: str,
          timeout_s: float = DEFAULT_TIMEOUT_S, ok: bool | None = True) -> Result:
    """``TxnCheck fence``: two producers with one transactional.id. JSON: older_exception,
    older_exception_chain, older_fenced, older_committed, newer_committed."""
    return run("TxnCheck", "fence", {"bootstrap": bootstrap, "topic": topic,
                                     "transactional_id": transactional_id,
                                     "timeout_s": int(timeout_s)}, (), timeout_s, ok)


def copied_value(value: str) -> str:
    """What ``copy`` writes for an input value."""
    return value + COPY_SUFFIX


def values_sha1(values: Iterable[str]) -> str:
    """``read``'s values_sha1: sha1 of the sorted values joined by newlines, UTF-8 (Python's
    sort equals Java's for text without characters outside the BMP)."""
    return hashlib.sha1("\n".join(sorted(values)).encode()).hexdigest()


# --------------------------------------------------------------------------- WordCount


def start_wordcount(bootstrap: str, input_topic: str, output_topic: str, application_id: str,
                    state_dir: Path | str, timeout_s: float, expected_words: int | None = None,
                    replication_factor: int | None = None,
                    commit_interval_ms: int | None = None) -> Running:
    """Start the Kafka Streams word count (exactly_once_v2). With ``expected_words`` it ends by
    itself once the counts on ``output_topic`` add up to it; otherwise ``stop()`` it (or let
    it reach ``timeout_s``). The output topic must exist before it starts."""
    return start("WordCount", "run", {
        "bootstrap": bootstrap, "input": input_topic, "output": output_topic,
        "application_id": application_id, "state_dir": state_dir, "timeout_s": int(timeout_s),
        "expected_words": expected_words, "replication_factor": replication_factor,
        "commit_interval_ms": commit_interval_ms,
    }, (), timeout_s)


def wordcount(*args: Any, ok: bool | None = True, **kwargs: Any) -> Result:
    """``start_wordcount`` and wait for it. JSON: words_total, distinct_words, expected_words,
    reached, output_records, state, transitions, thread_replacements, elapsed_ms."""
    return start_wordcount(*args, **kwargs).wait(ok=ok)


def read_word_counts(bootstrap: str, topic: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                     ok: bool | None = True) -> dict[str, int]:
    """The latest count per word on the word count's output topic, read with read_committed
    (``WordCount read``)."""
    result = run("WordCount", "read", {"bootstrap": bootstrap, "topic": topic,
                                       "timeout_s": int(timeout_s)}, (), timeout_s, ok)
    return {str(k): int(v) for k, v in result.data.get("counts", {}).items()}


def count_words(lines: Iterable[str]) -> dict[str, int]:
    """The counts WordCount should reach for these input lines (the same split)."""
    counts: dict[str, int] = {}
    for line in lines:
        for word in _WORD_SPLIT.split(line):
            if word:
                counts[word] = counts.get(word, 0) + 1
    return counts
