"""Output files written whole, then renamed (openvivqa_jax.outputs): a failed write leaves the old file as it was,
no temporary file and no 0-byte file, and one error naming the file and the operating system's reason."""

from __future__ import annotations

import errno
import io
import os
import stat

import pytest

from openvivqa_jax import outputs


def _names(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text("old")
    outputs.write_json(path, {"CIDEr": 1.5, "câu": "màu đỏ"}, indent=1, newline=True)
    assert path.read_text(encoding="utf-8") == '{\n "CIDEr": 1.5,\n "câu": "màu đỏ"\n}\n'
    assert _names(tmp_path) == ["metrics.json"]


def test_a_failed_write_keeps_the_old_file_and_names_the_reason(tmp_path):
    path = tmp_path / "sub.json"
    path.write_text('{"1": "old answer"}')
    with pytest.raises(outputs.OutputWriteError) as e:
        with outputs.atomic_write(path, what="--output") as f:
            f.write('{"1": "new')
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(e.value) == f"could not write --output {path}: No space left on device"
    assert path.read_text() == '{"1": "old answer"}'
    assert _names(tmp_path) == ["sub.json"]  # the temporary file is gone


def test_an_error_of_the_content_leaves_no_file(tmp_path):
    path = tmp_path / "new.json"
    with pytest.raises(TypeError):
        outputs.write_json(path, {"x": object()})
    with pytest.raises(ZeroDivisionError):
        with outputs.atomic_write(path) as f:
            f.write("half")
            1 / 0  # noqa: B018 - a bug in the writer: raised as it is, nothing left behind
    assert _names(tmp_path) == []


def test_folder_missing_name_too_long_and_a_folder_in_the_way(tmp_path):
    with pytest.raises(outputs.OutputWriteError, match=r"could not write .*/nope/x\.json: No such file or directory"):
        outputs.write_text(tmp_path / "nope" / "x.json", "x")
    long = tmp_path / ("a" * 300 + ".json")
    with pytest.raises(outputs.OutputWriteError, match="File name too long"):
        outputs.write_text(long, "x")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(outputs.OutputWriteError, match="Is a directory"):
        outputs.write_text(tmp_path / "dir.json", "x")
    assert _names(tmp_path) == ["dir.json"]


def test_mode_kept_symlink_followed_device_written_in_place(tmp_path):
    old = tmp_path / "old.json"
    old.write_text("1")
    os.chmod(old, 0o640)
    outputs.write_text(old, "2")
    assert stat.S_IMODE(os.stat(old).st_mode) == 0o640 and old.read_text() == "2"
    umask = os.umask(0)
    os.umask(umask)
    outputs.write_text(tmp_path / "new.json", "3")
    assert stat.S_IMODE(os.stat(tmp_path / "new.json").st_mode) == 0o666 & ~umask
    link = tmp_path / "link.json"
    link.symlink_to(old)
    outputs.write_text(link, "4")
    assert link.is_symlink() and old.read_text() == "4"
    outputs.write_text(os.devnull, "nothing")  # not replaced by a regular file
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_os_reason_of_a_library_error():
    e = ValueError('INTERNAL: Error writing local file "/x/d/abc": [OS error: No space left on device]')
    assert outputs.os_reason(e) == "No space left on device"
    assert outputs.os_reason(OSError(errno.EFBIG, os.strerror(errno.EFBIG))) == "File too large"
    assert outputs.os_reason(RuntimeError("boom")) == "boom"


class _FullStream(io.StringIO):
    def write(self, s):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_guarded_stream_names_standard_output():
    guard = outputs.GuardedStream(_FullStream())
    with pytest.raises(outputs.OutputWriteError, match=r"^could not write to standard output: No space left on "
                                                       r"device$"):
        print("bảng điểm", file=guard)
    assert guard.failed
    ok = outputs.GuardedStream(io.StringIO())
    print("câu trả lời", file=ok)
    ok.flush()
    assert ok.getvalue() == "câu trả lời\n" and not ok.failed
