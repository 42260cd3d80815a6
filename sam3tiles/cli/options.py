"""Reusable click options and the error handling every command shares."""

from __future__ import annotations

import functools
import logging
import signal
import sys

import click

from ..errors import EXIT_INTERNAL, EXIT_MODEL, Sam3TilesError
from ..options import fields as registry_fields
from ..options import value_type


def configure_logging(verbose: int, quiet: int) -> None:
    import warnings

    from rasterio.errors import NotGeoreferencedWarning

    # plain images (PNG, microscopy) are used in pixel space on purpose: not worth a warning
    warnings.filterwarnings("ignore", category=NotGeoreferencedWarning)
    level = logging.WARNING - 10 * verbose + 10 * quiet
    logging.basicConfig(level=max(logging.DEBUG, level), format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger().setLevel(max(logging.DEBUG, level))  # again after the subcommand's own -v/-q
    for noisy in ("distributed", "rasterio", "fiona", "pyogrio", "tornado", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, level) if verbose < 2 else logging.DEBUG)
    # a failed task is retried, then reported by the pipeline (one line per tile); the worker's own
    # "Compute Failed" record, with its traceback text, shows with -v only
    logging.getLogger("distributed.worker").setLevel(logging.CRITICAL if verbose < 1 else logging.NOTSET)


def handle_errors(fn):
    """Sam3TilesError -> 'Error: message', its exit code, no traceback. Anything else -> exit 1, with the
    traceback only under -vv."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        verbose, quiet = verbosity(ctx)
        if ctx.params.get("verbose") or ctx.params.get("quiet"):  # given after the subcommand: same meaning
            configure_logging(verbose, quiet)
        previous = _catch_sigterm()
        try:
            return fn(*args, **kwargs)
        except Sam3TilesError as e:  # options named by flag, or by job key where a job file set them (`wording`)
            click.echo(f"Error: {e.worded(e.words or 'cli')}", err=True)
            ctx.exit(e.exit_code)
        except Terminated:
            click.echo("Terminated (SIGTERM): rerun the same command to resume from the finished tiles.", err=True)
            ctx.exit(143)
        except KeyboardInterrupt:
            click.echo("Interrupted: rerun the same command to resume from the finished tiles.", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except MemoryError:
            click.echo("Error: out of memory (or the address-space limit, ulimit -v, reached): lower --workers or "
                       "raise the limit, or run on a machine with more memory; rerun the same command to resume "
                       "from the finished tiles", err=True)
            ctx.exit(EXIT_MODEL)
        except Exception as e:  # noqa: BLE001 - the last line of defence for a clean exit
            if verbose >= 2:
                raise
            click.echo(f"Error: internal error ({type(e).__name__}: {e}). This is a bug in sam3tiles: rerun "
                       "with -vv for the traceback and report it.", err=True)
            ctx.exit(EXIT_INTERNAL)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    return wrapper


def verbosity(ctx) -> tuple[int, int]:
    """(-v count, -q count) given before and after the subcommand together: they mean the same there."""
    root = ctx.find_root()
    v = q = 0
    for c in {id(root): root, id(ctx): ctx}.values():
        v += c.params.get("verbose") or 0
        q += c.params.get("quiet") or 0
    return v, q


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch system's walltime limit): unwind like Ctrl-C, so locks and temporary files are
    cleaned up and every finished tile stays checkpointed."""


def _raise_terminated(signum, frame):
    raise Terminated()


def _catch_sigterm():
    """Turn SIGTERM into `Terminated` in the main thread; returns the previous handler (None elsewhere)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except (ValueError, OSError):
        return None


verbose_opt = click.option("-v", "--verbose", count=True, help="More logging (-vv: debug and tracebacks).")
quiet_opt = click.option("-q", "--quiet", count=True, help="Less output: no progress bar, no report.")
overwrite_opt = click.option("--overwrite", is_flag=True, help="Replace an existing output.")


def _click_type(kind, d):
    """The click type of an option: its choices, its range (refused while parsing, exit 2, the allowed
    range in click's message) or its plain type."""
    allowed = d.allowed()
    if allowed is not None:
        return click.Choice(list(allowed))
    if d.parse is not None:  # its parser takes the text (`Options` checks the value)
        return click.STRING
    if kind not in (int, float):
        return None
    lo = d.ge if d.ge is not None else d.gt
    if lo is None and d.le is None:
        return kind
    rng = click.IntRange if kind is int else click.FloatRange
    return rng(lo, d.le, min_open=d.gt is not None)


def registry_options(command: str, cls: type | None = None):
    """Decorator: the click options of `command` (segment, plan, run), from the options registry
    (`sam3tiles.options`; `cls`: another Options class, for tests). On `run` a flag overrides the job
    file, so its default is None (the job's)."""
    decls = [(f, d) for f, d in registry_fields(cls) if d.flags and command in d.commands]

    def decorate(fn):
        for f, d in reversed(decls):
            default = None if command == "run" else f.default
            kw = dict(default=default, help=d.help, envvar=d.envvar, metavar=d.metavar)
            kind = value_type(f.name, cls)
            if kind is bool:
                kw.update(is_flag=True)
            else:
                kw.update(type=_click_type(kind, d), show_default=default is not None and default != "")
            fn = click.option(*d.flags, f.name, **kw)(fn)
        return fn

    return decorate
