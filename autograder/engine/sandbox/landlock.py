"""Linux Landlock through its three system calls: which files a sandboxed process may read or write,
no TCP, and no signals or abstract Unix sockets outside its own sandbox.

Written against the kernel's UAPI (``linux/landlock.h``) because the wall needs the network rules
(ABI 4) and the scopes (ABI 6), which the Python bindings on PyPI do not offer. Every right the running
kernel knows is handled, so anything not granted by a rule is denied.
"""
import ctypes
import os

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ABI1_WRITES = sum(1 << bit for bit in range(4, 13))  # remove and make dir / file / socket / fifo / device / link
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _call(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def abi_version() -> int:
    """The Landlock ABI of the running kernel; 0 when Landlock is missing or disabled."""
    try:
        return _call(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:
        return 0


def handled_fs(abi: int) -> int:
    """Every file right that ABI ``abi`` can restrict."""
    rights = READ | WRITE_FILE | _ABI1_WRITES
    rights |= REFER if abi >= 2 else 0
    rights |= TRUNCATE if abi >= 3 else 0
    rights |= IOCTL_DEV if abi >= 5 else 0
    return rights


class Ruleset:
    """A ruleset that denies everything it handles until ``allow`` grants it, then ``enforce`` applies it.

    Built once in the fork server; each sandboxed child calls ``enforce`` (the rules are copied into
    the child's own domain, so the ruleset can serve many children).
    """

    def __init__(self, abi: int):
        self.abi = abi
        self.fs = handled_fs(abi)
        attr = _RulesetAttr(self.fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
        size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else ctypes.sizeof(ctypes.c_uint64) * (2 if abi >= 4 else 1)
        self.fd = _call(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))

    def allow(self, path: str, rights: int) -> None:
        """Grant ``rights`` on ``path`` and everything beneath it (only the rights a file can have, for a file)."""
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            if not os.path.isdir(path):
                rights &= EXECUTE | READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV
            rule = _PathBeneathAttr(rights & self.fs, fd)
            _call(_SYS_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                  ctypes.c_uint32(0))
        finally:
            os.close(fd)

    def enforce(self) -> None:
        """Restrict the calling process (and every thread and child it makes later) to the rules."""
        _call(_SYS_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0))
        os.close(self.fd)
