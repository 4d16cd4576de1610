#!/usr/bin/env bash
# The one prepared command for the lent GPU machine (no network; its own python3: 3.12, torch 2.11, Lightning):
#   scripts/gpu_check_device.sh [OUT [GPU_CHECK_ARGS...]]   # default OUT: experiments/bench/results/gpu/
# Installs the carried wheels (`make gpu-wheels` here: .wheels/gpu/) into a temporary folder, says which
# versions it runs with and whether torch sees CUDA, then runs the GPU check, which writes gpu_check.{md,json}
# and gpu_check-ladder.md into OUT as each part ends. Budget: BUDGET_S (default 360 s) for the check's parts,
# the ladder last with what is left, and a hard stop at BUDGET_S + 80 s: under 8 minutes with the install and CUDA start.
# Through the device tool (README "On a GPU"): carry [".wheels"], command `scripts/gpu_check_device.sh $OUT`.
# DRY=1 runs the check's CPU dry mode instead (tests/experiments/bench/test_device_wheels.py runs the script so).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-experiments/bench/results/gpu}
shift || true
budget=${BUDGET_S:-360}
python=${PYTHON:-python3}
wheels=(.wheels/gpu/*.whl)
[ -e "${wheels[0]}" ] || { echo "error: no wheels in .wheels/gpu/: run \`make gpu-wheels\` where pip reaches PyPI, and carry .wheels" >&2; exit 3; }
site=$(mktemp -d /tmp/gpu-check-site.XXXXXX)
start=$SECONDS
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --python-version 3.12 --only-binary=:all: --target "$site" "${wheels[@]}" || { echo "error: the carried wheels did not install into $site" >&2; exit 3; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
echo "wheels: ${#wheels[@]} installed into $site in $((SECONDS - start)) s"
DRY=${DRY:-} "$python" - <<'PY' || exit 4
import importlib.metadata as m, os, sys, torch
names = ("lightning", "torchmetrics", "jsonargparse", "submitit", "datasets", "timm", "tensorboard", "numpy")
print("versions:", f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}),",
      ", ".join(f"{n} {m.version(n)}" for n in names))
if os.environ["DRY"]:
    sys.exit(0)
if not torch.cuda.is_available():
    sys.exit("error: torch sees no CUDA device (torch.cuda.is_available() is False): nothing to measure")
torch.zeros(1, device="cuda")  # the first CUDA initialisation, timed by the line below
print(f"device: {torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
PY
echo "ready after $((SECONDS - start)) s"
timeout --signal=INT --kill-after=10 $((budget + 80)) \
    "$python" -m experiments.bench.gpu_check --out "$out" --budget-s "$budget" ${DRY:+--dry} "$@"
status=$?
echo "gpu_check exited $status after $((SECONDS - start)) s in all; results in $out"
exit $status
