"""The run's three folders (issue 48): `planning`, `executing`, `recording`, and the conductor `pipeline` above
them. Arrows point down only: executing -> planning -> recording (executing also -> recording), nothing of
them imports the pipeline; every module of the run lives in a folder (but the pipeline and the face), none
is over 600 lines, and the faces import nothing (`import sam3tiles` loads `run.planning.limits` first, before
numpy). Checked statically, from the modules' own imports; fails naming the arrow."""

from __future__ import annotations

import ast

from test_structure import _imports, _modules

RUN = "sam3tiles.run"
#: what each folder may import of the run, besides itself
MAY_IMPORT = {"recording": set(), "planning": {"recording"}, "executing": {"planning", "recording"}}
MAX_MODULE_LINES = 600


def _folder(module: str) -> str | None:
    """The run's folder a module lies in ("pipeline" for the conductor), None outside the run."""
    if not module.startswith(RUN + "."):
        return None
    return module[len(RUN) + 1:].split(".")[0]


def _arrows_up(edges: dict[str, set[str]]) -> list[str]:
    """The imports between the run's folders that do not point down."""
    out = []
    for m, deps in sorted(edges.items()):
        here = _folder(m)
        if here not in MAY_IMPORT:
            continue
        out += [f"{m} -> {d}" for d in sorted(deps)
                if (there := _folder(d)) is not None and there != here and there not in MAY_IMPORT[here]]
    return out


def _run_modules() -> dict:
    return {m: p for m, p in _modules().items() if m == RUN or m.startswith(RUN + ".")}


def test_the_run_folders_import_only_down():
    mods = _modules()
    edges = {m: _imports(m, p, mods) for m, p in _run_modules().items()}
    assert _arrows_up(edges) == []


def test_the_folder_check_names_an_arrow_up():
    edges = {f"{RUN}.recording.checkpoint": {f"{RUN}.executing.tasks", f"{RUN}.recording.workfolder"},
             f"{RUN}.planning.plan": {f"{RUN}.executing.engine", f"{RUN}.recording.checkpoint", "sam3tiles.errors"},
             f"{RUN}.planning.maps": {f"{RUN}.pipeline"},
             f"{RUN}.executing.runner": {f"{RUN}.planning.plan", f"{RUN}.recording.report"}}
    assert _arrows_up(edges) == [f"{RUN}.planning.maps -> {RUN}.pipeline",
                                 f"{RUN}.planning.plan -> {RUN}.executing.engine",
                                 f"{RUN}.recording.checkpoint -> {RUN}.executing.tasks"]


def test_every_run_module_has_its_folder_and_stays_under_600_lines():
    homeless, long = [], []
    for m, p in _run_modules().items():
        if m not in (RUN, f"{RUN}.pipeline") and _folder(m) not in MAY_IMPORT:
            homeless.append(m)
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES:
            long.append(f"{m} ({n} lines)")
    assert homeless == [] and long == []
    assert {_folder(m) for m in _run_modules() if m != RUN} == {*MAY_IMPORT, "pipeline"}


def test_the_run_faces_import_nothing():
    faces = [p for m, p in _run_modules().items() if p.name == "__init__.py"]
    assert len(faces) == 4
    importing = [str(p) for p in faces
                 if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(ast.parse(p.read_text())))]
    assert importing == []
