"""Messages between the grader and its fork server over a pipe: a JSON header and a byte payload.

The grader sends a job as a pickled payload (the fork server trusts the grader), which the fork server reads
into a memory map of its own (``read_job``), so that no copy of it stays behind in its heap. The fork server answers
with a JSON header and, for a finished run, the child's own bytes, which the grader never unpickles: it
reads them with ``report.from_bytes``, which checks every size they declare before it makes anything.
"""
import json
import mmap
import os
import struct

from autograder.engine import limits

_LENGTHS = struct.Struct(">IQ")


def write_message(fd: int, header: dict, payload: bytes = b"") -> None:
    head = json.dumps(header, ensure_ascii=False).encode()
    _write_all(fd, _LENGTHS.pack(len(head), len(payload)) + head + payload)


def read_message(fd: int, max_payload: int) -> tuple[dict, bytes]:
    """The next message on ``fd``; EOFError when the other side has gone."""
    header, payload_len = _read_header(fd, max_payload)
    return header, _read_exactly(fd, payload_len)


def _read_header(fd: int, max_payload: int) -> tuple[dict, int]:
    """A message's header, and how long its payload is (refused when either is over its limit)."""
    head_len, payload_len = _LENGTHS.unpack(_read_exactly(fd, _LENGTHS.size))
    if head_len > limits.HEADER_BYTES or payload_len > max_payload:
        raise ValueError(f"message too large: header {head_len} bytes, payload {payload_len} bytes")
    return json.loads(_read_exactly(fd, head_len)), payload_len


def read_job(fd: int, max_payload: int) -> tuple[dict, mmap.mmap]:
    """``read_message`` with the payload (never empty) read into an anonymous memory map of its size, which the
    caller closes: unmapped, its bytes are gone from this process and from every child it forks afterwards, where
    freed heap would keep them."""
    header, payload_len = _read_header(fd, max_payload)
    if payload_len == 0:
        raise ValueError("not a job: its payload is empty")
    payload, done = mmap.mmap(-1, payload_len), 0
    with memoryview(payload) as view:
        while done < payload_len:
            got = os.readv(fd, [view[done:min(payload_len, done + (1 << 20))]])
            if not got:
                break
            done += got
    if done < payload_len:
        payload.close()
        raise EOFError("the other side closed the pipe")
    return header, payload


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
