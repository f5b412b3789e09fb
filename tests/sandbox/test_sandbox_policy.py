"""The sandbox's effective policy (``autograder/engine/sandbox/policy.py``): what ``readable_paths`` grants on a
fake tree, that the policy in the fork server's hello is what a run behind its walls finds, and that
``course-doctor --sandbox`` prints it."""
import os
import sys
from pathlib import Path

import pytest

import course
from autograder.engine import limits
from autograder.engine.sandbox import syscall_filter
from autograder.engine.sandbox.policy import LIST, READ, Policy, size
from autograder.engine.sandbox.walls import Tree, readable_paths
from autograder.instructor import doctor
from course.layout import ROOT as REPO
from tests.sandbox.test_hostile_submissions import graded

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the walls are Linux's")


def _files(root: Path, *paths: str) -> None:
    """Empty files (and their folders) at ``paths`` under ``root``; a path ending in / is a folder."""
    for path in paths:
        target = root / path
        if path.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("")


@pytest.fixture
def fake(tmp_path):
    """A machine in ``tmp_path``: a Python (a standard library, a site-packages), a course checkout holding the
    grading packages and a virtual environment, a course cache holding the outputs kept on disk and one of the
    two weights folders. Returns (the root, a function making the ``Tree`` with the grading packages either in
    the checkout or installed in site-packages)."""
    root = tmp_path.resolve()
    stdlib, site = root / "python" / "lib" / "python3.11", root / "python" / "lib" / "python3.11" / "site-packages"
    _files(root, "python/lib/python3.11/os.py", "python/lib/python3.11/json/__init__.py",
           "python/lib/python3.11/site-packages/numpy/__init__.py", "python/lib/python3.11/site-packages/six.py",
           "python/lib/python3.11/site-packages/autograder/__init__.py",
           "python/lib/python3.11/site-packages/solutions/__init__.py",
           "checkout/pyproject.toml", "checkout/autograder/__init__.py", "checkout/solutions/attention_basics.py",
           "checkout/course/__init__.py", "checkout/source/01/01.py",
           "checkout/.venv/lib/python3.11/site-packages/torch/__init__.py",
           "cache/known-outputs/ABOUT.txt", "cache/smollm2/SmolLM2-135M-Instruct/model.safetensors",
           "usr/lib/libc.so")
    (site / "answers").symlink_to(root / "checkout" / "solutions")  # an entry that leads into a grading package
    (site / "cache").symlink_to(root / "cache")  # and one that leads to a folder holding the output store
    checkout = root / "checkout"

    def tree(installed: bool) -> Tree:
        grading = (site / "autograder", site / "solutions") if installed else (checkout / "autograder",
                                                                                checkout / "solutions")
        return Tree(sys_path=("", str(checkout), str(root), str(stdlib), str(site), str(root / "cache"),
                              str(checkout / ".venv" / "lib" / "python3.11" / "site-packages"), str(root / "nowhere")),
                    sysconfig_paths=(str(stdlib), str(site)), prefix=str(checkout / ".venv"),
                    course=(str(checkout / "course"),), grading=grading, checkout=None if installed else checkout,
                    weights=(root / "cache" / "smollm2" / "SmolLM2-135M-Instruct", root / "cache" / "qwen35"),
                    output_store=(root / "cache" / "known-outputs",), system=(str(root / "usr" / "lib"),))

    return root, tree


def _inside(path, folder) -> bool:
    path, folder = Path(path), Path(folder)
    return path == folder or folder in path.parents


@pytest.mark.parametrize("installed", [False, True], ids=["a checkout", "installed"])
def test_the_checkout_and_the_folders_above_it_are_never_granted(fake, installed):
    root, tree = fake
    granted = dict(readable_paths(tree(installed)))
    checkout = root / "checkout"
    if not installed:
        assert not [path for path in granted if _inside(checkout, path)]  # not it, nor root, nor / ...
        # Inside it, only the course package and the virtual environment's Python.
        inside = [path for path in granted if _inside(path, checkout)]
        assert inside and all(_inside(p, checkout / "course") or _inside(p, checkout / ".venv") for p in inside)
        assert str(checkout / "source") not in granted and str(checkout / "pyproject.toml") not in granted
    else:  # installed, the folder named checkout is a folder like any other: its course is granted all the same
        assert str(checkout / "course") in granted


@pytest.mark.parametrize("installed", [False, True], ids=["a checkout", "installed"])
def test_grading_packages_and_the_output_store_are_never_granted_nor_any_folder_holding_them(fake, installed):
    root, tree = fake
    made = tree(installed)
    granted = readable_paths(made)
    answers = [*made.grading, *made.output_store]
    for path, rights in granted:
        target = Path(path).resolve()
        assert not any(_inside(target, answer) for answer in answers), path
        if rights == READ:  # a whole tree: never one that holds answers
            assert not any(_inside(answer, target) for answer in answers), path
    # A folder on sys.path that holds the output store is only listed, and the store in it is not granted.
    assert dict(granted).get(str(root / "cache")) == LIST
    assert str(root / "cache" / "known-outputs") not in dict(granted)


def test_site_packages_is_listed_with_its_entries_read_but_the_grading_packages(fake):
    root, tree = fake
    granted = dict(readable_paths(tree(installed=True)))
    site = root / "python" / "lib" / "python3.11" / "site-packages"
    assert granted[str(site)] == LIST
    entries = {path.name: granted.get(str(path)) for path in site.iterdir()}
    # "answers" leads into the checkout's solutions/, not a grading package here; "cache" holds the output store.
    assert entries == {"numpy": READ, "six.py": READ, "autograder": None, "solutions": None, "answers": READ,
                       "cache": None}
    stdlib = site.parent
    assert granted[str(stdlib)] == LIST and granted[str(stdlib / "os.py")] == READ
    # With the grading packages in a checkout, the entry that leads into them is the one left out.
    granted = dict(readable_paths(tree(installed=False)))
    assert str(site / "answers") not in granted and granted[str(site / "autograder")] == READ


@pytest.mark.parametrize("installed", [False, True], ids=["a checkout", "installed"])
def test_the_course_package_is_readable(fake, installed):
    root, tree = fake
    assert dict(readable_paths(tree(installed)))[str(root / "checkout" / "course")] == READ


def test_weights_folders_are_granted_when_present(fake):
    root, tree = fake
    granted = dict(readable_paths(tree(installed=False)))
    assert granted[str(root / "cache" / "smollm2" / "SmolLM2-135M-Instruct")] == READ
    assert str(root / "cache" / "qwen35") not in granted
    (root / "cache" / "qwen35").mkdir()
    assert dict(readable_paths(tree(installed=False)))[str(root / "cache" / "qwen35")] == READ
    assert granted[str(root / "usr" / "lib")] == READ  # the system's shared libraries, given with the tree


def test_this_machines_tree_grants_the_course_and_not_the_checkout():
    here = Tree.here()
    granted = dict(readable_paths(here))
    assert granted == dict(readable_paths())
    assert granted[str(Path(course.__path__[0]).resolve())] == READ
    if here.checkout is not None:
        assert not [path for path in granted if _inside(here.checkout, path)]


def test_a_policy_goes_over_the_wire_unchanged():
    policy = Policy(up=("fork", "seccomp"), missing=(("landlock", "no Landlock"),), readable=(("/usr/lib", READ),),
                    devices=("/dev/null",), writable="/tmp", denied=syscall_filter.RULES, user=(65534, 65534),
                    privileges_dropped=True,
                    hidden=("/srv/course/solutions",), covers=(("/root", ("/root/.pyenv",)),))
    assert Policy.from_wire(policy.to_wire()) == policy
    assert Policy.from_wire(Policy().to_wire()) == Policy()


# --- the fork server's own policy ---------------------------------------------------------------------------

def _probe(policy: Policy) -> str:
    """``attention_scores``, correct, once it has found that its run is walled as ``policy`` says; otherwise it
    raises the differences it found."""
    expected = {"writable": policy.writable, "user": list(policy.user) if policy.user else [os.geteuid(), os.getegid()],
                "limits": vars(policy.limits) if policy.limits else None,
                "denied": {rule.syscall: rule.errno for rule in policy.denied},
                "reads": [[path, os.path.isdir(path)] for path, _ in policy.readable if os.path.exists(path)],
                "hidden": list(policy.hidden), "checkout": str(REPO / "pyproject.toml") if policy.readable else "",
                "no_new_privs": policy.privileges_dropped}
    return f'''
import ctypes, errno, math, os, resource, socket

EXPECTED = {expected!r}


def _refused(call):
    try:
        call()
    except OSError as e:
        return errno.errorcode[e.errno]
    return ""


def _checked(result):
    if result == -1:
        raise OSError(ctypes.get_errno(), "refused")


def _open(path, is_dir):
    os.listdir(path) if is_dir else open(path, "rb").close()


def attention_scores(q, k):
    wrong = []
    if not (os.getcwd() == os.environ["HOME"] == os.environ["TMPDIR"] == EXPECTED["writable"]):
        wrong.append(("writable", os.getcwd(), os.environ["HOME"], os.environ["TMPDIR"]))
    if [os.getuid(), os.getgid()] != EXPECTED["user"]:
        wrong.append(("user", os.getuid(), os.getgid()))
    if bool(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0)) != EXPECTED["no_new_privs"]:  # PR_GET_NO_NEW_PRIVS
        wrong.append(("no_new_privs", not EXPECTED["no_new_privs"]))
    run = EXPECTED["limits"]
    if run:
        cpu = math.ceil(run["cpu_s"]) + 1
        for name, value in (("FSIZE", [run["file_bytes"]] * 2), ("NOFILE", [run["open_files"]] * 2),
                            ("CPU", [cpu, cpu + 1]), ("NPROC", [run["processes"]] * 2 if run["processes"] else None)):
            if value and list(resource.getrlimit(getattr(resource, "RLIMIT_" + name))) != value:
                wrong.append((name, resource.getrlimit(getattr(resource, "RLIMIT_" + name))))
        memory = resource.getrlimit(resource.RLIMIT_AS)
        if memory[0] != memory[1] or memory[0] < run["extra_memory_bytes"]:
            wrong.append(("AS", memory))
        disk = os.statvfs(os.getcwd())
        if run["tmp_bytes"] and [disk.f_blocks * disk.f_frsize, disk.f_files] != [run["tmp_bytes"], run["tmp_files"]]:
            wrong.append(("tmp", disk.f_blocks * disk.f_frsize, disk.f_files))
    forked = _refused(lambda: os._exit(0) if os.fork() == 0 else None)
    memfd = _refused(lambda: os.close(os.memfd_create("probe")))
    if [forked, memfd] != [EXPECTED["denied"].get("clone", ""), EXPECTED["denied"].get("memfd_create", "")]:
        wrong.append(("seccomp", forked, memfd))
    # Calls aimed outside the run; where seccomp is missing other walls (or their arguments) refuse them otherwise.
    libc = ctypes.CDLL(None, use_errno=True)
    outside = {{"kill": lambda: os.kill(os.getppid(), 0),
               "tgkill": lambda: _checked(libc.tgkill(os.getppid(), os.getppid(), 0)),
               "ptrace": lambda: _checked(libc.ptrace(2, os.getppid(), None, None)),  # PTRACE_PEEKDATA
               "process_vm_readv": lambda: _checked(libc.process_vm_readv(os.getppid(), None, 0, None, 0, 0)),
               "socket": lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close(),
               "io_uring_setup": lambda: _checked(libc.syscall(425, 1, None)),
               "pidfd_send_signal": lambda: _checked(libc.syscall(424, -1, 0, None, 0))}}
    found = {{name: _refused(call) for name, call in outside.items() if name in EXPECTED["denied"]}}
    if found != {{name: EXPECTED["denied"][name] for name in found}}:
        wrong.append(("seccomp, outside the run", found))
    unreadable = [path for path, is_dir in EXPECTED["reads"] if _refused(lambda: _open(path, is_dir))]
    if unreadable:
        wrong.append(("unreadable", unreadable[:3]))
    if EXPECTED["checkout"] and _refused(lambda: _open(EXPECTED["checkout"], False)) != "EACCES":
        wrong.append(("read the checkout", EXPECTED["checkout"]))
    shown = [folder for folder in EXPECTED["hidden"] if os.listdir(folder)]
    if shown:
        wrong.append(("not hidden", shown))
    if wrong:
        raise LookupError(repr(wrong))
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
'''


@linux_only
@pytest.mark.parametrize("walls_off", [(), ("landlock",)], ids=["all walls", "no landlock"])
def test_the_hellos_policy_is_what_a_run_finds(walls_off, sandbox, sandbox_without):
    """Student code checks each part of the policy its fork server sent in its hello: the private folder, the
    user, every limit, the system calls seccomp denies, every path Landlock grants (and the checkout it does not),
    the folders hidden from runs without Landlock. It passes only if all hold."""
    box = sandbox_without(*walls_off) if walls_off else sandbox
    policy = box.policy()
    assert set(walls_off) <= set(policy.missing_walls) and list(policy.up) == box.hello()["up"]
    assert policy.missing_walls == box.hello()["missing"]
    if "seccomp" in policy.up:
        assert policy.denied == syscall_filter.RULES
    if "landlock" in policy.up:
        assert (str(Path(course.__path__[0]).resolve()), READ) in policy.readable
    else:
        assert policy.readable == () and (not policy.hidden or "hidden-answers" in policy.up)
    if policy.limits:
        assert policy.limits.cpu_s == limits.EXERCISE_TIMEOUT_S
    verdict = graded(_probe(policy), sandbox=box, timeout_s=policy.limits.cpu_s if policy.limits else 10)
    assert verdict.passed, verdict.message


# --- course-doctor --sandbox ----------------------------------------------------------------------------------

@linux_only
def test_course_doctor_sandbox_prints_the_policy(sandbox, capsys):
    policy = sandbox.policy()  # this process's fork server: the doctor starts one of its own on the same machine
    assert doctor.main(["--sandbox"]) == 0
    said = capsys.readouterr().out
    lines = said.splitlines()
    for wall in policy.up:
        assert any(line.startswith(f"  ✓ {wall}: ") for line in lines), said
    for wall in policy.missing_walls:
        assert any(line.startswith(f"  ✗ {wall}: ") for line in lines), said
    assert f"  file size: {size(limits.FILE_BYTES)}" in lines and f"  open files: {limits.OPEN_FILES}" in lines
    assert "  CPU time: 20 s per exercise (RLIMIT_CPU one second above)" in lines
    if "landlock" in policy.up:
        assert f"  {Path(course.__path__[0]).resolve()}" in lines, said
        assert any(line.startswith("Writes: only ") for line in lines)
    if "seccomp" in policy.up:
        assert "clone (EPERM) unless it makes a thread (CLONE_THREAD)" in said


def test_course_doctor_sandbox_says_when_the_sandbox_cannot_start(monkeypatch, capsys):
    from autograder.engine.sandbox import client

    def refuse(box):
        raise client.SandboxError("no fork server")

    monkeypatch.setattr(client.Sandbox, "hello", refuse)
    assert doctor.main(["--sandbox"]) == 1
    assert "✗ 评分沙箱启动不了：no fork server" in capsys.readouterr().out
