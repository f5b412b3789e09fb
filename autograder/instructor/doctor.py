"""``course-doctor``: check this machine for the course and say what to fix.

    course-doctor             the checks
    course-doctor --sandbox   the grading sandbox's effective policy on this machine

Each check gives a ``Finding``, printed as a line — ✓ fine, ! works but could be better, ✗ needs fixing —
with, when something is off, the command that fixes it. The exit code is 1 only when grading cannot work at all.
"""
import argparse
import importlib.util
import platform
import shutil
import subprocess
import sys
from typing import NamedTuple

OK, WARN, BAD = "✓", "!", "✗"
_CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


class Finding(NamedTuple):
    mark: str
    what: str
    fix: str = ""  # what to run or do, when something is off

    def __str__(self) -> str:
        return f"{self.mark} {self.what}" + (f"\n    → {self.fix}" if self.fix else "")


def check_torch():
    if importlib.util.find_spec("torch") is None:
        return Finding(BAD, "torch 没有安装", f"在没有 GPU 的机器上：python -m pip install torch {_CPU_INDEX}")
    import torch

    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU"
    if torch.version.cuda and not torch.cuda.is_available():
        # The same version's CPU build, named with its +cpu label: pip counts 2.5.1+cu124 as "torch==2.5.1".
        cpu = torch.__version__.split("+")[0] + "+cpu"
        return Finding(WARN, f"torch {torch.__version__}（{build} 版）装在了没有可用 GPU 的机器上：能用，"
                             "但多占了几个 GB", f'换成 CPU 版：python -m pip install "torch=={cpu}" {_CPU_INDEX}')
    return Finding(OK, f"torch {torch.__version__}（{build} 版）")


def _sandbox_policy():
    """The grading sandbox's policy, as a fork server of its own puts it up on this machine; SandboxError where it
    cannot start."""
    from autograder.engine.sandbox.client import Sandbox

    sandbox = Sandbox()
    try:
        return sandbox.policy()
    finally:
        sandbox.stop()


def _sandbox_broken(e: Exception) -> Finding:
    return Finding(BAD, f"评分沙箱启动不了：{e}", "把这行信息告诉老师或助教")


def _kernel() -> str:
    return f"{platform.system()} {platform.release()}"


def check_sandbox():
    """The grading sandbox's walls, as its fork server finds them on this machine."""
    from autograder.engine.sandbox.client import SandboxError
    from autograder.engine.sandbox.walls import describe_missing

    try:
        policy = _sandbox_policy()
    except SandboxError as e:
        return _sandbox_broken(e)
    missing = describe_missing(policy.missing_walls)
    if missing:
        return Finding(WARN, f"评分沙箱（{_kernel()}）缺少 {len(missing)} 道防护，评分照常：\n      " + "\n      ".join(missing),
                       "在 Linux 6.12 或更新的内核上，评分的隔离最完整")
    return Finding(OK, f"评分沙箱：{_kernel()}，所有防护都在（{', '.join(policy.up)}）")


def show_sandbox() -> int:
    """``course-doctor --sandbox``: what student code may do here — the walls up and missing, a run's limits, what it
    may read and write, the user it runs as, the system calls seccomp denies — as the fork server put it up."""
    from autograder.engine.sandbox.client import SandboxError
    from autograder.engine.sandbox.walls import PURPOSE

    try:
        policy = _sandbox_policy()
    except SandboxError as e:
        print(_sandbox_broken(e))
        return 1
    print(f"评分沙箱在这台机器上（{_kernel()}）的有效策略 / the grading sandbox's effective policy:")
    for line in policy.describe(PURPOSE):
        print(line)
    return 0


def check_plot_font():
    from course.tools import plotting

    family = plotting._find_cjk_family()
    if family is None:
        return Finding(BAD, "matplotlib 找不到中文字体：图里的中文会是方框", "python -m pip install mplfonts")
    return Finding(OK, f"matplotlib 的中文字体：{family}")


def check_browser_font():
    """JupyterLab's Markdown and code are drawn by the browser with the system's fonts."""
    if sys.platform in ("darwin", "win32"):
        return Finding(OK, "浏览器的中文字体：macOS 和 Windows 自带")
    if shutil.which("fc-list") is None:
        return Finding(WARN, "查不到系统字体（没有 fc-list）", "Debian/Ubuntu：sudo apt-get install fontconfig fonts-noto-cjk")
    families = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout.split("\n")
    families = sorted({f.split(",")[0].strip() for f in families if f.strip()})
    if not families:
        return Finding(BAD, "系统里没有中文字体：JupyterLab 里的中文说明和报错会显示成方框",
                       "Debian/Ubuntu：sudo apt-get install fonts-noto-cjk；Fedora：sudo dnf install google-noto-sans-cjk-fonts；"
                       "装好后刷新浏览器")
    return Finding(OK, f"浏览器的中文字体：{families[0]}" + (f" 等 {len(families)} 种" if len(families) > 1 else ""))


def check_nbgrader():
    """Students do not need nbgrader; with it installed, JupyterLab shows instructor menus."""
    if importlib.util.find_spec("nbgrader") is None:
        return Finding(OK, "没有装 nbgrader：JupyterLab 里不会出现老师用的菜单（学生不需要它）")
    jupyter = shutil.which("jupyter")
    listing = subprocess.run([jupyter, "labextension", "list"], capture_output=True, text=True) if jupyter else None
    text = (listing.stdout + listing.stderr) if listing else ""
    enabled = any("nbgrader" in line and "enabled" in line for line in text.splitlines())
    if enabled:
        return Finding(WARN, "nbgrader 的 JupyterLab 扩展开着：会出现 Formgrader、Create Assignment 这些老师用的菜单",
                       "老师的机器：这正是要用的，不用管这一条。学生的机器：学生不需要它，python -m pip uninstall nbgrader，"
                       "或 jupyter labextension disable @jupyter/nbgrader")
    return Finding(OK, "nbgrader 装了，但它的 JupyterLab 扩展是关着的")


def check_weights():
    from course import qwen35_weights

    try:
        found = qwen35_weights.find_checkpoint()
    except qwen35_weights.CheckpointError as e:
        return Finding(BAD, f"找不到 Qwen3.5 的权重：{e}")
    mark = WARN if found.synthetic else OK
    fix = (f"要用真模型：course-weights qwen35 --layers 0-3（只取作业 06、08 读的第 0～3 层，约 166 MB；只做作业 06 的话 "
           f"--layers 3 就够，约 37 MB），或设 {qwen35_weights.ENV_VAR} 指向它的文件夹，或 hf download {qwen35_weights.REPO_ID}"
           if found.synthetic else "")  # hf: huggingface_hub's CLI from 1.0
    return Finding(mark, f"Qwen3.5 第 0～3 层的权重（{found.origin}）：{found.describe(layers='0-3')}", fix)


def check_real_models():
    """The real weights that assignments' graders read (07's SmolLM2-135M-Instruct), fetched once."""
    from autograder.engine.assignments import RECORDS  # imports torch: here, so that check_torch can say it is missing

    needed: dict = {}  # weights -> the assignments that need them
    for assignment in RECORDS.values():
        for weights in assignment.needs:
            needed.setdefault(weights, []).append(assignment.name)
    missing = [w for w in needed if not w.ready()]
    if missing:
        return Finding(WARN, "；".join(f"作业 {'、'.join(needed[w])} 的真实模型 {w.name} 还不在 {w.folder()}"
                                      for w in missing), "；".join(w.command for w in missing) + "（只需运行一次）")
    return Finding(OK, "；".join(f"作业 {'、'.join(needed[w])} 的真实模型 {w.name}：{w.folder()}" for w in needed))


CHECKS = (check_torch, check_sandbox, check_plot_font, check_browser_font, check_nbgrader, check_weights,
          check_real_models)
GRADING = (check_torch, check_sandbox)  # without these, nothing can be graded


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="course-doctor", description="Check this machine for the course and say "
                                     "what to fix.")
    parser.add_argument("--sandbox", action="store_true", help="print the grading sandbox's effective policy here: "
                        "walls up and missing, limits, what a run may read and write, its user, what seccomp denies")
    if parser.parse_args(argv).sandbox:
        return show_sandbox()
    print(f"Python {sys.version.split()[0]}（{sys.executable}）")
    broken = False
    for check in CHECKS:
        try:
            finding = check()
        except Exception as e:  # noqa: BLE001 - a broken check is reported, and the others still run
            finding = Finding(BAD, f"{check.__name__}：检查时出错 {type(e).__name__}: {e}")
        print(finding)
        broken = broken or (finding.mark == BAD and check in GRADING)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
