#!/usr/bin/env bash
# One short GPU check (about 8 minutes on one GPU; every step has its own timeout, 480 s in
# all). It runs:
#   1. the GPU tests (device placement, precision);
#   2. data-parallel parity on the GPU: 2 ranks of batch 64 against 1 process of batch 128
#      (nccl with 2+ GPUs; with one GPU both ranks share it through gloo, which still
#      runs the collectives on CUDA tensors);
#   3. L2E vs cSGHMC vs SGHMC on ResNet20-FRN over the CIFAR-10 subset (3 000 steps);
#   4. the vision fine-tuning bench at a GPU size (5 000 images, 1 seed).
# Results: JSON under benchmarks/results/gpu/ (copied to $OUT when the device tool sets it).
#
#   BDLKIT_DATA=/path/to/data bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
RES=benchmarks/results/gpu
mkdir -p "$RES"
for d in "${BDLKIT_DATA:-}" ../shared/data shared/data; do
  if [ -n "$d" ] && [ -d "$d/cifar10_jpeg_subset" ]; then export BDLKIT_DATA=$(cd "$d" && pwd); break; fi
done
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")
[ "$GPUS" -ge 1 ] || { echo "gpu_check: no CUDA device" >&2; exit 1; }
$PY -c "import json, torch; print(json.dumps({'gpus': torch.cuda.device_count(), 'device': torch.cuda.get_device_name(0), 'torch': torch.__version__, 'data': '${BDLKIT_DATA:-none}'}))" > "$RES/machine.json"
if [ -z "${BDLKIT_DATA:-}" ]; then echo "gpu_check: no data folder with cifar10_jpeg_subset: set BDLKIT_DATA" >&2; fi

# 1. the tests that use a GPU
timeout 40 $PY -m pytest -q -p no:cacheprovider tests/engine/test_placement.py tests/test_precision.py \
    --junitxml="$RES/tests.xml" > "$RES/tests.log" 2>&1 || echo "gpu tests: failures (see $RES/tests.log)" >&2

# 2. parity: 2 ranks x 64 against 1 x 128, 50 steps of SGHMC on ResNet20-FRN
FIT="-m bdlkit fit --method sghmc --model resnet20_frn --data cifar10 --device cuda --steps 50 --no-progress --overwrite --checkpoint-every 50"
if [ "$GPUS" -ge 2 ]; then BACKEND=nccl; else BACKEND=gloo; fi
BDLKIT_DIST_BACKEND=$BACKEND CUDA_VISIBLE_DEVICES=$([ "$GPUS" -ge 2 ] && echo 0,1 || echo 0) \
  timeout 70 $PY -m torch.distributed.run --standalone --nproc-per-node 2 $FIT --batch-size 64 \
  --out "$RES/parity-2x64" > "$RES/parity-2x64.log" 2>&1 || echo "parity 2x64: failed" >&2
if [ "$GPUS" -lt 2 ]; then  # both ranks on GPU 0: nccl needs one GPU per rank
  sed -i 's/^/[ranks share GPU 0] /' "$RES/parity-2x64.log"
fi
timeout 40 $PY $FIT --batch-size 128 --out "$RES/parity-1x128" > "$RES/parity-1x128.log" 2>&1 \
  || echo "parity 1x128: failed" >&2
$PY - <<'PY' > "$RES/parity.json" || echo "parity: no comparison" >&2
import json
from safetensors.torch import load_file
from bdlkit.engine.checkpoint import latest_checkpoint
a = load_file(latest_checkpoint("benchmarks/results/gpu/parity-2x64/checkpoints"))
b = load_file(latest_checkpoint("benchmarks/results/gpu/parity-1x128/checkpoints"))
gap = max((a[k].double() - b[k].double()).abs().max().item() for k in a
          if k.startswith("state/") and a[k].is_floating_point())
print(json.dumps({"max_abs_state_gap_after_50_steps": gap, "float32": True}))
PY

# 3. L2E vs cSGHMC vs SGHMC on ResNet20-FRN, 3 000 steps each
for m in l2e csghmc sghmc; do
  extra=""; [ "$m" = csghmc ] && extra="--lr 0.05"
  timeout 70 $PY -m bdlkit fit --method $m $extra --model resnet20_frn --data cifar10 --device cuda \
      --steps 3000 --batch-size 128 --no-progress --overwrite --out "$RES/resnet-$m" \
      > "$RES/resnet-$m.log" 2>&1 || echo "$m: stopped (see $RES/resnet-$m.log)" >&2
done

# 4. the vision bench at a GPU size
timeout 120 $PY - <<'PY' > "$RES/vision.log" 2>&1 || echo "vision bench: stopped (see $RES/vision.log)" >&2
from pathlib import Path
from bdlkit.bench import vision
sizes = vision.Sizes(train=5000, map_steps=1000, vi_steps=500, test=5000, draws=16, seeds=1,
                     batch=128)
vision.run(Path("benchmarks/results/gpu/vision"), sizes=sizes,
           command="scripts/gpu_check.sh (step 4)")
PY

$PY - <<'PY'
import json, pathlib
res = pathlib.Path("benchmarks/results/gpu")
summary = {"machine": json.loads((res / "machine.json").read_text())}
for name in ("parity.json",):
    p = res / name
    summary[name] = json.loads(p.read_text()) if p.exists() and p.stat().st_size else "missing"
for d in sorted(res.glob("resnet-*")):
    m = d / "metrics.json"
    summary[d.name] = ({k: json.loads(m.read_text()).get(k) for k in ("accuracy", "nll", "ece")}
                       if m.exists() else "missing")
v = res / "vision" / "results.json"
summary["vision"] = json.loads(v.read_text())["rows"] if v.exists() else "missing"
(res / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
print(json.dumps(summary, indent=1, default=str))
PY
if [ -n "${OUT:-}" ]; then cp -r "$RES" "$OUT/"; fi
