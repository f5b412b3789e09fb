"""A seccomp filter (through libseccomp) for student code: it may start threads but no processes, and
may not make memory files (``memfd_create``), whose pages no address-space limit counts. Everything
else is left to the other walls."""
import errno

from autograder.engine.sandbox.policy import Denied

_CLONE_THREAD = 0x00010000
_A_THREAD = "it makes a thread (CLONE_THREAD)"

RULES = (
    Denied("fork", "EPERM"),
    Denied("vfork", "EPERM"),
    Denied("memfd_create", "EPERM"),
    Denied("memfd_secret", "EPERM"),
    # A thread (CLONE_THREAD) shares the process and dies with it; any other clone is a new process.
    Denied("clone", "EPERM", unless=_A_THREAD),
    # clone3 passes its flags in memory, out of a filter's reach: C libraries fall back to clone on ENOSYS.
    Denied("clone3", "ENOSYS"),
)


def build():
    """The filter of ``RULES``, ready to ``load()`` in each sandboxed child; raises OSError or ImportError where
    libseccomp is missing."""
    import pyseccomp as seccomp  # Linux only, and loads libseccomp.so: imported where it is used

    passes = {_A_THREAD: (seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0),)}  # what each ``unless`` lets by
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for rule in RULES:
        unless = passes[rule.unless] if rule.unless else ()
        rules.add_rule(seccomp.ERRNO(getattr(errno, rule.errno)), rule.syscall, *unless)
    return rules
