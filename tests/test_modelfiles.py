"""Model file management: fetch from a local HTTP server (127.0.0.1 only), verify, info, and the CLI."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from sam3tiles.testing.graphs import build_contract_models

from sam3tiles.model import contract as mc
from sam3tiles.model import layouts as ml
from sam3tiles.model import files as mf
from sam3tiles.cli.model import model as model_cli
from sam3tiles.errors import EXIT_MODEL, ModelError, ModelNotFoundError

# ------------------------------------------------------------------------------------------------
# a local server standing in for the Hugging Face hub


REPO, REV = "test-org/sam3-onnx-test", "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Serves files on 127.0.0.1 the way the hub does for huggingface_hub: HEAD and GET on
    /<repo>/resolve/<revision>/<name> with X-Repo-Commit, ETag and Content-Length (Range honoured), and
    plain files under /files/<name> (the vocabulary's own URL). Scripted faults per file name, one per
    GET: "html" (an error page with status 200). Every request is logged with its Authorization header.
    """

    def __init__(self, files: dict[str, bytes]):
        self.files = dict(files)
        self.faults: dict[str, list[str]] = {}
        self.log: list[tuple[str, str, str | None, int, str | None]] = []  # (method, name, Range, status, auth)
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_HEAD(self):
                self._serve(head=True)

            def do_GET(self):
                self._serve(head=False)

            def _serve(self, head):
                path = self.path.split("?")[0]
                prefix = f"/{REPO}/resolve/{REV}/"
                if path.startswith(prefix):
                    name = path[len(prefix):]
                elif path.startswith("/files/"):
                    name = path[len("/files/"):]
                else:
                    name = None
                rng = self.headers.get("Range")
                body = hub.files.get(name) if name else None
                queue = hub.faults.get(name) or []
                fault = queue.pop(0) if queue and not head else None
                extra = {"X-Repo-Commit": REV}
                if body is not None:
                    extra["ETag"] = f'"{hashlib.sha256(body).hexdigest()}"'
                if fault == "html":
                    page = b"<html><body>We're sorry, an error occurred.</body></html>"
                    body = page + b" " * (len(body) - len(page))  # the right length: only the hash tells
                if body is None:
                    return self._reply(head, name, rng, 404, b"not found", {"X-Error-Code": "EntryNotFound"})
                start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
                if start >= len(body) and start:
                    return self._reply(head, name, rng, 416, b"", extra)
                if start:
                    extra["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
                return self._reply(head, name, rng, 206 if start else 200, body[start:], extra)

            def _reply(self, head, name, rng, status, body, extra):
                hub.log.append(("HEAD" if head else "GET", name, rng, status, self.headers.get("Authorization")))
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                if not head:
                    self.wfile.write(body)
                self.wfile.flush()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def gets(self, name: str) -> list[tuple[str | None, int]]:
        return [(r, s) for m, n, r, s, _ in self.log if n == name and m == "GET"]

    def fault(self, name: str, *faults: str) -> None:
        self.faults[name] = list(faults)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _content(name: str, size: int) -> bytes:
    return np.random.default_rng(len(name) * 7919 + size).integers(0, 256, size, dtype=np.uint8).tobytes()


FAKE_SIZES = {f.name: 40_000 + 17_000 * i for i, f in enumerate(mf.MANIFEST)}
FAKE = {name: _content(name, size) for name, size in FAKE_SIZES.items()}
BIG = mf.IMAGE_ENCODER + ".data"


def fake_manifest(url: str) -> tuple:
    """The manifest's files with test content: graphs in the fake repo, the vocabulary at a plain URL."""
    return tuple(mf.ModelFile(f.name, f"{url}/files/{f.name}", hashlib.sha256(FAKE[f.name]).hexdigest(), f.licence,
                              repo=REPO if f.repo else None, revision=REV if f.repo else None)
                 for f in mf.MANIFEST)


@pytest.fixture
def hub():
    h = FakeHub(FAKE)
    yield h
    h.close()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    import huggingface_hub.constants as hfc

    for var in (mf.MODEL_DIR_ENV, "SAM3TILES_VOCAB", "HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hfc, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # a stored login of the machine stays out
    monkeypatch.setattr(hfc, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))


def _fetch(d, hub, cache=None, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("backoff", 0.0)
    messages: list[str] = []
    out = mf.fetch(d, files=fake_manifest(hub.url), endpoint=kw.pop("endpoint", hub.url),
                   cache_dir=cache or Path(f"{d}.hf-cache"), echo=messages.append, **kw)
    return out, messages


def _all_there(d: Path) -> None:
    for name, body in FAKE.items():
        assert (d / name).read_bytes() == body
        assert not (d / (name + ".part")).exists()


# ------------------------------------------------------------------------------------------------
# fetch


def test_fetch_downloads_verifies_and_writes_the_licence_notice(tmp_path, hub, capsys):
    d = tmp_path / "model dir"
    out, messages = _fetch(d, hub, progress=True)
    assert out == d
    _all_there(d)
    notice = (d / mf.LICENSE_NOTICE).read_text()
    assert mf.SAM_LICENSE_URL in notice and "SAM License" in notice and "accept" in notice
    assert "Copyright (c) 2021 OpenAI" in notice
    assert messages[0].startswith("NOTICE") and mf.SAM_LICENSE_URL in messages[0]
    assert mf.verify(d, fake_manifest(hub.url)).ok
    # each file fetched once, the graphs at the pinned revision's paths; hard links to the shared cache's blobs
    assert all(len(hub.gets(name)) == 1 for name in FAKE)
    blobs = list(Path(f"{d}.hf-cache").rglob("blobs/*"))
    assert len(blobs) == len(FAKE) - 1  # every graph file; the vocabulary is not a hub file
    assert (d / mf.DECODER).stat().st_ino in {b.stat().st_ino for b in blobs}


def test_second_fetch_and_a_second_directory_download_nothing(tmp_path, hub):
    _fetch(tmp_path / "a", hub, cache=tmp_path / "shared")
    hub.log.clear()
    _, messages = _fetch(tmp_path / "a", hub, cache=tmp_path / "shared")
    assert hub.log == []
    assert sum("present, sha256 ok" in m for m in messages) == len(FAKE)
    # another model directory on the same shared cache: the graphs come from the cache, no GET
    _fetch(tmp_path / "b", hub, cache=tmp_path / "shared")
    _all_there(tmp_path / "b")
    assert [n for m, n, *_ in hub.log if m == "GET"] == [mf.VOCAB_NAME]


def test_present_file_with_wrong_hash_is_replaced(tmp_path, hub):
    d = tmp_path / "m"
    _fetch(d, hub)
    (d / mf.DECODER).unlink()  # a hard link: writing into it would change the cached blob too
    (d / mf.DECODER).write_bytes(b"corrupt")
    _fetch(d, hub)
    _all_there(d)


def test_error_page_is_caught_by_the_hash_and_downloaded_again(tmp_path, hub):
    hub.fault(mf.DECODER, "html")
    _, messages = _fetch(tmp_path / "m", hub)
    _all_there(tmp_path / "m")
    assert len(hub.gets(mf.DECODER)) == 2
    assert any("retrying" in m and "sha256 mismatch" in m for m in messages)


def test_vocabulary_download_resumes_a_partial_file(tmp_path, hub):
    d = tmp_path / "m"
    d.mkdir()
    (d / (mf.VOCAB_NAME + ".part")).write_bytes(FAKE[mf.VOCAB_NAME][:1000])
    _fetch(d, hub)
    _all_there(d)
    assert hub.gets(mf.VOCAB_NAME) == [("bytes=1000-", 206)]


def test_whole_part_file_is_used_without_a_request(tmp_path, hub):
    d = tmp_path / "m"
    d.mkdir()
    (d / (mf.VOCAB_NAME + ".part")).write_bytes(FAKE[mf.VOCAB_NAME])
    _fetch(d, hub)
    _all_there(d)
    assert hub.gets(mf.VOCAB_NAME) == []


def test_persistent_hash_mismatch_is_a_model_error(tmp_path, hub):
    bad = tuple(mf.ModelFile(f.name, f.url, "0" * 64 if f.name == mf.DECODER else f.sha256, f.licence, f.repo,
                             f.revision) for f in fake_manifest(hub.url))
    d = tmp_path / "m"
    with pytest.raises(ModelError) as info:
        mf.fetch(d, progress=False, retries=2, endpoint=hub.url, files=bad, backoff=0.0, cache_dir=tmp_path / "c",
                 echo=lambda m: None)
    message = str(info.value)
    assert "sam3_decoder.onnx" in message and "sha256 mismatch" in message and "3 attempt" in message
    assert f"sam3tiles model fetch --dir {d}" in message
    assert len(hub.gets(mf.DECODER)) == 3
    assert not (d / mf.DECODER).exists()


def test_missing_file_on_the_hub_fails_fast(tmp_path, hub):
    del hub.files[mf.DECODER]
    with pytest.raises(ModelError, match="could not download sam3_decoder.onnx") as info:
        _fetch(tmp_path / "m", hub, retries=5)
    assert REPO in str(info.value) and hub.gets(mf.DECODER) == []
    assert sum(n == mf.DECODER for _, n, *_ in hub.log) == 1  # one HEAD, no retries


def test_hf_endpoint_and_token_from_the_environment(tmp_path, hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_testtoken123")
    _fetch(tmp_path / "m", hub, endpoint=None)
    _all_there(tmp_path / "m")
    auth = {a for m, n, r, s, a in hub.log if n != mf.VOCAB_NAME}
    assert auth == {"Bearer hf_testtoken123"}
    assert {a for m, n, r, s, a in hub.log if n == mf.VOCAB_NAME} == {None}  # no token to other hosts


def test_unwritable_directory_is_a_model_error(tmp_path, hub):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ModelError, match="cannot write to the model directory"):
        _fetch(blocker / "model", hub)


# ------------------------------------------------------------------------------------------------
# the pinned manifest, directories


def test_manifest_is_the_release_osam_pins():
    sam3 = pytest.importorskip("osam._models.sam3._models")
    blobs = []
    for blob in sam3.Sam3._blobs.values():
        blobs.append(blob)
        blobs.extend(blob.attachments or [])
    pinned = {b.url.rsplit("/", 1)[1]: (b.url, b.hash.removeprefix("sha256:")) for b in blobs}
    ours = {f.name: (f.url, f.sha256) for f in mf.MANIFEST if f.name != mf.VOCAB_NAME}
    assert ours == pinned


def test_vocab_hash_is_the_one_osam_ships():
    assert mf.sha256_file(mf._osam_vocab()) == mf.VOCAB_SHA256
    vocab = next(f for f in mf.MANIFEST if f.name == mf.VOCAB_NAME)
    assert vocab.url == "https://github.com/openai/CLIP/raw/main/clip/bpe_simple_vocab_16e6.txt.gz"


def test_model_dir_resolution(tmp_path, monkeypatch):
    default = mf.default_model_dir()
    assert default.parts[-2:] == ("sam3tiles", "sam3-onnx-v0.3.0")
    assert mf.resolve_model_dir() == default
    monkeypatch.setenv(mf.MODEL_DIR_ENV, str(tmp_path / "env"))
    assert mf.resolve_model_dir() == tmp_path / "env"
    assert mf.resolve_model_dir(tmp_path / "explicit") == tmp_path / "explicit"


def test_require_model_lists_missing_files_and_the_command(tmp_path):
    d = tmp_path / "my models"
    with pytest.raises(ModelNotFoundError) as info:
        mf.require_model(d)
    assert f"sam3tiles model fetch --dir '{d}'" in str(info.value) and "does not exist" in str(info.value)
    build_contract_models(d)
    (d / mf.DECODER).unlink()
    with pytest.raises(ModelNotFoundError, match="lacks sam3_decoder.onnx") as info:
        mf.require_model(d)
    assert info.value.exit_code == EXIT_MODEL
    build_contract_models(d)
    assert mf.require_model(d) == d


# ------------------------------------------------------------------------------------------------
# verify and info


def test_verify_reports_missing_mismatched_and_partial(tmp_path, hub):
    _fetch(tmp_path, hub)
    report = mf.verify(tmp_path, fake_manifest(hub.url))
    assert report.ok and [f.size for f in report.files] == [len(FAKE[f.name]) for f in fake_manifest(hub.url)]
    assert "all files present, sha256 ok" in report.format()
    (tmp_path / mf.DECODER).write_bytes(b"oops")
    (tmp_path / BIG).unlink()
    (tmp_path / (BIG + ".part")).write_bytes(b"12345")
    report = mf.verify(tmp_path, fake_manifest(hub.url))
    assert not report.ok
    assert report.missing == [BIG] and report.mismatched == [mf.DECODER]
    text = report.format()
    assert "partial download: 5 B" in text and f"fix: sam3tiles model fetch --dir {tmp_path}" in text
    assert hashlib.sha256(b"oops").hexdigest() in text


def test_verify_accepts_the_vocabulary_from_osam(tmp_path, hub):
    _fetch(tmp_path, hub)
    (tmp_path / mf.VOCAB_NAME).unlink()
    files = tuple(mf.ModelFile(f.name, f.url, mf.VOCAB_SHA256 if f.name == mf.VOCAB_NAME else f.sha256)
                  for f in fake_manifest(hub.url))
    report = mf.verify(tmp_path, files)
    assert report.ok
    vocab = next(f for f in report.files if f.name == mf.VOCAB_NAME)
    assert vocab.location is not None and "osam" in str(vocab.location)
    assert "not in the directory; runs use" in report.format()


@pytest.mark.parametrize("slots", [1, 16])
def test_info_describes_each_graph_and_the_layout(tmp_path, slots):
    d = build_contract_models(tmp_path, box_slots=slots, with_point_decoder=slots == 16)
    result = ml.info(d)
    assert result.box_slots == slots and not result.differences and not result.missing
    text = result.format()
    assert f"box_coords float32 [{slots},1,4]" in text and f"box_masks bool [1,{slots}]" in text
    assert "image uint8 [3,1008,1008]" in text and "masks float32 [N,1,288,288]" in text
    assert "text_attention_mask bool [1,32]" in text and "opset ai.onnx 21" in text
    assert "contract: every graph fits" in text
    if slots == 1:
        assert result.layout == "v0.3.0 layout: 1 box slot"
    else:
        assert result.layout.startswith("16-slot layout") and "point decoder: clicks usable" in result.layout


def test_read_graph_io_agrees_with_onnx(tmp_path):
    d = build_contract_models(tmp_path, box_slots=16)
    for name in (mf.IMAGE_ENCODER, mf.LANGUAGE_ENCODER, mf.DECODER):
        ours = mc.read_graph_io(d / name)
        proto = onnx.load(str(d / name), load_external_data=False)

        def spec(vi):
            t = vi.type.tensor_type
            dims = tuple(x.dim_value if x.HasField("dim_value") else x.dim_param for x in t.shape.dim)
            return mc.TensorSpec(vi.name, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
                                 if t.elem_type != TensorProto.BOOL else "bool", dims)

        assert ours.inputs == [spec(v) for v in proto.graph.input]
        assert ours.outputs == [spec(v) for v in proto.graph.output]
        assert ours.opsets == {"ai.onnx": 21} and ours.ir_version == proto.ir_version


def test_read_graph_io_skips_initializers_listed_as_inputs(tmp_path):
    w = onnx.numpy_helper.from_array(np.ones(3, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])], initializer=[w])
    onnx.save(helper.make_model(graph), str(tmp_path / "g.onnx"))
    io = mc.read_graph_io(tmp_path / "g.onnx")
    assert [t.name for t in io.inputs] == ["x"] and io.outputs == [mc.TensorSpec("y", "float32", ("n",))]


def test_read_graph_io_on_a_truncated_file(tmp_path):
    d = build_contract_models(tmp_path)
    data = (d / mf.DECODER).read_bytes()
    (d / mf.DECODER).write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelError, match="sam3tiles model fetch"):
        mc.read_graph_io(d / mf.DECODER)


# ------------------------------------------------------------------------------------------------
# the CLI


@pytest.fixture
def fake_files(monkeypatch, hub):
    monkeypatch.setattr(mf, "MANIFEST", fake_manifest(hub.url))


def test_cli_fetch_verify(tmp_path, hub, fake_files):
    runner = CliRunner()
    d = tmp_path / "m"
    result = runner.invoke(model_cli, ["fetch", "--dir", str(d), "--endpoint", hub.url,
                                       "--cache-dir", str(tmp_path / "c"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(d)
    assert "NOTICE" in result.stderr and mf.SAM_LICENSE_URL in result.stderr
    _all_there(d)
    result = runner.invoke(model_cli, ["verify", str(d)])
    assert result.exit_code == 0 and "all files present, sha256 ok" in result.stdout

    (d / mf.DECODER).write_bytes(b"bad")
    result = runner.invoke(model_cli, ["verify", str(d)])
    assert result.exit_code == EXIT_MODEL
    assert result.stderr.startswith("Error: ") and f"sam3tiles model fetch --dir {d}" in result.stderr
    assert "Traceback" not in result.output

    result = runner.invoke(model_cli, ["verify", str(tmp_path / "empty")])
    assert result.exit_code == EXIT_MODEL and "missing" in result.stderr


def test_cli_verify_uses_the_environment_directory(tmp_path, hub, fake_files, monkeypatch):
    _fetch(tmp_path, hub)
    monkeypatch.setenv(mf.MODEL_DIR_ENV, str(tmp_path))
    result = CliRunner().invoke(model_cli, ["verify"])
    assert result.exit_code == 0 and str(tmp_path) in result.stdout


def test_cli_fetch_failure_exit_code(tmp_path, hub, fake_files):
    del hub.files[mf.DECODER]
    result = CliRunner().invoke(model_cli, ["fetch", "--dir", str(tmp_path), "--endpoint", hub.url,
                                            "--cache-dir", str(tmp_path / "c"), "--no-progress", "--retries", "0"])
    assert result.exit_code == EXIT_MODEL
    assert "Error: could not download sam3_decoder.onnx" in result.stderr and "Traceback" not in result.output


def test_cli_info(tmp_path):
    runner = CliRunner()
    d = build_contract_models(tmp_path / "m", box_slots=16)
    result = runner.invoke(model_cli, ["info", str(d)])
    assert result.exit_code == 0, result.output
    assert "16-slot layout" in result.stdout and "box_coords float32 [16,1,4]" in result.stdout
    result = runner.invoke(model_cli, ["info", str(tmp_path / "nothing")])
    assert result.exit_code == EXIT_MODEL and result.stderr.startswith("Error: no SAM 3 graph")
    os.remove(d / mf.DECODER)
    result = runner.invoke(model_cli, ["info", str(d)])
    assert result.exit_code == EXIT_MODEL and "sam3_decoder.onnx: missing" in result.stdout
    assert "Error: " in result.stderr and "sam3tiles model fetch --dir" in result.stderr


def test_cli_help_lists_the_commands():
    result = CliRunner().invoke(model_cli, ["--help"])
    assert result.exit_code == 0
    for command in ("fetch", "verify", "info"):
        assert command in result.stdout
