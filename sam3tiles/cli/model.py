"""``sam3tiles model``: download, check and describe the SAM 3 ONNX model files.

The main CLI adds this group with ``cli.add_command(model)``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..model import files as modelfiles, layouts
from ..errors import ContractError, ModelError, ModelNotFoundError, Sam3TilesError, UsageError
from ..model.providers import DEVICES, PRECISIONS, describe, missing, precision_problem, requested


def _errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Print a sam3tiles error as ``Error: <message>`` on stderr and exit with its code (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Sam3TilesError as err:
            click.echo(f"Error: {err.worded(err.words or 'cli')}", err=True)  # options by flag (`wording`)
            sys.exit(err.exit_code)

    return wrapper


_DIR_HELP = (f"model directory (default: ${modelfiles.MODEL_DIR_ENV}, else "
             f"<user cache>/sam3tiles/sam3-onnx-{modelfiles.MODEL_VERSION})")


@click.group()
def model() -> None:
    """Download, check and describe the SAM 3 ONNX model files (runs never download)."""


@model.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=_DIR_HELP)
@click.option("--endpoint", default=None, metavar="URL",
              help="Hugging Face hub mirror to download from (default: $HF_ENDPOINT, else huggingface.co)")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False),
              help="huggingface_hub cache (default: $HF_HUB_CACHE or $HF_HOME/hub, shared with other tools)")
@click.option("--retries", type=click.IntRange(0, 20), default=3, show_default=True,
              help="extra tries per file after a failed or corrupt download")
@click.option("--progress/--no-progress", default=True, show_default=True, help="show progress bars")
@_errors
def fetch(directory: Path | None, endpoint: str | None, cache_dir: str | None, retries: int, progress: bool) -> None:
    """Download the pinned SAM 3 ONNX files (v0.3.0, about 3.4 GB) and verify their sha256.

    Downloads go through huggingface_hub: its cache is shared with other tools and resumes partial
    downloads; a token comes from $HF_TOKEN or `hf auth login`. Files already in the directory with the
    right hash are kept, so running it again is cheap. The weights are under Meta's SAM License: a notice
    is written beside them.
    """
    d = modelfiles.fetch(directory, progress=progress, retries=retries, endpoint=endpoint, cache_dir=cache_dir,
                         echo=lambda m: click.echo(m, err=True))
    click.echo(str(d))


@model.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@_errors
def verify(directory: Path | None) -> None:
    """Name the layout of DIRECTORY's graphs; check the size and sha256 of every file of the published (seed)
    layout, or for another known layout (samexporter's) that its graphs fit it (no hashes are published for
    those). Exit 4 when a file is missing or wrong, or the graphs fit no known layout."""
    try:
        found = layouts.info(directory)
    except ModelError:  # a graph that cannot be read: the hashes below say which file is wrong
        found = None
    if found is None:
        pass
    elif found.fit is not None and not found.differences and not found.missing:
        click.echo(f"layout: {found.fit.describe()}")
        if found.fit.layout is not layouts.SEED:
            click.echo(f"model directory: {found.directory}\nevery graph fits the {found.fit.layout.title} layout "
                       "(no sha256 is published for it: the graphs' interfaces were checked)")
            return
    elif found.graphs and not found.missing:
        raise ContractError(f"the graphs in {found.directory} fit no known layout ({len(found.differences)} "
                            f"difference(s) from the nearest, {found.fit.layout.title if found.fit else '-'}: "
                            f"{found.differences[0]}): `sam3tiles model info {found.directory}` lists them; "
                            f"known layouts: {layouts.known_layouts()}")
    report = modelfiles.verify(directory)
    click.echo(report.format())
    if not report.ok:
        problems = []
        if report.missing:
            problems.append(f"missing {', '.join(report.missing)}")
        if report.mismatched:
            problems.append(f"sha256 mismatch for {', '.join(report.mismatched)}")
        error = ModelError if report.mismatched else ModelNotFoundError
        raise error(f"the model in {report.directory} is not usable: {'; '.join(problems)}. Fix it "
                             f"with `{modelfiles.fetch_command(report.directory)}`")


@model.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--device", type=click.Choice(DEVICES), default=None,
              help="also load each graph into onnxruntime on this device and show the providers in use")
@click.option("--precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
              help="with --device: fp32 / tf32 (CUDA's TF32 off / on) or fp16 (TensorRT)")
@_errors
def info(directory: Path | None, device: str | None, precision: str) -> None:
    """Show each graph's inputs and outputs (dtype, shape), the layout (box slots, raw or filtered scores,
    precision) or the nearest layout's differences; with
    --device, the onnxruntime providers each graph actually runs on (loading the image encoder takes
    its 3.2 GB)."""
    result = layouts.info(directory)
    click.echo(result.format())
    if device is not None and result.graphs:
        _show_providers(result.directory, list(result.graphs), device, precision)
    if not result.graphs:
        raise ModelNotFoundError(f"no SAM 3 graph in {result.directory}: download the model with "
                             f"`{modelfiles.fetch_command(result.directory)}`")
    if result.missing:
        raise ModelNotFoundError(f"{result.directory} lacks {', '.join(result.missing)}: download the model "
                                 f"with `{modelfiles.fetch_command(result.directory)}`")
    if result.differences:
        raise ContractError(f"{len(result.differences)} contract difference(s) in {result.directory} from the "
                            f"nearest layout (listed above; known: {layouts.known_layouts()}): download the "
                            f"published files again with `{modelfiles.fetch_command(result.directory)}`")



def _show_providers(directory: Path, graphs: list[str], device: str, precision: str) -> None:
    """Each graph in an onnxruntime session for `device` / `precision`: the providers asked for and
    those in use; a graph left on the CPU although a GPU provider was asked for is said loudly."""
    import onnxruntime as ort

    problem = precision_problem(device, precision)
    if problem is not None:
        raise UsageError(problem)
    available = ort.get_available_providers()
    click.echo(f"onnxruntime {ort.__version__} offers: {', '.join(available)}")
    try:
        providers = requested(device, precision, available, directory)
    except LookupError:
        raise ModelError(missing(device, available, ort.__version__)) from None
    click.echo(f"asked for (--device {device} --precision {precision}): {describe(providers)}")
    want = providers[0] if isinstance(providers[0], str) else providers[0][0]
    for name in graphs:
        try:
            used = ort.InferenceSession(str(directory / name), providers=providers).get_providers()
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
            raise ModelError(f"cannot load {directory / name} on --device {device}: {str(exc).splitlines()[0]}")
        line = f"{name}: runs on {', '.join(used)}"
        if used[0] != want:
            line += (f"  <- WARNING: not on {want} (a known fallback of some onnxruntime / CUDA builds for "
                     "opset-21 graphs): expect CPU speed")
        click.echo(line)


@model.command()
@click.option("--model", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=_DIR_HELP)
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
              help="where onnxruntime runs the model")
@click.option("--precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
              help="fp32 / tf32 (CUDA's TF32 off / on) or fp16 (TensorRT)")
@click.option("--threads", type=click.IntRange(0, 1024), default=0, show_default=True,
              help="onnxruntime intra-op threads (0: its default)")
@_errors
def check(directory: Path | None, device: str, precision: str, threads: int) -> None:
    """Run the installed model on the seed article's two scenes and compare with its published figures.

    The first thing to run after `sam3tiles model fetch`. Draws the article's scenes (800x600 and
    1280x720: a noisy gradient with a red circle, a blue rectangle, a green triangle, a yellow ellipse),
    runs the prompts "red circle", "blue rectangle", "green triangle", "yellow ellipse", "visual",
    "shape", "cat", an example box around the circle and, with the point decoder of the four-graph layout, a
    click at each shape's centre, the way the published callers do (the scene
    stretched to 1008x1008), and prints objects found, IoU and score per prompt beside the published
    figures (IoU 0.99 per shape prompt; all four shapes under "visual"; nothing for "shape" or "cat";
    the circle alone for its box). Exit 0 when every prompt finds exactly the published objects at IoU
    >= 0.95; exit 4 naming the prompts that differ otherwise. Two image encodes: seconds on a GPU, about a
    minute on a laptop CPU.
    """
    from ..model import selfcheck
    from ..model.onnx import OnnxRuntime

    problem = precision_problem(device, precision)
    if problem is not None:
        raise UsageError(problem)
    rt = OnnxRuntime(directory, device=device, intra_op_threads=threads, precision=precision)
    click.echo(f"model {rt.model_dir} ({rt.identity}), providers {', '.join(rt.providers)}")
    problem = rt.clicks_problem()
    click.echo("clicks: checked too (the point decoder loads and fits)" if problem is None else
               f"clicks: not checked ({problem.splitlines()[0]})")
    results = selfcheck.run_check(rt)
    click.echo(selfcheck.format_results(results))
    bad = [f"{r.probe.label!r} on {r.scene[0]}x{r.scene[1]}" for r in results if not r.ok]
    if bad:
        raise ModelError(f"{len(bad)} of {len(results)} prompts differ from the published figures: "
                         f"{', '.join(bad)}. Check the files with `sam3tiles model verify` and the providers "
                         "in use (a CUDA/onnxruntime mismatch can change results); tolerance: IoU >= "
                         f"{selfcheck.PUBLISHED_IOU - selfcheck.IOU_TOLERANCE:.2f} and exactly the published "
                         "number of objects")
    click.echo(f"all {len(results)} prompts as published (IoU >= "
               f"{selfcheck.PUBLISHED_IOU - selfcheck.IOU_TOLERANCE:.2f}, object counts exact)")
