"""SAM 3 ONNX model files: where they live, how to download and check them, and the graph contract.

The model directory defaults to ``<user cache>/sam3tiles/sam3-onnx-v0.3.0`` and is overridden by the
environment variable ``SAM3TILES_MODEL_DIR`` or an explicit directory. Files are downloaded only by
``sam3tiles model fetch`` (`fetch`); a run never downloads anything.

Pinned release (the one osam 0.4.0 to 0.8.1 runs): Hugging Face ``wkentaro/sam3-onnx-models-v0.3.0`` at
revision ``895f3980b24a88249898cbe5a44571b15dec2a7f``, about 3.4 GB. The weights are under Meta's SAM
License; ``fetch`` writes a notice (``LICENSE-SAM.txt``) beside them. The CLIP vocabulary is OpenAI's
(MIT). Downloads go through huggingface_hub (see `fetch`): a mirror is ``$HF_ENDPOINT`` (this replaces
the former ``SAM3TILES_MODEL_URL``); an offline copy is a directory given to ``--model`` or
``$SAM3TILES_MODEL_DIR`` and checked with ``sam3tiles model verify``.

The graph contract lives in `contract`; the CLIP vocabulary lookup (`find_vocab`) is here because the
vocabulary is one of the model files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from ..errors import ModelError, ModelNotFoundError
from ..wording import opt

MODEL_VERSION = "v0.3.0"
MODEL_DIR_ENV = "SAM3TILES_MODEL_DIR"
HF_ENDPOINT_ENV = "HF_ENDPOINT"
VOCAB_ENV = "SAM3TILES_VOCAB"
HF_REPO = "wkentaro/sam3-onnx-models-v0.3.0"
HF_REVISION = "895f3980b24a88249898cbe5a44571b15dec2a7f"
HF_BASE_URL = f"https://huggingface.co/{HF_REPO}/resolve/{HF_REVISION}"

IMAGE_ENCODER = "sam3_image_encoder.onnx"
LANGUAGE_ENCODER = "sam3_language_encoder.onnx"
DECODER = "sam3_decoder.onnx"
POINT_DECODER = "sam3_point_decoder.onnx"
VOCAB_NAME = "bpe_simple_vocab_16e6.txt.gz"
LICENSE_NOTICE = "LICENSE-SAM.txt"

SAM_LICENSE_NAME = "SAM License"
SAM_LICENSE_URL = "https://github.com/facebookresearch/sam3/blob/main/LICENSE"
CLIP_LICENSE_URL = "https://github.com/openai/CLIP/blob/main/LICENSE"
# OpenAI CLIP's vocabulary, the very file osam ships as osam/_models/yoloworld/clip/ (MIT). "main" is a
# branch, not a revision: the pinned sha256 below catches any change.
VOCAB_URL = "https://github.com/openai/CLIP/raw/main/clip/bpe_simple_vocab_16e6.txt.gz"
VOCAB_SHA256 = "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a"

_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelFile:
    """One file of the model directory: name, where to get it, its pinned sha256, its licence."""

    name: str
    url: str  # where it lives (for hub files, the pinned revision's resolve URL on huggingface.co)
    sha256: str
    licence: str = SAM_LICENSE_NAME
    repo: str | None = None  # a Hugging Face model repo: downloaded through huggingface_hub
    revision: str | None = None


def _hf(name: str, sha256: str) -> ModelFile:
    return ModelFile(name, f"{HF_BASE_URL}/{name}", sha256, repo=HF_REPO, revision=HF_REVISION)


#: Every file of the pinned v0.3.0 model directory (sha256 from the release, see the contract).
MANIFEST: tuple[ModelFile, ...] = (
    _hf(IMAGE_ENCODER, "c6f3769e9d42573806c34b663d6100b3827a4c0ecba6f45dbf39b8f3906be725"),
    _hf(IMAGE_ENCODER + ".data", "03bd50b0703e2b04e2193ca831b7f9d5ecf40bc5287cc59b1970f56ab800c995"),
    _hf(LANGUAGE_ENCODER, "b3b465935c9bf4cf5efd950589741f3da5eec9e9bfe459576989cbe565331b53"),
    _hf(LANGUAGE_ENCODER + ".data", "1b03dabc657c1f2887d1b8ce2a3537467d4c033ea1f8c8be141fbca55e4b95f7"),
    _hf(DECODER, "bbc216dbf3de4742f692c2a0a0fd215ea8957956002a05f28150040a88b5dc1a"),
    ModelFile(VOCAB_NAME, VOCAB_URL, VOCAB_SHA256, licence="MIT (OpenAI CLIP)"),
)
#: Files a runtime cannot start without (the vocabulary may also come from elsewhere, see tokenizer).
REQUIRED_GRAPH_FILES = (IMAGE_ENCODER, IMAGE_ENCODER + ".data", LANGUAGE_ENCODER, LANGUAGE_ENCODER + ".data",
                        DECODER)
#: Other names exports give the three graphs (greenjava's C++ exports); found only where the seed's name is absent.
#: The layout is told by the graphs themselves (`model.layouts`): these names only find them.
GRAPH_ALIASES = {IMAGE_ENCODER: ("vision-encoder.onnx", "vision-encoder-fp16.onnx", "vision_encoder.onnx"),
                 LANGUAGE_ENCODER: ("text-encoder.onnx", "text-encoder-fp16.onnx", "text_encoder.onnx"),
                 DECODER: ("decoder.onnx", "decoder-fp16.onnx")}


def graph_path(directory: str | os.PathLike[str], name: str) -> Path:
    """The file of graph `name` (the seed's file name) in `directory`: that name, else the first of its
    `GRAPH_ALIASES` there, else the seed's name (missing)."""
    d = Path(directory)
    if (d / name).is_file():
        return d / name
    return next((d / a for a in GRAPH_ALIASES.get(name, ()) if (d / a).is_file()), d / name)


def _missing_graph_files(d: Path) -> list[str]:
    """`REQUIRED_GRAPH_FILES` not in `d`; a graph found under an alias needs no ``.data`` beside it (an export
    with its weights inside; one whose weights are missing fails to load, naming the file)."""
    out = []
    for name in REQUIRED_GRAPH_FILES:
        graph = name.removesuffix(".data")
        if name.endswith(".data") and graph_path(d, graph).name != graph:
            continue
        if not (graph_path(d, name) if name == graph else d / name).is_file():
            out.append(name)
    return out


# --------------------------------------------------------------------------------------------------
# directories


def default_model_dir() -> Path:
    """``<user cache dir>/sam3tiles/sam3-onnx-v0.3.0``."""
    return Path(platformdirs.user_cache_dir("sam3tiles")) / f"sam3-onnx-{MODEL_VERSION}"


def resolve_model_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """The model directory: `directory` if given, else ``$SAM3TILES_MODEL_DIR``, else the default."""
    if directory is not None and str(directory) != "":
        return Path(directory).expanduser()
    env = os.environ.get(MODEL_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return default_model_dir()


def fetch_command(directory: str | os.PathLike[str]) -> str:
    """The exact command that downloads the model into `directory`."""
    return f"sam3tiles model fetch --dir {shlex.quote(str(directory))}"


def require_model(directory: str | os.PathLike[str] | None = None) -> Path:
    """The model directory, after checking every file a run needs is there (never downloads).

    Raises ModelNotFoundError naming each missing file and the fetch command.
    """
    d = resolve_model_dir(directory)
    missing = _missing_graph_files(d)
    try:
        find_vocab(d)
    except ModelNotFoundError:
        missing.append(VOCAB_NAME)
    if missing:
        where = "does not exist" if not d.exists() else f"lacks {', '.join(missing)}"
        raise ModelNotFoundError(
            f"the SAM 3 model directory {d} {where}. sam3tiles never downloads during a run; download "
            f"the model once (about 3.4 GB) with:\n    {fetch_command(d)}\n"
            f"or point {opt('model')} (or ${MODEL_DIR_ENV}) at a directory that holds it")
    return d


# --------------------------------------------------------------------------------------------------
# download


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


LICENSE_TEXT = f"""\
SAM 3 model weights: licence notice (written by sam3tiles model fetch)

The files sam3_image_encoder.onnx(.data), sam3_language_encoder.onnx(.data) and sam3_decoder.onnx in this
directory are an ONNX export of Meta's SAM 3 weights (Hugging Face {HF_REPO},
revision {HF_REVISION}). The weights are licensed under Meta's {SAM_LICENSE_NAME}:

    {SAM_LICENSE_URL}

You must read and accept the {SAM_LICENSE_NAME} before using these files. Whoever redistributes them must
ship that licence with them. sam3tiles itself is MIT licensed and does not include the weights.

{VOCAB_NAME} is OpenAI CLIP's BPE vocabulary, MIT License, Copyright (c) 2021 OpenAI:
    {CLIP_LICENSE_URL}
"""


def _default_echo(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _bar_class(progress: bool):
    """tqdm for huggingface_hub's progress bars: its own, or one that never draws."""

    if progress:
        return None
    # tqdm.std, not tqdm.auto (it warns at import in a kernel without ipywidgets): this bar never draws
    from tqdm.std import tqdm

    class _Quiet(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return _Quiet


def _endpoint(endpoint: str | None) -> str | None:
    """The hub to download from: `endpoint`, else ``$HF_ENDPOINT`` read now (huggingface_hub reads it once
    at import), else huggingface_hub's default."""
    return (endpoint or os.environ.get(HF_ENDPOINT_ENV) or "").rstrip("/") or None


def _get(f: ModelFile, d: Path, *, endpoint: str | None, token: str | None, cache_dir: str | None,
         progress: bool, force: bool) -> Path:
    """One download attempt: a hub file into the Hugging Face cache (shared with other tools; resumable),
    any other file into ``<dir>/<name>.part`` (resumed from its size). Returns the downloaded file."""
    if f.repo is not None:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(f.repo, f.name, revision=f.revision, endpoint=_endpoint(endpoint), token=token,
                                    cache_dir=cache_dir, force_download=force, tqdm_class=_bar_class(progress)))
    from huggingface_hub.file_download import http_get

    part = d / (f.name + ".part")
    if force:
        part.unlink(missing_ok=True)
    elif part.is_file() and sha256_file(part) == f.sha256:
        return part  # a whole part left by a run killed before its rename (a resumed request would get 416)
    with open(part, "ab") as fh:
        http_get(f.url, fh, resume_size=fh.tell(), displayed_filename=f.name, tqdm_class=_bar_class(progress))
    return part


def _forget(f: ModelFile, got: Path) -> None:
    """Drop a download whose hash is wrong (the cached blob too), so the next try fetches it again."""
    real = Path(os.path.realpath(got))
    for q in {got, real}:
        try:
            q.unlink()
        except OSError:
            pass


def _place(got: Path, dest: Path) -> None:
    """Put a verified download at `dest`: a hard link to the cached blob (no second copy; survives a
    cache clean-up), else a copy; renamed into place so `dest` is never half there."""
    real = Path(os.path.realpath(got))
    if real.parent == dest.parent and real.name == dest.name + ".part":
        os.replace(real, dest)
        return
    tmp = dest.with_name(dest.name + ".part")
    tmp.unlink(missing_ok=True)
    try:
        os.link(real, tmp)
    except OSError:
        shutil.copyfile(real, tmp)
    os.replace(tmp, dest)


def _why(exc: BaseException) -> tuple[str, bool]:
    """(what went wrong in words, whether another try cannot help)."""
    from huggingface_hub import errors as hf

    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    permanent = (hf.RepositoryNotFoundError, hf.RevisionNotFoundError, hf.EntryNotFoundError, hf.GatedRepoError,
                 hf.LocalEntryNotFoundError, hf.DisabledRepoError)
    if isinstance(exc, permanent):
        return text, True
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return (f"HTTP {status}: {text}" if status else text), status in (401, 403, 404, 410)


def _download(f: ModelFile, d: Path, *, retries: int, backoff: float, echo: Callable[[str], None], **kw) -> None:
    last, attempt = "", 0
    for attempt in range(1 + max(0, retries)):
        if attempt:
            delay = backoff * 2 ** (attempt - 1)
            echo(f"retrying {f.name} in {delay:.1f} s ({last})")
            time.sleep(delay)
        try:
            got = _get(f, d, force=attempt > 0 and last.startswith("sha256"), **kw)
        except Exception as exc:  # noqa: BLE001 - huggingface_hub and httpx raise many kinds
            last, permanent = _why(exc)
            if permanent:
                break
            continue
        digest = sha256_file(got)
        if digest == f.sha256:
            _place(got, d / f.name)
            return
        last = (f"sha256 mismatch: got {digest[:16]}..., expected {f.sha256[:16]}... (an error page, a wrong "
                f"mirror or a corrupt transfer)")
        _forget(f, got)
    where = f"{f.repo} at revision {f.revision} from {_endpoint(kw.get('endpoint')) or 'huggingface.co'}" \
        if f.repo else f.url
    raise ModelError(
        f"could not download {f.name} ({where}) after {attempt + 1} attempt(s): {last}. Check the network, "
        f"the mirror (${HF_ENDPOINT_ENV}), the token ($HF_TOKEN) or offline mode ($HF_HUB_OFFLINE), then run "
        f"`{fetch_command(d)}` again; finished files are kept and a partial download resumes")


def fetch(directory: str | os.PathLike[str] | None = None, progress: bool = True, retries: int = 3, *,
          endpoint: str | None = None, token: str | None = None, cache_dir: str | os.PathLike | None = None,
          files: Sequence[ModelFile] | None = None, backoff: float = 2.0,
          echo: Callable[[str], None] | None = None) -> Path:
    """Download every model file into the model directory, verified by sha256; returns the directory.

    The SAM 3 graphs come from the pinned Hugging Face revision through huggingface_hub: its cache
    (``$HF_HOME``, ``$HF_HUB_CACHE`` or `cache_dir`) is shared with other tools and resumes partial
    downloads; a mirror is ``$HF_ENDPOINT`` (or `endpoint`); a token is ``$HF_TOKEN`` or the stored login
    (or `token`). Each file is checked against its pinned sha256 (a mismatch drops it and retries, up to
    `retries` times with exponential backoff) and then hard-linked (else copied) into the directory.
    Files already present with the right hash are kept. Writes ``LICENSE-SAM.txt`` and prints the SAM
    License notice.
    """
    echo = echo or _default_echo
    d = resolve_model_dir(directory)
    entries = tuple(files) if files is not None else MANIFEST
    try:
        d.mkdir(parents=True, exist_ok=True)
        (d / LICENSE_NOTICE).write_text(LICENSE_TEXT, encoding="utf-8")
    except OSError as exc:
        raise ModelError(f"cannot write to the model directory {d}: {exc}. Choose a writable directory "
                         f"with --dir or ${MODEL_DIR_ENV}") from exc
    echo(f"NOTICE: the SAM 3 weights are licensed under Meta's {SAM_LICENSE_NAME} ({SAM_LICENSE_URL}); "
         f"by downloading and using them you accept it. See {d / LICENSE_NOTICE}.")
    for f in entries:
        dest = d / f.name
        if dest.is_file():
            if sha256_file(dest) == f.sha256:
                echo(f"{f.name}: present, sha256 ok")
                continue
            echo(f"{f.name}: present but its sha256 does not match, downloading it again")
            dest.unlink()
        echo(f"{f.name}: downloading " + (f"from {f.repo}" if f.repo else f"from {f.url}"))
        _download(f, d, retries=retries, backoff=backoff, echo=echo, endpoint=endpoint, token=token,
                  cache_dir=str(cache_dir) if cache_dir else None, progress=progress)
        echo(f"{f.name}: done, sha256 ok")
    echo(f"model ready in {d}")
    return d


# --------------------------------------------------------------------------------------------------
# verify


@dataclass
class FileCheck:
    name: str
    expected_sha256: str
    size: int | None = None
    sha256: str | None = None
    partial_bytes: int | None = None  # size of a leftover <name>.part
    location: Path | None = None  # set when the file checked lies outside the model directory

    @property
    def status(self) -> str:
        if self.sha256 is None:
            return "missing"
        return "ok" if self.sha256 == self.expected_sha256 else "mismatch"


@dataclass
class VerifyReport:
    directory: Path
    files: list[FileCheck] = field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        return [f.name for f in self.files if f.status == "missing"]

    @property
    def mismatched(self) -> list[str]:
        return [f.name for f in self.files if f.status == "mismatch"]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.mismatched

    def format(self) -> str:
        lines = [f"model directory: {self.directory}"]
        for f in self.files:
            size = "-" if f.size is None else f"{f.size:,} B"
            extra = f" (partial download: {f.partial_bytes:,} B)" if f.partial_bytes else ""
            sha = f.sha256 or "-"
            if f.location is not None:
                extra += f" (not in the directory; runs use {f.location})"
            lines.append(f"  {f.status:8s} {f.name:36s} {size:>18s}  sha256 {sha}{extra}")
            if f.status == "mismatch":
                lines.append(f"  {'':8s} {'':36s} {'':>18s}  expected {f.expected_sha256}")
        if self.ok:
            lines.append("all files present, sha256 ok")
        else:
            if self.missing:
                lines.append(f"missing: {', '.join(self.missing)}")
            if self.mismatched:
                lines.append(f"sha256 mismatch: {', '.join(self.mismatched)}")
            lines.append(f"fix: {fetch_command(self.directory)}")
        return "\n".join(lines)


def verify(directory: str | os.PathLike[str] | None = None,
           files: Sequence[ModelFile] | None = None) -> VerifyReport:
    """Size and sha256 of every manifest file in the model directory (hashes the whole 3.4 GB)."""
    d = resolve_model_dir(directory)
    report = VerifyReport(d)
    for f in files if files is not None else MANIFEST:
        check = FileCheck(f.name, f.sha256)
        path = d / f.name
        if not path.is_file() and f.name == VOCAB_NAME:  # the tokenizer may find it elsewhere
            try:
                check.location = find_vocab(d)
            except ModelNotFoundError:
                pass
        source = check.location or path
        if source.is_file():
            check.size = source.stat().st_size
            check.sha256 = sha256_file(source)
        part = path.with_name(path.name + ".part")
        if part.is_file():
            check.partial_bytes = part.stat().st_size
        report.files.append(check)
    return report


def _osam_vocab() -> Path | None:
    """The vocabulary file inside an installed osam package, found without importing osam."""
    try:
        spec = importlib.util.find_spec("osam")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / "_models" / "yoloworld" / "clip" / VOCAB_NAME
        if path.is_file():
            return path
    return None


def find_vocab(model_dir: str | os.PathLike[str] | None = None) -> Path:
    """The vocabulary file to use: ``$SAM3TILES_VOCAB``, the model directory, then osam's copy."""
    env = os.environ.get(VOCAB_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise ModelNotFoundError(
                f"{VOCAB_ENV} points to {path}, which is not a file: fix or unset {VOCAB_ENV}, or run "
                f"`sam3tiles model fetch` to download {VOCAB_NAME} into the model directory")
        return path
    directory = resolve_model_dir(model_dir)
    path = directory / VOCAB_NAME
    if path.is_file():
        return path
    shipped = _osam_vocab()
    if shipped is not None:
        return shipped
    raise ModelNotFoundError(
        f"the CLIP vocabulary {VOCAB_NAME} is not in {directory}: run `sam3tiles model fetch --dir "
        f"{directory}` to download it (or set {VOCAB_ENV} to the file's path)")


def files_fingerprint(model_dir: str | os.PathLike[str] | None) -> str:
    """"onnx:" + a hash of the names, sizes and the first and last MiB of every graph and weight file in
    `model_dir`: cheap on 3.4 GB, and any re-export, new release or corruption changes it (a full sha256 is
    `sam3tiles model verify`'s job). The model's checkpoint identity, and the key of its TensorRT engines."""
    d = Path(model_dir) if model_dir else None
    if d is None or not d.is_dir():
        return "onnx:unknown"
    h = hashlib.sha256()
    for f in sorted([*d.glob("*.onnx"), *d.glob("*.onnx.data")]):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            if size > 2 << 20:
                fh.seek(size - (1 << 20))
                h.update(fh.read(1 << 20))
    return "onnx:" + h.hexdigest()[:16]
