"""The work folder: a folder sam3tiles owns, and its record of the outputs its runs put in place.

* owned: it carries a marker file (`MARKER`), and only marked folders are cleared, and then only of the
  files sam3tiles writes (`claim_work_dir`, `clear_work_dir`); a suspicious `--work-dir` (empty, `/`,
  home, the current folder or one above it, a folder holding inputs, one holding files sam3tiles did not
  write) is refused before anything is written (`check_work_dir`);
* its record, `outputs.json`: each output a run put in place, so a rerun may replace an unchanged output
  of an unfinished earlier run without --overwrite (`record_outputs`, `replaceable`), and a refusal names
  a damaged record (`vouched`).
"""

from __future__ import annotations

import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from ...errors import OutputExistsError, UsageError
from ...readers.identity import local_path_of
from ...wording import enable, mention, opt

#: The file that marks a folder as a sam3tiles work folder (JSON: tool, schema).
MARKER = "sam3tiles-work.json"
#: Every file sam3tiles writes in a work folder; `clear_work_dir` deletes these and nothing else.
OWN_FILES = (MARKER, "tiles.sqlite", "tiles.sqlite-wal", "tiles.sqlite-shm", "tiles.sqlite-journal", "outputs.json")


def real_path(p: str | os.PathLike, dirs: dict | None = None) -> Path:
    """`p` resolved (`os.path.realpath`). `dirs`: a cache of resolved folders for one check of many paths:
    a file that is not a link is its folder's resolution and its name (a path of ten parts costs realpath ten
    status calls; 1,024 inputs are resolved three times in a plan)."""
    text = os.path.expanduser(str(p))
    if dirs is not None:
        head, name = os.path.split(text)
        if name not in ("", ".", ".."):
            try:
                link = stat.S_ISLNK(os.lstat(text).st_mode)
            except (OSError, ValueError):
                link = False  # no such file: realpath keeps the name as given too
            if not link:
                if head not in dirs:
                    dirs[head] = os.path.realpath(head or ".")
                return Path(os.path.join(dirs[head], name))
    return Path(os.path.realpath(text))


def is_within(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def check_work_dir(value, inputs: Sequence[str] = (), option: str = "work_dir") -> Path | None:
    """Refuse a work folder that a `--fresh` could never safely clear, before anything is written.

    `value` None means "not given" (fine). Refused (exit 2): an empty or blank value (an unset shell
    variable), `/`, the home folder or one above it, the current folder or one above it, a folder that
    holds an input, a file, and an existing folder holding files sam3tiles did not write."""
    if value is None:
        return None
    text = str(value)
    if not text.strip():
        raise UsageError(f"{mention(option)} is empty (an unset shell variable?): name a folder for the "
                         "checkpoints, or leave it out to use <output>.sam3tiles-work beside the output")
    p = real_path(text)
    home = real_path(Path.home())
    cwd = real_path(os.getcwd())
    if p == Path(p.anchor) or is_within(home, p) or is_within(cwd, p):
        what = "the root folder" if p == Path(p.anchor) else "your home folder" if is_within(home, p) and \
            p == home else "the current folder" if p == cwd else "a folder above the current or home folder"
        raise UsageError(f"{mention(option, text)}: that is {what}, which sam3tiles will not use for checkpoints "
                         f"(a {opt('fresh')} would have to clear it): name a new folder, e.g. out.sam3tiles-work")
    dirs: dict = {}
    for i in inputs:
        local = local_path_of(i)
        if local is not None and is_within(real_path(local, dirs), p):
            raise UsageError(f"{mention(option, text)} holds the input {i}: checkpoints go in a folder of their own; "
                             "name a new folder outside the inputs'")
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {text} is a file, not a folder: name a new folder for the checkpoints")
    if p.is_dir() and not is_work_dir(p):
        foreign = sorted(e.name for e in p.iterdir() if not _own(e.name))
        if foreign:
            raise UsageError(f"{option} {text} is not a sam3tiles work folder (it holds {foreign[0]!r}"
                             f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, and no {MARKER}): "
                             "name a new or empty folder for the checkpoints")
    return p


def _own(name: str) -> bool:
    """A file sam3tiles writes in a work folder, or the temporary file of one (`.<stem>.<hex8>.tmp<ext>`)."""
    if name in OWN_FILES:
        return True
    return any(name.startswith(f".{Path(f).stem}.") and ".tmp" in name for f in (MARKER, "outputs.json"))


def _our_lock(entry: Path) -> bool:
    """The output lock this process holds (`--out w/o.gpkg --work-dir w`: the run's own lock is no foreign
    file in its work folder)."""
    if not entry.name.endswith(".lock") or not entry.is_file():
        return False
    try:
        owner = json.loads(entry.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(owner, dict) and owner.get("pid") == os.getpid()


def is_work_dir(path: str | os.PathLike) -> bool:
    """Whether `path` carries the marker sam3tiles writes into every work folder it creates."""
    try:
        data = json.loads((Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("tool") == "sam3tiles"


def claim_work_dir(path: str | os.PathLike) -> Path:
    """Create the work folder (or adopt one holding only sam3tiles' files) and mark it as ours."""
    p = Path(path)
    if p.is_dir() and not is_work_dir(p):
        foreign = [e.name for e in p.iterdir() if not _own(e.name) and not _our_lock(e)]
        if foreign:  # checked before the run too; a folder that changed since is still not ours
            raise UsageError(f"{opt('work_dir', p)} is not a sam3tiles work folder (it holds {foreign[0]!r}): "
                             "name a new or empty folder for the checkpoints")
    p.mkdir(parents=True, exist_ok=True)
    if not is_work_dir(p):
        from ...writers.atomic import atomic_path

        with atomic_path(p / MARKER) as tmp:
            tmp.write_text(json.dumps({"tool": "sam3tiles", "schema": 1,
                                       "note": "checkpoints of sam3tiles; safe to delete when no run uses them"}))
    return p


def clear_work_dir(path: str | os.PathLike) -> list[Path]:
    """`--fresh`: delete the files sam3tiles wrote in a marked work folder, then the folder if it is empty.
    Anything else in it stays; an unmarked folder holding other files is refused (exit 2)."""
    p = Path(path)
    if not p.exists():
        return []
    if not p.is_dir():
        raise UsageError(f"{opt('work_dir', p)} is a file, not a folder: name a new folder for the checkpoints")
    if not is_work_dir(p):
        foreign = [e.name for e in p.iterdir() if not _own(e.name)]
        if foreign:
            raise UsageError(f"{opt('fresh')}: {p} is not a sam3tiles work folder (no {MARKER}; "
                             f"it holds {foreign[0]!r}): nothing was deleted; name the work folder of the run to "
                             "start over")
    gone = []
    for q in sorted(p.iterdir()):
        if q.name != MARKER and _own(q.name) and (q.is_file() or q.is_symlink()):
            q.unlink()
            gone.append(q)
    if [e.name for e in p.iterdir()] in ([], [MARKER]):
        (p / MARKER).unlink(missing_ok=True)
        p.rmdir()
    # else other files stay, and so do the folder and its marker (it is still ours)
    return gone


# -- outputs an earlier run of the same job left unfinished ----------------------------------------------------
# `outputs.json` in the work folder records each output a run put in place (size, time, inode, the run's
# failed tiles, and whether all its renames finished). A rerun may replace such an output without
# --overwrite when it is unchanged since and that run was not complete (tiles failed: exit 5; or killed
# between its renames): the docs' "rerun the same command" then does what it says.

def _stamp(p: Path) -> list | None:
    try:
        st = p.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _entry(v) -> bool:
    return isinstance(v, dict) and isinstance(v.get("state"), str) and isinstance(v.get("failed", 0), int) and (
        v.get("stamp") is None or isinstance(v.get("stamp"), list))


def _read_records(work_dir) -> tuple[dict, str | None]:
    """The record's sound entries, and what is wrong with the file (None: nothing, or there is none)."""
    try:
        text = (Path(work_dir) / "outputs.json").read_text()
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as e:
        return {}, f"unreadable: {getattr(e, 'strerror', None) or e}"
    try:
        data = json.loads(text)
    except ValueError:
        return {}, "not JSON"
    if not isinstance(data, dict):
        return {}, f"not sam3tiles' record of outputs but a JSON {type(data).__name__}"
    good = {k: v for k, v in data.items() if _entry(v)}
    bad = [k for k in data if k not in good]
    return good, bad and f"not sam3tiles' record of outputs: its entry {bad[0]!r} is no record of a file"


def _records(work_dir) -> dict:
    return _read_records(work_dir)[0]


@contextmanager
def vouched(work_dir, what: str, path) -> Iterator[None]:
    """Around a check that refuses an existing file (OutputExistsError) unless an earlier run of `work_dir`
    wrote it (`replaceable`): when the work folder's record is damaged, the refusal names the record and
    what to do instead of saying the run did not write the file (it cannot tell)."""
    try:
        yield
    except OutputExistsError:
        problem = _read_records(work_dir)[1] if work_dir is not None and is_work_dir(work_dir) else None
        if not problem:
            raise
        raise OutputExistsError(
            f"{mention(what, path)} exists and this run cannot tell whether it wrote it: "
            f"{Path(work_dir) / 'outputs.json'}, "
            f"the work folder's record of what its runs wrote, is damaged ({problem}): if the file is sam3tiles' own "
            f"(a rerun writes it anew), {enable('overwrite')} (with {opt('fresh')} the checkpoints start over too); "
            "else move it away") from None


def replaceable(output, work_dir, side_file: bool = False) -> bool:
    """Whether `output` is an unchanged output of an unfinished earlier run of this work folder; with
    `side_file` (a report or preview), of any earlier run of it (the file is sam3tiles' own, as it wrote it)."""
    if work_dir is None or not is_work_dir(work_dir):
        return False
    rec = _records(work_dir).get(str(real_path(output)))
    if not isinstance(rec, dict) or rec.get("stamp") != _stamp(Path(output)):
        return False
    return side_file or bool(rec.get("failed")) or rec.get("state") != "done"


def record_outputs(work_dir, files: Sequence[tuple[Path, Path]], failed: int, state: str) -> None:
    """Record the outputs (temporary name, final name) a run puts in place; see `replaceable`."""
    if work_dir is None or not is_work_dir(work_dir):
        return
    from ...writers.atomic import atomic_path

    recs = _records(work_dir)
    for tmp, final in files:
        stamp = _stamp(tmp) if tmp.exists() else _stamp(final)  # a rename keeps size, time and inode
        recs[str(real_path(final))] = {"stamp": stamp, "failed": int(failed), "state": state}
    with atomic_path(Path(work_dir) / "outputs.json") as t:
        t.write_text(json.dumps(recs, indent=1))
