"""Notebooks inside a student's zip file: listed and read in memory, never extracted, so no name inside a
zip can point anywhere on disk; the zip itself is read as any submission is (``autograder.engine.ipynb.read_bytes``),
and each notebook in it is held to the same size cap, unzipped."""
import io
import stat
import zipfile
from pathlib import Path, PurePosixPath

from autograder.engine import limits
from autograder.engine.ipynb import NotebookError, read_bytes


def _open_zip(path: Path, root: Path) -> zipfile.ZipFile:
    data = read_bytes(path, root)
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as e:
        raise NotebookError(f"{path.name} 不是能打开的 zip 文件（{type(e).__name__}）。") from None


def zip_notebooks(path: Path, root: Path) -> list[str]:
    """The notebooks in a zip: regular files ending in .ipynb, without macOS's and Jupyter's extra copies."""
    with _open_zip(path, root) as archive:
        return sorted(info.filename for info in archive.infolist() if _is_notebook(info))


def _is_notebook(info: zipfile.ZipInfo) -> bool:
    parts = PurePosixPath(info.filename).parts
    mode = info.external_attr >> 16
    return (not info.is_dir() and info.filename.lower().endswith(".ipynb") and not stat.S_ISLNK(mode)
            and not any(p.startswith(".") or p == "__MACOSX" for p in parts))


def read_member(path: Path, member: str, root: Path) -> bytes:
    """The bytes of the notebook ``member`` of the zip at ``path`` (a regular file inside ``root``)."""
    with _open_zip(path, root) as archive:
        try:
            info = archive.getinfo(member)
            if info.file_size > limits.NOTEBOOK_BYTES:
                raise NotebookError(f"{member} 有 {info.file_size / 2**20:.1f} MiB，超过了 "
                                    f"{limits.NOTEBOOK_BYTES // 2**20} MiB 的上限。")
            with archive.open(info) as opened:
                data = opened.read(limits.NOTEBOOK_BYTES + 1)
        except NotebookError:
            raise
        except Exception as e:  # noqa: BLE001 - a damaged or hostile zip: whatever zipfile raises, it is unreadable
            raise NotebookError(f"{path.name} 里的 {member} 读不出来（{type(e).__name__}）。") from None
    if len(data) > limits.NOTEBOOK_BYTES:  # a header that understates the size
        raise NotebookError(f"{member} 超过了 {limits.NOTEBOOK_BYTES // 2**20} MiB 的上限。")
    return data
