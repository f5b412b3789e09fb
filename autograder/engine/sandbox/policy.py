"""The sandbox's effective policy: what a run of student code may do on this machine, as one frozen value.

The fork server makes it from the walls it put up (``walls.Walls.policy``, after ``prepare``), from the very
values each run's walls are put up with: the Landlock grants, the seccomp rules, the limits, the user runs drop
to, the private folder. It sends it with its hello (``to_wire``; the grader reads it with ``from_wire``, see
``client.Sandbox.policy``), and ``course-doctor --sandbox`` prints it (``describe``). Nothing here is recomputed in
the grader.
"""
import textwrap
from dataclasses import asdict, dataclass

READ, LIST = "read", "list"  # a whole tree; a folder's own entries, each granted (or not) on its own


@dataclass(frozen=True)
class Limits:
    """What one run may use before it is stopped (``walls._limit_resources``), as this machine lets it be set."""

    extra_memory_bytes: int  # address space a run may add to what the fork server maps (RLIMIT_AS)
    memory_ceiling_bytes: int | None  # the host's own RLIMIT_AS (e.g. `ulimit -v`), the cap when it is lower
    cpu_s: float  # CPU seconds of one exercise, RLIMIT_CPU one above (what is left of a notebook's cap may be less)
    file_bytes: int  # RLIMIT_FSIZE
    open_files: int  # RLIMIT_NOFILE
    processes: int | None  # RLIMIT_NPROC; None where the grader is root, whom it does not bind (seccomp does)
    tmp_bytes: int | None  # the private folder's tmpfs, which counts as memory; None when it is a folder on disk
    tmp_files: int | None
    output_bytes: int  # what a run may hand back


@dataclass(frozen=True)
class Denied:
    """A system call the seccomp filter refuses: it fails with ``errno``, except when ``unless`` holds."""

    syscall: str
    errno: str
    unless: str = ""


@dataclass(frozen=True)
class Policy:
    """The walls up, and those missing with the reason, and what a run behind them may do."""

    up: tuple[str, ...] = ()
    missing: tuple[tuple[str, str], ...] = ()  # (wall, why it is missing)
    limits: Limits | None = None  # None without rlimits
    readable: tuple[tuple[str, str], ...] = ()  # Landlock's grants, (path, READ or LIST); none without Landlock
    devices: tuple[str, ...] = ()  # read and written under Landlock
    writable: str = ""  # the private folder, a run's working folder, HOME and TMPDIR (under Landlock, all it writes)
    denied: tuple[Denied, ...] = ()  # seccomp's rules; none without it
    user: tuple[int, int] | None = None  # (uid, gid) runs drop to; None: they keep the grader's
    privileges_dropped: bool = False  # every capability dropped and no_new_privs set (Linux)
    hidden: tuple[str, ...] = ()  # emptied in each run's mount namespace (without Landlock)
    covers: tuple[tuple[str, tuple[str, ...]], ...] = ()  # a folder runs' user may not enter -> what it shows

    @property
    def missing_walls(self) -> dict[str, str]:
        return dict(self.missing)

    def to_wire(self) -> dict:
        """The policy as JSON takes it (``from_wire`` makes it again): its fields, tuples as lists."""
        return {**asdict(self), "missing": dict(self.missing), "covers": dict(self.covers)}

    @classmethod
    def from_wire(cls, sent: dict) -> "Policy":
        user, limits = sent["user"], sent["limits"]
        return cls(up=tuple(sent["up"]), missing=tuple(sent["missing"].items()),
                   limits=None if limits is None else Limits(**limits),
                   readable=tuple((path, rights) for path, rights in sent["readable"]), devices=tuple(sent["devices"]),
                   writable=sent["writable"], denied=tuple(Denied(**rule) for rule in sent["denied"]),
                   user=None if user is None else (user[0], user[1]), privileges_dropped=sent["privileges_dropped"],
                   hidden=tuple(sent["hidden"]),
                   covers=tuple((folder, tuple(shown)) for folder, shown in sent["covers"].items()))

    def describe(self, purpose: dict[str, str] | None = None) -> list[str]:
        """The policy as lines to print; ``purpose`` names what each wall keeps from student code."""
        purpose = purpose or {}
        lines = ["Walls up:"] + [f"  ✓ {wall}: {purpose.get(wall, wall)}" for wall in self.up or ["none"]]
        if self.missing:
            lines.append("Walls missing:")
            lines += [f"  ✗ {wall}: {purpose.get(wall, wall)} — {why}" for wall, why in self.missing]
        lines += ["Limits of one run:"] + ([f"  {line}" for line in _limits(self.limits)] if self.limits else
                                          ["  none (no resource limits on this platform)"])
        lines.append(_writes(self.writable, "landlock" in self.up))
        lines += _reads(self.readable, self.devices)
        lines.append("Runs as: " + (f"uid:gid {self.user[0]}:{self.user[1]}" if self.user else "the grader's user")
                     + (", without capabilities or new privileges" if self.privileges_dropped else ""))
        if self.hidden:
            lines += ["Empty in each run (its own mount namespace):"] + [f"  {folder}" for folder in self.hidden]
        for folder, shown in self.covers:
            lines.append(f"Shown in {folder}, which that user may not enter: only {', '.join(shown)}")
        denied = [f"{rule.syscall} ({rule.errno})" + (f" unless {rule.unless}" if rule.unless else "")
                  for rule in self.denied]
        lines.append("Seccomp denies: " + ("; ".join(denied) if denied else "nothing (no seccomp filter)"))
        return lines


def size(n: int) -> str:
    """``3 GiB``, ``64 MiB``, ``512 KiB`` or ``100 bytes``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _limits(limits: Limits) -> list[str]:
    memory = f"memory: {size(limits.extra_memory_bytes)} of address space beyond the fork server's own"
    if limits.memory_ceiling_bytes is not None:
        memory += f", at most {size(limits.memory_ceiling_bytes)} in all (this machine's RLIMIT_AS)"
    tmp = (f"private folder: a {size(limits.tmp_bytes)} tmpfs of at most {limits.tmp_files} files, counted as memory"
           if limits.tmp_bytes is not None else "private folder: on disk, no size cap but the file size")
    return [memory, f"CPU time: {limits.cpu_s:g} s per exercise (RLIMIT_CPU one second above)",
            f"file size: {size(limits.file_bytes)}", f"open files: {limits.open_files}",
            f"processes: {limits.processes}" if limits.processes is not None else
            "processes: no RLIMIT_NPROC, which does not bind root (the grader here): seccomp stops new processes",
            tmp, f"output handed back: {size(limits.output_bytes)}"]


def _writes(writable: str, landlock: bool) -> str:
    if not writable:
        return "Writes: wherever the grader may (no private folder: each job runs in a process of its own)"
    if landlock:
        return f"Writes: only {writable} (its working folder, HOME and TMPDIR)"
    return f"Writes: {writable} (its working folder, HOME and TMPDIR), and what file permissions let it (no Landlock)"


def _reads(readable: tuple[tuple[str, str], ...], devices: tuple[str, ...]) -> list[str]:
    """Landlock's grants: each whole tree on a line, each listed folder with the names of its entries granted."""
    if not readable:
        return ["Reads: what file permissions allow (no Landlock)"]
    entries: dict[str, list[str]] = {path: [] for path, rights in readable if rights == LIST}
    trees = []
    for path, rights in readable:
        folder, _, name = path.rpartition("/")
        if rights == READ:
            (entries[folder].append(name) if folder in entries else trees.append(path))
    lines = [f"Reads (Landlock), {len(readable)} paths:"] + [f"  {path}" for path in trees]
    for folder, names in entries.items():
        lines.append(f"  {folder}/ listed, and {len(names)} of its entries read:")
        lines += textwrap.wrap(", ".join(names), 110, initial_indent=" " * 6, subsequent_indent=" " * 6,
                               break_long_words=False, break_on_hyphens=False)
    return lines + [f"  {device} (read and written)" for device in devices]
