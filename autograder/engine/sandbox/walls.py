"""The walls around each run of student code, and which of them this machine can put up.

``Walls.probe`` runs once in the fork server and prepares what each run needs (the Landlock ruleset, the
seccomp filter, the private temporary folder). ``enter_child`` puts every wall up in a freshly forked
child before any student code runs. A wall the machine lacks is recorded with the reason, so the
grader can say once, plainly, what is missing; grading still works without it.

Why these walls: Landlock limits files, TCP and signals without root and survives into any child;
namespaces let the fork server, as PID 1, kill whatever a run leaves behind (``setsid`` included) and
take the network away; seccomp forbids new processes and memory files; rlimits cap memory, CPU time,
file sizes and open files. Root is stripped of every capability first, since capabilities would
otherwise carry it past several of these. Without Landlock, where the grader is root, student code
runs as an unprivileged user (``user``), so that file permissions keep the answers out; and each run gets a
mount namespace of its own in which the grading packages are empty (``hidden-answers``). Before serving,
a probe run behind every wall tries to read the answers: if it can, no wall keeps them out, and every job
is refused as the grader's problem (``answers``: grading fails closed).
"""
import contextlib
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
from autograder.engine.errors import GraderProblem

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
    "seccomp": "seccomp: no new processes, no memfd files outside the memory cap（不能创建进程，不能用 memfd 绕过内存上限）",
    "rlimits": "resource limits: memory, CPU time, file size, open files（资源上限：内存、CPU 时间、文件大小、打开文件数）",
    "user": "without Landlock: an unprivileged user for student code where the grader is root"
            "（没有 Landlock 而评分者是 root 时，学生代码以无特权用户运行）",
    "hidden-answers": "without Landlock: the grading packages are empty in each run's own mount namespace"
                      "（没有 Landlock 时，每次运行看到的评分包都是空的）",
    "answers": "no wall keeps the answers out: every exercise is refused, no points are given"
               "（没有任何防护能挡住答案：所有练习都不评分，不给分）",
}
_ENV_DISABLE = "ATTENTION_COURSE_SANDBOX_OFF"  # comma-separated walls to leave down: for tests of the fallbacks
_ENV_USER = "ATTENTION_COURSE_SANDBOX_USER"  # "uid:gid" student code runs as where the grader is root
_NOBODY = (65534, 65534)  # nobody / nogroup on Debian and Ubuntu, Gradescope's images
_REACHED = "a run can read"


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
    answers_reachable: str = ""  # why no job may run, when a probe run could read the answers
    _hidden: list[str] = field(default_factory=list)
    _ruleset: object = None
    _filter: object = None

    def note(self, name: str, ok: bool, why: str = "") -> bool:
        (self.up.append(name) if ok else self.missing.__setitem__(name, why))
        return ok

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
        if linux:
            from autograder.engine.sandbox import landlock  # noqa: F401 - imported before any mount can hide it
        self._prepare_seccomp()
        tmp = Path("/tmp").resolve()
        self._prepare_workdir(mask_tmp=not any(_inside(Path(path).resolve(), tmp) for path, _ in paths))
        self._prepare_landlock(paths)
        self.note("rlimits", resource is not None, "no setrlimit on this platform")
        if linux:
            self._prepare_user()
            self._prepare_hiding()
            self._check_answers()

    def _prepare_workdir(self, mask_tmp: bool) -> None:
        if self.in_namespaces:
            from autograder.engine.sandbox import namespaces

            try:
                os.chdir("/")
                self.workdir = namespaces.private_mounts(limits.TMP_BYTES, limits.TMP_FILES, mask_tmp)
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
        self.note("landlock-network", abi >= 4, f"Landlock ABI {abi} < 4 (Linux 6.7)")
        self.note("landlock-scope", abi >= 6, f"Landlock ABI {abi} < 6 (Linux 6.12)")
        ruleset = landlock.Ruleset(abi)
        for path, rights in paths:
            ruleset.allow(path, landlock.READ_DIR if rights == "list" else landlock.READ)
        for device in ("/dev/null", "/dev/zero", "/dev/urandom"):
            if os.path.exists(device):
                ruleset.allow(device, landlock.READ_FILE | landlock.WRITE_FILE)
        ruleset.allow(self.workdir, ruleset.fs)
        self._ruleset = ruleset

    def _prepare_user(self) -> None:
        """Where the grader is root and Landlock is missing, find out whether a run can become
        ``_sandbox_user()``: not inside a user namespace that maps no such uid (then setuid fails). The private
        folder is given to that user. With Landlock up, runs stay root without capabilities: that user could
        not read what root's home holds, e.g. the course's cache of real weights."""
        if os.geteuid() != 0 or "landlock" in self.up:
            return  # unprivileged already, or Landlock keeps the answers out
        if "user" in _disabled():
            self.note("user", False, f"turned off by {_ENV_DISABLE}")
            return
        user = _sandbox_user()
        why = _try_in_child(lambda _: _become(user))
        if self.note("user", not why, f"cannot switch to uid:gid {user[0]}:{user[1]} here ({why})"):
            self.user = user
            os.chown(self.workdir, *user)
            _import_lazy_modules()

    def _prepare_hiding(self) -> None:
        """Without Landlock but with namespaces: each run mounts empty folders over the grading packages and
        the course's ``source/``, in a mount namespace of its own (the fork server still needs them)."""
        if "landlock" in self.up or not self.in_namespaces:
            return
        if "hidden-answers" in _disabled():
            self.note("hidden-answers", False, f"turned off by {_ENV_DISABLE}")
            return
        hidden = [str(folder) for folder in _answer_folders()]
        why = _try_in_child(lambda _: _hide(hidden))
        if self.note("hidden-answers", not why, f"the kernel refused the mounts ({why})"):
            self._hidden = hidden

    def _check_answers(self) -> None:
        """A probe run behind every wall tries to read one file of each grading package; if it reads any,
        nothing keeps the answers out and ``answers_reachable`` says so (the fork server then refuses jobs)."""
        probes = [str(p) for p in _answer_files()]

        def probe(result_fd: int) -> None:
            self.enter_child(result_fd, limits.STARTUP_TIMEOUT_S)
            reached = [path for path in probes if _readable(path)]
            if reached:
                raise PermissionError(f"{_REACHED} {reached[0]}")

        why = _try_in_child(probe, walls=self)
        if _REACHED in why:
            reached = why.split(": ", 1)[1]
            self.answers_reachable = (f"the sandbox cannot keep the answers out on this machine ({reached}, as "
                                      "the user student code runs as): grade where Landlock is available (Linux "
                                      "5.13 or newer), or make the answers unreadable to that user")
            self.note("answers", False, self.answers_reachable)

    def _prepare_seccomp(self) -> None:
        if "seccomp" in _disabled():
            self.note("seccomp", False, f"turned off by {_ENV_DISABLE}")
            return
        try:
            from autograder.engine.sandbox import syscall_filter

            self._filter = syscall_filter.build()
            self.note("seccomp", True)
        except (ImportError, OSError, RuntimeError, AttributeError) as e:
            self.note("seccomp", False, f"libseccomp is not available ({type(e).__name__}: {e})")

    def close(self) -> None:
        """Remove the private folder when it was made inside the host's ``/tmp`` (a tmpfs over ``/tmp`` itself
        vanishes with the namespace)."""
        if not self.workdir or self.workdir == "/tmp":
            return
        if self.in_namespaces:
            from autograder.engine.sandbox import namespaces

            try:
                namespaces.unmount(self.workdir)
            except OSError:
                return
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
        if "rlimits" in self.up:
            _limit_resources(cpu_s)
        if sys.platform.startswith("linux"):
            from autograder.engine.sandbox import privileges

            if self._hidden:
                _hide(self._hidden)
            privileges.drop_capabilities(lambda: _become(self.user) if self.user else None)
            privileges.forbid_new_privileges()
        if self._ruleset:
            self._ruleset.enforce()
        if self._filter:
            self._filter.load()



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


def _hide(folders: list[str]) -> None:
    from autograder.engine.sandbox import namespaces

    namespaces.hide(folders)


def _answer_folders() -> list[Path]:
    """The folders that hold answers: the grading packages, and the instructor's notebooks of a checkout."""
    grading = _grading_packages()
    source = grading[0].parent / "source" if grading else None
    return grading + ([source] if source and source.is_dir() else [])


def _answer_files() -> list[Path]:
    """One regular file of each answer folder, for the probe to try."""
    found = []
    for folder in _answer_folders():
        files = sorted(p for p in folder.rglob("*.py") if p.is_file())
        found += files[:1]
    return found


def _readable(path: str) -> bool:
    try:
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


def _limit_resources(cpu_s: float) -> None:
    now = _vm_size()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    memory = now + limits.EXTRA_MEMORY_BYTES
    if hard != resource.RLIM_INFINITY and hard < memory:
        if hard < now + limits.MIN_EXTRA_MEMORY_BYTES:
            raise GraderProblem(
                f"this machine limits a process's address space to {hard / 2**30:.1f} GiB (RLIMIT_AS, e.g. "
                f"`ulimit -v`); the grader needs {(now + limits.MIN_EXTRA_MEMORY_BYTES) / 2**30:.1f} GiB to run "
                "student code next to torch. Raise the limit (`ulimit -v unlimited`) and grade again.")
        memory = hard
    cpu = math.ceil(cpu_s) + 1
    for which, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu),
                         (resource.RLIMIT_FSIZE, limits.FILE_BYTES), (resource.RLIMIT_NOFILE, limits.OPEN_FILES),
                         (resource.RLIMIT_CORE, 0)):
        _, hard = resource.getrlimit(which)
        value = min(value, hard) if hard != resource.RLIM_INFINITY else value
        resource.setrlimit(which, (value, value + (1 if which == resource.RLIMIT_CPU and value == cpu else 0)))
    if os.geteuid() != 0 and hasattr(resource, "RLIMIT_NPROC"):  # root is exempt from it; seccomp covers root
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.PROCESSES, limits.PROCESSES))


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


def readable_paths() -> list[tuple[str, str]]:
    """What a run may read, as (path, "read") for whole trees and (path, "list") for folders whose
    entries are granted one by one: Python's library folders, without the grading packages; the
    ``course`` package; the converted SmolLM2 weights, when they are there, and the cache's Qwen3.5 weights;
    the system's shared libraries. Nothing granted is, or holds, the course repository or a grading package."""
    import course
    from course import qwen35_weights, smollm2

    grading = _grading_packages()
    checkout = grading[0].parent if grading and (grading[0].parent / "pyproject.toml").is_file() else None
    inside_checkout_ok = [Path(p).resolve() for p in (sys.prefix, *course.__path__)]

    def allowed(path: Path) -> bool:
        if checkout and _inside(checkout, path):  # the checkout itself, or a folder above it
            return False
        if any(_inside(path, package) for package in grading):
            return False
        return not checkout or not _inside(path, checkout) or any(_inside(path, ok) for ok in inside_checkout_ok)

    found: dict[str, str] = {}
    folders = {Path(p).resolve() for p in sys.path if p and os.path.isdir(p)}
    folders |= {Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
                if (p := sysconfig.get_paths().get(key)) and os.path.isdir(p)}
    for folder in sorted(f for f in folders if allowed(f)):
        found[str(folder)] = "list"
        for entry in folder.iterdir():
            target = entry.resolve()
            if allowed(target) and not any(_inside(package, target) for package in grading):
                found[str(entry)] = "read"
    for location in course.__path__:
        found[str(Path(location).resolve())] = "read"
    # The real model of assignment 07 (`course-weights smollm2`): weights, not answers, read where they are.
    # And the Qwen3.5 weights of the cache, which jobs name by file (course/stored_tensors.py): made here if
    # need be, since a rule needs the folder, and the stand-in's layers are written there on first use.
    qwen35 = qwen35_weights.cache_folder()
    with contextlib.suppress(OSError):
        qwen35.mkdir(parents=True, exist_ok=True)
    for weights in (smollm2.model_folder().resolve(), qwen35.resolve()):
        if weights.is_dir() and allowed(weights):
            found[str(weights)] = "read"
    # Shared libraries, and what CPU feature detection (torch's cpuinfo) reads.
    for system in ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/etc/ld.so.cache", "/proc/cpuinfo",
                   "/sys/devices/system/cpu"):
        if os.path.exists(system) and allowed(Path(system).resolve()):
            found[system] = "read"
    return sorted(found.items())
