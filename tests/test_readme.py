"""Every command in the README runs as written (issue 40): the README's bash blocks are parsed and each
command is run, in order, in a folder prepared as a user's would be after the Quick start (`sam3tiles demo`,
`python examples/make_data.py`, a copy of configs/ and examples/), at small sizes. A command marked
`# model` needs the SAM 3 model: it runs up to the model error (exit 4, naming `sam3tiles model fetch`), with
every file it names in place. Installs, the test suite itself, the model download and the benchmarks (minutes
each, some on a GPU) are not run: the download's and the benchmarks' `--help` are."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL_MARK = re.compile(r"#\s*model\b")
#: Small sizes for the test: the demo's scene and the example slides (the README's are minutes of work).
SMALL = [(re.compile(r"^sam3tiles demo$"), "sam3tiles demo --size 2000x1600"),
         (re.compile(r"(examples/make_slide\.py .*--size )\d+"), r"\g<1>2500")]


@dataclass
class Command:
    section: str
    text: str  # as written (continuation lines joined, the trailing comment kept)
    kind: str  # setup, install, tests, download, develop, model, run

    @property
    def runnable(self) -> str:
        text = self.text
        for pattern, repl in SMALL:
            text = pattern.sub(repl, text)
        return text


def _kind(section: str, text: str) -> str:
    body = text.split("#", 1)[0].strip()
    if body.startswith("python -m pip install"):
        return "install"
    if body.startswith("python -m pytest"):
        return "tests"
    if section == "Quick start":
        return "setup"
    if body.startswith("sam3tiles model fetch"):
        return "download"
    if body.startswith("python -m benchmarks."):
        return "develop"
    return "model" if MODEL_MARK.search(text) else "run"


def readme_commands(readme: Path = ROOT / "README.md") -> list[Command]:
    """Every command of the README's ```bash blocks, in order (`a && b` is two commands of one kind)."""
    out, section, block, pending = [], "", False, ""
    for line in readme.read_text().splitlines():
        if line.startswith(("## ", "### ")):
            section = line.lstrip("#").strip()
        elif line.strip() == "```bash":
            block = True
        elif line.strip() == "```":
            block = False
        elif block and line.strip() and not line.lstrip().startswith("#"):
            pending += line.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            text, pending = " ".join(pending.split()), ""
            first, _, rest = text.partition(" && ")
            if rest and _kind(section, first) == "install":  # `pip install ... && sam3tiles demo`: two steps
                out += [Command(section, first, "install"), Command(section, rest, _kind(section, rest))]
            else:
                out.append(Command(section, text, _kind(section, text)))
    return out


def test_the_readme_commands_are_found_and_each_has_its_kind():
    cmds = readme_commands()
    kinds = {c.kind for c in cmds}
    assert {"setup", "install", "tests", "download", "develop", "model", "run"} <= kinds, kinds
    assert [c.runnable for c in cmds if c.kind == "setup"] == ["sam3tiles demo --size 2000x1600"]
    assert len([c for c in cmds if c.kind == "run"]) >= 6 and len([c for c in cmds if c.kind == "model"]) >= 8
    # every segment of the Usage block runs on the demo's files, not on an image the reader does not have
    assert all("sam3tiles-demo/" in c.text or "examples/data" in c.text
               for c in cmds if c.section == "Usage" and " segment " in f" {c.text}")


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory):
    """A folder as a user's clone is after the Quick start: configs/, the example scripts, the demo's
    files (`sam3tiles demo`, small) and the example data (`python examples/make_data.py`), with `sam3tiles`
    and `python` on PATH running this checkout, and no model anywhere it looks."""
    d = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "configs", d / "configs")
    (d / "examples").mkdir()
    for script in (ROOT / "examples").glob("*.py"):
        shutil.copy(script, d / "examples" / script.name)
    bin_dir = d / "bin"
    bin_dir.mkdir()
    for name, run in (("sam3tiles", f'"{sys.executable}" -m sam3tiles'), ("python", f'"{sys.executable}"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "SAM3TILES_MODEL_DIR": str(d / "no-model"), "QT_QPA_PLATFORM": "offscreen"}
    env.pop("SAM3TILES_SCHEDULER", None)
    for setup in [c.runnable for c in readme_commands() if c.kind == "setup"] + ["python examples/make_data.py"]:
        r = _run(setup, d, env)
        assert r.returncode == 0, (setup, r.stdout, r.stderr)
    return d, env


def _run(command: str, cwd: Path, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _named_inputs(command: str) -> list[str]:
    """The files a `sam3tiles segment` or `run` command reads: its inputs, box file, example images, job."""
    args = shlex.split(command.split(" #", 1)[0].split(" && ")[-1])
    if len(args) < 2 or args[0] != "sam3tiles" or args[1] not in ("segment", "run", "plan", "evaluate"):
        return []
    named, i = [], 2
    while i < len(args):
        a = args[i]
        if a in ("--box-file", "--example-image"):
            named.append(args[i + 1].rsplit(",neg", 1)[0])
            i += 2
        elif a.startswith("-"):
            i += 2 if a not in ("--dry-run", "--clean", "--overwrite") else 1
        else:
            named.append(a)
            i += 1
    return named


@pytest.mark.slow
def test_every_readme_command_runs_as_written(user_folder):
    d, env = user_folder
    failures = []
    for c in readme_commands():
        if c.kind in ("setup", "install", "tests"):
            continue
        if c.kind in ("download", "develop"):  # the download is 3.4 GB, a benchmark minutes: their --help
            r = _run(c.text.split(" #", 1)[0] + " --help", ROOT if c.kind == "develop" else d, env)
            ok = r.returncode == 0
        elif c.kind == "model":
            r = _run(c.runnable, d, env)
            missing = [p for p in _named_inputs(c.text) if not list(d.glob(p))]
            ok = r.returncode == 4 and "sam3tiles model fetch" in r.stderr and not missing
        else:
            r = _run(c.runnable, d, env)
            ok = r.returncode == 0 and "Traceback" not in r.stderr
        if not ok:
            failures.append(f"[{c.section}] {c.runnable}\n  exit {r.returncode}: {(r.stderr or r.stdout)[-600:]}")
    assert not failures, "\n".join(failures)
    assert (d / "demo.gpkg").exists() and (d / "grid.gpkg").exists() and (d / "nuclei.qupath.geojson").exists()
    assert (d / "nuclei-labels.ome.tif").exists() and (d / "examples" / "out" / "nuclei.qupath.geojson").exists()


COLOURS = {"green": (0, 255, 0), "magenta": (255, 0, 255), "white": (255, 255, 255)}


def test_the_readme_figure_shows_what_its_caption_says():
    """docs/demo.png: each colour the caption names is drawn in it, exactly (issue 40: the caption said
    white where the picture's palette had turned the core lines maroon), it has a legend, and it stays
    under 1 MB."""
    from PIL import Image

    text = (ROOT / "README.md").read_text()
    caption = text[text.index("(docs/demo.png)"):].split("\n\n")[1]
    named = [c for c in COLOURS if c in caption]
    assert named == ["green", "magenta", "white"], caption
    png = ROOT / "docs" / "demo.png"
    assert png.stat().st_size < 1_000_000
    img = np.asarray(Image.open(png).convert("RGB"))
    for name in named:
        assert (img == COLOURS[name]).all(axis=-1).sum() > 500, name
    legend = img[:90, :340]  # the legend box: dark, with every colour's swatch
    assert (legend.max(axis=-1) < 40).mean() > 0.5
    assert all((legend == COLOURS[c]).all(axis=-1).sum() >= 60 for c in named)
