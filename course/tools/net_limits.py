"""How long ``course-weights`` waits on a server, in one place: the Qwen3.5 fetch gives these to its HTTP client,
the SmolLM2 fetch to pip (tests shrink them to try a stalling server in a second).

A server that accepts no connection within ``CONNECT_TIMEOUT_S`` is unreachable; one that sends nothing for
``READ_TIMEOUT_S`` stalls; one that keeps sending, but so slowly that an answer takes longer than a read timeout
plus its size at ``SLOWEST_BYTES_PER_S``, trickles (each byte on time, so no read timeout ever fires).
"""
import time

CONNECT_TIMEOUT_S = 15.0
READ_TIMEOUT_S = 30.0
SLOWEST_BYTES_PER_S = 10_000  # 10 kB/s: a 14 MB fetch may take 23 minutes, a 93 MB wheel 2.6 hours


def deadline(size: int) -> float:
    """The ``time.monotonic()`` by which an answer of ``size`` bytes, asked for now, must have arrived."""
    return time.monotonic() + READ_TIMEOUT_S + size / SLOWEST_BYTES_PER_S


def too_slow(what: str, received: int, size: int) -> str:
    """Why ``what`` was given up: only ``received`` bytes of an answer of up to ``size`` came in the time allowed."""
    allowed = READ_TIMEOUT_S + size / SLOWEST_BYTES_PER_S
    return (f"{what} is too slow: {received:,} bytes in {allowed:,.1f} s, the time allowed for up to {size:,} "
            f"({READ_TIMEOUT_S:g} s plus 1 s per {SLOWEST_BYTES_PER_S:,} bytes). The server or the network trickles; "
            "run again later or use another server.")
