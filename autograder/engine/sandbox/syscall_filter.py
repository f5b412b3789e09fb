"""A seccomp filter (through libseccomp) for student code: it may start threads but no processes; it may not make
memory files (``memfd_create``), whose pages no address-space limit counts; it may not signal or trace any process
but its own, nor open a network socket. The namespaces and Landlock's TCP rules (ABI 4) and scopes (ABI 6) stop
those too: this filter holds where they are missing (no user namespaces, kernels before 6.7 or 6.12). Everything
else is left to the other walls."""
import errno

from autograder.engine.sandbox.policy import Denied

_CLONE_THREAD = 0x00010000
_AF_UNIX = 1
_A_THREAD = "it makes a thread (CLONE_THREAD)"
_ITSELF = "the process it signals is its own"
_LOCAL = "the socket is a Unix socket (AF_UNIX)"

RULES = (
    Denied("fork", "EPERM"),
    Denied("vfork", "EPERM"),
    Denied("memfd_create", "EPERM"),
    Denied("memfd_secret", "EPERM"),
    # A thread (CLONE_THREAD) shares the process and dies with it; any other clone is a new process.
    Denied("clone", "EPERM", unless=_A_THREAD),
    # clone3 passes its flags in memory, out of a filter's reach: C libraries fall back to clone on ENOSYS.
    Denied("clone3", "ENOSYS"),
    # Signals: the first argument of each is the target's process id (raise() and pthread_kill() name their own).
    *(Denied(call, "EPERM", unless=_ITSELF) for call in ("kill", "tkill", "tgkill", "rt_sigqueueinfo",
                                                          "rt_tgsigqueueinfo")),
    Denied("pidfd_send_signal", "EPERM"),  # a pidfd (or a /proc/<pid> folder) names any process
    Denied("ptrace", "EPERM"),
    Denied("process_vm_readv", "EPERM"),
    Denied("process_vm_writev", "EPERM"),
    Denied("socket", "EACCES", unless=_LOCAL),
    Denied("io_uring_setup", "EPERM"),  # io_uring opens sockets and files past the filter
)


def build(pid: int):
    """The filter of ``RULES`` for the process ``pid`` (the one that will ``load()`` it: a sandboxed child); raises
    OSError or ImportError where libseccomp is missing."""
    import pyseccomp as seccomp  # Linux only, and loads libseccomp.so: imported where it is used

    # Where each ``unless`` fails, so that the rule applies.
    applies = {_A_THREAD: seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0),
               _ITSELF: seccomp.Arg(0, seccomp.NE, pid),
               _LOCAL: seccomp.Arg(0, seccomp.NE, _AF_UNIX)}
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for rule in RULES:
        rules.add_rule(seccomp.ERRNO(getattr(errno, rule.errno)), rule.syscall,
                       *([applies[rule.unless]] if rule.unless else []))
    return rules
