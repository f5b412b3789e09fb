"""Messages between the grader and its fork server over a pipe: a JSON header and a byte payload.

The grader sends a job as a pickled payload (the fork server trusts the grader). The fork server answers
with a JSON header and, for a finished run, the child's own bytes, which the grader never unpickles: it
reads them with ``report.from_bytes``, which checks every size they declare before it makes anything.
"""
import json
import os
import struct

from autograder.engine import limits

_LENGTHS = struct.Struct(">IQ")


def write_message(fd: int, header: dict, payload: bytes = b"") -> None:
    head = json.dumps(header, ensure_ascii=False).encode()
    _write_all(fd, _LENGTHS.pack(len(head), len(payload)) + head + payload)


def read_message(fd: int, max_payload: int) -> tuple[dict, bytes]:
    """The next message on ``fd``; EOFError when the other side has gone."""
    head_len, payload_len = _LENGTHS.unpack(_read_exactly(fd, _LENGTHS.size))
    if head_len > limits.HEADER_BYTES or payload_len > max_payload:
        raise ValueError(f"message too large: header {head_len} bytes, payload {payload_len} bytes")
    header = json.loads(_read_exactly(fd, head_len))
    return header, _read_exactly(fd, payload_len)


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
