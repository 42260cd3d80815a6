"""The lowest address-space limit (`ulimit -v`, RLIMIT_AS) a `segment` run finishes under, by bisection.

    python -m benchmarks.bench_address_space                      # reference and onnx, a few thread counts
    python -m benchmarks.bench_address_space --config "reference --workers 8"
    python -m benchmarks.bench_address_space --no-ease            # as before issue 36: default reservations
    python -m benchmarks.bench_address_space --smoke              # one run under 3 GB (checks the code)

Each probe runs the CLI in a fresh process under `setrlimit(RLIMIT_AS)` (a preexec_fn), `--reps` times: the
limit passes only when every run exits 0 (a failure is an exit code, a hang past `--timeout`, a crash).
The scene is the demo scene (3000 x 2000 px, 12 tiles of 1008 px), the onnx backend runs the contract
graphs of `sam3tiles.testing.graphs`. The run's own check is replaced by one that prints what
`limits.address_space_need` says (mapped at the check, the need) and lets the run go on, so the table sets
the measured lowest limit beside the need the check would ask for: the need must be above every lowest.

Failures are not monotonic in the limit while pyarrow's mimalloc reserves 1 GiB when the limit has room
for it (`--no-ease`): probe a grid of limits with `--grid` to see that.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

from .common import ROOT, wait_for_quiet

DRIVER = r"""
import os, sys
import sam3tiles.run.planning.limits as L
import sam3tiles.run.planning.preflight as P

def vm():
    return int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) >> 10

def measured(threads, model_bytes=0, onnx=False, pixels=None):
    if not os.environ.get("BENCH_NO_EASE"):
        L.fewer_malloc_arenas()
    need = L.address_space_need(threads, model_bytes, onnx, pixels)
    sys.stderr.write(f"BENCH_CHECK {vm()} {need.total >> 20} {threads} {need.gdal_cache >> 20}\n")

P.check_address_space = measured
import atexit
atexit.register(lambda: sys.stderr.write(
    "BENCH_PEAK " + open('/proc/self/status').read().split('VmPeak:')[1].split()[0] + "\n"))
from sam3tiles.cli.main import cli
cli(sys.argv[1:], prog_name="sam3tiles")
"""

CONFIGS = ["reference --workers 1", "reference --workers 2", "reference --workers 4", "reference --workers 8",
           "onnx --workers 2 --threads 1", "onnx --workers 2 --threads 2", "onnx --workers 2 --threads 4",
           "onnx --workers 2 --threads 8"]


def run(limit_mb: int, config: str, scene: str, model: str, ease: bool, timeout: float) -> dict:
    """One run under `limit_mb` (0: none): its exit ('hang' past the timeout), what the check printed."""
    backend, *rest = config.split()
    args = ["--backend", backend, *rest] + (["--model", model] if backend == "onnx" else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not ease:  # as before: mimalloc's 1 GiB reserve, glibc's arenas (a value set here wins over sam3tiles')
        env.update(BENCH_NO_EASE="1", MIMALLOC_ARENA_RESERVE="1GiB")

    def limit():
        if limit_mb:
            resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    with tempfile.TemporaryDirectory() as d:
        try:
            p = subprocess.run([sys.executable, "-c", DRIVER, "segment", scene, "-t", "blue", "--out", f"{d}/o.gpkg",
                                *args], check=False, capture_output=True, text=True, env=env, preexec_fn=limit,
                               timeout=timeout)
            code, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired as e:
            code, err = "hang", e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    check = next((line.split()[1:] for line in err.splitlines() if line.startswith("BENCH_CHECK")), [None] * 4)
    peak = next((int(line.split()[1]) >> 10 for line in err.splitlines() if line.startswith("BENCH_PEAK")), None)
    why = next((line[:120] for line in err.splitlines() if line.startswith("Error") or "bad_alloc" in line), "")
    return {"code": code, "mapped_at_check_mb": check[0] and int(check[0]), "need_mb": check[1] and int(check[1]),
            "threads": check[2] and int(check[2]), "gdal_cache_mb": check[3] and int(check[3]), "peak_mb": peak,
            "why": why}


def passes(limit_mb: int, config: str, a, failures: list) -> bool:
    for _ in range(a.reps):
        r = run(limit_mb, config, a.scene, a.model, a.ease, a.timeout)
        if r["code"] != 0:
            failures.append([limit_mb, r["code"], r["why"]])
            return False
    return True


def lowest(config: str, a) -> dict:
    """The lowest limit (to `--step` MB) under which `--reps` runs all finish."""
    free = run(0, config, a.scene, a.model, a.ease, a.timeout)
    assert free["code"] == 0, free
    # what the check sees under a limit (its reductions act only then): the figures under the highest
    room = run(a.high, config, a.scene, a.model, a.ease, a.timeout)
    lo, hi, failures = a.low, a.high, []
    while hi - lo > a.step:
        mid = (lo + hi) // 2 // a.step * a.step
        if passes(mid, config, a, failures):
            hi = mid
        else:
            lo = mid
    return {"config": config, "ease": a.ease, "lowest_ok_mb": hi, "need_mb": room["need_mb"],
            "mapped_at_check_mb": room["mapped_at_check_mb"], "threads": room["threads"],
            "gdal_cache_mb": room["gdal_cache_mb"], "peak_under_limit_mb": room["peak_mb"],
            "unlimited_peak_mb": free["peak_mb"], "failures": failures}


def inputs(folder: str, small: bool = False) -> tuple[str, str]:
    from sam3tiles.testing.demo import write_scene
    from sam3tiles.testing.graphs import build_contract_models

    scene = os.path.join(folder, "scene.tif")
    write_scene(scene, *((1000, 800) if small else (3000, 2000)), 3)
    return scene, str(build_contract_models(os.path.join(folder, "model"), decoder="colour", grid=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", help="BACKEND [segment options] (repeatable)")
    ap.add_argument("--no-ease", dest="ease", action="store_false", help="the default reservations (as before)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--low", type=int, default=400)
    ap.add_argument("--high", type=int, default=3200)
    ap.add_argument("--step", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--grid", type=int, nargs="*", help="probe these limits (MB) instead of bisecting")
    ap.add_argument("--smoke", action="store_true", help="one small run under 3 GB (checks the code, no figure)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.config, a.grid, a.reps = ["reference --workers 1"], [3000], 1
    else:
        wait_for_quiet()
    with tempfile.TemporaryDirectory() as d:
        a.scene, a.model = inputs(d, small=a.smoke)
        for config in a.config or CONFIGS:
            if a.grid:
                for mb in a.grid:
                    runs = [run(mb, config, a.scene, a.model, a.ease, a.timeout) for _ in range(a.reps)]
                    why = [r["why"] for r in runs if r["why"]][:1]
                    print(json.dumps({"config": config, "ease": a.ease, "limit_mb": mb,
                                      "codes": [r["code"] for r in runs], "why": why}), flush=True)
                    if a.smoke and any(r["code"] != 0 for r in runs):
                        return 1  # the code under test is broken: a run under 3 GB finishes
            else:
                print(json.dumps(lowest(config, a)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
