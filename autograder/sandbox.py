"""Run student code in a forked child, so that nothing it does reaches the grader.

The child inherits the already-imported torch (a fork costs milliseconds, a fresh interpreter a
second), runs one task, and sends its result back serialised with ``torch.save``. The parent reads it
with ``torch.load(weights_only=True)``, which only rebuilds tensors and plain containers: whatever the
student patched (torch, the grader, builtins) stays in the child. A timeout, a memory cap, a crash or
an exit of the child become a ``SandboxFailure`` with a message for the student.
"""
import io
import os
import select
import signal
import time
import warnings

import torch

from autograder import limits


class SandboxFailure(Exception):
    """The child produced no usable result; the message says why, in Chinese."""


def _address_space_now() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _limit_memory(extra: int) -> None:
    try:
        import resource
    except ImportError:
        return
    now = _address_space_now()
    if now is not None:
        resource.setrlimit(resource.RLIMIT_AS, (now + extra, now + extra))


def plain(value):
    """``value`` with tensors detached into plain ``torch.Tensor`` and unknown objects named by type."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().as_subclass(torch.Tensor).clone()
    if isinstance(value, (tuple, list)):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"{type(value).__module__}.{type(value).__qualname__} 对象"


def _child(task, write_fd: int, extra_memory: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    torch.set_num_threads(1)
    _limit_memory(extra_memory)
    buffer = io.BytesIO()
    torch.save(plain(task()), buffer)
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(buffer.getvalue())


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything written to ``fd`` until EOF, or None when ``deadline`` passes first."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGKILL:
            return "运行进程被系统杀掉了（通常是内存用得太多）。"
        return f"运行进程因为信号 {signal.Signals(sig).name} 崩溃了。"
    return (f"运行进程提前退出了（退出码 {os.WEXITSTATUS(status)}），没有交回结果："
            "代码里是不是调用了 os._exit()、exit() 或 sys.exit()？")


def run_isolated(task, timeout_s: float = limits.EXERCISE_TIMEOUT_S,
                 extra_memory: int = limits.EXTRA_MEMORY_BYTES):
    """Return ``task()`` computed in a forked child (its tensors as plain tensors)."""
    if not hasattr(os, "fork"):  # Windows: no fork, so no isolation; grading still works.
        return plain(task())
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "fork() in a multi-threaded process"
        pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            _child(task, write_fd, extra_memory)
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        data = _read_until(read_fd, time.monotonic() + timeout_s)
    finally:
        os.close(read_fd)
    if data is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise SandboxFailure(f"运行超过 {timeout_s:g} 秒，被停止了：代码里是不是有死循环，或者在做很大的计算？")
    _, status = os.waitpid(pid, 0)
    if not data:
        raise SandboxFailure(_death(status))
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception:
        raise SandboxFailure("评分进程读不回结果：代码是不是修改了 torch 或评分器本身？") from None
