"""Shedding privileges in a sandboxed child: no capabilities (root's included), none to regain, and
no new privileges through execve. Linux only (prctl and capset through libc)."""
import ctypes
import os

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP and SECBIT_NO_CAP_AMBIENT_RAISE, each locked, and KEEP_CAPS locked off:
# uid 0 gains nothing from execve or setuid any more.
_SECUREBITS = 0b1110_1111
_CAPABILITY_VERSION_3 = 0x20080522
_CAP_SETPCAP = 1 << 8

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _prctl(option: int, arg: int = 0, what: str = "prctl") -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), what)


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 40


def set_parent_death_signal(signal_number: int) -> None:
    """Have the kernel send ``signal_number`` to this process when its parent dies."""
    _prctl(_PR_SET_PDEATHSIG, signal_number, "PR_SET_PDEATHSIG")


def forbid_new_privileges() -> None:
    """No execve can ever grant privileges again (also what Landlock and seccomp require)."""
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")


def drop_capabilities(switch_user=None) -> None:
    """Drop every capability for good: bounding set, ambient set, effective/permitted/inheritable.

    ``switch_user``, when given, is called once the bounding set is gone but before the rest: changing uid
    still needs CAP_SETUID, and with SECBIT_NO_SETUID_FIXUP the kernel leaves the capabilities to capset."""
    if effective_capabilities() & _CAP_SETPCAP:  # root, or the owner of a user namespace
        _prctl(_PR_SET_SECUREBITS, _SECUREBITS, "PR_SET_SECUREBITS")
        for cap in range(_last_capability() + 1):
            _prctl(_PR_CAPBSET_DROP, cap, "PR_CAPBSET_DROP")
    if switch_user:
        switch_user()
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT")
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(_CapHeader(_CAPABILITY_VERSION_3, 0)), data), "capset")


def effective_capabilities() -> int:
    """The effective capability set of this process, as a bit mask (0 when it has none)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0
