"""bench.systems.measure_each: each system's figures in turn; an error keeps the figures
measured before it; Ctrl-C gives None."""

from __future__ import annotations

from bench.systems import measure_each


def test_figures_of_each_system_in_turn() -> None:
    assert measure_each(["kafka", "kafkube"], lambda s: [s + "-1", s + "-2"]) == (
        ["kafka-1", "kafka-2", "kafkube-1", "kafkube-2"], None)


def test_an_error_keeps_what_was_measured_before_it() -> None:
    def measure(system: str) -> list[str]:
        if system == "kafkube":
            raise RuntimeError("a kafkube broker died")
        return ["kafka-1"]
    figures, failed = measure_each(["kafka", "kafkube"], measure)
    assert figures == ["kafka-1"] and str(failed) == "a kafkube broker died"


def test_an_interrupt_gives_none() -> None:
    def measure(system: str) -> list[str]:
        raise KeyboardInterrupt
    assert measure_each(["kafka"], measure) is None
