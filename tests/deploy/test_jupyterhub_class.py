"""A class on one server, for real: JupyterHub with deploy/jupyterhub/jupyterhub_config.py as it is (PAM
logins, Unix accounts, the formgrader as a Hub service run as the grader account, the students' Jupyter
config), its proxy (configurable-http-proxy) and nbgrader's exchange made by make-exchange.sh; students
and an instructor in headless Chromium.

An instructor generates and releases 01 in the formgrader; a student logs in, fetches it in JupyterLab's
Assignments tab and submits it there, a second one, with a mistake, does the same from a terminal with
nbgrader's commands (the answers are written into the fetched notebook on disk, as the student's own file:
typing them is tests/notebooks/test_browser.py's subject); the instructor collects, autogrades, generates and
releases feedback, each with the formgrader's own button; the first student fetches the feedback and reads
it. nbgrader's marks equal `pytest autograder/`'s for the same notebooks (the engine's, graded in this
process as the plugin grades), the mistaken student's are lower, the feedback shows no hidden tests, and
the students' JupyterLab has no instructor menus and no way into the formgrader.

The steps of deploy/jupyterhub/setup.sh that make the class, each with setup.sh's own script or command: the
grader's copy of the course is a clone of this checkout, in which the grader account runs course-release;
make-exchange.sh makes the exchange; login-path.sh puts the course's commands on the PATH of login shells, and
a student's JupyterLab terminal (a login shell) runs course-weights.

Differences from a class server, each the least this machine needs: the accounts are made for the test
(prefix ``attn-hub-``) and removed after it; the Hub runs in a mount namespace of its own, where /srv (the
exchange) and /etc/profile.d are empty tmpfs and any folder closed to other accounts on the way to the test's
Python (/root, for a pyenv Python) is replaced by an open one holding only that way; the students' and the
grader's environment are the test's own (setup.sh's installs of torch, JupyterHub and the course into two
venvs are not run), so course-release runs as ``python -m`` in the clone, and the ports are free ones.
"""
import contextlib
import grp
import os
import pwd
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import nbformat
import pytest
from nbgrader.api import Gradebook
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_notebook
from course.layout import ROOT as REPO
from tests.chromium import CHROMIUM, answers, free_port, launched
from tests.notebooks import ASSIGNMENT, filled, source_solutions
from tests.students import a01

DEPLOY = REPO / "deploy" / "jupyterhub"
PREFIX = "attn-hub-"
STUDENT, MISTAKEN, TEACHER, GRADER = (PREFIX + name for name in ("ada", "bo", "teacher", "grader"))
STUDENTS, INSTRUCTORS = PREFIX + "students", PREFIX + "instructors"
MEMBERS = {STUDENT: STUDENTS, MISTAKEN: STUDENTS, TEACHER: INSTRUCTORS, GRADER: None}
PASSWORD = "attention-hub-test-password"
SERVICE = "/services/attention-course"
MISTAKE = next(m for m in a01.MISTAKES if m[0] == "padding_mask")  # no later exercise calls padding_mask
MISTAKE_POINTS = next(e.points for e in ASSIGNMENTS[ASSIGNMENT] if e.name == "padding_mask")
NOTEBOOKS = {STUDENT: filled(source_solutions()), MISTAKEN: filled({**source_solutions(), "padding_mask": MISTAKE[2]})}
FULL_MARKS = sum(e.points for e in ASSIGNMENTS[ASSIGNMENT])
EXPECTED = {STUDENT: FULL_MARKS, MISTAKEN: FULL_MARKS - MISTAKE_POINTS}
SECONDS = 120  # for any one step: a server spawned, the formgrader up, an autograde

# What the test adds to the deploy's configuration: its own ports, on the loopback.
OVERLAY = """c = get_config()
load_subconfig({config!r})
c.JupyterHub.bind_url = "http://127.0.0.1:{public}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy}"
c.JupyterHub.services[0]["url"] = "http://127.0.0.1:{formgrader}"
"""


def needs() -> str | None:
    """Why this machine cannot run the class, or None."""
    missing = [name for name in ("unshare", "nsenter", "runuser", "useradd", "chpasswd", "configurable-http-proxy")
               if not shutil.which(name)]
    if missing:
        return f"needs {', '.join(missing)} (.ci/run installs configurable-http-proxy with npm)"
    if CHROMIUM is None:
        return "needs the system's Chromium (.ci/run installs it)"
    if os.geteuid() != 0:
        return "needs root: the Hub starts each user's server as that Unix user"
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        return "needs JupyterHub (the test extra installs it)"
    return None


def run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, f"{shlex.join(command)}: {done.stdout}{done.stderr}"


def processes_of(uid: int) -> list[int]:
    """The processes running as ``uid``."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(FileNotFoundError):
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                found.append(int(entry.name))
    return found


def remove_accounts() -> None:
    """The test's accounts and groups, a crashed run's too, and whatever they still run."""
    for user in MEMBERS:
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
        # SIGKILL is delivered, not waited for: userdel refuses an account while one of its processes is
        # still there, so kill until none is left.
        deadline = time.monotonic() + 10
        while (pids := processes_of(uid)) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        run("userdel", user)
    for group in (STUDENTS, INSTRUCTORS):
        try:
            grp.getgrnam(group)
        except KeyError:
            continue
        run("groupdel", group)


@pytest.fixture(scope="module")
def accounts():
    """Unix accounts with passwords, in the deploy's groups, homes in a folder every account may cross."""
    homes = Path(tempfile.mkdtemp(prefix=PREFIX, dir="/tmp"))
    homes.chmod(0o755)
    remove_accounts()
    for group in (STUDENTS, INSTRUCTORS):
        run("groupadd", group)
    for user, group in MEMBERS.items():  # homes as Debian 12's login.defs makes them: 0755
        run("useradd", "--create-home", "--home-dir", str(homes / user), "--shell", "/bin/bash",
            *(["--groups", group] if group else []), user)
    (homes / GRADER).chmod(0o700)  # as setup.sh makes it
    subprocess.run(["chpasswd"], input="".join(f"{u}:{PASSWORD}\n" for u in MEMBERS if u != GRADER),
                   text=True, check=True)
    yield homes
    remove_accounts()
    shutil.rmtree(homes, ignore_errors=True)


def reach(paths) -> list[str]:
    """Shell lines that make ``paths`` reachable for every account inside a mount namespace: each ancestor
    closed to others is covered by an open tmpfs, into which only the entries on the way are bound back (the
    outermost first, so that one closed folder inside another, a clone in a 0700 folder of /root, is reached
    through the bind of the first)."""
    closed: dict[Path, set[Path]] = {}
    for path in map(Path, paths):
        for parent in reversed(path.parents):
            if parent != path.parents[-1] and not parent.stat().st_mode & stat.S_IXOTH:
                closed.setdefault(parent, set()).add(Path(*path.parts[:len(parent.parts) + 1]))
    lines = []
    for n, parent in enumerate(sorted(closed, key=lambda p: len(p.parts))):
        staged = {entry: f"/srv/.reach-{n}-{m}" for m, entry in enumerate(sorted(closed[parent]))}
        lines += [f"mkdir {stage} && mount --bind {shlex.quote(str(e))} {stage}" for e, stage in staged.items()]
        lines.append(f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(parent))}")
        lines += [f"mkdir -p {shlex.quote(str(e))} && mount --bind {stage} {shlex.quote(str(e))} && umount {stage}"
                  for e, stage in staged.items()]
    return lines


NEEDS = needs()
# The environment whose bin/ holds the course's commands (setup.sh's /opt/attention-course and the grader's venv).
ENVIRONMENT = Path(sys.executable).parent.parent


class Hub:
    def __init__(self, url: str, course: Path, homes: Path, pid: int):
        self.url, self.course, self.homes, self.pid = url, course, homes, pid

    def hand_in(self, student: str) -> None:
        """Write ``student``'s answers into the notebook they fetched, as their own file."""
        fetched = self.homes / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        assert fetched.is_file(), f"{student} fetched nothing into {fetched.parent}"
        nbformat.write(NOTEBOOKS[student], fetched)
        user = pwd.getpwnam(student)
        os.chown(fetched, user.pw_uid, user.pw_gid)

    def terminal(self, student: str, *command: str) -> None:
        """``command`` in a terminal of ``student``'s (their account, their Jupyter config), on the server."""
        done = self.attempt(student, *command)
        assert done.returncode == 0, f"{shlex.join(command)}: {done.stdout}{done.stderr}"

    def attempt(self, student: str, *command: str) -> subprocess.CompletedProcess:
        """What ``command`` does in a terminal of ``student``'s on the server, whether it succeeds or not."""
        return subprocess.run(["nsenter", f"--mount=/proc/{self.pid}/ns/mnt", "--", "runuser", "-u", student, "--",
                               "env", f"HOME={self.homes / student}", f"JUPYTER_CONFIG_PATH={DEPLOY / 'student'}",
                               "sh", "-c", f"cd && {shlex.join(command)}"], capture_output=True, text=True)


def in_namespace(script: str) -> None:
    """``script`` in a mount namespace of its own, as root, reading nothing; it must succeed within 3 steps' time.
    Past that, its Pythons (run with ``PYTHONFAULTHANDLER``) are made to print where each thread stood, and the
    failure quotes it."""
    process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        said, _ = process.communicate(timeout=3 * SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGABRT)  # faulthandler's signal: each Python prints its stacks, then dies
        try:
            said, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            said, _ = process.communicate()
        pytest.fail(f"no end within {3 * SECONDS} s: {script}\n{said[-6000:]}")
    assert process.returncode == 0, f"{script}\n{said[-3000:]}"


@pytest.fixture(scope="module")
def hub(accounts, tmp_path_factory):
    """The Hub, up, over the grader's course folder: a clone of this checkout in which the grader ran
    course-release (the source notebooks the formgrader's Generate reads), as setup.sh makes it."""
    course = accounts / GRADER / "attention-by-hand"
    run("git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(course))
    run("chown", "-R", f"{GRADER}:", str(course))
    state = tmp_path_factory.mktemp("hub")
    ports = {name: free_port() for name in ("public", "hub", "proxy", "formgrader")}
    (state / "overlay.py").write_text(OVERLAY.format(config=str(DEPLOY / "jupyterhub_config.py"), **ports),
                                      encoding="utf-8")
    python, as_grader = Path(sys.executable), f"runuser -u {GRADER} -- env HOME={shlex.quote(str(accounts / GRADER))} PYTHONFAULTHANDLER=1"
    reached = ["mount -t tmpfs -o mode=755 tmpfs /srv",
               *reach({python.resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), REPO})]
    # setup.sh's `course-release` as the grader (the clone's own, run from the clone), before the Hub and on its own
    # clock, so that what it says is seen if it fails.
    in_namespace(" && ".join([*reached, f"cd {shlex.quote(str(course))}",
                              f"{as_grader} {shlex.quote(str(python))} -m autograder.instructor.release"]))
    script = " && ".join([
        *reached,
        "mount -t tmpfs -o mode=755 tmpfs /etc/profile.d",
        f"{as_grader} {shlex.quote(str(python))} -c 'import jupyterhub, nbgrader, autograder'",
        f"bash {shlex.quote(str(DEPLOY / 'make-exchange.sh'))} {GRADER}",
        f"bash {shlex.quote(str(DEPLOY / 'login-path.sh'))} {shlex.quote(str(ENVIRONMENT))} {GRADER} "
        f"{shlex.quote(str(ENVIRONMENT))}",
        f"exec {shlex.quote(str(python))} -m jupyterhub -f overlay.py",
    ])
    env = {**os.environ, "ATTENTION_COURSE_GRADER": GRADER, "ATTENTION_COURSE_GRADER_PYTHON": str(python),
           "ATTENTION_COURSE_STUDENTS": STUDENTS, "ATTENTION_COURSE_INSTRUCTORS": INSTRUCTORS}
    with (state / "hub.log").open("w") as log:
        process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                   cwd=state, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{ports['public']}"
    # Three steps before the Hub answers (the grader account's first imports, the exchange, the Hub's own start):
    # on a machine whose cores the other tests fill, the first took more than one step's time once.
    if not answers(f"{url}/hub/api", process, 3 * SECONDS):
        with contextlib.suppress(ProcessLookupError):  # gone already when the Hub itself stopped
            os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"JupyterHub did not start: {(state / 'hub.log').read_text(encoding='utf-8')[-3000:]}")
    yield Hub(url, course, accounts, process.pid)  # unshare and sh exec: its pid is the Hub's
    os.killpg(process.pid, signal.SIGTERM)  # the Hub stops the servers it started, the service and the proxy
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # on a busy machine the service can take half a minute to stop
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        # The proxy runs in a session of its own; the servers and the service die with `accounts`.
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int((state / "jupyterhub-proxy.pid").read_text(encoding="utf-8")), signal.SIGKILL)


@pytest.fixture(scope="module")
def browser():
    with launched() as chromium:
        yield chromium


def log_in(browser, hub: Hub, user: str, then: str):
    """A page of ``user``'s own browser, logged in on the Hub's form and sent on to ``then``."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.set_default_timeout(SECONDS * 1000)
    page.goto(f"{hub.url}/hub/login?next={quote(then)}")
    page.fill("#username_input", user)
    page.fill("#password_input", PASSWORD)
    page.click("#login_submit")
    return page


def formgrader(page, hub: Hub, view: str, row: str = ASSIGNMENT) -> None:
    """Open a formgrader page and wait for its table's ``row``, waiting out the service's start (the proxy
    answers 503 until it listens)."""
    deadline = time.monotonic() + SECONDS
    while True:
        page.goto(f"{hub.url}{SERVICE}/formgrader/{view}")
        if page.locator("#main-table").count():
            try:
                page.locator("#main-table tr", has_text=row).first.wait_for(timeout=30_000)
            except PlaywrightTimeout:
                pytest.fail(f"no row for {row} in the formgrader's {view}: {page.inner_text('body')[:1000]}")
            return
        assert time.monotonic() < deadline, f"no formgrader at {page.url}: {page.inner_text('body')[:500]}"
        time.sleep(1)


def press(page, row: str, button: str) -> str:
    """Click a formgrader button (the cell ``button`` of the row holding ``row``), wait for its answer and return
    what the answer's dialog said (for Autograde, nbgrader's log of the notebook)."""
    page.locator("#main-table tr", has_text=row).locator(f"td.{button} a").click()
    answer = page.locator("#success-modal, #error-modal")
    answer.wait_for(state="visible")
    said = answer.text_content()
    assert answer.get_attribute("id") == "success-modal", f"{button} of {row}: {said}"
    answer.locator(".modal-footer button").click()
    answer.wait_for(state="detached")
    return said


def assignments_tab(page) -> list[str]:
    """Open the Assignments tab through the Nbgrader menu; returns the menu's visible items."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Nbgrader$")).click()
    menu = page.evaluate("() => [...document.querySelectorAll('.lm-Menu .lm-Menu-item')]"
                         ".filter(item => item.offsetParent !== null).map(item => item.innerText.trim())")
    page.locator(".lm-Menu-item", has_text="Assignment List").click()
    page.locator("#released_assignments_list_loading").wait_for(state="hidden")
    return menu


def list_button(page, listing: str, label: str):
    return page.locator(f"#{listing}_assignments_list .list_item", has_text=ASSIGNMENT).locator("button", has_text=label)


def released(page):
    """01's Fetch button in the Assignments tab. The tab lists the exchange once, when it opens, so a list read
    while the machine was busy may come back without 01: refreshed as nbgrader's own UI tests do, until 01 is
    listed; otherwise the failure quotes what the tab showed."""
    fetch = list_button(page, "released", "Fetch")
    deadline = time.monotonic() + SECONDS
    while True:
        try:
            fetch.wait_for(timeout=15_000)
            return fetch
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                pytest.fail(f"no Fetch for {ASSIGNMENT} in the Assignments tab: "
                            f"{page.locator('.panel-group').first.inner_text()[:1000]}")
            page.locator("#refresh_assignments_list").click()


def fetch_and_submit(browser, hub: Hub, student: str) -> dict:
    """``student`` logs in, fetches 01, hands in their notebook and submits it; what their JupyterLab showed."""
    page = log_in(browser, hub, student, "/hub/")  # the Hub starts the server, then opens its /lab
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Nbgrader$")).wait_for()
    seen = {"menu": assignments_tab(page), "page": page,
            "sidebar": page.locator(".jp-SideBar .lm-TabBar-tab").evaluate_all("tabs => tabs.map(t => t.title)"),
            "own formgrader": page.request.get(f"{hub.url}/user/{student}/formgrader").status}
    released(page).click()
    list_button(page, "fetched", "Submit").wait_for()
    hub.hand_in(student)
    list_button(page, "fetched", "Submit").click()
    page.locator("#submitted_assignments_list .list_item", has_text=ASSIGNMENT).wait_for()
    return seen


@pytest.fixture(scope="module")
def graded_class(browser, hub):
    """The class, from release to feedback, the instructor's steps in the formgrader. What the students saw."""
    teacher = log_in(browser, hub, TEACHER, f"{SERVICE}/formgrader/manage_assignments")
    formgrader(teacher, hub, "manage_assignments")
    press(teacher, ASSIGNMENT, "assign")  # Generate: release/ and the gradebook's record of 01
    press(teacher, ASSIGNMENT, "release")
    seen = {STUDENT: fetch_and_submit(browser, hub, STUDENT)}
    # The other student from a terminal, with nbgrader's own commands: what the Assignments tab runs.
    hub.terminal(MISTAKEN, sys.executable, "-m", "nbgrader", "fetch_assignment", ASSIGNMENT)
    hub.hand_in(MISTAKEN)
    hub.terminal(MISTAKEN, sys.executable, "-m", "nbgrader", "submit", ASSIGNMENT)
    formgrader(teacher, hub, "manage_assignments")
    press(teacher, ASSIGNMENT, "collect")
    formgrader(teacher, hub, f"manage_submissions/{ASSIGNMENT}", row=STUDENT)
    seen["autograde"] = {student: press(teacher, student, "autograde") for student in NOTEBOOKS}
    formgrader(teacher, hub, "manage_assignments")
    press(teacher, ASSIGNMENT, "generate-feedback")
    press(teacher, ASSIGNMENT, "release-feedback")
    page = seen[STUDENT]["page"]
    page.locator("#refresh_assignments_list").click()
    list_button(page, "submitted", "Fetch Feedback").click()
    page.locator("#submitted_assignments_list a", has_text="view feedback").wait_for()
    seen["terminal"] = in_a_terminal(page, STUDENT, "command -v course-weights && course-weights --help")
    feedback = list((hub.homes / STUDENT / ASSIGNMENT / "feedback").glob(f"*/{ASSIGNMENT}.html"))
    assert len(feedback) == 1, feedback
    page.goto(f"{hub.url}/user/{STUDENT}/files/{quote(str(feedback[0].relative_to(hub.homes / STUDENT)))}")
    seen["feedback"] = page.content()
    intruder = log_in(browser, hub, MISTAKEN, f"{SERVICE}/formgrader")  # a student's login, sent to the formgrader
    intruder.wait_for_load_state()
    seen["student at the formgrader"] = intruder.inner_text("body")
    return seen


def in_a_terminal(page, user: str, command: str) -> str:
    """What ``command`` prints in a new terminal of ``user``'s JupyterLab (``page`` is logged in as them): the
    shell the Jupyter server starts for JupyterLab's Terminal (a login shell, under a Hub), over its websocket."""
    return page.evaluate("""async ([base, command]) => {
        const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || "";
        const made = await fetch(`${base}/api/terminals`, {method: "POST", headers: {"X-XSRFToken": xsrf}});
        const {name} = await made.json();
        const socket = new WebSocket(`${location.origin.replace("http", "ws")}${base}/terminals/websocket/${name}`);
        let seen = "";
        return await new Promise((resolve, reject) => {
            const timer = setTimeout(() => resolve(seen + "\\n(no end mark within 60 s)"), 60000);
            socket.onopen = () => socket.send(JSON.stringify(["stdin", command + "; echo END-$((40 + 2))\\r"]));
            socket.onmessage = (event) => {
                const [kind, text] = JSON.parse(event.data);
                if (kind === "stdout") seen += text;
                if (seen.includes("END-42")) { clearTimeout(timer); socket.close(); resolve(seen); }
            };
            socket.onerror = () => reject(new Error(`the terminal's websocket failed after: ${seen}`));
        });
    }""", [f"/user/{user}", command])


def nbgrader_marks(course: Path, student: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
        return {g.name.removeprefix("tests_"): g.score for g in notebook.grades if g.name.startswith("tests_")}


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.nbgrader
@pytest.mark.skipif(NEEDS is not None, reason=str(NEEDS))
class TestAClassOnOneServer:
    def test_formgrader_marks_equal_pytest_autograder(self, graded_class, hub, sandbox):
        for student in NOTEBOOKS:
            submitted = hub.course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
            by_pytest = {v.exercise: v.points for v in grade_notebook(submitted, sandbox=sandbox)}
            by_nbgrader = nbgrader_marks(hub.course, student)
            assert by_nbgrader == by_pytest, student
            assert sum(by_nbgrader.values()) == EXPECTED[student], student
        with Gradebook(f"sqlite:///{hub.course / 'gradebook.db'}") as gradebook:
            assert [a.name for a in gradebook.assignments] == [ASSIGNMENT]

    def test_honest_notebooks_autograde_without_warnings_and_keep_each_cell_once(self, graded_class, hub):
        """The formgrader's Autograde dialog shows nbgrader's warnings: an honest notebook gives none (a warning
        there would mean the notebook was tampered with), and the graded notebook holds each released cell once."""
        released = nbformat.read(hub.course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
        for student, said in graded_class["autograde"].items():
            assert "WARNING" not in said, (student, said)
            graded = nbformat.read(hub.course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
            ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in graded.cells]
            assert len(graded.cells) == len(released.cells) and all(ids.count(i) == 1 for i in ids if i), student

    def test_the_student_reads_feedback_without_hidden_tests(self, graded_class):
        html = graded_class["feedback"]
        assert f"{ASSIGNMENT} (Score: {EXPECTED[STUDENT]:.1f} / {EXPECTED[STUDENT]:.1f})" in html
        assert "HIDDEN TESTS" not in html and "grade(" not in html and "import grade" not in html

    def test_students_have_no_instructor_menus(self, graded_class):
        seen = graded_class[STUDENT]
        assert seen["menu"] == ["Assignment List"], seen["menu"]  # not Course List, Formgrader, Create assignment
        assert not any("Create Assignment" in (title or "") for title in seen["sidebar"]), seen["sidebar"]
        assert seen["own formgrader"] == 404
        assert "Manage Assignments" not in graded_class["student at the formgrader"]
        assert "403" in graded_class["student at the formgrader"]


    def test_a_students_terminal_runs_the_courses_commands(self, graded_class):
        """JupyterLab's terminal is a login shell, whose /etc/profile sets PATH anew: login-path.sh's file puts
        the course's commands back on it."""
        printed = graded_class["terminal"]
        assert str(ENVIRONMENT / "bin" / "course-weights") in printed and "usage: course-weights" in printed, printed

    def test_no_student_reads_another_students_work_nor_the_graders(self, graded_class, hub):
        """The first student's home, which useradd made 0755, is hers alone once her server has started: the
        second cannot list it or read her notebook, nor list what the exchange collected, nor read the gradebook."""
        home = hub.homes / STUDENT
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        from traitlets.config import PyFileConfigLoader

        config = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
        exchange = f"{config.Exchange.root}/{config.CourseDirectory.course_id}"
        for command in (["ls", str(home)], ["cat", str(home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")],
                        ["ls", f"{exchange}/inbound"], ["cat", str(hub.course / "gradebook.db")]):
            done = hub.attempt(MISTAKEN, *command)
            assert done.returncode != 0 and "Permission denied" in done.stderr, (command, done.stdout, done.stderr)
        assert hub.attempt(MISTAKEN, "ls", exchange).returncode == 0  # where they fetch from is open to them


def test_the_students_nbgrader_config_names_the_courses_exchange():
    """deploy/jupyterhub/student/nbgrader_config.py repeats the course's id and exchange (students cannot read
    the grader's nbgrader_config.py): they must agree, or students fetch from an empty exchange."""
    from traitlets.config import PyFileConfigLoader

    course = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    student = PyFileConfigLoader("nbgrader_config.py", path=str(DEPLOY / "student")).load_config()
    for section, key in (("CourseDirectory", "course_id"), ("Exchange", "root")):
        assert student[section][key] == course[section][key]
    exchange = (DEPLOY / "make-exchange.sh").read_text(encoding="utf-8")
    assert f"ROOT={course.Exchange.root}\n" in exchange and f"COURSE_ID={course.CourseDirectory.course_id} " in exchange


def test_the_deploy_scripts_are_valid_bash():
    for script in ("setup.sh", "make-exchange.sh", "login-path.sh", "profile.sh", "proxy-for-node.sh"):
        assert subprocess.run(["bash", "-n", str(DEPLOY / script)]).returncode == 0, script


def login_path(tmp_path, grader: str) -> tuple[subprocess.CompletedProcess, Path]:
    target = tmp_path / "profile.d" / "attention-course.sh"
    done = subprocess.run(["bash", str(DEPLOY / "login-path.sh"), "/opt/attention-course", grader,
                           "/home/grader/attention-by-hand/.venv", str(target)], capture_output=True, text=True)
    return done, target


def path_after(target: Path, times: int = 1) -> list[str]:
    """PATH in a shell that has read ``target`` ``times`` times, starting from the PATH /etc/profile sets."""
    line = "; ".join([f". {shlex.quote(str(target))}"] * times + ['echo "$PATH"'])
    done = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "bash", "--noprofile", "--norc", "-c", line],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip().split(":")


def test_login_shells_get_the_students_commands_and_the_grader_its_own(tmp_path):
    me = pwd.getpwuid(os.getuid()).pw_name
    done, target = login_path(tmp_path, grader="someone-else")
    assert done.returncode == 0, done.stderr
    assert path_after(target) == ["/opt/attention-course/bin", "/usr/bin", "/bin"]
    assert path_after(target, times=2) == ["/opt/attention-course/bin", "/usr/bin", "/bin"]  # not twice
    done, target = login_path(tmp_path, grader=me)  # this account is the grader: its own environment instead
    assert path_after(target) == ["/home/grader/attention-by-hand/.venv/bin", "/usr/bin", "/bin"]


def test_login_path_refuses_a_value_a_shell_would_read_as_code(tmp_path):
    done, target = login_path(tmp_path, grader='x"; rm -rf /; "')
    assert done.returncode == 1 and "only letters" in done.stderr and not target.exists()


@pytest.mark.parametrize("node, proxy", [("18.20.4", "configurable-http-proxy@4.6.3"),
                                         ("20.20.2", "configurable-http-proxy@5.3.0"),
                                         ("22.11.0", "configurable-http-proxy@5.3.0")])
def test_the_proxy_is_one_that_runs_on_the_machines_node(tmp_path, node, proxy):
    """configurable-http-proxy 5 declares Node >= 20: on Debian 12's own Node 18, setup.sh takes 4.6.3 (what the
    Hub was run with there, README). The node here is a stand-in that says its version as node does."""
    (tmp_path / "node").write_text(f"#!/bin/sh\necho {node.split('.')[0]}\n", encoding="utf-8")
    (tmp_path / "node").chmod(0o755)
    done = subprocess.run(["bash", str(DEPLOY / "proxy-for-node.sh")], capture_output=True, text=True,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert (done.returncode, done.stdout.strip()) == (0, proxy), done.stderr


def test_ci_installs_the_proxy_setup_sh_would_install_here():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'npm install --global --silent "$(bash deploy/jupyterhub/proxy-for-node.sh)"' in ci
