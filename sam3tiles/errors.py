"""One flat error hierarchy; each error knows the exit code the CLI returns for it.

Exit codes (documented in the README):
0 done, 1 internal error, 2 usage or job-file error, 3 input data error, 4 model error,
5 finished with failed tiles.
"""

from __future__ import annotations

from .wording import raw, render, speaking

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_MODEL = 4
EXIT_FAILED_TILES = 5


class Sam3TilesError(Exception):
    """Root of every error sam3tiles raises on purpose. The message names the problem and the fix."""

    exit_code = EXIT_INTERNAL
    #: The vocabulary its options are named in (`wording`): None (python: keywords), "cli", "job".
    words: str | None = None

    def __str__(self) -> str:
        return render(raw(self), self.words)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def worded(self, words: str) -> str:
        """The message with its options named in the vocabulary `words` (`wording.WORDS`)."""
        return render(raw(self), words)

    def __reduce__(self):
        # rebuild by calling the class: the default (and tblib's, which Dask uses to ship a worker's error)
        # fails for classes that mix ValueError with OSError, and Dask then hands back a bare Exception
        return (type(self), self.args, self.__dict__ or None)


class worded:
    """Context manager of an entry point: a sam3tiles error raised inside, not yet worded by another,
    names its options in the vocabulary `words` (`wording.WORDS`: "job" in `jobs.run_job`), keeping its
    type and exit code (the same error, re-raised)."""

    def __init__(self, words: str):
        self.words = words

    def __enter__(self):
        self._speaking = speaking(self.words)  # log lines and report notes inside: the same words
        self._speaking.__enter__()
        return self

    def __exit__(self, kind, exc, tb):
        self._speaking.__exit__(None, None, None)
        if isinstance(exc, Sam3TilesError) and exc.words is None:
            exc.words = self.words
        return False


def shippable(fn):
    """For functions that run as Dask tasks: a Sam3TilesError leaves them without its chained causes (GDAL's
    or onnxruntime's exceptions), which Dask may fail to pickle: it would then hand back a bare Exception,
    and the error would lose its type and exit code."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Sam3TilesError as e:
            e.__cause__ = None
            e.__context__ = None
            raise

    return wrapper


class UsageError(Sam3TilesError, ValueError):
    """Bad options, prompts or job files."""

    exit_code = EXIT_USAGE


class JobFileError(UsageError):
    """A job file that does not validate."""


class OutputExistsError(UsageError, FileExistsError):
    """The output exists and overwrite was not asked for."""


class OutputError(UsageError, OSError):
    """The output cannot be written (directory missing or not writable, locked by another run)."""


class InputDataError(Sam3TilesError, ValueError):
    """An input raster or vector that cannot be used as it is."""

    exit_code = EXIT_INPUT


class RasterReadError(InputDataError, OSError):
    """A file that GDAL cannot open or read."""


class BandError(InputDataError):
    """Band selection that does not fit the raster."""


class CRSError(InputDataError):
    """Missing or incompatible coordinate reference systems."""


class ModelError(Sam3TilesError, RuntimeError):
    """Missing, corrupt or incompatible model files, or a model that fails to run."""

    exit_code = EXIT_MODEL


class ModelNotFoundError(ModelError, FileNotFoundError):
    """The model directory lacks a file."""


class WorkerLostError(ModelError):
    """No Dask worker that can run the model is left, and none joined within the worker timeout."""


class ContractError(ModelError):
    """A graph whose inputs or outputs do not match the SAM 3 ONNX contract."""


class PromptError(UsageError):
    """A prompt the model cannot take (empty, too long, unknown to the backend)."""


class TilesFailedError(Sam3TilesError):
    """The run finished, but some tiles failed (raised only when strict, or used for the exit code)."""

    exit_code = EXIT_FAILED_TILES
