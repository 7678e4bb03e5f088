"""The access-log writer (`user_api.access_log.LineWriter`): request threads queue their lines, one
thread writes them, woken once per batch rather than once per line (a wake-up per request cost each
fresh document read ~7 futex calls and a `write`: bench/PROFILE.md, freshbase), and nothing queued
is lost on a clean stop."""

from __future__ import annotations

import io
import threading

from tests.support import poll
from user_api.access_log import LineWriter


class CountedStream(io.StringIO):
    """stderr as the writer sees it, counting the writes it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)

    def lines(self) -> list[str]:
        return self.getvalue().splitlines()


def put_from_threads(writer: LineWriter, threads: int, each: int) -> None:
    def put(thread: int) -> None:
        for index in range(each):
            writer.put(f"t{thread} {index}")

    started = [threading.Thread(target=put, args=(thread,)) for thread in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()


def test_lines_queued_within_the_interval_are_one_write_and_a_clean_stop_writes_them() -> None:
    out = CountedStream()
    writer = LineWriter(lambda: out, interval=3600, size=10_000)
    put_from_threads(writer, threads=4, each=100)
    # Woken per line, the writer would have written some of these already (a write per wake-up).
    assert out.writes == 0
    writer.close()
    assert out.writes == 1
    lines = out.lines()
    assert len(lines) == 400
    for thread in range(4):  # each thread's lines in the order it put them
        assert [line for line in lines if line.startswith(f"t{thread} ")] == [f"t{thread} {index}" for index in range(100)]


def test_a_full_batch_is_written_without_waiting_for_the_interval() -> None:
    out = CountedStream()
    writer = LineWriter(lambda: out, interval=3600, size=50)
    try:
        put_from_threads(writer, threads=1, each=50)
        poll(lambda: len(out.lines()) == 50, "the full batch written")
        assert out.writes == 1
    finally:
        writer.close()


def test_a_line_after_a_written_batch_wakes_the_writer_again() -> None:
    out = CountedStream()
    writer = LineWriter(lambda: out, interval=0.01)
    try:
        for index in range(3):
            writer.put(f"line {index}")
            poll(lambda index=index: len(out.lines()) == index + 1, f"line {index} written")  # type: ignore[misc]
        assert out.lines() == ["line 0", "line 1", "line 2"]
    finally:
        writer.close()


def test_a_failing_stream_loses_its_batch_never_the_writer() -> None:
    out = CountedStream()
    broken = {"first": True}

    def stream() -> io.StringIO:
        if broken.pop("first", False):
            raise OSError("stderr is gone")
        return out

    writer = LineWriter(stream, interval=0.01)
    try:
        writer.put("lost")
        poll(lambda: not broken, "the failing write tried")
        writer.put("kept")
        poll(lambda: out.lines() == ["kept"], "the next line written")
    finally:
        writer.close()
