"""Cases the fork server keeps between jobs, so that a job sends its cases' bytes once, not once per notebook.

An exercise's cases are the same for every notebook a process grades (``Exercise.made_cases``), and those of a
real-size layer are tens of MB: pickled, written through the pipe and read back for each notebook, they took
longer than running the student's code on them. The grader (``Sent``) now sends them with the first job that
needs them and their key after that; it decides what the fork server keeps and tells it what to let go.

The fork server (``Held``) keeps each as its pickled bytes in an anonymous memory map and never unpickles it.
A child unpickles its own job's cases and unmaps every kept map before the walls go up, so that the code under
test cannot find another exercise's cases in its memory (some are built from a reference's outputs).
"""
import mmap
import pickle
from collections import OrderedDict

from autograder.engine import limits


class Sent:
    """The grader's side: which cases the fork server holds, by key, the least recently used first."""

    def __init__(self):
        self._held: OrderedDict[int, tuple[object, int, int]] = OrderedDict()  # id(cases) -> (cases, size, key)
        self._bytes = 0
        self._next = 0

    def plan(self, cases) -> tuple[dict, bytes]:
        """What goes with a job for ``cases``: the message header's entries (``cases``: the key, and, when
        their bytes go along, ``cases_bytes``: how many, at the payload's end; ``forget``: keys to let go) and
        the bytes to append to the payload (empty when the fork server holds them)."""
        found = self._held.get(id(cases))
        if found is not None and found[0] is cases:
            self._held.move_to_end(id(cases))
            return {"cases": found[2]}, b""
        data = pickle.dumps(cases, protocol=pickle.HIGHEST_PROTOCOL)
        self._next += 1
        header = {"cases": self._next, "cases_bytes": len(data), "keep": len(data) <= limits.HELD_CASES_BYTES}
        if header["keep"]:
            forget = []
            while self._held and self._bytes + len(data) > limits.HELD_CASES_BYTES:
                _, (_, size, key) = self._held.popitem(last=False)
                forget.append(key)
                self._bytes -= size
            self._held[id(cases)] = (cases, len(data), self._next)
            self._bytes += len(data)
            if forget:
                header["forget"] = forget
        return header, data


class Held:
    """The fork server's side: each kept job's payload (``wire.read_job``'s memory map) and where its cases start."""

    def __init__(self):
        self._maps: dict[int, tuple[mmap.mmap, int]] = {}

    def take(self, header: dict, payload: mmap.mmap) -> tuple[bytes, tuple[mmap.mmap, int]]:
        """Split a job's payload as ``header`` says (``Sent.plan``): the job's own bytes, and where its cases lie
        (``(map, offset)``, for ``cases`` in the child and ``done`` afterwards). Keeps the cases' bytes when told
        to, and lets go of those in ``forget``."""
        for key in header.get("forget", ()):
            self._maps.pop(key)[0].close()
        size = header.get("cases_bytes")
        if size is None:
            job = payload[:]
            payload.close()
            return job, self._maps[header["cases"]]
        where = (payload, len(payload) - size)
        if header.get("keep"):
            self._maps[header["cases"]] = where
        return payload[:where[1]], where

    def done(self, where: tuple[mmap.mmap, int]) -> None:
        """After the job: its payload goes, unless its cases are kept."""
        if all(where[0] is not kept for kept, _ in self._maps.values()):
            where[0].close()

    def cases(self, where: tuple[mmap.mmap, int]) -> tuple:
        """In a child, once: the job's cases, after which no kept payload is left in this process."""
        payload, offset = where
        try:
            with memoryview(payload) as whole, whole[offset:] as part:
                return pickle.loads(part)  # from the grader, which started the fork server
        finally:
            for kept in {id(m): m for m, _ in [*self._maps.values(), where]}.values():
                kept.close()
            self._maps.clear()
