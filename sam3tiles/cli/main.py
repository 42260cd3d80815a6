"""The `sam3tiles` click group; registered as a rasterio plugin too (`rio sam3tiles ...`)."""

from __future__ import annotations

import click

from .. import __version__
from .options import configure_logging, quiet_opt, verbose_opt


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@verbose_opt
@quiet_opt
@click.version_option(__version__, prog_name="sam3tiles")
@click.pass_context
def cli(ctx, verbose, quiet):
    """SAM 3 on images far larger than its 1008x1008 view: tiles, seam-aware merging, polygons in the
    source CRS."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    ctx.obj["quiet"] = quiet
    configure_logging(verbose, quiet)


def _register() -> None:
    from .demo import demo
    from .evaluate import evaluate
    from .plan import plan
    from .segment import segment

    for cmd in (segment, plan, evaluate, demo):
        cli.add_command(cmd)
    try:
        from .model import model
    except ImportError:  # pragma: no cover - the model commands arrive with the ONNX backend
        pass
    else:
        cli.add_command(model)
    try:
        from .run import run
    except ImportError:  # pragma: no cover
        pass
    else:
        cli.add_command(run)


_register()
