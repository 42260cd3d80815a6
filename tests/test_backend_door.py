"""The model door: a backend defined here, handed to `segment` as an object (in-process engine) and as a
callable built in each worker process (a real LocalCluster), and one installed through the
`sam3tiles.backends` entry-point group of a small package this test builds with pip."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cloudpickle
import geopandas as gpd
import numpy as np
import pytest
import rasterio
from affine import Affine
from scipy import ndimage

import sam3tiles
from sam3tiles.errors import ModelError, UsageError
from sam3tiles.model.registry import RuntimeSpec, available_backends, runtime_stats, spec_identity
from sam3tiles.model.runtime import MASK_SIZE, MODEL_SIZE, Detections, ModelRuntime, PreparedPrompt

ROOT = Path(__file__).resolve().parents[1]
SQUARES = [(100, 100), (400, 250), (980, 700), (1000, 120), (600, 820)]  # top-left corners, 60 px each
_NEAREST = ((np.arange(MASK_SIZE) + 0.5) * MODEL_SIZE / MASK_SIZE).astype(int)


class BrightSquares:
    """A backend written against the ModelRuntime Protocol only: every bright blob is an object."""

    name = "brightsquares"
    box_slots = 1
    identity = "brightsquares:v1"

    def __init__(self) -> None:
        self.encodes = 0

    def encode(self, image):
        self.encodes += 1
        return image

    def prepare_prompt(self, text: str) -> PreparedPrompt:
        return PreparedPrompt(text, usable=text != "nothing", note=f"{text!r}: brightsquares finds squares only")

    def decode(self, image, prompt, boxes=()) -> Detections:
        lab, n = ndimage.label((image.rgb.min(axis=0) > 200) & image.valid)
        masks = np.zeros((n, 1, MASK_SIZE, MASK_SIZE), np.float32)
        boxes_xyxy = np.zeros((n, 4), np.float32)
        for i, (sy, sx) in enumerate(ndimage.find_objects(lab)):
            masks[i, 0] = (lab[np.ix_(_NEAREST, _NEAREST)] == i + 1)
            boxes_xyxy[i] = np.array([sx.start, sy.start, sx.stop, sy.stop], np.float32) / MODEL_SIZE
        return Detections(boxes_xyxy, np.full(n, 0.9, np.float32), masks)


def make_bright_squares() -> BrightSquares:
    """The factory a cluster gets: each worker process builds its own runtime."""
    return BrightSquares()


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """1200 x 900 px, black with five white 60 px squares; one straddles the seam of its 2 tiles."""
    data = np.zeros((3, 900, 1200), np.uint8)
    for x, y in SQUARES:
        data[:, y:y + 60, x:x + 60] = 255
    path = tmp_path_factory.mktemp("door") / "squares.tif"
    with rasterio.open(path, "w", driver="GTiff", width=1200, height=900, count=3, dtype="uint8",
                       crs="EPSG:32633", transform=Affine(0.5, 0, 400000, 0, -0.5, 5000000)) as dst:
        dst.write(data)
    return path


def _check_squares(gdf: gpd.GeoDataFrame, name: str) -> None:
    assert len(gdf) == len(SQUARES), gdf
    assert set(gdf["backend"]) == {name} and set(gdf["prompt"]) == {"squares"}
    # 60 px squares of 0.5 m pixels: 900 m2 each, whatever tile they were found in
    assert np.allclose(sorted(gdf["area_m2"]), 900.0, rtol=0.08)


def test_object_backend_in_process(scene):
    rt = BrightSquares()
    gdf = sam3tiles.segment(str(scene), ["squares"], backend=rt, checkpoint=False, workers=1)
    _check_squares(gdf, "brightsquares")
    assert rt.encodes >= 2  # this very object ran the tiles (nothing was copied)
    assert set(gdf["model"]) == {"brightsquares:v1"}
    assert gdf.attrs["sam3tiles_report"]["backend"] == "brightsquares"


def test_object_backend_unusable_prompt_is_refused(scene):
    with pytest.raises(Exception, match="brightsquares finds squares only"):
        sam3tiles.segment(str(scene), ["nothing"], backend=BrightSquares(), checkpoint=False, workers=1)


def test_spec_takes_name_and_identity_from_the_backend():
    spec = RuntimeSpec.of(BrightSquares())
    assert spec.backend == "brightsquares" and spec_identity(spec) == "brightsquares:v1"
    assert isinstance(BrightSquares(), ModelRuntime)
    with pytest.raises(UsageError, match="backend name"):
        RuntimeSpec.of(42)
    with pytest.raises(UsageError, match="unknown backend 'nope'"):
        RuntimeSpec.of("nope")


@pytest.fixture(scope="module")
def process_cluster():
    """Two worker processes (spawned: nothing of this process is inherited), both model workers."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", resources={"GPU": 1}, silence_logs=40)
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def test_factory_backend_on_worker_processes(scene, process_cluster):
    # the workers cannot import this test module: the callable (and its class) travel by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        gdf = sam3tiles.segment(str(scene), ["squares"], backend=make_bright_squares, client=process_cluster,
                                checkpoint=False)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    _check_squares(gdf, "brightsquares")
    loads = [s["brightsquares"]["loads"] for s in process_cluster.run(runtime_stats).values()
             if "brightsquares" in s]
    assert loads and all(n == 1 for n in loads)  # built in the worker processes, once each


def test_object_backend_on_worker_processes_is_a_model_error(scene, process_cluster):
    with pytest.raises(ModelError, match="give a callable"):
        sam3tiles.segment(str(scene), ["squares"], backend=BrightSquares(), client=process_cluster,
                          checkpoint=False)


PLUGIN = '''
"""A third-party backend: registered under sam3tiles.backends, built with the run's RuntimeSpec."""
import numpy as np
from sam3tiles.model.runtime import MASK_SIZE, Detections, PreparedPrompt


class Corner:
    name = "corner"
    box_slots = 1

    def __init__(self, spec):
        self.identity = "corner:" + str(spec.device)

    def encode(self, image):
        return image

    def prepare_prompt(self, text):
        return PreparedPrompt(text)

    def decode(self, image, prompt, boxes=()):
        # one object: the top-left 288 px of the input, wherever the tile is
        masks = np.zeros((1, 1, MASK_SIZE, MASK_SIZE), np.float32)
        masks[0, 0, :82, :82] = 1.0
        return Detections(np.array([[0, 0, 0.285, 0.285]], np.float32), np.array([0.8], np.float32), masks)


def build(spec):
    return Corner(spec)
'''


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict:
    """A tiny setuptools project installed with pip into a folder; PYTHONPATH makes it visible."""
    tmp = tmp_path_factory.mktemp("plugin")
    proj = tmp / "proj"
    (proj / "corner_backend").mkdir(parents=True)
    (proj / "corner_backend" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (proj / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools>=70.1"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "corner-backend"
        version = "0.0.1"

        [project.entry-points."sam3tiles.backends"]
        corner = "corner_backend:build"
        '''))
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(proj)], check=True, timeout=300,
                   capture_output=True)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


CLI_SCRIPT = """
import sys
from click.testing import CliRunner
from sam3tiles.cli.main import cli
for args in sys.argv[1:]:
    r = CliRunner().invoke(cli, args.split("|"))
    print("EXIT", r.exit_code, r.output.replace("\\n", " "))
"""


def test_entry_point_backend_from_the_cli(scene, plugin_env, tmp_path):
    """`--backend corner`, a job file's `backend: {name: corner}` and `segment --help` (one interpreter)."""
    job = tmp_path / "job.yaml"
    job.write_text(f"inputs: [{scene}]\nprompts: {{text: [x]}}\nbackend: {{name: corner}}\n"
                   f"output: {{path: {tmp_path / 'job.gpkg'}}}\n")
    out = tmp_path / "corner.gpkg"
    runs = ["segment|--help", f"segment|{scene}|--text|anything|--backend|corner|--device|cpu|--out|{out}|--quiet",
            f"run|{job}|--quiet"]
    done = subprocess.run([sys.executable, "-c", CLI_SCRIPT, *runs], env=plugin_env, capture_output=True,
                          text=True, timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("EXIT")]
    assert len(lines) == 3 and all(ln.startswith("EXIT 0") for ln in lines), done.stdout + done.stderr
    assert "corner" in lines[0] and "simulated" in lines[0]
    gdf = gpd.read_file(out)
    assert len(gdf) >= 1 and set(gdf["backend"]) == {"corner"} and set(gdf["model"]) == {"corner:cpu"}
    assert set(gpd.read_file(tmp_path / "job.gpkg")["backend"]) == {"corner"}


def test_entry_points_are_not_built_in():
    assert available_backends()[:3] == ("onnx", "reference", "simulated")
