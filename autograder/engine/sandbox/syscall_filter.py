"""A seccomp filter (through libseccomp) for student code: it may start threads but no processes, and
may not make memory files (``memfd_create``), whose pages no address-space limit counts. Everything
else is left to the other walls."""
import errno

_CLONE_THREAD = 0x00010000


def build():
    """The filter, ready to ``load()`` in each sandboxed child; raises OSError or ImportError where
    libseccomp is missing."""
    import pyseccomp as seccomp  # Linux only, and loads libseccomp.so: imported where it is used

    deny = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in ("fork", "vfork", "memfd_create", "memfd_secret"):
        rules.add_rule(deny, name)
    # A thread (CLONE_THREAD) shares the process and dies with it; any other clone is a new process.
    rules.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))
    # clone3 passes its flags in memory, out of a filter's reach: C libraries fall back to clone on ENOSYS.
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return rules
