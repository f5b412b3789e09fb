"""An LMS's "download all submissions" zip (Canvas's ``submissions.zip``, Moodle's and Blackboard's downloads),
given to ``course-grade`` as it was downloaded: its notebooks and student zips are copied into a private
folder that lives as long as the run, and the class is read from there as from a folder.

Only what a class folder may hold is copied: regular files ending in .ipynb or .zip, under relative names
without ``..`` (a name that could point outside the folder is refused, naming it); macOS's ``__MACOSX`` copies,
hidden files, links and everything else are left out. Each file is copied up to one byte past
``limits.NOTEBOOK_BYTES``, so that a notebook over the cap still reads as too big for its own student, and a
zip bomb fills no disk.
"""
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from autograder.engine import limits

_COPIED = (".ipynb", ".zip")
_CHUNK = 1 << 20


class DownloadError(Exception):
    """The download cannot be read as a class; the message names the file or entry."""


def is_download(path: Path) -> bool:
    """Whether ``path`` is a file (not a class folder) named as a zip."""
    return path.is_file() and path.suffix.lower() == ".zip"


@contextmanager
def unpacked(download: Path) -> Iterator[Path]:
    """A private folder holding the class in ``download``, removed when the block ends."""
    try:
        archive = zipfile.ZipFile(download)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise DownloadError(f"{download} is not a zip file that can be opened ({type(e).__name__}: {e})") from None
    folder = Path(tempfile.mkdtemp(prefix="course-grade-download-"))  # mode 0700
    try:
        with archive:
            for info in archive.infolist():
                name = _kept_name(info)
                if name is not None:
                    _copy(archive, info, folder.joinpath(*name.parts))
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _kept_name(info: zipfile.ZipInfo) -> PurePosixPath | None:
    """The relative name ``info`` is copied under, None for an entry a class folder would not hold."""
    name = PurePosixPath(info.filename.replace("\\", "/"))
    if name.is_absolute() or ".." in name.parts:
        raise DownloadError(f"the download holds an entry named {info.filename!r}, which points outside its folder: "
                            "this is not an LMS's download")
    if (info.is_dir() or stat.S_ISLNK(info.external_attr >> 16) or name.suffix.lower() not in _COPIED
            or any(part.startswith(".") or part == "__MACOSX" for part in name.parts)):
        return None
    return name


def _copy(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path) -> None:
    """At most ``limits.NOTEBOOK_BYTES + 1`` bytes of ``info`` into ``target`` (owner-only). An entry that cannot
    be read (a download cut short, a CRC error) stops the run: it is the download's fault, not the student's."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        out = open(target, "xb", opener=lambda path, flags: os.open(path, flags, 0o600))
    except OSError:  # the same name twice, or a file where a folder is named
        raise DownloadError(f"the download holds {info.filename!r} twice, or as a file and a folder: this is not an "
                            "LMS's download") from None
    left = limits.NOTEBOOK_BYTES + 1
    with out:
        try:
            with archive.open(info) as source:
                while left > 0:
                    chunk = source.read(min(_CHUNK, left))
                    if not chunk:
                        break
                    out.write(chunk)
                    left -= len(chunk)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as e:
            raise DownloadError(f"{info.filename!r} in the download cannot be read ({type(e).__name__}: {e}): "
                                "download the submissions again") from None
