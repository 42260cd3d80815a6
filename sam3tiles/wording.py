"""How error messages name options: by a marker, spelled by the entry point that reports the error.

A message names an option with `opt("tile_size")` (the option), `opt("out", path)` (the option with its
value) or `enable("overwrite")` (the advice to switch a flag on), never with a flag or a job key. Each
entry point words the markers in its own vocabulary:

    words    opt("overwrite")    opt("out", "o.gpkg")    enable("overwrite")
    python   overwrite           out=o.gpkg              pass overwrite=True
    cli      --overwrite         --out o.gpkg            pass --overwrite
    job      output.overwrite    output.path o.gpkg      set output.overwrite: true

`str(error)` of a `Sam3TilesError` is in its `words` (None: python, the keyword names of
`sam3tiles.segment`); the CLI's error handler prints `cli` (flags), `jobs.run_job` and `jobs.plan_job`
mark their errors `job` (key paths). The cli and job spellings come from the options registry
(`options.py`, which registers them here: this module imports nothing of sam3tiles). Code that puts an
error's text into another message takes `raw(error)`, so the markers stay for the entry point to spell.

A log line or a report note has no error to carry its words: it is spelled when written, by `spoken(text)`,
in the words of the entry point running (`speaking(words)`: the CLI for a command, `errors.worded` for a
job; python otherwise). The words are held for the process too, so a line logged by a worker thread of
the in-process engine is spelled as the command's own.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

__all__ = ["opt", "mention", "enable", "render", "named_in", "raw", "speaking", "spoken", "SPELLERS", "WORDS"]

_START, _SEP, _END = "\x02", "\x1f", "\x03"
_MARK = re.compile("\x02([=!])([A-Za-z_][A-Za-z0-9_]*)(?:\x1f([^\x03]*))?\x03")

#: The vocabularies: python (keyword names), cli (flags), job (job-file key paths).
WORDS = ("python", "cli", "job")

#: A speller: (option name, its value or None, enable?) -> the words. `options.py` adds cli and job.
Speller = Callable[[str, "str | None", bool], str]


def _python(name: str, value: str | None, on: bool) -> str:
    if on:
        return f"pass {name}=True"
    return name if value is None else f"{name}={value}"


SPELLERS: dict[str, Speller] = {"python": _python}


def opt(name: str, value: object = None) -> str:
    """The marker of option `name` (a keyword of `sam3tiles.segment`), with its value when given."""
    return f"{_START}={name}" + ("" if value is None else f"{_SEP}{value}") + _END


def mention(what: str, value: object = None) -> str:
    """`opt(what, value)` when `what` is an option's name, else the phrase `what` (and the value): for code
    that names either an option or another thing ("the preview")."""
    if what.isidentifier():
        return opt(what, value)
    return what if value is None else f"{what} {value}"


def enable(name: str) -> str:
    """The marker of the advice to switch the flag `name` on (`pass --overwrite`)."""
    return f"{_START}!{name}{_END}"


def render(text: str, words: str | None = None) -> str:
    """`text` with every marker spelled in the vocabulary `words` (None: python)."""
    if _START not in text:
        return text
    spell = SPELLERS.get(words or "python", _python)
    return _MARK.sub(lambda m: spell(m.group(2), m.group(3), m.group(1) == "!"), text)


def named_in(text: str) -> set[str]:
    """The names of the options a message (with its markers: `raw`) names."""
    return {m.group(2) for m in _MARK.finditer(text)}


def raw(exc: BaseException) -> str:
    """An error's message with its markers, to be put into another message."""
    return Exception.__str__(exc)


_SPOKEN: ContextVar[str | None] = ContextVar("sam3tiles_words", default=None)
_PROCESS: list[str | None] = [None]  # the words of the entry point running, for threads it did not start


@contextmanager
def speaking(words: str | None) -> Iterator[None]:
    """Inside, `spoken` spells markers in the vocabulary `words` (`WORDS`)."""
    token, before = _SPOKEN.set(words), _PROCESS[0]
    _PROCESS[0] = words
    try:
        yield
    finally:
        _SPOKEN.reset(token)
        _PROCESS[0] = before


def spoken(text: str) -> str:
    """`text` (a log line, a report note) with its markers spelled in the running entry point's words."""
    return render(text, _SPOKEN.get() or _PROCESS[0])
