"""bench.fuzz judges a broker by what it does on the socket, against a fake broker here.

``python -m bench fuzz --seed 7`` once reported a 30 s hang on a 100 MB FindCoordinator that
the broker answered in under a second: the answer echoes the keys (100 MB), and the fuzzer
appended each 64 KiB of it to one ``bytes`` buffer, quadratic, then counted its own copying
against the broker. A long answer that streams is answered; only a broker silent for
HANG_AFTER is hung, whether it stops answering or stops reading the frame (which sendall's
overall timeout made "closed", a close after a well-formed request).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from bench import fuzz
from bench.fuzz import Fuzzer

# A frame of the fuzzer's (FindCoordinator v4, correlation id 0); the fake does not decode it.
FRAME = struct.pack(">ihhi", 8, 10, 4, 0)
PROBE_ID = 1  # the probe behind a frame takes the frame's correlation id + 1


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(min(size - len(data), 1 << 20))
        assert chunk, "the fuzzer closed mid-frame"
        data += chunk
    return bytes(data)


def _read_request(conn: socket.socket) -> int:
    """One request frame; its correlation id."""
    (size,) = struct.unpack(">i", _recv_exact(conn, 4))
    return struct.unpack_from(">i", _recv_exact(conn, size), 4)[0]


def _answer(correlation_id: int, body: int) -> bytes:
    return struct.pack(">ii", 4 + body, correlation_id) + bytes(body)


@pytest.fixture
def fake_broker() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """Start a one-connection fake broker running a behaviour; its bootstrap address. The
    test's ``done`` event lets a behaviour hold its connection until the verdict is in."""
    threads: list[threading.Thread] = []

    def start(behaviour: Callable[[socket.socket], None]) -> str:
        server = socket.create_server(("127.0.0.1", 0))

        def serve() -> None:
            with server, server.accept()[0] as conn:
                behaviour(conn)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return f"127.0.0.1:{server.getsockname()[1]}"

    yield start
    for thread in threads:
        thread.join(10)


def test_a_100_mb_answer_streamed_fast_is_answered_not_hung(fake_broker, monkeypatch) -> None:
    monkeypatch.setattr(fuzz, "HANG_AFTER", 5.0)  # the old buffering took 30 s and more

    def answers_100_mb(conn: socket.socket) -> None:
        assert (_read_request(conn), _read_request(conn)) == (0, PROBE_ID)
        conn.sendall(_answer(0, 100_000_000) + _answer(PROBE_ID, 10))

    fuzzer = Fuzzer(fake_broker(answers_100_mb), seed=7)
    started = time.monotonic()
    outcome = fuzzer.send(10, 4, FRAME, mangled=False)
    took = time.monotonic() - started
    fuzzer._drop()
    assert outcome in ("answered", "late"), f"{outcome} after {took:.1f} s"
    assert not fuzzer.stats.hangs_by_api and fuzzer.stats.answered == 1


def test_a_broker_silent_for_hang_after_is_hung(fake_broker, monkeypatch) -> None:
    monkeypatch.setattr(fuzz, "HANG_AFTER", 0.5)
    done = threading.Event()

    def reads_and_never_answers(conn: socket.socket) -> None:
        _read_request(conn)
        _read_request(conn)
        done.wait(30)

    fuzzer = Fuzzer(fake_broker(reads_and_never_answers), seed=7)
    assert fuzzer.send(10, 4, FRAME, mangled=False) == "hang"
    done.set()
    assert fuzzer.stats.hangs_by_api == {10: 1} and fuzzer.stats.hang_samples


def test_a_broker_that_stops_reading_the_frame_is_hung_not_closed(
        fake_broker, monkeypatch) -> None:
    """More than the socket buffers hold, never read: sendall's 10 s timeout made this a
    "closed" after a well-formed frame, which the fuzz run fails on as a broker bug."""
    monkeypatch.setattr(fuzz, "HANG_AFTER", 0.5)
    done = threading.Event()
    fuzzer = Fuzzer(fake_broker(lambda conn: done.wait(30)), seed=7)
    frame = struct.pack(">ihhi", 64 << 20, 10, 4, 0) + bytes((64 << 20) - 8)
    started = time.monotonic()
    outcome = fuzzer.send(10, 4, frame, mangled=False)
    took = time.monotonic() - started
    done.set()
    assert outcome == "hang", f"{outcome} after {took:.1f} s"
    assert not fuzzer.stats.closed_intact


def test_a_broker_answering_slowly_but_steadily_is_late_not_hung(
        fake_broker, monkeypatch) -> None:
    """Bytes every 0.2 s for 2 s against a 1 s HANG_AFTER: progress, not silence."""
    monkeypatch.setattr(fuzz, "HANG_AFTER", 1.0)
    monkeypatch.setattr(fuzz, "SLOW_AFTER", 0.5)

    def trickles(conn: socket.socket) -> None:
        _read_request(conn)
        _read_request(conn)
        answer = _answer(0, 9000) + _answer(PROBE_ID, 10)
        for start in range(0, len(answer), 1000):
            conn.sendall(answer[start : start + 1000])
            time.sleep(0.2)  # the slow broker's pace, not a wait for anything

    fuzzer = Fuzzer(fake_broker(trickles), seed=7)
    assert fuzzer.send(10, 4, FRAME, mangled=False) == "late"
    fuzzer._drop()
    assert fuzzer.stats.late == 1 and not fuzzer.stats.hangs_by_api


def test_answers_are_found_in_any_split_of_the_stream() -> None:
    stream = _answer(5, 0) + _answer(6, 70_000) + _answer(7, 3)
    for piece in (1, 7, 8, 9, 65_536, len(stream)):
        scanner = fuzz.AnswerScanner()
        found = [c for i in range(0, len(stream), piece)
                 for c in scanner.feed(stream[i : i + piece])]
        assert found == [5, 6, 7], piece
