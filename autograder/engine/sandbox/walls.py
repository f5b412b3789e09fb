"""The walls around each run of student code, and which of them this machine can put up.

``Walls.probe`` runs once in the fork server and prepares what each run needs (the Landlock ruleset, the
seccomp filter, the private temporary folder). ``enter_child`` puts every wall up in a freshly forked
child before any student code runs. A wall the machine lacks is recorded with the reason, so the
grader can say once, plainly, what is missing; grading still works without it. ``Walls.policy`` is what runs may
do behind the walls as they were put up (``policy.Policy``), which the fork server sends in its hello.

Why these walls: Landlock limits files, TCP and signals without root and survives into any child;
namespaces let the fork server, as PID 1, kill whatever a run leaves behind (``setsid`` included) and
take the network away; seccomp forbids new processes and memory files, and signals, tracing and network
sockets aimed outside the run (where namespaces or Landlock's newer rules are missing); rlimits cap memory, CPU time,
file sizes and open files. Root is stripped of every capability first, since capabilities would
otherwise carry it past several of these. Without Landlock, where the grader is root, student code
runs as an unprivileged user (``user``), so that file permissions keep the answers out; and each run gets a
mount namespace of its own in which the grading packages are empty (``hidden-answers``), and in which a folder
that user may not enter shows only what runs read inside it (a course cloned into a 0700 folder, a Python in
root's home). Before serving, a probe run behind every wall tries to read the answers and to write where
grading relies on: if it can, every job is refused as the grader's problem (``answers``: grading fails closed).
"""
import contextlib
import itertools
import math
import os
import shutil
import signal
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from autograder.engine import limits
from autograder.engine.sandbox import syscall_filter
from autograder.engine.sandbox.policy import LIST, READ, Limits, Policy
from course.errors import GraderProblem

try:
    import resource
except ImportError:  # Windows
    resource = None

# What each wall keeps from student code, for the notice about missing walls.
PURPOSE = {
    "fork": "a fresh process behind the walls for every run（每次运行都在一个新的、设了防护的进程里）",
    "namespaces": "PID / network / mount namespaces: kill every leftover process, no network, a size-capped private /tmp"
                  "（命名空间：结束时清掉所有残留进程、断网、有大小上限的私有 /tmp）",
    "landlock": "Landlock file rules: read only what Python and torch need, write only the private folder"
                "（文件规则：只读 Python 和 torch 需要的文件，只写私有临时文件夹）",
    "landlock-network": "Landlock TCP rules: no TCP connections（网络规则：不能建立 TCP 连接）",
    "landlock-scope": "Landlock scopes: no signals or abstract sockets outside the sandbox（不能向沙箱外的进程发信号）",
    "seccomp": "seccomp: no new processes, no memfd files outside the memory cap, no signals, tracing or network "
               "sockets aimed outside the run（不能创建进程，不能用 memfd 绕过内存上限，不能向运行之外发信号、跟踪进程或开网络连接）",
    "rlimits": "resource limits: memory, CPU time, file size, open files（资源上限：内存、CPU 时间、文件大小、打开文件数）",
    "user": "without Landlock: an unprivileged user for student code where the grader is root"
            "（没有 Landlock 而评分者是 root 时，学生代码以无特权用户运行）",
    "hidden-answers": "without Landlock: in each run's own mount namespace the course repository holds only the "
                      "course package, and the grading packages are empty（没有 Landlock 时，每次运行看到的课程仓库里"
                      "只有 course 包，评分包都是空的）",
    "answers": "no wall keeps the answers out, or student code from changing what grading relies on: every exercise "
               "is refused, no points are given（没有任何防护能挡住答案，或挡住学生代码改动评分所依赖的文件："
               "所有练习都不评分，不给分）",
}
_ENV_DISABLE = "ATTENTION_COURSE_SANDBOX_OFF"  # comma-separated walls to leave down: for tests of the fallbacks
_ENV_USER = "ATTENTION_COURSE_SANDBOX_USER"  # "uid:gid" student code runs as where the grader is root
PRIVATE_ENV = "ATTENTION_COURSE_SANDBOX_PRIVATE"  # folders of the grading run kept from runs (``Sandbox(private)``)
SCRATCH_ENV = "ATTENTION_COURSE_SANDBOX_SCRATCH"  # a folder the grader made for the fork server, removed after it
_NOBODY = (65534, 65534)  # nobody / nogroup on Debian and Ubuntu, Gradescope's images
_REACHED = "a run can read"
_WRITES = "a run can write to"
_SHUT = "a run cannot read"
# What the probe run found -> what it means, and what to do, for the refusal.
_FOUND = {_REACHED: ("it cannot keep the answers out", "Grade where Landlock is available (Linux 5.13 or newer), or "
                                                         "make the answers unreadable to that user."),
          _WRITES: ("it cannot keep student code from changing what grading relies on",
                    "Grade where Landlock or user namespaces are available, or make that unwritable to that user."),
          _SHUT: ("student code cannot read what it needs, which would count against it",
                  "Make that readable to that user.")}


def _disabled() -> set[str]:
    return {name.strip() for name in os.environ.get(_ENV_DISABLE, "").split(",") if name.strip()}


def _vm_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _grading_packages() -> list[Path]:
    """Where the packages holding references and checks live (the course repository, or site-packages)."""
    import importlib.util

    found = []
    for name in ("autograder", "solutions"):
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            found.append(Path(location).resolve())
    return found


@dataclass
class Walls:
    """The walls this machine offers; ``missing`` maps each absent wall to why it is absent."""

    up: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    in_namespaces: bool = False
    workdir: str = ""
    user: tuple[int, int] | None = None  # (uid, gid) runs drop to, where the grader is root
    run_limits: Limits | None = None  # what each run may use, where rlimits are up
    refusal: str = ""  # why no job may run: a probe run could read an answer or change what grading relies on
    _readable: tuple[tuple[str, str], ...] = ()  # Landlock's grants (``readable_paths``) and devices
    _devices: tuple[str, ...] = ()
    _hidden: list[str] = field(default_factory=list)
    _covers: dict[str, list[str]] = field(default_factory=dict)  # a folder the user may not enter -> what runs read in it
    _answers: list[Path] = field(default_factory=list)  # the answer folders and the file of each the probe tries,
    _probes: list[str] = field(default_factory=list)  # found before the private /tmp can hide one (a cache under /tmp)
    _guarded: list[str] = field(default_factory=list)  # what no run may change, and a file of each (``_guarded_places``)
    _checkout: Path | None = None  # the course repository, when the grading packages are not installed
    _private: list[Path] = field(default_factory=list)  # the grading run's own folders (``PRIVATE_ENV``)
    _reads: list[Path] = field(default_factory=list)  # what runs read (``_run_reads``)
    _ruleset: object = None
    _seccomp: bool = False  # each child loads a filter of its own (``syscall_filter.build``)

    def note(self, name: str, ok: bool, why: str = "") -> bool:
        (self.up.append(name) if ok else self.missing.__setitem__(name, why))
        return ok

    def policy(self) -> Policy:
        """What runs may do behind these walls, from the values each run's walls are put up with: after
        ``prepare``, or once ``can_fork`` found no fork (then there are no walls at all)."""
        return Policy(up=tuple(self.up), missing=tuple(self.missing.items()), limits=self.run_limits,
                      readable=self._readable, devices=self._devices, writable=self.workdir,
                      denied=syscall_filter.RULES if self._seccomp else (), user=self.user, hidden=tuple(self._hidden),
                      privileges_dropped="fork" in self.up and sys.platform.startswith("linux"),
                      covers=tuple((folder, tuple(shown)) for folder, shown in self._covers.items()))

    # --- in the fork server -------------------------------------------------------------------------------

    def can_fork(self) -> bool:
        """Whether runs can be forked; without fork (Windows) every wall is missing and each job runs in a
        fresh process of its own."""
        off = "fork" in _disabled()
        if hasattr(os, "fork") and not off:
            return self.note("fork", True)
        for name in PURPOSE:
            self.note(name, False, f"turned off by {_ENV_DISABLE}" if off else "this platform has no fork()")
        return False

    def enter_namespaces(self) -> bool:
        """Unshare the namespaces for the next child (the fork server proper); False where refused."""
        if not sys.platform.startswith("linux"):
            return self.note("namespaces", False, "not Linux")
        if "namespaces" in _disabled():
            return self.note("namespaces", False, f"turned off by {_ENV_DISABLE}")
        from autograder.engine.sandbox import namespaces

        try:
            namespaces.unshare()
        except OSError as e:
            return self.note("namespaces", False, f"the kernel refused them ({e})")
        self.in_namespaces = True
        return True

    def prepare(self) -> None:
        """In the fork server proper: the private folder, the Landlock ruleset and the seccomp filter.

        What runs need to read is found, and every wall's code imported, before the private ``/tmp`` is
        mounted: a course or a Python living under ``/tmp`` would be hidden by it, so then ``/tmp`` stays
        visible (read-only, by Landlock) and the private folder is a tmpfs of its own inside it.
        """
        linux = sys.platform.startswith("linux")
        paths = readable_paths() if linux else []
        self._reads, self._checkout, self._private = _run_reads(paths), _checkout(), _private_folders()
        self._answers = [*_answer_folders(self._reads, self._checkout), *self._private]
        self._probes = [str(p) for p in _answer_files(self._answers)]
        self._guarded = [str(p) for p in _guarded_places(self._checkout, self._private)]
        if linux:
            from autograder.engine.sandbox import landlock  # noqa: F401 - imported before any mount can hide it
        self._prepare_seccomp()
        tmp = Path("/tmp").resolve()
        self._prepare_workdir(mask_tmp=not any(_inside(Path(path).resolve(), tmp) for path, _ in paths))
        self._prepare_landlock(paths)
        if self.note("rlimits", resource is not None, "no setrlimit on this platform"):
            self.run_limits = _run_limits(tmpfs="namespaces" in self.up)
        if linux:
            self._prepare_user(paths)
            self._prepare_hiding()
            self._check_runs()

    def _prepare_workdir(self, mask_tmp: bool) -> None:
        if self.in_namespaces:
            from autograder.engine.sandbox import namespaces

            try:
                os.chdir("/")
                # Inside /tmp, the tmpfs's mount point is the grader's to remove: from here, every file system is
                # read-only once the mounts are made.
                target = "/tmp" if mask_tmp else tempfile.mkdtemp(prefix="attention-course-sandbox-",
                                                                  dir=os.environ.get(SCRATCH_ENV) or "/tmp")
                self.workdir = namespaces.private_mounts(limits.TMP_BYTES, limits.TMP_FILES, target)
                self.note("namespaces", True)
                return
            except OSError as e:
                self.in_namespaces = os.getpid() == 1  # still PID 1, so still able to clean up processes
                self.note("namespaces", False, f"no private /tmp ({e})")
        self.workdir = tempfile.mkdtemp(prefix="attention-course-sandbox-")

    def _prepare_landlock(self, paths: list[tuple[str, str]]) -> None:
        if not sys.platform.startswith("linux"):
            self.note("landlock", False, "not Linux")
            return
        from autograder.engine.sandbox import landlock

        abi = 0 if "landlock" in _disabled() else landlock.abi_version()
        if not self.note("landlock", abi >= 1, f"turned off by {_ENV_DISABLE}" if "landlock" in _disabled()
                         else "this kernel has no Landlock (Linux 5.13 or newer, with Landlock enabled)"):
            return
        # Turning a rule off uses the ABI of a kernel without it (as a test of what the other walls hold alone).
        for rule, before in (("landlock-scope", 5), ("landlock-network", 3)):
            abi = min(abi, before) if rule in _disabled() else abi
        off = f", turned off by {_ENV_DISABLE}" if {"landlock-scope", "landlock-network"} & _disabled() else ""
        self.note("landlock-network", abi >= 4, f"Landlock ABI {abi} < 4 (Linux 6.7){off}")
        self.note("landlock-scope", abi >= 6, f"Landlock ABI {abi} < 6 (Linux 6.12){off}")
        ruleset = landlock.Ruleset(abi)
        for path, rights in paths:
            ruleset.allow(path, landlock.READ_DIR if rights == LIST else landlock.READ)
        devices = tuple(device for device in ("/dev/null", "/dev/zero", "/dev/urandom") if os.path.exists(device))
        for device in devices:
            ruleset.allow(device, landlock.READ_FILE | landlock.WRITE_FILE)
        ruleset.allow(self.workdir, ruleset.fs)
        self._ruleset, self._readable, self._devices = ruleset, tuple(paths), devices

    def _prepare_user(self, paths: list[tuple[str, str]]) -> None:
        """Where the grader is root and Landlock is missing, find out whether a run can become
        ``_sandbox_user()``: not inside a user namespace that maps no such uid (then setuid fails), and able to
        read what runs read (``_let_in``). The private folder is given to that user. With Landlock up, runs stay
        root without capabilities: that user could not read what root's home holds, e.g. the course's cache of
        real weights."""
        if os.geteuid() != 0 or "landlock" in self.up:
            return  # unprivileged already, or Landlock keeps the answers out
        if "user" in _disabled():
            self.note("user", False, f"turned off by {_ENV_DISABLE}")
            return
        user = _sandbox_user()
        why = _try_in_child(lambda _: _become(user))
        if why:
            self.note("user", False, f"cannot switch to uid:gid {user[0]}:{user[1]} here ({why})")
            return
        covers, why = self._let_in(user, _run_reads(paths))
        if self.note("user", not why, why):
            self.user, self._covers = user, covers
            os.chown(self.workdir, *user)
            _import_lazy_modules()

    def _let_in(self, user: tuple[int, int], reads: list[Path]) -> tuple[dict[str, list[str]], str]:
        """The covers (``namespaces.cover``, which need the namespaces) that let runs as ``user`` reach ``reads`` and
        the private folder through the folders it may not enter, and "" once a child has read them so; else why
        that user cannot. Student code that cannot read its Python or the course fails in ways that would count
        against it (an import inside torch, ``course.llama``), so then runs stay root, as without this wall, and
        the reason says what to do. Weights it cannot read are each case's grader problem (``protocols``)."""
        covers = _covers([*reads, Path(self.workdir).resolve()], user) if "namespaces" in self.up else {}
        needed = _needed(reads)
        fix = f"or set {_ENV_USER} to a user who can; until then student code runs as root"
        if "namespaces" not in self.up and (shut := _covers(needed, user)):
            where = "; ".join(f"{folder}: {shown[0]}" + (f" and {len(shown) - 1} more" if len(shown) > 1 else "")
                              for folder, shown in shut.items())
            folders = dict.fromkeys(str(f) for shown in shut.values() for p in shown for f in _shut_folders(Path(p), user))
            return {}, (f"uid:gid {user[0]}:{user[1]} may not enter the folders above what runs read ({where}), and "
                        f"without namespaces nothing can let it in: `chmod o+x {' '.join(folders)}`, {fix}")
        why = _try_in_child(lambda _: _read_as(user, covers, needed))
        if why:
            return {}, (f"uid:gid {user[0]}:{user[1]} cannot read what runs read ({why}): make it readable to "
                        f"that user (`chmod -R o+rX`), {fix}")
        return covers, ""

    def _prepare_hiding(self) -> None:
        """Without Landlock but with namespaces: in a mount namespace of each run's own (the fork server still
        needs them), the course repository and the grading run's own folders (a class, the outputs) are empty but
        for what runs read in them (the ``course`` package, a venv inside the checkout): no grading package,
        ``source/``, ``tests/``, ``.git`` with its packed history, or classmate's notebook; and the grading
        packages installed elsewhere and the outputs kept on disk are empty folders."""
        if "landlock" in self.up or not self.in_namespaces:
            return
        if "hidden-answers" in _disabled():
            self.note("hidden-answers", False, f"turned off by {_ENV_DISABLE}")
            return
        covers = dict(self._covers)
        # A folder the private /tmp already hides (a class or a cache under /tmp) is not there to be covered.
        for folder in [*([self._checkout] if self._checkout else []), *self._private]:
            if folder.is_dir() and _in_view(folder, covers):
                inside = [str(path) for path in self._reads if _inside(path, folder) and path != folder]
                covers[str(folder)] = sorted({*covers.get(str(folder), []), *inside})
        hidden = [str(folder) for folder in self._answers if folder.is_dir() and _in_view(folder, covers)]
        why = _try_in_child(lambda _: _hide(hidden, covers))
        if self.note("hidden-answers", not why, f"the kernel refused the mounts ({why})"):
            self._hidden, self._covers = hidden, covers

    def _check_runs(self) -> None:
        """A probe run behind every wall tries to read one file of each place answers are (``_answer_folders``,
        and the run's own folders), to change what grading relies on (``_guarded_places``), and to read what runs
        need (``_reads`` but the weights, whose absence is each case's grader problem). If it can do one of the
        first two, or not the last, ``refusal`` says what it found (the fork server then refuses jobs)."""
        probes, guarded = self._probes, self._guarded
        needed = [str(path) for path in _needed(self._reads)]

        def probe(result_fd: int) -> None:
            self.enter_child(result_fd, limits.STARTUP_TIMEOUT_S)
            found = [*[f"{_REACHED} {path}" for path in probes if _readable(path)][:1],
                     *[f"{_WRITES} {path}" for path in guarded if _writable(path)][:1],
                     *[f"{_SHUT} {path}" for path in needed if not _readable(path)][:1]]
            if found:
                raise PermissionError("; ".join(found))

        why = _try_in_child(probe, walls=self)
        found = why.split(": ", 1)[1].split("; ") if why.startswith("PermissionError: ") else []
        said = [(meaning, part, fix) for part in found for start, (meaning, fix) in _FOUND.items()
                if part.startswith(start)]
        if said:
            self.refusal = (f"the sandbox cannot grade safely here: {'; '.join(f'{m} ({p})' for m, p, _ in said)}, "
                            f"as the user student code runs as. {' '.join(fix for _, _, fix in said)}")
            self.note("answers", False, self.refusal)

    def _prepare_seccomp(self) -> None:
        if "seccomp" in _disabled():
            self.note("seccomp", False, f"turned off by {_ENV_DISABLE}")
            return
        try:
            syscall_filter.build(os.getpid())  # libseccomp is there
            self._seccomp = True
            self.note("seccomp", True)
        except (ImportError, OSError, RuntimeError, AttributeError) as e:
            self.note("seccomp", False, f"libseccomp is not available ({type(e).__name__}: {e})")

    def close(self) -> None:
        """Remove the private folder where it is a plain one. A private tmpfs vanishes with the namespace, and a mount
        point inside ``/tmp`` lies in the grader's scratch folder (``SCRATCH_ENV``), which the grader removes."""
        if self.workdir and "namespaces" not in self.up:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def clean_up_after_run(self, child: int) -> None:
        """Kill every process the run left behind, reap them all, and empty the private folder."""
        if self.in_namespaces:
            try:
                os.kill(-1, signal.SIGKILL)  # as PID 1: every other process in this namespace
            except ProcessLookupError:
                pass
            while True:
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    break
        else:
            try:
                os.killpg(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.waitpid(child, 0)
            except ChildProcessError:
                pass
        empty(self.workdir)

    # --- in the child, before any student code ---------------------------------------------------------

    def enter_child(self, result_fd: int, cpu_s: float) -> None:
        """Put every wall up in this freshly forked child; raises GraderProblem when one cannot go up."""
        keep = {result_fd} | ({self._ruleset.fd} if self._ruleset else set())
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _close_all_except(keep | {0, 1, 2})
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setsid()  # out of the grader's session: a Ctrl-C in the terminal is the grader's to handle
        os.chdir(self.workdir)
        os.environ.update(HOME=self.workdir, TMPDIR=self.workdir, MPLCONFIGDIR=self.workdir)
        tempfile.tempdir = self.workdir
        sys.dont_write_bytecode = True
        if self.run_limits:
            _limit_resources(cpu_s, self.run_limits)
        if sys.platform.startswith("linux"):
            from autograder.engine.sandbox import privileges

            if self._hidden or self._covers:
                _hide(self._hidden, self._covers)
            privileges.drop_capabilities(lambda: _become(self.user) if self.user else None)
            privileges.forbid_new_privileges()
        if self._ruleset:
            self._ruleset.enforce()
        if self._seccomp:
            syscall_filter.build(os.getpid()).load()



def _sandbox_user() -> tuple[int, int]:
    """The (uid, gid) student code runs as where the grader is root: ``$ATTENTION_COURSE_SANDBOX_USER``
    ("uid:gid"), else nobody / nogroup."""
    value = os.environ.get(_ENV_USER, "")
    if not value:
        return _NOBODY
    uid, _, gid = value.partition(":")
    return int(uid), int(gid or uid)


def _import_lazy_modules() -> None:
    """Import here what torch imports on first use, because the sandbox user may not read the Python that root
    installed (under root's home): the first ``torch.broadcast_shapes`` imports sympy, through
    ``torch.fx.experimental.symbolic_shapes``."""
    import torch

    torch.broadcast_shapes((1, 2), (3, 1))


def _become(user: tuple[int, int]) -> None:
    """Switch this process to ``user`` for good, with no supplementary groups (root's would stay otherwise)."""
    os.setgroups([])
    os.setgid(user[1])
    os.setuid(user[0])


def _hide(folders: list[str], covers: dict[str, list[str]] | None = None) -> None:
    from autograder.engine.sandbox import namespaces

    namespaces.hide(folders, covers)


def _run_reads(paths: list[tuple[str, str]]) -> list[Path]:
    """The paths of ``readable_paths`` that lie in no other of them, resolved: the folders and files runs read."""
    listed = {path for path, _ in paths}
    return sorted({Path(path).resolve() for path in listed if not any(str(up) in listed for up in Path(path).parents)})


def _shut_folders(path: Path, user: tuple[int, int]) -> list[Path]:
    """The folders above ``path``, outermost first, whose permission bits do not let ``user`` (its uid and gid
    alone, as ``_become`` leaves it) enter them."""
    shut = []
    for folder in reversed(path.parents):
        with contextlib.suppress(OSError):
            mode = folder.stat()
            shift = 6 if mode.st_uid == user[0] else 3 if mode.st_gid == user[1] else 0
            if not mode.st_mode >> shift & 1:
                shut.append(folder)
    return shut


def _covers(paths: list[Path], user: tuple[int, int]) -> dict[str, list[str]]:
    """The outermost folder ``user`` may not enter above each of ``paths`` -> the paths inside it, none inside
    another (``namespaces.cover`` binds each back, with what it holds). Never ``/``, which holds ``/proc``, where
    the binds come from: a path that only covering ``/`` would reach stays unreadable, and the check says so."""
    inside: dict[str, set[Path]] = {}
    for path in paths:
        if (shut := _shut_folders(path, user)) and shut[0] != Path("/"):
            inside.setdefault(str(shut[0]), set()).add(path)
    return {folder: sorted(str(p) for p in shown if not any(o != p and _inside(p, o) for o in shown))
            for folder, shown in inside.items()}


def _weights_folders() -> list[Path]:
    """Where runs read weights: assignment 07's model (`course-weights smollm2`), the cache's Qwen3.5 layers
    (course/stored_tensors.py) and the toy Llama of 07's long-prompt case (course/toy_llama.py), resolved."""
    from course import qwen35_weights, smollm2, toy_llama

    return [smollm2.model_folder().resolve(), qwen35_weights.cache_folder().resolve(), toy_llama.home().resolve()]


def _in_view(folder: Path, covers: dict[str, list[str]]) -> bool:
    """Whether ``folder`` is still there behind ``covers`` (not inside a covered folder, or inside what it shows)."""
    return all(not _inside(folder, Path(shut)) or any(_inside(folder, Path(p)) for p in shown)
               for shut, shown in covers.items())


def _read_as(user: tuple[int, int], covers: dict[str, list[str]], reads: list[Path]) -> None:
    """In a child: behind ``covers``, as ``user``, check that each of ``reads`` can be read (a folder: listed)."""
    if covers:
        _hide([], covers)
    _become(user)
    for path in reads:
        if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
            raise PermissionError(f"{path} is not readable by that user")


def _needed(reads: list[Path]) -> list[Path]:
    """What runs must read for grading to be fair: ``reads`` but the weights, whose absence is each case's grader
    problem (``protocols``)."""
    weights = _weights_folders()
    return [path for path in reads if path not in weights]


def _output_store() -> list[Path]:
    """The folder of the references' and mistakes' outputs kept on disk (``output_store``), made if need be so
    that a wall covers it before any job writes there; none when it cannot be made (then nothing is kept)."""
    from autograder.engine import output_store

    try:
        return [output_store.folder().resolve()]
    except OSError:
        return []


def _checkout() -> Path | None:
    """The course repository that holds the grading packages, when they are not installed (an editable install)."""
    packages = _grading_packages()
    return packages[0].parent if packages and (packages[0].parent / "pyproject.toml").is_file() else None


def _private_folders() -> list[Path]:
    """The folders the grader named as the run's own (``PRIVATE_ENV``), resolved, those that exist."""
    named = [Path(p).resolve() for p in os.environ.get(PRIVATE_ENV, "").split(os.pathsep) if p]
    return [folder for folder in dict.fromkeys(named) if folder.is_dir()]


def _answer_folders(reads: list[Path], checkout: Path | None) -> list[Path]:
    """Where answers are: the grading packages and the outputs kept on disk; and in a ``checkout``, everything of
    it but what runs read (``reads``: the ``course`` package, a venv inside it): ``source/``, ``tests/`` (the
    correct code of its simulated students), the ``.git`` whose packs hold every version of ``solutions/``, each
    other entry."""
    rest = [] if checkout is None else sorted(
        entry for entry in checkout.iterdir() if not any(_inside(read, entry.resolve()) for read in reads))
    return list(dict.fromkeys([*_grading_packages(), *_output_store(), *rest]))


def _answer_files(places: list[Path]) -> list[Path]:
    """One regular file of each answer place, for the probe to try: the file itself, or a module (else any file)
    of a folder."""
    found = []
    for place in places:
        if place.is_file():
            found.append(place)
        elif place.is_dir():
            modules = (path for path in _files(place) if path.suffix == ".py")
            found.extend(itertools.islice(itertools.chain(modules, _files(place)), 1))
    return found


def _guarded_places(checkout: Path | None, private: list[Path]) -> list[Path]:
    """What no run may change, each folder and one file in it: the grading run's own folders (a class's notebooks,
    the grader's outputs), the outputs kept on disk, the checkout, the ``course`` package and the grading packages,
    and Python's site-packages (a ``.pth`` file there runs in each later Python of it, outside every wall)."""
    import course

    paths = sysconfig.get_paths()
    folders = [*private, *_output_store(), *([checkout] if checkout else []), *map(Path, course.__path__),
               *_grading_packages(), *(Path(paths[key]) for key in ("purelib", "platlib") if paths.get(key))]
    found = []
    for folder in dict.fromkeys(folder.resolve() for folder in folders):
        if folder.is_dir():
            found.append(folder)
            found.extend(itertools.islice(_files(folder), 1))
    return found


def _files(folder: Path):
    """The regular files in ``folder`` and below, shallowest first (lazily: the probe needs one)."""
    for top, _, names in os.walk(folder):
        for name in sorted(names):
            path = Path(top) / name
            if path.is_file() and not path.is_symlink():
                yield path


def _writable(path: str) -> bool:
    """Whether this process may change ``path``: make a file in a folder (removed at once), or open a file for
    writing (nothing is written)."""
    try:
        if os.path.isdir(path):
            made = os.path.join(path, f".attention-course-probe-{os.getpid()}")
            os.close(os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            os.unlink(made)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK))
        return True
    except OSError:
        return False


def _readable(path: str) -> bool:
    """Whether this process may read ``path`` (a folder: list it)."""
    try:
        if os.path.isdir(path):
            os.listdir(path)
            return True
        with open(path, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False


def _try_in_child(action, walls: "Walls | None" = None) -> str:
    """Run ``action(fd)`` in a forked child, ``fd`` being the pipe it reports on: "" when it returns, else the
    error it raised (its first 500 bytes). A child that used the walls is cleaned up after as a run would be."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            action(write_fd)
            message = b""
        except BaseException as e:  # noqa: BLE001 - reported to the fork server, which decides
            message = f"{type(e).__name__}: {e}".encode()[:500]
        os.write(write_fd, message)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        message = pipe.read(600)
    if walls is None:
        os.waitpid(pid, 0)
    else:
        walls.clean_up_after_run(pid)
    return message.decode(errors="replace")


def describe_missing(missing: dict[str, str]) -> list[str]:
    """One line per missing wall: what it would keep from student code, and why it is not up."""
    return [f"{PURPOSE.get(name, name)} — {why}" for name, why in missing.items()]


def _close_all_except(keep: set[int]) -> None:
    fds = sorted(keep)
    start = 0
    for fd in fds + [limits.MAX_FD]:
        if fd > start:
            os.closerange(start, fd)
        start = fd + 1


def _run_limits(tmpfs: bool) -> Limits:
    """What ``_limit_resources`` gives each run, as this machine's hard limits leave it; ``tmpfs``: whether the
    private folder is the namespaces' tmpfs."""
    _, memory = resource.getrlimit(resource.RLIMIT_AS)
    return Limits(extra_memory_bytes=limits.EXTRA_MEMORY_BYTES,
                  memory_ceiling_bytes=None if memory == resource.RLIM_INFINITY else memory,
                  cpu_s=limits.EXERCISE_TIMEOUT_S, file_bytes=_capped(resource.RLIMIT_FSIZE, limits.FILE_BYTES),
                  open_files=_capped(resource.RLIMIT_NOFILE, limits.OPEN_FILES),
                  # root is exempt from RLIMIT_NPROC; seccomp covers root
                  processes=limits.PROCESSES if os.geteuid() != 0 and hasattr(resource, "RLIMIT_NPROC") else None,
                  tmp_bytes=limits.TMP_BYTES if tmpfs else None, tmp_files=limits.TMP_FILES if tmpfs else None,
                  output_bytes=limits.OUTPUT_BYTES)


def _capped(which: int, value: int) -> int:
    """``value``, or this process's hard limit ``which`` where that is lower."""
    _, hard = resource.getrlimit(which)
    return min(value, hard) if hard != resource.RLIM_INFINITY else value


def _limit_resources(cpu_s: float, run: Limits) -> None:
    now = _vm_size()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    memory = now + run.extra_memory_bytes
    if hard != resource.RLIM_INFINITY and hard < memory:
        if hard < now + limits.MIN_EXTRA_MEMORY_BYTES:
            raise GraderProblem(
                f"this machine limits a process's address space to {hard / 2**30:.1f} GiB (RLIMIT_AS, e.g. "
                f"`ulimit -v`); the grader needs {(now + limits.MIN_EXTRA_MEMORY_BYTES) / 2**30:.1f} GiB to run "
                "student code next to torch. Raise the limit (`ulimit -v unlimited`) and grade again.")
        memory = hard
    cpu = math.ceil(cpu_s) + 1
    for which, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu),
                         (resource.RLIMIT_FSIZE, run.file_bytes), (resource.RLIMIT_NOFILE, run.open_files),
                         (resource.RLIMIT_CORE, 0)):
        value = _capped(which, value)
        resource.setrlimit(which, (value, value + (1 if which == resource.RLIMIT_CPU and value == cpu else 0)))
    if run.processes is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (run.processes, run.processes))


def empty(folder: str) -> None:
    """Remove everything inside ``folder`` (never following links out of it)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=_make_removable)
            else:
                os.unlink(entry.path)


def _make_removable(function, path, _):
    """A folder the student made unreadable: open it up to its owner, then retry once."""
    parent = os.path.dirname(path)
    for folder in (parent, path):
        try:
            os.chmod(folder, 0o700, follow_symlinks=False)
        except (OSError, NotImplementedError):
            pass
    if function in (os.rmdir, os.unlink, os.remove):
        function(path)
    elif os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)


SYSTEM_READS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/etc/ld.so.cache", "/proc/cpuinfo",
                "/sys/devices/system/cpu")


@dataclass(frozen=True)
class Tree:
    """What ``readable_paths`` decides from: where Python, the course, the answers and the weights are. ``here()``
    finds them in this process; a test gives its own (a fake tree)."""

    sys_path: tuple[str, ...]  # sys.path
    sysconfig_paths: tuple[str, ...]  # sysconfig's stdlib, platstdlib, purelib and platlib
    prefix: str  # sys.prefix: a virtual environment inside the checkout is Python's, not the course's
    course: tuple[str, ...]  # the course package's folders
    grading: tuple[Path, ...]  # the grading packages' folders, resolved (``_grading_packages``)
    checkout: Path | None  # the course repository holding them, if they are not installed
    weights: tuple[Path, ...]  # where runs read real weights, resolved (``_weights_folders``)
    output_store: tuple[Path, ...]  # the folder of the outputs kept on disk, when it can be made (``_output_store``)
    system: tuple[str, ...] = SYSTEM_READS  # shared libraries, and what CPU feature detection (torch's cpuinfo) reads

    @classmethod
    def here(cls) -> "Tree":
        """This process's tree. The output store's folder is made if need be, and so are the cache's folders of
        weights the grader writes on first use (the stand-in's Qwen3.5 layers, which jobs name by file, see
        course/stored_tensors.py; the toy Llama): a rule needs the folder."""
        import course
        from course import qwen35_weights, toy_llama

        packages = _grading_packages()
        output_store = _output_store()
        for written in (qwen35_weights.cache_folder(), toy_llama.home()):
            with contextlib.suppress(OSError):
                written.mkdir(parents=True, exist_ok=True)
        paths = sysconfig.get_paths()
        library = tuple(p for key in ("stdlib", "platstdlib", "purelib", "platlib") if (p := paths.get(key)))
        checkout = _checkout()
        return cls(sys_path=tuple(sys.path), sysconfig_paths=library, prefix=sys.prefix, course=tuple(course.__path__),
                   grading=tuple(packages), checkout=checkout, weights=tuple(_weights_folders()),
                   output_store=tuple(output_store))


def readable_paths(tree: Tree | None = None) -> list[tuple[str, str]]:
    """What a run may read, as (path, "read") for whole trees and (path, "list") for folders whose
    entries are granted one by one: Python's library folders, without the grading packages; the
    ``course`` package; the converted SmolLM2 weights, when they are there, and the cache's Qwen3.5 weights;
    the system's shared libraries. Nothing granted is, or holds, the course repository, a grading package or the
    outputs kept on disk. ``tree``: where all these are (default: ``Tree.here()``)."""
    tree = tree or Tree.here()
    checkout = tree.checkout
    grading = [*tree.grading, *tree.output_store]  # never granted, nor any folder that holds one
    inside_checkout_ok = [Path(p).resolve() for p in (tree.prefix, *tree.course)]

    def allowed(path: Path) -> bool:
        if checkout and _inside(checkout, path):  # the checkout itself, or a folder above it
            return False
        if any(_inside(path, package) for package in grading):
            return False
        return not checkout or not _inside(path, checkout) or any(_inside(path, ok) for ok in inside_checkout_ok)

    found: dict[str, str] = {}
    folders = {Path(p).resolve() for p in (*tree.sys_path, *tree.sysconfig_paths) if p and os.path.isdir(p)}
    for folder in sorted(f for f in folders if allowed(f)):
        found[str(folder)] = LIST
        for entry in folder.iterdir():
            target = entry.resolve()
            if allowed(target) and not any(_inside(package, target) for package in grading):
                found[str(entry)] = READ
    for location in tree.course:
        found[str(Path(location).resolve())] = READ
    # The real model of assignment 07 (`course-weights smollm2`) and the Qwen3.5 weights of the cache: weights, not
    # answers, read where they are.
    for weights in tree.weights:
        if weights.is_dir() and allowed(weights):
            found[str(weights)] = READ
    for system in tree.system:
        if os.path.exists(system) and allowed(Path(system).resolve()):
            found[system] = READ
    return sorted(found.items())
