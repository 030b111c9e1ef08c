"""FileIO: the same contract on OsFileIO and MemoryFileIO; crash models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mq.core.rng import Rng
from mq.storage import FileIO, MemoryFileIO, OsFileIO, power_loss


@pytest.fixture(params=["os", "memory"])
def fs_root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[FileIO, str]:
    if request.param == "os":
        return OsFileIO(), str(tmp_path)
    return MemoryFileIO(), "/root"


def test_handle_contract(fs_root: tuple[FileIO, str]) -> None:
    fs, root = fs_root
    fs.makedirs(f"{root}/p-0")
    path = f"{root}/p-0/a.log"
    assert not fs.exists(path)
    h = fs.open(path)
    assert fs.exists(path) and h.size() == 0
    assert h.append(b"hello") == 0
    assert h.append(memoryview(b" world")) == 5
    assert h.size() == 11 and h.pread(0, 5) == b"hello" and h.pread(6, 100) == b"world"
    assert h.pread(11, 10) == b""
    h.fsync()
    h.truncate(5)
    assert h.size() == 5 and h.pread(0, 100) == b"hello"
    assert h.append(b"!") == 5
    h.close()
    h2 = fs.open(path)
    assert h2.size() == 6 and h2.pread(0, 6) == b"hello!"
    h2.close()


def test_directory_operations(fs_root: tuple[FileIO, str]) -> None:
    fs, root = fs_root
    fs.makedirs(f"{root}/d/e")
    for name in ("b", "a", "c"):
        fs.open(f"{root}/d/{name}").close()
    assert fs.listdir(f"{root}/d") == ["a", "b", "c", "e"]
    fs.rename(f"{root}/d/a", f"{root}/d/z")
    fs.remove(f"{root}/d/b")
    assert fs.listdir(f"{root}/d") == ["c", "e", "z"]
    fs.fsync_dir(f"{root}/d")
    with pytest.raises(FileNotFoundError):
        fs.remove(f"{root}/d/b")
    with pytest.raises(FileNotFoundError):
        fs.open(f"{root}/missing/x")
    fs.rmtree(f"{root}/d")
    assert not fs.exists(f"{root}/d") and not fs.exists(f"{root}/d/c")


def test_memory_crash_keeps_only_fsynced_bytes() -> None:
    fs = MemoryFileIO()
    fs.makedirs("/d")
    h = fs.open("/d/f")
    h.append(b"durable")
    h.fsync()
    h.append(b"-lost")
    assert fs.durable_size("/d/f") == 7
    assert fs.durable_lengths() == {"/d/f": 7}
    fs.crash()
    with pytest.raises(OSError):
        h.append(b"stale handle")
    assert fs.open("/d/f").pread(0, 100) == b"durable"


def test_memory_truncate_is_durable() -> None:
    fs = MemoryFileIO()
    fs.makedirs("/d")
    h = fs.open("/d/f")
    h.append(b"0123456789")
    h.fsync()
    h.truncate(4)
    h.append(b"xy")
    fs.crash()
    assert fs.open("/d/f").pread(0, 100) == b"0123"


def test_memory_torn_crash_keeps_a_prefix_and_holes() -> None:
    kept_lengths = set()
    for seed in range(50):
        fs = MemoryFileIO()
        fs.makedirs("/d")
        h = fs.open("/d/f")
        h.append(b"a" * 100)
        h.fsync()
        h.append(b"b" * 5000)
        report = fs.crash(Rng(seed), holes=True)
        keep, zeroed = report["/d/f"]
        data = fs.open("/d/f").pread(0, 10_000)
        assert len(data) == keep and 100 <= keep <= 5100
        assert data[:100] == b"a" * 100
        for start in zeroed:
            assert start >= 100 and data[start] == 0
        assert all(c in (0, ord("b")) for c in data[100:])
        kept_lengths.add(keep)
    assert len(kept_lengths) > 10


def test_memory_fault_injection() -> None:
    fs = MemoryFileIO()
    fs.makedirs("/d")
    h = fs.open("/d/f")
    fs.faults["fsync"] = OSError(28, "ENOSPC")
    h.append(b"x")
    with pytest.raises(OSError):
        h.fsync()
    fs.faults["io"] = OSError(5, "EIO")
    with pytest.raises(OSError):
        h.append(b"y")


def test_os_power_loss_from_journal(tmp_path: Path) -> None:
    journal = str(tmp_path / "journal")
    fs = OsFileIO(journal=journal)
    fs.makedirs(str(tmp_path / "p"))
    a = fs.open(str(tmp_path / "p" / "a"))
    a.append(b"synced")
    a.fsync()
    a.append(b"-unsynced")
    b = fs.open(str(tmp_path / "p" / "b.tmp"))
    b.append(b"ckpt")
    b.fsync()
    fs.rename(str(tmp_path / "p" / "b.tmp"), str(tmp_path / "p" / "b"))
    c = fs.open(str(tmp_path / "p" / "c"))
    c.append(b"never synced")
    for handle in (a, b, c):
        handle.close()
    result = power_loss(journal)
    assert (tmp_path / "p" / "a").read_bytes() == b"synced"
    assert (tmp_path / "p" / "b").read_bytes() == b"ckpt"
    assert (tmp_path / "p" / "c").read_bytes() == b""
    assert result[os.path.abspath(tmp_path / "p" / "a")] == 6
