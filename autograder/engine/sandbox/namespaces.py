"""Linux namespaces for the fork server: its own PID namespace (so that, as PID 1, it can kill every
process a run leaves behind), an empty network namespace, and a mount namespace in which ``/tmp`` is a
small private tmpfs and ``/run`` and ``/dev/shm`` are empty. Root enters them directly; anyone else
through a user namespace that maps only their own uid and gid."""
import ctypes
import os
import tempfile

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 1 << 14, 1 << 18

# Empty, read-only: where sockets to services outside the sandbox usually live.
MASKED = ("/run", "/var/run", "/dev/shm")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def unshare() -> None:
    """Give this process's next child new PID, network, IPC and mount namespaces (and a user namespace
    that maps this process's own ids, unless it is root). Raises OSError where the kernel refuses."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET | (0 if uid == 0 else CLONE_NEWUSER)
    _check(_libc.unshare(flags), "unshare")
    if uid != 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None), f"mount {target}")


def private_mounts(tmp_bytes: int, tmp_inodes: int, mask_tmp: bool = True) -> str:
    """In the new mount namespace: a private tmpfs of ``tmp_bytes`` (returned) and the ``MASKED`` folders
    emptied. The tmpfs goes on ``/tmp`` itself when ``mask_tmp``, else on a fresh folder inside it (when
    something the runs need lives under ``/tmp``). Nothing of this reaches the host's mounts."""
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    target = "/tmp" if mask_tmp else tempfile.mkdtemp(prefix="attention-course-sandbox-", dir="/tmp")
    options = f"size={tmp_bytes},nr_inodes={tmp_inodes},mode=0700,uid={os.geteuid()},gid={os.getegid()}"
    _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
    for folder in MASKED:
        if os.path.isdir(folder) and not os.path.islink(folder):
            _mount("tmpfs", folder, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0755")
    return target


def hide(folders: list[str]) -> None:
    """In a mount namespace of this process's own: an empty read-only tmpfs over each of ``folders``, so
    that nothing started from here sees what they hold (the fork server, in its own namespace, still does)."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    for folder in folders:
        _mount("tmpfs", folder, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0755")


def unmount(target: str) -> None:
    """Detach the mount on ``target`` (lazily, as the last process using it may still be exiting)."""
    _check(_libc.umount2(target.encode(), 2), f"umount {target}")  # MNT_DETACH
