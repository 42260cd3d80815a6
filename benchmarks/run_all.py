"""Every figure of the distributed pipeline in one table (issue 4): memory, GPU kept busy, scale-out,
merge scaling, CPU work per tile.

    python -m benchmarks.run_all                 # the full set (generates a 32000 x 32000 scene once)
    python -m benchmarks.run_all --quick         # smaller sizes, a few minutes
    python -m benchmarks.run_all --only merge cpu

Each measurement runs in fresh processes (see the bench_*.py modules for what exactly is timed). The
machine's 1-minute load average is printed beside each figure: on a shared machine, wait for a quiet
moment (`--max-load`, default half the cores) or read the figures with it in mind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .common import load, run_child, smoke, table, wait_for_quiet

ALL = ("cpu", "merge", "memory", "throughput", "scaleout")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="+", choices=ALL, default=list(ALL))
    ap.add_argument("--max-load", type=float, default=None)
    ap.add_argument("--wait", type=float, default=300, help="seconds to wait for a quiet machine per step")
    ap.add_argument("--json-out", default=None, help="also write every raw result here")
    ap.add_argument("--smoke", action="store_true", help="every step at its smoke size, in this process")
    args = ap.parse_args(argv)
    q = args.quick
    extra = ["--smoke"] if smoke(args.smoke) else []
    rows: list[list] = []
    raw: dict = {"cpu_count": os.cpu_count()}

    def quiet() -> float:
        return round(load() if args.smoke else wait_for_quiet(args.max_load, args.wait), 2)

    def step(name):
        print(f"[{time.strftime('%H:%M:%S')}] {name} (load {load():.2f})", file=sys.stderr, flush=True)

    if "cpu" in args.only:
        step("CPU work per tile")
        la = quiet()
        res = run_child("bench_cpu_per_tile", *extra, "--objects", 10, 100)
        raw["cpu"] = res
        for r in res.get("runs", [res]):  # --smoke: one density, one result
            rows.append([f"CPU per tile by stage, {r['objects_per_tile']} objects (1 core, median CPU ms)",
                         f"read {r['read_ms']:.1f} + post {r['postprocess_ms']:.1f} + vectorize "
                         f"{r['vectorize_ms']:.1f} + merge {r['merge_share_ms']:.1f} = {r['cpu_ms_per_tile']:.1f}",
                         f"{r['cpu_ms_per_tile'] / 30:.2f} cores per 30 ms GPU tile",
                         "<= 30 ms" if r["objects_per_tile"] >= 50 else "<= 10 ms", la])
    if "merge" in args.only:
        step("merge scaling")
        la = quiet()
        sizes = [20_000, 200_000] if q else [100_000, 1_000_000]
        res = run_child("bench_merge", *extra, "--sizes", *sizes)
        raw["merge"] = res
        for mode, ratio in res["time_ratio"].items():
            r = [x for x in res["runs"] if x["mode"] == mode]
            figs = ", ".join(f"{x['pieces']:,} pieces {x['seconds']:.1f} s ({x['peak_rss_mb']:.0f} MB)" for x in r)
            rows.append([f"merge {mode}", figs, f"time ratio {ratio:.1f}", "<= 12", la])
    if "memory" in args.only:
        step("memory")
        la = quiet()
        sizes = [4000, 16000] if q else [8000, 32000]
        res = [run_child("bench_memory", *extra, "--size", s) for s in sizes]
        raw["memory"] = res
        ratio = res[1]["peak_rss_mb"] / res[0]["peak_rss_mb"]
        rows.append(["peak RSS, reference backend", ", ".join(
            f"{r['size']}^2 ({r['tiles']} tiles, {r['objects']} objects) {r['peak_rss_mb']:.0f} MB" for r in res),
            f"ratio {ratio:.2f}", "<= 1.3", la])
    if "throughput" in args.only:
        step("GPU kept busy")
        la = quiet()
        res = run_child("bench_throughput", *extra, "--size", 4000 if q else 8000)
        raw["throughput"] = res
        p, pl = res["pipeline"], res["plain"]
        rows.append(["tiles/s, simulated GPU 100+10 ms", f"pipeline {p['tiles_per_s']:.2f} (GPU busy "
                     f"{p['gpu_busy']:.0%}), plain loop {pl['tiles_per_s']:.2f} (GPU busy {pl['gpu_busy']:.0%}); "
                     f"{p['tiles']} tiles", f"{res['pipeline_vs_ideal']:.2f} x ideal {res['ideal_tiles_per_s']:.2f};"
                     f" {res['pipeline_vs_plain']:.2f} x plain", ">= 0.95 x ideal", la])
        step("GPU kept busy at SAM 3's 30 ms")
        la = quiet()
        res = run_child("bench_throughput", *extra, "--size", 4000, "--encode", 0.03, "--decode", 0.003)
        raw["throughput_30ms"] = res
        p, pl = res["pipeline"], res["plain"]
        rows.append(["tiles/s, simulated GPU 30+3 ms (SAM 3 on an H200)", f"pipeline {p['tiles_per_s']:.2f} "
                     f"(GPU busy {p['gpu_busy']:.0%}, CPU {p['cpu_ms_per_tile']:.0f} ms/tile), plain loop "
                     f"{pl['tiles_per_s']:.2f} (CPU {pl['cpu_ms_per_tile']:.0f} ms/tile); {p['tiles']} tiles",
                     f"{res['pipeline_vs_plain']:.2f} x plain; {res['pipeline_vs_ideal']:.2f} x ideal "
                     f"{res['ideal_tiles_per_s']:.1f}", ">= 1.3 x plain", la])
    if "scaleout" in args.only:
        step("scale-out")
        la = quiet()
        res = run_child("bench_scaleout", *extra, "--size", 4000 if q else 8000)
        raw["scaleout"] = res
        rows.append(["tiles/s, 1 vs 2 simulated-GPU workers", f"1: {res['one']['tiles_per_s']:.2f}, 2: "
                     f"{res['two']['tiles_per_s']:.2f} (encodes per worker {res['two']['encodes_per_worker']})",
                     f"speedup {res['speedup']:.2f}", ">= 1.8", la])
    print(table(rows, ["measure", "figures", "result", "target", "load"]))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(raw, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
