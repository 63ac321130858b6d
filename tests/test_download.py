"""Tests of nmt.download against a local HTTP server (127.0.0.1, port 0); no internet needed.

Fixture files are made by the tests themselves; a small registry is injected as a DatasetSpec.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nmt import download as dl
from nmt.core.errors import DownloadError, InputError
from nmt.core.progress import Progress
from nmt.download import (
    DatasetSpec,
    RemoteFile,
    Source,
    Split,
    download,
    parallel_files,
    safe_extract,
)

FAST = dict(backoff=0.001, timeout=5.0)
SHARED_M30K = Path(__file__).resolve().parents[2] / "shared/data/multi30k"


# ------------------------------------------------------------------------------------------
# A scriptable HTTP server
# ------------------------------------------------------------------------------------------


class FileServer(ThreadingHTTPServer):
    """Serves `files` (URL path -> bytes), honours `Range: bytes=N-`, logs every request.

    `plan[path]` is a list of actions for the next requests of that path, used up in order:
    an int status (e.g. 503), "drop" (send half the body then close), "ignore-range"
    (answer 200 with the whole file), "slow" (wait before answering), "retry-after" (429 with
    Retry-After: 1), "too-much" (three times the file, announced by Content-Length), "too-much-unannounced"
    (three times the file with no Content-Length, ended by closing the connection).
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.files: dict[str, bytes] = {}
        self.plan: dict[str, list] = defaultdict(list)
        self.log: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def count(self, path: str | None = None) -> int:
        with self.lock:
            return sum(1 for p, _ in self.log if path is None or p == path)

    def ranges(self, path: str) -> list[str | None]:
        with self.lock:
            return [r for p, r in self.log if p == path]

    def handle_error(self, request, client_address) -> None:  # quiet: dropped sockets are expected
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FileServer

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        srv = self.server
        rng = self.headers.get("Range")
        with srv.lock:
            srv.log.append((self.path, rng))
            action = srv.plan[self.path].pop(0) if srv.plan[self.path] else None
        if action == "slow":
            time.sleep(1.0)
        if isinstance(action, int):
            return self._send(action, b"try later\n")
        if action == "retry-after":
            return self._send(429, b"slow down\n", {"Retry-After": "1"})
        data = srv.files.get(self.path)
        if data is None:
            return self._send(404, b"not found\n")
        start, status, headers = 0, 200, {}
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if m and action != "ignore-range":
            start = int(m.group(1))
            if start >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        if action == "stall":  # half the body, then silence on an open connection
            self._headers(status, len(body), headers)
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            time.sleep(3.0)
            self.close_connection = True
            return
        if action == "drip":  # a byte every 0.05 s: each read returns in time, the file never arrives
            self._headers(status, len(body), headers)
            for i in range(min(len(body), 200)):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(0.05)
            self.close_connection = True
            return
        if action == "too-much":
            return self._send(status, body * 3, headers)
        if action == "too-much-unannounced":
            self.send_response(status)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body * 3)
            self.close_connection = True
            return
        if action == "drop":
            self._headers(status, len(body), headers)
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self._send(status, body, headers)

    def _headers(self, status: int, length: int, extra: dict) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()

    def _send(self, status: int, body: bytes, extra: dict | None = None) -> None:
        self._headers(status, len(body), extra or {})
        self.wfile.write(body)


@pytest.fixture
def server():
    srv = FileServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


# ------------------------------------------------------------------------------------------
# Fixture data
# ------------------------------------------------------------------------------------------


def sentences(lang: str, n: int, tag: str) -> list[str]:
    word = {"en": "house", "de": "Haus"}[lang]
    return [f"{tag} {word} {i} ä ö ü {'x' * (i % 37)}" for i in range(n)]


def gz(lines: list[str]) -> bytes:
    return gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), mtime=0)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


SIZES = {"train": 2000, "val": 30, "test": 20}


def tiny_files() -> dict[str, bytes]:
    """train/val/test .en.gz/.de.gz, like Multi30k's raw folder (train ~60 kB compressed)."""
    return {
        f"{stem}.{lang}.gz": gz(sentences(lang, n, stem))
        for stem, n in SIZES.items()
        for lang in ("en", "de")
    }


def tiny_spec(
    base: str, files: dict[str, bytes], sums: bool = True, wrong: str | None = None
) -> DatasetSpec:
    """A Multi30k-shaped spec over `files` at `base`; `wrong` gets a bad checksum."""
    table = {name: (sha256(data), len(data)) for name, data in files.items()} if sums else {}
    if wrong:
        table[wrong] = ("0" * 64, len(files[wrong]))
    return DatasetSpec(
        name="tiny",
        src="en",
        tgt="de",
        description="test set",
        licence="test",
        splits=(
            parallel_files("train", base, "train.en.gz", "train.de.gz", SIZES["train"], table),
            parallel_files("valid", base, "val.en.gz", "val.de.gz", SIZES["val"], table),
            parallel_files("test", base, "test.en.gz", "test.de.gz", SIZES["test"], table),
        ),
    )


def serve(srv: FileServer, files: dict[str, bytes], prefix: str = "/data/") -> str:
    for name, data in files.items():
        srv.files[prefix + name] = data
    return srv.url.rstrip("/") + prefix


def events():
    log: list[Progress] = []
    return log, log.append


def messages(log: list[Progress]) -> str:
    return "\n".join(p.message for p in log if p.message)


def check_layout(out: Path, spec: DatasetSpec) -> dict:
    for split, n in (("train", SIZES["train"]), ("valid", SIZES["val"]), ("test", SIZES["test"])):
        for lang in ("en", "de"):
            lines = (out / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            assert len(lines) == n
            stem = "val" if split == "valid" else split
            assert lines == sentences(lang, n, stem)
    manifest = json.loads((out / "MANIFEST.json").read_text(encoding="utf-8"))
    assert manifest["dataset"] == spec.name
    assert {"train", "valid", "test"} <= set(manifest["splits"])
    assert manifest["files"]["train.de"]["lines"] == SIZES["train"]
    data = (out / "train.de").read_bytes()
    assert manifest["files"]["train.de"]["sha256"] == sha256(data)
    assert manifest["files"]["train.de"]["bytes"] == len(data)
    src = manifest["sources"]["train.en.gz"]
    assert src["verified"] is True and src["sha256"] == src["expected_sha256"]
    return manifest


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------


def test_full_download_layout_and_manifest(server, tmp_path):
    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    log, progress = events()
    result = download(spec, tmp_path / "out", progress=progress, **FAST)
    out = tmp_path / "out"
    check_layout(out, spec)
    assert not result.up_to_date
    assert sorted(result.fetched) == sorted(files)
    assert result.bytes_fetched == sum(len(d) for d in files.values())
    assert result.written["train.en"] == SIZES["train"]
    assert result.manifest == out / "MANIFEST.json"
    assert (out / ".cache" / "train.en.gz").read_bytes() == files["train.en.gz"]
    assert not list((out / ".cache").glob("*.part")) and not (out / ".cache" / "extract").exists()
    byte_events = [p for p in log if p.unit == "B" and p.task == "download train.en.gz"]
    assert byte_events[-1].done == byte_events[-1].total == len(files["train.en.gz"])
    assert server.count() == len(files)
    assert dl.summary(result).startswith(f"tiny: downloaded {len(files)} file(s)")


def test_second_run_downloads_nothing(server, tmp_path):
    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    download(spec, tmp_path, **FAST)
    before = server.count()
    mtime = (tmp_path / "train.en").stat().st_mtime_ns
    log, progress = events()
    result = download(spec, tmp_path, progress=progress, **FAST)
    assert log == []  # not even a cache check
    assert result.up_to_date and result.fetched == [] and result.written == {}
    assert result.skipped == ["train", "valid", "test"]
    assert server.count() == before
    assert "everything present" in dl.summary(result) and "nothing downloaded" in dl.summary(result)
    assert (tmp_path / "train.en").stat().st_mtime_ns == mtime


def test_missing_output_rebuilt_from_cache_without_network(server, tmp_path):
    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    download(spec, tmp_path, **FAST)
    before = server.count()
    (tmp_path / "valid.de").unlink()
    result = download(spec, tmp_path, **FAST)
    assert server.count() == before
    assert result.fetched == [] and sorted(result.reused) == ["val.de.gz", "val.en.gz"]
    assert set(result.written) == {"valid.en", "valid.de"} and result.skipped == ["train", "test"]
    check_layout(tmp_path, spec)


def test_resume_within_run_after_dropped_connection(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    server.plan["/data/train.de.gz"] = ["drop"]
    log, progress = events()
    download(tiny_spec(base, files), tmp_path, progress=progress, **FAST)
    half = len(files["train.de.gz"]) // 2
    assert server.ranges("/data/train.de.gz") == [None, f"bytes={half}-"]
    assert (tmp_path / ".cache" / "train.de.gz").read_bytes() == files["train.de.gz"]
    assert "retrying" in messages(log) and f"resuming at byte {half}" in messages(log)
    check_layout(tmp_path, tiny_spec(base, files))


def test_resume_on_next_run_after_interrupted_download(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    spec = tiny_spec(base, files)
    server.plan["/data/train.en.gz"] = ["drop"]
    with pytest.raises(DownloadError) as err:
        download(spec, tmp_path, retries=0, **FAST)
    assert base + "train.en.gz" in str(err.value) and "re-run" in str(err.value)
    half = len(files["train.en.gz"]) // 2
    part = tmp_path / ".cache" / "train.en.gz.part"
    assert part.stat().st_size == half
    assert not (tmp_path / ".cache" / "train.en.gz").exists()
    assert not (tmp_path / "train.en").exists()
    result = download(spec, tmp_path, **FAST)
    assert server.ranges("/data/train.en.gz") == [None, f"bytes={half}-"]
    assert not part.exists()
    assert result.bytes_fetched == sum(len(d) for d in files.values()) - half
    check_layout(tmp_path, spec)


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    server.plan["/data/train.en.gz"] = ["drop", "ignore-range"]
    log, progress = events()
    download(tiny_spec(base, files), tmp_path, progress=progress, **FAST)
    assert len(server.ranges("/data/train.en.gz")) == 2
    assert "ignored the resume request" in messages(log)
    assert (tmp_path / ".cache" / "train.en.gz").read_bytes() == files["train.en.gz"]
    check_layout(tmp_path, tiny_spec(base, files))


def test_complete_part_file_is_verified_without_refetching(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    cache = tmp_path / ".cache"
    cache.mkdir()
    (cache / "train.en.gz.part").write_bytes(files["train.en.gz"])  # crashed before the rename
    download(tiny_spec(base, files), tmp_path, **FAST)
    assert server.count("/data/train.en.gz") == 0
    check_layout(tmp_path, tiny_spec(base, files))


def test_complete_part_of_unknown_size_accepted_on_416(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    spec = tiny_spec(base, files, sums=False)  # no sizes known: the server must say it is complete
    cache = tmp_path / ".cache"
    cache.mkdir()
    (cache / "val.en.gz.part").write_bytes(files["val.en.gz"])
    download(spec, tmp_path, **FAST)
    assert server.ranges("/data/val.en.gz") == [f"bytes={len(files['val.en.gz'])}-"]
    assert (cache / "val.en.gz").read_bytes() == files["val.en.gz"]


def test_extra_tests_fetch_only_the_extra_files(server, tmp_path):
    files = tiny_files()
    files.update({f"extra.{lang}.gz": gz(sentences(lang, 7, "extra")) for lang in ("en", "de")})
    base = serve(server, files)
    plain = tiny_spec(base, files)
    extra = parallel_files("testx", base, "extra.en.gz", "extra.de.gz", 7, extra=True)
    spec = DatasetSpec("tiny", "en", "de", "t", "t", splits=plain.splits + (extra,))
    first = download(spec, tmp_path, **FAST)
    assert "testx" not in first.written and not (tmp_path / "testx.en").exists()
    before = server.count()
    second = download(spec, tmp_path, extra_tests=True, **FAST)
    assert sorted(second.fetched) == ["extra.de.gz", "extra.en.gz"] and server.count() == before + 2
    assert second.skipped == ["train", "valid", "test"] and second.unverified == second.fetched
    manifest = check_layout(tmp_path, spec)
    assert manifest["splits"]["testx"]["lines"] == 7
    assert download(spec, tmp_path, extra_tests=True, **FAST).up_to_date


def test_retry_after_503(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    server.plan["/data/val.en.gz"] = [503, 503]
    log, progress = events()
    download(tiny_spec(base, files), tmp_path, progress=progress, **FAST)
    assert server.count("/data/val.en.gz") == 3
    assert "HTTP 503" in messages(log) and "retrying" in messages(log)
    check_layout(tmp_path, tiny_spec(base, files))


def test_retry_after_header_is_respected(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    server.plan["/data/val.de.gz"] = ["retry-after"]
    log, progress = events()
    start = time.monotonic()
    download(tiny_spec(base, files), tmp_path, progress=progress, **FAST)  # backoff alone: 0s
    assert time.monotonic() - start >= 0.9
    assert server.count("/data/val.de.gz") == 2
    assert "HTTP 429; retrying in 1s" in messages(log)
    check_layout(tmp_path, tiny_spec(base, files))


def test_gives_up_after_retries_with_clear_error(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    server.plan["/data/val.en.gz"] = [503] * 10
    with pytest.raises(DownloadError) as err:
        download(tiny_spec(base, files), tmp_path, retries=2, **FAST)
    assert server.count("/data/val.en.gz") == 3
    assert base + "val.en.gz" in str(err.value) and "HTTP 503" in str(err.value)


def test_timeout_is_retried(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    server.plan["/data/test.de.gz"] = ["slow"]
    download(tiny_spec(base, files), tmp_path, retries=2, backoff=0.001, timeout=0.3)
    assert server.count("/data/test.de.gz") == 2
    check_layout(tmp_path, tiny_spec(base, files))


def test_404_names_the_url_and_is_not_retried(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    del server.files["/data/test.de.gz"]
    with pytest.raises(DownloadError) as err:
        download(tiny_spec(base, files), tmp_path, **FAST)
    message = str(err.value)
    assert base + "test.de.gz" in message and "404" in message and "\n" not in message
    assert server.count("/data/test.de.gz") == 1
    assert not (tmp_path / "test.de").exists()


def test_checksum_mismatch_keeps_good_files_and_leaves_nothing_complete(server, tmp_path):
    files = tiny_files()
    base = serve(server, files)
    with pytest.raises(DownloadError) as err:
        download(tiny_spec(base, files, wrong="test.en.gz"), tmp_path, **FAST)
    message = str(err.value)
    assert base + "test.en.gz" in message and "checksum mismatch for test.en.gz" in message
    cache = tmp_path / ".cache"
    assert not (cache / "test.en.gz").exists() and not (cache / "test.en.gz.part").exists()
    assert not (tmp_path / "test.en").exists() and not (tmp_path / "MANIFEST.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name not in (".cache", ".nmt.lock")]  # no output looks complete
    good = ["train.en.gz", "train.de.gz", "val.en.gz", "val.de.gz"]
    assert all((cache / name).read_bytes() == files[name] for name in good)
    before = {name: server.count(f"/data/{name}") for name in files}
    result = download(tiny_spec(base, files), tmp_path, **FAST)  # fixed registry: only the rest
    assert sorted(result.reused) == sorted(good)
    assert all(server.count(f"/data/{name}") == before[name] for name in good)
    check_layout(tmp_path, tiny_spec(base, files))


def test_unknown_checksum_records_computed_sha256(server, tmp_path):
    files = tiny_files()
    log, progress = events()
    spec = tiny_spec(serve(server, files), files, sums=False)
    result = download(spec, tmp_path, progress=progress, **FAST)
    assert sorted(result.unverified) == sorted(files)
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text())
    record = manifest["sources"]["train.en.gz"]
    assert record["expected_sha256"] is None and record["verified"] is False
    assert record["sha256"] == sha256(files["train.en.gz"])


def test_line_count_mismatch_is_an_error(server, tmp_path):
    files = tiny_files()
    files["val.de.gz"] = gz(sentences("de", SIZES["val"] - 1, "val"))
    with pytest.raises(DownloadError, match=r"valid\.en has 30 lines but valid\.de has 29"):
        download(tiny_spec(serve(server, files), files), tmp_path, **FAST)
    assert not (tmp_path / "valid.en").exists() and not (tmp_path / "valid.de").exists()


def test_local_directory_mirror_uses_no_http(tmp_path):
    files = tiny_files()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, data in files.items():
        (mirror / name).write_bytes(data)
    spec = tiny_spec("http://127.0.0.1:9/unreachable/", files)  # port 9: nothing listens
    result = download(spec, tmp_path / "out", mirror=str(mirror), retries=0, **FAST)
    assert sorted(result.fetched) == sorted(files)
    manifest = check_layout(tmp_path / "out", spec)
    assert manifest["sources"]["val.de.gz"]["fetched_from"] == str(mirror / "val.de.gz")


def test_local_mirror_missing_file_and_bad_dir(tmp_path):
    files = tiny_files()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "train.en.gz").write_bytes(files["train.en.gz"])
    spec = tiny_spec("http://127.0.0.1:9/x/", files)
    with pytest.raises(DownloadError, match=re.escape(str(mirror / "train.de.gz"))):
        download(spec, tmp_path / "out", mirror=str(mirror), **FAST)
    with pytest.raises(InputError, match="`mirror`"):
        download(spec, tmp_path / "out", mirror=str(tmp_path / "nope"), **FAST)


def test_url_mirror_replaces_base_location(server, tmp_path):
    files = tiny_files()
    mirror = serve(server, files, prefix="/mirror/multi/")
    spec = tiny_spec("http://127.0.0.1:9/official/", files)
    download(spec, tmp_path, mirror=mirror.rstrip("/"), retries=0, **FAST)
    assert server.count() == len(files)
    assert all(path.startswith("/mirror/multi/") for path, _ in server.log)
    check_layout(tmp_path, spec)


def test_unknown_dataset_and_out_is_a_file(tmp_path):
    with pytest.raises(InputError, match="multi30k"):
        download("nope", tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        download("multi30k", tmp_path / "f")


# --- archives: WMT-like dataset and unsafe members ----------------------------------------


def tgz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sgm(lines: list[str], lang: str) -> bytes:
    segs = "".join(f'<seg id="{i + 1}"> {line}  </seg>\n' for i, line in enumerate(lines))
    head = f'<srcset setid="t" srclang="{lang}">\n<doc docid="d" origlang="en">\n'
    return (head + segs + "</doc>\n</srcset>\n").encode()


def text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def wmt_like(base: str, archives: dict[str, bytes]) -> DatasetSpec:
    """Train from members of two archives; test from SGML members of a third (md5 known)."""
    a, b = RemoteFile(base + "a.tgz"), RemoteFile(base + "b.tgz")
    md5 = hashlib.md5(archives["test.tgz"]).hexdigest()
    t = RemoteFile(base + "test.tgz", md5=md5)
    train = {
        lang: (Source(a, f"training/a.de-en.{lang}"), Source(b, f"b.de-en.{lang}"))
        for lang in ("en", "de")
    }
    test_src = Source(t, "test/dev-src.en.sgm", "sgm")
    test_ref = Source(t, "test/dev-ref.de.sgm", "sgm")
    splits = (Split("train", train["en"], train["de"]), Split("test", (test_src,), (test_ref,), 2))
    return DatasetSpec("wmtlike", "en", "de", "test", "test", splits=splits)


def test_wmt_like_archives_concatenated_and_sgml_extracted(server, tmp_path):
    langs = ("en", "de")
    a = {f"training/a.de-en.{lang}": text(sentences(lang, 5, "a")) for lang in langs}
    b = {f"./b.de-en.{lang}": text(sentences(lang, 3, "b")) for lang in langs}
    b["b.de-en.annotation"] = b"ignored\n"
    t = {
        "test/dev-src.en.sgm": sgm(["One  sentence .", "Two sentences ."], "en"),
        "test/dev-ref.de.sgm": sgm(["Ein  Satz .", "Zwei   Sätze ."], "de"),
        "test/other.fr.sgm": sgm(["Une"], "fr"),
    }
    archives = {"a.tgz": tgz(a), "b.tgz": tgz(b), "test.tgz": tgz(t)}
    download(wmt_like(serve(server, archives), archives), tmp_path, **FAST)
    for lang in langs:
        expected = sentences(lang, 5, "a") + sentences(lang, 3, "b")
        assert (tmp_path / f"train.{lang}").read_text().splitlines() == expected
    assert (tmp_path / "test.de").read_text().splitlines() == ["Ein Satz .", "Zwei Sätze ."]
    assert (tmp_path / "test.en").read_text().splitlines() == ["One sentence .", "Two sentences ."]
    assert not (tmp_path / ".cache" / "extract").exists()
    sources = json.loads((tmp_path / "MANIFEST.json").read_text())["sources"]
    assert sources["test.tgz"]["verified"] and not sources["a.tgz"]["verified"]


EVIL = {
    "dotdot": "data/../../evil.txt",
    "absolute": "/tmp/nmt-evil-abs.txt",
    "symlink": "data/link",
    "hardlink": "data/hard",
    "device": "data/dev",
}


def evil_tar(path: Path, kind: str) -> str:
    """Write a tar with one harmless file and one unsafe member of `kind`; return its name."""
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo("data/ok.txt")
        ok.size = 3
        tar.addfile(ok, io.BytesIO(b"ok\n"))
        info = tarfile.TarInfo(EVIL[kind])
        if kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        elif kind == "hardlink":
            info.type, info.linkname = tarfile.LNKTYPE, "/etc/passwd"
        elif kind == "device":
            info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        else:
            info.size = 5
        tar.addfile(info, io.BytesIO(b"evil\n") if info.isfile() else None)
    return info.name


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "hardlink", "device"])
def test_safe_extract_rejects_unsafe_members(tmp_path, kind):
    archive = tmp_path / "evil.tgz"
    name = evil_tar(archive, kind)
    dest = tmp_path / "a" / "b"
    with pytest.raises(DownloadError) as err:
        safe_extract(archive, dest)
    assert repr(name) in str(err.value) and "unsafe archive member" in str(err.value)
    assert not (tmp_path / "a" / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()
    assert not Path("/tmp/nmt-evil-abs.txt").exists()
    assert not (dest / "data" / "link").exists() and not (dest / "data" / "hard").exists()


def test_download_rejects_archive_with_dotdot_member(server, tmp_path):
    evil_tar(tmp_path / "evil.tgz", "dotdot")
    base = serve(server, {"evil.tgz": (tmp_path / "evil.tgz").read_bytes()})
    f = RemoteFile(base + "evil.tgz")
    side = (Source(f, "data/ok.txt"),)
    spec = DatasetSpec("evil", "en", "de", "t", "t", splits=(Split("train", side, side),))
    out = tmp_path / "out"
    with pytest.raises(DownloadError, match=re.escape("'data/../../evil.txt'")):
        download(spec, out, **FAST)
    assert not (tmp_path / "evil.txt").exists() and not (out / "train.en").exists()
    assert not (out / ".cache" / "extract").exists()


def test_safe_extract_selected_members_and_missing_member(tmp_path):
    archive = tmp_path / "a.tgz"
    archive.write_bytes(tgz({"x/a.txt": b"a\n", "x/b.txt": b"b\n"}))
    found = safe_extract(archive, tmp_path / "out", ["x/a.txt"])
    assert found == {"x/a.txt": tmp_path / "out" / "x" / "a.txt"}
    assert not (tmp_path / "out" / "x" / "b.txt").exists()
    with pytest.raises(DownloadError, match="x/c.txt"):
        safe_extract(archive, tmp_path / "out2", ["x/c.txt"])


# --- registry ------------------------------------------------------------------------------


def test_list_datasets():
    infos = {i.name: i for i in dl.list_datasets()}
    assert {"multi30k", "wmt14"} <= set(infos)
    m = infos["multi30k"]
    assert m.langs == "en-de" and m.splits == {"train": 29000, "valid": 1014, "test": 1000}
    assert set(m.extra_splits) == {"test2017", "test2017mscoco", "test2018"}
    assert m.download_bytes == 1296271 and m.size == "1.3 MB" and m.licence
    assert "https://github.com/multi30k/dataset/raw/master/data/task1/raw/train.en.gz" in m.sources
    w = infos["wmt14"]
    assert w.download_bytes is None and w.size.startswith("about")
    assert any(s.endswith("training-parallel-commoncrawl.tgz") for s in w.sources)
    assert {n: i.langs for n, i in infos.items() if n.startswith(("wmt14-", "europarl"))} == {
        "wmt14-de-en": "de-en", "wmt14-en-fr": "en-fr", "wmt14-fr-en": "fr-en",
        "europarl-en-fr": "en-fr", "europarl-fr-en": "fr-en",
    }
    assert any(s.endswith("training-giga-fren.tar") for s in infos["wmt14-en-fr"].sources)
    assert infos["europarl-en-fr"].sources == ("https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",)
    row = dl.describe(m)
    assert len(row) == 5 and all(isinstance(x, str) for x in row)
    assert row[:3] == ("multi30k", "en-de", "1.3 MB") and "train 29,000" in row[4]


@pytest.mark.parametrize("name, pair", [("wmt14", "en-de"), ("wmt14-de-en", "de-en"), ("wmt14-en-fr", "en-fr"),
                                        ("wmt14-fr-en", "fr-en")])
def test_wmt14_valid_and_test_come_from_sacrebleu_registry(name, pair):
    from sacrebleu.dataset import DATASETS

    spec = dl.registry()[name]
    assert spec.pair == pair
    splits = {s.name: s for s in spec.splits}
    # newstest2014 as papers report it: all 3,003 lines (sacreBLEU's plain "wmt14" is a 2,737-line subset)
    for split, test_set in (("valid", "wmt13"), ("test", "wmt14/full")):
        src, ref = splits[split].src[0], splits[split].tgt[0]
        ds = DATASETS[test_set]
        assert src.file.url == ds.data[0] and src.file.md5 == ds.md5[0]
        assert [src.member, ref.member] == ds.langpairs[pair][:2]
        assert src.fmt == ref.fmt == "sgm"
    # training archives: no checksum is invented
    assert all(s.file.sha256 is None and s.file.md5 is None for s in splits["train"].src)


def test_sgm_cleaning_matches_sacrebleu(tmp_path):
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    path = tmp_path / "x.sgm"
    path.write_bytes(sgm([" a  b ", "c\td", "<b>x</b> y"], "en"))
    mirror = tmp_path / "mirror"  # a local --mirror folder: the archive goes through no HTTP
    mirror.mkdir()
    (mirror / "test.tgz").write_bytes(
        tgz({"test/dev-src.en.sgm": path.read_bytes(), "test/dev-ref.de.sgm": path.read_bytes()})
    )
    t = RemoteFile("http://127.0.0.1:9/unreachable/test.tgz")
    src, ref = Source(t, "test/dev-src.en.sgm", "sgm"), Source(t, "test/dev-ref.de.sgm", "sgm")
    spec = DatasetSpec("sgm", "en", "de", "t", "t", splits=(Split("test", (src,), (ref,), 3),))
    download(spec, tmp_path / "out", mirror=str(mirror), retries=0, **FAST)
    ours = (tmp_path / "out" / "test.en").read_text(encoding="utf-8").splitlines()
    theirs = tmp_path / "theirs.txt"
    FakeSGMLDataset("x", data=[], langpairs={})._convert_format(str(path), str(theirs))
    assert ours == theirs.read_text(encoding="utf-8").splitlines() == ["a b", "c d", "<b>x</b> y"]
    assert (tmp_path / "out" / "test.de").read_text(encoding="utf-8").splitlines() == ours


@pytest.mark.skipif(not SHARED_M30K.is_dir(), reason=f"{SHARED_M30K} not present")
def test_multi30k_from_shared_local_copy(tmp_path):
    result = download("multi30k", tmp_path, mirror=str(SHARED_M30K))
    counts = {"train": 29000, "valid": 1014, "test": 1000}
    for split, n in counts.items():
        for lang in ("en", "de"):
            with open(tmp_path / f"{split}.{lang}", encoding="utf-8") as f:
                assert sum(1 for _ in f) == n
    assert result.unverified == [] and result.written["train.de"] == 29000
    assert download("multi30k", tmp_path, mirror=str(SHARED_M30K)).up_to_date


# ------------------------------------------------------------------------------------------
# Stalls, locks, verification
# ------------------------------------------------------------------------------------------


def test_a_stalled_transfer_is_resumed(server, tmp_path):
    """The server sends half the file and then nothing on an open connection: the read timeout ends the
    attempt and the next one resumes from the half that arrived."""
    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    server.plan["/data/train.en.gz"] = ["stall"]
    log, progress = events()
    start = time.monotonic()
    download(spec, tmp_path, progress=progress, backoff=0.001, timeout=0.5)
    assert time.monotonic() - start < 3.0  # the stall did not hold the download for its 3 s
    check_layout(tmp_path, spec)
    ranges = server.ranges("/data/train.en.gz")
    assert ranges[0] is None and ranges[1] == f"bytes={len(files['train.en.gz']) // 2}-"
    assert "timed out" in messages(log) or "connection lost" in messages(log)


def test_a_dripping_server_is_reported_not_waited_for(server, tmp_path):
    """A byte every 0.05 s never trips the read timeout; the stall watch (1 KiB per --timeout) does."""
    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    server.plan["/data/train.en.gz"] = ["drip"] * 10
    start = time.monotonic()
    with pytest.raises(DownloadError, match=r"train.en.gz: download failed after 3 attempt.*stalled.*re-run"):
        download(spec, tmp_path, backoff=0.001, timeout=0.5, retries=2)
    assert time.monotonic() - start < 8.0
    assert server.count("/data/train.en.gz") == 3


def test_a_second_download_into_the_folder_is_refused(server, tmp_path):
    import os

    from nmt.core.errors import BusyError
    from nmt.core.files import folder_lock

    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    # folder_lock as another process's would be held: flock locks belong to open files
    with folder_lock(tmp_path / "out"), pytest.raises(BusyError, match=rf"another nmt process \(pid {os.getpid()}\) is using"):
        download(spec, tmp_path / "out", **FAST)
    assert server.count() == 0
    download(spec, tmp_path / "out", **FAST)  # once the lock is free
    check_layout(tmp_path / "out", spec)


def test_rerun_rewrites_a_file_changed_in_place_and_verify_reports_it(server, tmp_path):
    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    download(spec, tmp_path, **FAST)
    assert dl.verify_outputs(tmp_path) == (sorted(f"{s}.{lang}" for s in ("train", "valid", "test") for lang in ("en", "de")), [])
    text = (tmp_path / "train.de").read_bytes()
    (tmp_path / "train.de").write_bytes(text.replace(b"Haus 1 ", b"Hund 1 ", 1))  # same size, other content
    good, problems = dl.verify_outputs(tmp_path)
    assert problems == [f"{tmp_path / 'train.de'}: sha256 differs from the manifest's (changed since it was written)"]
    (tmp_path / "valid.en").unlink()
    assert len(dl.verify_outputs(tmp_path)[1]) == 2
    before = server.count()
    result = download(spec, tmp_path, **FAST)
    assert result.skipped == ["test"] and server.count() == before  # rebuilt from the cache
    check_layout(tmp_path, spec)
    assert dl.verify_outputs(tmp_path)[1] == []


def test_verify_without_a_manifest(tmp_path):
    with pytest.raises(DownloadError, match="MANIFEST.json: missing"):
        dl.verify_outputs(tmp_path)


# ------------------------------------------------------------------------------------------
# English-French: WMT14 en-fr / fr-en and Europarl, on fabricated archives laid out like upstream
# ------------------------------------------------------------------------------------------


def _load_fake_archives():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tools" / "fake_enfr_archives.py"
    spec = importlib.util.spec_from_file_location("fake_enfr_archives", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAKE = _load_fake_archives()
ENFR_SIZES = {"europarl": 3000, "commoncrawl": 40, "un": 30, "nc": 20, "giga": 50}
ENFR_ARCHIVES = [
    "training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz", "training-parallel-un.tgz",
    "training-parallel-nc-v9.tgz", "training-giga-fren.tar", "test.tgz", "test-full.tgz",
]


@pytest.fixture(scope="module")
def enfr_mirror(tmp_path_factory) -> Path:
    """The seven WMT14 en-fr archives, fabricated (Europarl: 3,000 pairs, pairs 1500 and 3000 with
    an empty French side)."""
    folder = tmp_path_factory.mktemp("enfr-mirror")
    FAKE.write_archives(folder, ENFR_SIZES, blank_every=1500)
    return folder


def without_checksums(spec: DatasetSpec) -> DatasetSpec:
    """The registry's spec with no checksum: the fabricated test sets cannot match sacreBLEU's md5."""
    import dataclasses

    def bare(s: Source) -> Source:
        return dataclasses.replace(s, file=RemoteFile(s.file.url))

    splits = tuple(
        dataclasses.replace(sp, src=tuple(map(bare, sp.src)), tgt=tuple(map(bare, sp.tgt))) for sp in spec.splits
    )
    return dataclasses.replace(spec, splits=splits)


def fake_lines(corpus: str, lang: str, n: int, seed: int, blank_every: int = 0) -> list[str]:
    en, fr = FAKE.sentence_pairs(n, seed, blank_every)
    lines = en if lang == "en" else fr
    return [f"{corpus} {line}" if line else "" for line in lines]


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_registry_names_match_the_upstream_archives():
    """URLs and member names of WMT14 en-fr, as in fairseq's prepare-wmt14en2fr.sh and tensor2tensor."""
    spec = dl.registry()["wmt14-en-fr"]
    train = {s.name: s for s in spec.splits}["train"]
    assert [s.describe() for s in train.tgt] == [
        "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz#training/europarl-v7.fr-en.fr",
        "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz#commoncrawl.fr-en.fr",
        "https://www.statmt.org/wmt13/training-parallel-un.tgz#un/undoc.2000.fr-en.fr",
        "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz#training/news-commentary-v9.fr-en.fr",
        "https://www.statmt.org/wmt10/training-giga-fren.tar#giga-fren.release2.fixed.fr.gz",
    ]
    assert [f.name for f in spec.files(spec.splits)] == ENFR_ARCHIVES
    assert all(s.file.sha256 is None and s.file.md5 is None for s in train.src + train.tgt)  # none invented


def test_wmt14_en_fr_over_http_with_a_dropped_connection(server, enfr_mirror, tmp_path):
    files = {name: (enfr_mirror / name).read_bytes() for name in ENFR_ARCHIVES}
    mirror = serve(server, files, prefix="/mirror/")
    server.plan["/mirror/training-giga-fren.tar"] = ["drop"]  # resumed with Range, as for en-de
    spec = without_checksums(dl.resolve("wmt14", "en-fr"))
    out = tmp_path / "wmt14-en-fr"
    result = download(spec, out, mirror=mirror, **FAST)
    assert sorted(result.fetched) == sorted(ENFR_ARCHIVES)
    assert server.ranges("/mirror/training-giga-fren.tar")[1] == f"bytes={len(files['training-giga-fren.tar']) // 2}-"
    # train: the five corpora concatenated in order; the giga members are gzip files inside a plain tar
    for lang in ("en", "fr"):
        expected = []
        for seed, (corpus, n) in enumerate(ENFR_SIZES.items(), 1):
            tag = {"europarl": "ep", "commoncrawl": "cc", "giga": "giga"}.get(corpus, corpus)
            expected += fake_lines(tag, lang, n, seed, 1500 if corpus == "europarl" else 0)
        assert lines_of(out / f"train.{lang}") == expected
    dev_en, dev_fr = FAKE.sentence_pairs(3000, 7)
    test_en, test_fr = FAKE.sentence_pairs(3003, 6)
    assert lines_of(out / "valid.en") == dev_en and lines_of(out / "valid.fr") == dev_fr
    assert lines_of(out / "test.en") == test_en and lines_of(out / "test.fr") == test_fr
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert (manifest["dataset"], manifest["family"], manifest["src"], manifest["tgt"]) == ("wmt14-en-fr", "wmt14", "en", "fr")
    assert manifest["files"]["test.fr"]["from"] == [
        "https://statmt.org/wmt14/test-full.tgz#test-full/newstest2014-fren-ref.fr.sgm"
    ]
    before = server.count()
    assert download(spec, out, mirror=mirror, **FAST).up_to_date and server.count() == before


def test_wmt14_fr_en_takes_sacrebleus_members_for_that_direction(enfr_mirror, tmp_path):
    spec = dl.resolve("wmt14", "fr-en")
    assert (spec.name, spec.src, spec.tgt) == ("wmt14-fr-en", "fr", "en")
    test = {s.name: s for s in spec.splits}["test"]
    assert (test.src[0].member, test.tgt[0].member) == (
        "test-full/newstest2014-fren-src.fr.sgm", "test-full/newstest2014-fren-ref.en.sgm")
    download(without_checksums(spec), tmp_path, mirror=str(enfr_mirror), **FAST)
    test_en, test_fr = FAKE.sentence_pairs(3003, 6)
    assert lines_of(tmp_path / "test.fr") == test_fr and lines_of(tmp_path / "test.en") == test_en
    assert len(lines_of(tmp_path / "train.fr")) == sum(ENFR_SIZES.values())
    assert json.loads((tmp_path / "MANIFEST.json").read_text())["splits"]["test"]["src"] == "test.fr"


def test_europarl_held_out_split(enfr_mirror, tmp_path):
    only = tmp_path / "mirror"  # Europarl needs its archive alone
    only.mkdir()
    (only / ENFR_ARCHIVES[0]).write_bytes((enfr_mirror / ENFR_ARCHIVES[0]).read_bytes())
    out = tmp_path / "out"
    result = download("europarl", out, mirror=str(only), pair="en-fr", **FAST)
    assert result.fetched == [ENFR_ARCHIVES[0]] and result.unverified == [ENFR_ARCHIVES[0]]
    en, fr = fake_lines("ep", "en", 3000, 1, 1500), fake_lines("ep", "fr", 3000, 1, 1500)
    # pairs 500 and 2500 are valid, 1000 and 2000 test; 1500 and 3000 have an empty side: train keeps them
    assert lines_of(out / "valid.en") == [en[499], en[2499]] and lines_of(out / "valid.fr") == [fr[499], fr[2499]]
    assert lines_of(out / "test.en") == [en[999], en[1999]] and lines_of(out / "test.fr") == [fr[999], fr[1999]]
    held = {499, 999, 1999, 2499}
    pairs = {(en[i], fr[i]) for i in held}  # and train has none of them, wherever they repeat
    train = [(e, f) for i, (e, f) in enumerate(zip(en, fr)) if i not in held and (e, f) not in pairs]
    assert len(train) < 2996 and not pairs & set(train)
    assert lines_of(out / "train.en") == [e for e, _ in train] and lines_of(out / "train.fr") == [f for _, f in train]
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["dataset"] == "europarl-en-fr" and manifest["splits"]["test"]["held_out_every"] == 1000
    assert download("europarl-en-fr", out, mirror=str(only), **FAST).up_to_date
    (out / "test.fr").unlink()  # rebuilt from the cache, the same
    download("europarl", out, mirror=str(only), **FAST)
    assert lines_of(out / "test.fr") == [fr[999], fr[1999]]


def test_held_out_split_of_unequal_sides_is_an_error(tmp_path):
    mirror = tmp_path / "m"
    mirror.mkdir()
    (mirror / "c.tgz").write_bytes(tgz({"c.en": text(["a", "b", "c"]), "c.fr": text(["a", "b"])}))
    f = RemoteFile("http://127.0.0.1:9/c.tgz")
    src, tgt = (Source(f, "c.en"),), (Source(f, "c.fr"),)
    splits = tuple(Split(n, src, tgt, holdout=dl.Holdout(2)) for n in ("train", "valid", "test"))
    spec = DatasetSpec("c", "en", "fr", "t", "t", splits=splits)
    with pytest.raises(DownloadError, match=r"train: the sources of train.fr end at line 2.*not parallel"):
        download(spec, tmp_path / "out", mirror=str(mirror), retries=0, **FAST)
    assert not (tmp_path / "out" / "train.en").exists()


@pytest.mark.parametrize("n, src, tgt, part", [
    (1, "a", "b", "train"), (500, "a", "b", "valid"), (1000, "a", "b", "test"), (1500, "a", "b", "valid"),
    (2000, "a", "b", "test"), (999, "a", "b", "train"), (1000, "a", "", "train"), (500, " ", "b", "train"),
])
def test_holdout_part(n, src, tgt, part):
    assert dl.Holdout(1000).part(n, src, tgt) == part


@pytest.mark.parametrize("name, pair, expected", [
    ("wmt14", None, "wmt14"), ("wmt14", "en-de", "wmt14"), ("wmt14", "en-fr", "wmt14-en-fr"),
    ("wmt14", "FR-EN", "wmt14-fr-en"), ("wmt14", "de-en", "wmt14-de-en"), ("wmt14-en-fr", None, "wmt14-en-fr"),
    ("wmt14-en-de", None, "wmt14"), ("wmt14-fr-en", "fr-en", "wmt14-fr-en"), ("europarl", None, "europarl-en-fr"),
    ("europarl", "fr-en", "europarl-fr-en"), ("multi30k", None, "multi30k"), ("multi30k", "de-en", "multi30k-de-en"),
])
def test_resolve_name_and_pair(name, pair, expected):
    assert dl.resolve(name, pair).name == expected


@pytest.mark.parametrize("name, pair, words", [
    ("wmt14", "enfr", ["`pair` 'enfr'", "SOURCE-TARGET", "en-de, de-en, en-fr, fr-en"]),
    ("wmt14", "en-ru", ["`pair` en-ru", "wmt14 has no en-ru", "en-de, de-en, en-fr, fr-en"]),
    ("europarl", "en-de", ["`pair` en-de", "europarl has no en-de", "choose one of: en-fr, fr-en"]),
    ("wmt14-en-fr", "fr-en", ["`pair` fr-en", "wmt14-en-fr is en-fr; drop `pair`", "nmt download wmt14 --pair fr-en"]),
    ("wmt15", None, ["unknown dataset 'wmt15'", "europarl, multi30k, wmt14", "wmt14-en-fr"]),
])
def test_resolve_errors_name_the_option_and_the_choices(name, pair, words):
    with pytest.raises(InputError) as e:
        dl.resolve(name, pair)
    for w in words:
        assert w in str(e.value)


def test_every_side_of_every_dataset_reads_files_of_its_language():
    def in_language(source: Source, lang: str) -> bool:  # "x.fr-en.fr", "x.fr.gz", "x-src.fr.sgm"
        name = source.member or source.file.name
        return name.endswith(f".{lang}") or f".{lang}." in name

    for spec in dl.registry().values():
        dl.check_spec(spec)
        for split in spec.splits:
            assert all(in_language(s, spec.src) for s in split.src), (spec.name, split.name)
            assert all(in_language(s, spec.tgt) for s in split.tgt), (spec.name, split.name)


# ------------------------------------------------------------------------------------------
# Bounded downloads: a source that sends more than the file is stopped
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("action, announced", [("too-much", True), ("too-much-unannounced", False)])
def test_a_server_sending_more_than_the_known_size_is_stopped(server, tmp_path, action, announced):
    """A mirror once wrote 6.4 GB for a 569 kB file: the download stops at the registered size, the bytes
    are deleted, and the error names the URL, the file and the fix."""
    files = tiny_files()
    base = serve(server, files)
    server.plan["/data/train.en.gz"] = [action]
    size = len(files["train.en.gz"])
    log, progress = events()
    with pytest.raises(DownloadError) as err:
        download(tiny_spec(base, files), tmp_path, progress=progress, **FAST)
    message = str(err.value)
    assert message.startswith(f"{base}train.en.gz: too much data (train.en.gz is {size:,} bytes") and "\n" not in message
    assert (f"it announces {3 * size:,}" if announced else "it sent more") in message and "`mirror`" in message
    received = [p.done for p in log if p.unit == "B" and p.task == "download train.en.gz"]
    assert max(received, default=0) <= (0 if announced else size + 1)  # the rest is not even read
    assert not (tmp_path / ".cache" / "train.en.gz.part").exists() and not (tmp_path / ".cache" / "train.en.gz").exists()
    assert server.count("/data/train.en.gz") == 1  # not retried: the server's file is another one
    download(tiny_spec(base, files), tmp_path, **FAST)  # a server that behaves again: all well
    check_layout(tmp_path, tiny_spec(base, files))


def limited_spec(base: str, files: dict[str, bytes], name: str, limit: int) -> DatasetSpec:
    """tiny_spec with no checksums or sizes, and a `limit` on file `name`."""
    import dataclasses

    def bounded(s: Source) -> Source:
        return dataclasses.replace(s, file=RemoteFile(s.file.url, limit=limit)) if s.file.name == name else s

    spec = tiny_spec(base, files, sums=False)
    return dataclasses.replace(spec, splits=tuple(
        dataclasses.replace(sp, src=tuple(map(bounded, sp.src)), tgt=tuple(map(bounded, sp.tgt))) for sp in spec.splits))


@pytest.mark.parametrize("action, said", [(None, "it announces"), ("too-much-unannounced", "it sent more")])
def test_a_file_of_unknown_size_is_bounded_by_its_limit(server, tmp_path, action, said):
    files = tiny_files()
    base = serve(server, files)
    if action:
        server.plan["/data/val.de.gz"] = [action]
    limit = len(files["val.de.gz"]) - 1
    log, progress = events()
    with pytest.raises(DownloadError, match=rf"val.de.gz: too much data \(val.de.gz may be at most {limit:,} bytes, {said}"):
        download(limited_spec(base, files, "val.de.gz", limit), tmp_path, progress=progress, **FAST)
    assert max((p.done for p in log if p.task == "download val.de.gz" and p.unit == "B"), default=0) <= limit + 1
    assert not (tmp_path / ".cache" / "val.de.gz.part").exists()
    download(limited_spec(base, files, "val.de.gz", limit + 1), tmp_path, **FAST)  # the file fits: fine


def test_a_mirror_file_larger_than_the_known_size_is_not_copied(tmp_path):
    files = tiny_files()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, data in files.items():
        (mirror / name).write_bytes(data * (3 if name == "val.en.gz" else 1))
    log, progress = events()
    spec = tiny_spec("http://127.0.0.1:9/x/", files)
    with pytest.raises(DownloadError, match=re.escape(f"{mirror / 'val.en.gz'}: too much data (val.en.gz is")):
        download(spec, tmp_path / "out", mirror=str(mirror), progress=progress, **FAST)
    assert not [p for p in log if p.task == "copy val.en.gz" and p.unit == "B"]  # not a byte copied
    assert not (tmp_path / "out" / ".cache" / "val.en.gz.part").exists()


def test_a_mirror_file_that_keeps_coming_is_cut_at_the_known_size(tmp_path):
    """A named pipe (or a link to /dev/zero) in the mirror has no size to check first: the copy stops one
    byte past the registered size."""
    import os

    files = tiny_files()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, data in files.items():
        if name != "val.en.gz":
            (mirror / name).write_bytes(data)
    os.mkfifo(mirror / "val.en.gz")
    size = len(files["val.en.gz"])

    def writer() -> None:
        try:
            with open(mirror / "val.en.gz", "wb") as f:
                f.write(b"\0" * (10 * size))
        except BrokenPipeError:
            pass  # the reader stopped: what it should do

    threading.Thread(target=writer, daemon=True).start()
    log, progress = events()
    with pytest.raises(DownloadError, match=re.escape(f"val.en.gz: too much data (val.en.gz is {size:,} bytes, the "
                                                      "mirror's copy is longer)")):
        download(tiny_spec("http://127.0.0.1:9/x/", files), tmp_path / "out", mirror=str(mirror), progress=progress)
    assert max(p.done for p in log if p.task == "copy val.en.gz" and p.unit == "B") == size + 1
    assert not (tmp_path / "out" / ".cache" / "val.en.gz.part").exists()


# ------------------------------------------------------------------------------------------
# The output folder: nmt's, or empty of what the download writes
# ------------------------------------------------------------------------------------------


def test_a_users_own_files_are_not_replaced(server, tmp_path):
    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "train.en").write_text("my own corpus\n")
    (out / "valid.de").write_text("mine too\n")
    with pytest.raises(InputError) as err:
        download(spec, out, **FAST)
    message = str(err.value)
    assert message.startswith(f"`out` {out}: {out / 'train.en'} (and 1 more) exists and no MANIFEST.json")
    assert "choose another `out`, or move the file(s) away" in message and "\n" not in message
    assert (out / "train.en").read_text() == "my own corpus\n"
    assert sorted(p.name for p in out.iterdir()) == ["train.en", "valid.de"]  # nothing written, not even a lock
    assert server.count() == 0


def test_a_folder_with_a_foreign_manifest_is_refused(server, tmp_path):
    files = tiny_files()
    spec = tiny_spec(serve(server, files), files)
    (tmp_path / "MANIFEST.json").write_text('{"my": "inventory"}\n')
    with pytest.raises(InputError, match=r"MANIFEST.json is not a manifest of nmt download; choose another `out`"):
        download(spec, tmp_path, **FAST)
    assert (tmp_path / "MANIFEST.json").read_text() == '{"my": "inventory"}\n' and server.count() == 0


def test_a_download_that_failed_halfway_resumes_where_it_stopped(server, tmp_path):
    """The manifest is written before the first output and after each split: a re-run is nmt's own, and
    leaves the splits that were complete alone."""
    files = tiny_files()
    bad = dict(files, **{"val.de.gz": gz(sentences("de", SIZES["val"] - 1, "val"))})
    with pytest.raises(DownloadError, match="valid.de has 29"):
        download(tiny_spec(serve(server, bad), bad), tmp_path, **FAST)
    assert (tmp_path / "train.en").exists() and not (tmp_path / "valid.en").exists()
    assert json.loads((tmp_path / "MANIFEST.json").read_text())["files"].keys() == {"train.en", "train.de"}
    mtime = (tmp_path / "train.en").stat().st_mtime_ns
    result = download(tiny_spec(serve(server, files), files), tmp_path, **FAST)  # upstream fixed
    assert result.skipped == ["train"] and (tmp_path / "train.en").stat().st_mtime_ns == mtime
    check_layout(tmp_path, tiny_spec(serve(server, files), files))


# ------------------------------------------------------------------------------------------
# --mirror: malformed values, and the output folder as a mirror
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mirror, words", [
    ("http://[::1", ["not a valid URL"]),
    ("http://", ["names no host"]),
    ("http:/data", ["names no host"]),
    ("https://example.org:99999/data", ["not a valid URL"]),
    ("http://example.org:port/", ["not a valid URL"]),
    ("", ["empty"]),
    ("   ", ["empty"]),
    ("file://server/share", ["file:///PATH"]),
    ("nul\x00byte", ["not a folder"]),
    ("ftp://example.org/data", ["not a folder, nor an http(s) URL"]),
])
def test_a_malformed_mirror_is_one_line_naming_the_option(tmp_path, mirror, words):
    spec = tiny_spec("http://127.0.0.1:9/x/", tiny_files())
    with pytest.raises(InputError) as err:
        download(spec, tmp_path / "out", mirror=mirror, **FAST)
    message = str(err.value)
    assert message.startswith(f"`mirror` {mirror!r}: ") and "\n" not in message
    assert all(w in message for w in words), message
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_a_file_url_mirror_is_a_local_folder(tmp_path):
    files = tiny_files()
    (tmp_path / "m").mkdir()
    for name, data in files.items():
        (tmp_path / "m" / name).write_bytes(data)
    spec = tiny_spec("http://127.0.0.1:9/x/", files)
    download(spec, tmp_path / "out", mirror=(tmp_path / "m").as_uri(), retries=0, **FAST)
    check_layout(tmp_path / "out", spec)


@pytest.mark.parametrize("where", [".", ".cache"])
def test_the_output_folder_cannot_be_the_mirror(tmp_path, where):
    files = tiny_files()
    out = tmp_path / "data"
    mirror = out / where
    mirror.mkdir(parents=True)
    for name, data in files.items():
        (mirror / name).write_bytes(data)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    spec = tiny_spec("http://127.0.0.1:9/x/", files)
    with pytest.raises(InputError, match=r"`mirror` .*: is (the `out` folder|inside `out`).*give another `out`"):
        download(spec, out, mirror=str(mirror), **FAST)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    download(spec, tmp_path / "elsewhere", mirror=str(mirror), **FAST)  # the same mirror, another --out
    check_layout(tmp_path / "elsewhere", spec)


# ------------------------------------------------------------------------------------------
# Formats
# ------------------------------------------------------------------------------------------


HOSTILE_SGM = [
    '<seg id="1">  a\tb  </seg>\n', '<seg id="2">cr\rinside</seg>\r\n', '<seg id="3">nel\x85and\u2028ls\u00a0nbsp</seg>\n',
    '<seg id="4">after</seg> trailing\n', '<seg id="5">one</seg><seg id="6">two</seg>\n', '<seg id="7">no close\n',
    'continued</seg>\n', '<seg id="8"></seg>\n', '  <seg id="9">indented</seg>\n', "<seg>no id</seg>\n",
    '<seg id="10">\x1c\x1f\x0b\x0cseps</seg>\n', '\ufeff<seg id="11">bom</seg>\n', '<seg id="12">é 中文 🙂</seg>',
]


@pytest.mark.parametrize("lines", [HOSTILE_SGM, HOSTILE_SGM[::-1], ['<seg id="1">x</seg>\n'], []])
def test_sgm_lines_are_sacrebleus_text(tmp_path, lines):
    """nmt reads WMT's SGML itself, line for line as sacreBLEU's FakeSGMLDataset converts it."""
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    from nmt.download.formats import sgm_lines

    path = tmp_path / "x.sgm"
    path.write_bytes("".join(lines).encode("utf-8"))
    theirs = tmp_path / "theirs.txt"
    FakeSGMLDataset("x", data=[], langpairs={})._convert_format(str(path), str(theirs))
    assert "".join(line + "\n" for line in sgm_lines(path)).encode("utf-8") == theirs.read_bytes()


def test_sgm_that_is_not_utf8_names_the_line(tmp_path):
    from nmt.download.formats import sgm_lines

    path = tmp_path / "x.sgm"
    path.write_bytes(b'<seg id="1">ok</seg>\n<seg id="2">caf\xe9</seg>\n')
    with pytest.raises(InputError, match=r"x.sgm: line 2 is not valid UTF-8"):
        list(sgm_lines(path))


def test_tsv_sources_take_one_column_each(tmp_path):
    mirror = tmp_path / "m"
    mirror.mkdir()
    (mirror / "pairs.tsv").write_text("a house\tein Haus\nthe cat\tdie Katze\textra\n", encoding="utf-8")
    f = RemoteFile("http://127.0.0.1:9/pairs.tsv")
    split = Split("train", (Source(f, fmt="tsv", column=0),), (Source(f, fmt="tsv", column=1),), 2)
    download(DatasetSpec("tsv", "en", "de", "t", "t", splits=(split,)), tmp_path / "out", mirror=str(mirror))
    assert lines_of(tmp_path / "out" / "train.en") == ["a house", "the cat"]
    assert lines_of(tmp_path / "out" / "train.de") == ["ein Haus", "die Katze"]
    (mirror / "pairs.tsv").write_text("no tab here\n", encoding="utf-8")
    with pytest.raises(DownloadError, match=r"pairs.tsv: line 1 has 1 tab-separated field\(s\), not the 2 expected"):
        bad = Split("train", (Source(f, fmt="tsv", column=0),), (Source(f, fmt="tsv", column=1),))
        download(DatasetSpec("tsv", "en", "de", "t", "t", splits=(bad,)), tmp_path / "out2", mirror=str(mirror))
    with pytest.raises(ValueError, match="column"):
        dl.check_spec(DatasetSpec("tsv", "en", "de", "t", "t", splits=(Split("train", (Source(f, fmt="tsv"),),
                                                                           (Source(f),)),)))
