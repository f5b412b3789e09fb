"""A progress line with an estimate of the time left, on stderr. On a terminal it redraws one line; in a
log (a batch job's output) it writes a line at every tenth of the way, so logs stay short."""
import sys
import time


def duration(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``42s``."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class Progress:
    def __init__(self, total: int, what: str = "notebooks", stream=None):
        self.total, self.what, self.done = total, what, 0
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self._live = self.stream.isatty()
        self._drawn_at = 0.0
        self._tenths = 0

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        share = self.done / self.total if self.total else 1.0
        bar = "#" * int(24 * share) + "." * (24 - int(24 * share))
        eta = duration(elapsed / self.done * (self.total - self.done)) if self.done else "?"
        rate = self.done / elapsed if elapsed > 0 else 0.0
        return (f"[{bar}] {self.done}/{self.total} {self.what} {100 * share:3.0f}%  "
                f"{rate:.1f}/s  elapsed {duration(elapsed)}  ETA {eta}")

    def step(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self._live:
            if now - self._drawn_at >= 0.2 or self.done == self.total:
                self.stream.write("\r" + self.line())
                self.stream.flush()
                self._drawn_at = now
        elif self.total and self.done * 10 // self.total > self._tenths:
            self._tenths = self.done * 10 // self.total
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self._live and self.total:
            self.stream.write("\n")
            self.stream.flush()
