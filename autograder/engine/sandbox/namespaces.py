"""Linux namespaces for the fork server: its own PID namespace (so that, as PID 1, it can kill every
process a run leaves behind), an empty network namespace, and a mount namespace in which every file system is
read-only but ``/tmp``, a small private tmpfs, and ``/run`` and ``/dev/shm`` are empty. Root enters them
directly; anyone else through a user namespace that maps only their own uid and gid."""
import ctypes
import os
import stat

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 1 << 12, 1 << 14, 1 << 18

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


def private_mounts(tmp_bytes: int, tmp_inodes: int, target: str = "/tmp") -> str:
    """In the new mount namespace: every file system read-only (``read_only``), then a private tmpfs of
    ``tmp_bytes`` on ``target`` (returned), the one place to write, and the ``MASKED`` folders emptied. ``target``
    is ``/tmp`` itself, or a folder inside it when something the runs need lives under ``/tmp``. Nothing of this
    reaches the host's mounts."""
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    read_only()
    options = f"size={tmp_bytes},nr_inodes={tmp_inodes},mode=0700,uid={os.geteuid()},gid={os.getegid()}"
    _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
    for folder in MASKED:
        if os.path.isdir(folder) and not os.path.islink(folder):
            _mount("tmpfs", folder, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0755")
    return target


# statvfs's flags that a remount must keep (the kernel refuses to clear them on a mount a user namespace did not
# make): ST_NOSUID, ST_NODEV, ST_NOEXEC, ST_NOATIME and ST_NODIRATIME are MS_'s own bits; ST_RELATIME is not.
_KEPT_FLAGS = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | 1024 | 2048
_ST_RELATIME, _MS_RELATIME = 4096, 1 << 21


def mount_points() -> list[str]:
    """Every mount point of this mount namespace, as ``/proc/self/mountinfo`` lists them (its octal escapes
    undone)."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        points = [line.split()[4] for line in f if line.strip()]
    return [point.encode("utf-8", "surrogateescape").decode("unicode_escape").encode("latin-1").decode(
        "utf-8", "surrogateescape") for point in points]


def read_only() -> None:
    """Every mount of this namespace remounted read-only, so that student code writes nowhere but where a
    writable mount is put afterwards: not the course, the venv, the class folder or the grader's outputs, even
    where Landlock is missing and it runs as the grader."""
    for point in mount_points():
        try:
            flags = os.statvfs(point).f_flag
        except OSError:  # a mount point hidden under a later mount
            continue
        kept = (flags & _KEPT_FLAGS) | (_MS_RELATIME if flags & _ST_RELATIME else 0)
        _mount("none", point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept)


def hide(folders: list[str], covers: dict[str, list[str]] | None = None) -> None:
    """In a mount namespace of this process's own: each folder of ``covers`` emptied but for the paths listed with
    it (``cover``), then an empty read-only tmpfs over each of ``folders``, so that nothing started from here sees
    what they hold (the fork server, in its own namespace, still does)."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    for folder, shown in (covers or {}).items():
        cover(folder, shown)
    for folder in folders:
        _mount("tmpfs", folder, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0755")


def cover(folder: str, shown: list[str]) -> None:
    """An empty read-only tmpfs over ``folder`` with only ``shown`` (paths inside it) bound back in place: a user
    who may not enter ``folder`` reaches those, and nothing else of it. Each is opened before the tmpfs hides it."""
    handles = [os.open(path, os.O_PATH | os.O_CLOEXEC) for path in shown]
    try:
        _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=0755")
        for path, handle in zip(shown, handles):
            _mount_point(folder, path, stat.S_ISDIR(os.fstat(handle).st_mode))
            _mount(f"/proc/self/fd/{handle}", path, None, _MS_BIND | _MS_REC)
        _mount("none", folder, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    finally:
        for handle in handles:
            os.close(handle)


def _mount_point(folder: str, path: str, is_dir: bool) -> None:
    """``path`` made in the fresh tmpfs on ``folder``, its folders open to everyone whatever the umask."""
    current = folder
    parts = os.path.relpath(path, folder).split(os.sep)
    for part in parts[:-1] if not is_dir else parts:
        current = os.path.join(current, part)
        if not os.path.isdir(current):
            os.mkdir(current)
            os.chmod(current, 0o755)
    if not is_dir:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
