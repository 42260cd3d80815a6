"""The `sam3tiles` click group; registered as a rasterio plugin too (`rio sam3tiles ...`)."""

from __future__ import annotations

import click

from ..version import __version__
from ..wording import speaking
from .options import configure_logging, quiet_opt, verbose_opt


@click.group(name="sam3tiles", context_settings={"help_option_names": ["-h", "--help"]})
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
    ctx.with_resource(speaking("cli"))  # log lines and report notes name flags (`wording.spoken`)


def _register() -> None:
    from .demo import demo
    from .evaluate import evaluate
    from .model import model
    from .plan import plan
    from .qgis import qgis
    from .run import run
    from .segment import segment

    for cmd in (segment, plan, evaluate, demo, model, run, qgis):
        cli.add_command(cmd)


_register()
