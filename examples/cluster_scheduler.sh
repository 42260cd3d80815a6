#!/usr/bin/env bash
# sam3tiles on a dask.distributed cluster started by hand: one `dask scheduler`, one
# `dask worker --resources GPU=1` per GPU (each pinned to its GPU with CUDA_VISIBLE_DEVICES; sam3tiles reads,
# vectorizes and merges on their threads too), optional CPU-only workers, then `sam3tiles segment --scheduler`.
#
#   examples/cluster_scheduler.sh INPUT OUT [sam3tiles segment options...]
#   examples/cluster_scheduler.sh ortho.tif buildings.gpkg --text building
#
# Everything runs on this machine; on several machines, run the `dask worker` line on each GPU host
# with the scheduler's address (tcp://SCHEDULER_HOST:8786) and give every worker the same view of the
# input files (a shared file system) and the same Python environment.
#
# Settings (environment variables):
#   GPUS="0 1"        GPU indices, one worker each (default: every GPU nvidia-smi lists, else "0")
#   THREADS=4         threads per GPU worker: reads and vectorizing run beside the one model task
#   CPU_WORKERS=0     extra CPU-only worker processes (THREADS threads each)
#   HOST=127.0.0.1    address the scheduler listens on (use the host name for a multi-machine cluster)
#   PORT=8786         scheduler port; DASHBOARD_PORT=8787 its dashboard
#   BACKEND=onnx      sam3tiles backend (reference: a CPU dry run of this whole setup, no GPU needed)
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,20p' "$0" >&2
    exit 2
fi
INPUT=$1
OUT=$2
shift 2
if [ $# -eq 0 ]; then
    set -- --text building
fi

if [ -z "${GPUS:-}" ]; then
    GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr '\n' ' ' || true)
    GPUS=${GPUS:-0}
fi
THREADS=${THREADS:-4}
CPU_WORKERS=${CPU_WORKERS:-0}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8786}
DASHBOARD_PORT=${DASHBOARD_PORT:-8787}
BACKEND=${BACKEND:-onnx}
ADDRESS="tcp://$HOST:$PORT"

pids=()
cleanup() {
    # the workers first (each closes cleanly while its scheduler is still there), then the scheduler
    for pid in "${pids[@]:1}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]:1}"; do
        wait "$pid" 2>/dev/null || true
    done
    kill "${pids[0]}" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT

# 1. the scheduler
dask scheduler --host "$HOST" --port "$PORT" --dashboard-address ":$DASHBOARD_PORT" &
pids+=($!)

# 2. one worker per GPU, advertising the GPU resource (model tasks run only there, one at a time)
n=0
for gpu in $GPUS; do
    CUDA_VISIBLE_DEVICES=$gpu dask worker "$ADDRESS" --name "gpu$gpu" --nthreads "$THREADS" \
        --resources GPU=1 --no-dashboard &
    pids+=($!)
    n=$((n + 1))
done
# 3. optional CPU-only workers (other Dask work: sam3tiles's tile batches and merges run on the GPU workers)
for i in $(seq 1 "$CPU_WORKERS"); do
    CUDA_VISIBLE_DEVICES= dask worker "$ADDRESS" --name "cpu$i" --nthreads "$THREADS" --no-dashboard &
    pids+=($!)
    n=$((n + 1))
done

# wait until every worker has joined, so the first model task finds its GPU workers
python - "$ADDRESS" "$n" <<'EOF'
import sys
from distributed import Client

with Client(sys.argv[1], timeout="60s") as client:
    client.wait_for_workers(int(sys.argv[2]), timeout=120)
    print(f"cluster ready: {sys.argv[2]} workers; dashboard {client.dashboard_link}", file=sys.stderr)
EOF

# 4. the job: tiles go to the cluster, the merge's final pass and the output stay here
sam3tiles segment "$INPUT" --out "$OUT" --backend "$BACKEND" --scheduler "$ADDRESS" "$@"
