#!/usr/bin/env bash
# Burn-in on a real GPU machine: `python3 -m burnin run --profile h200-sxm-8 --level quick`
# with the real NVML (pynvml from nvidia-ml-py) and the torch GPU stress check, plus
# nvidia-smi captures parsed by burnin's own parsers.
#
# Written for the lent one-GPU H200 (see docs/burnin.md): the image's python3 holds torch
# and nvidia-ml-py; DCGM, nccl-tests and the IB tools are absent there, so those checks
# must come back as `error` (a missing tool is never a pass) and the GPU count check must
# fail with 1 of 8. Run from the repository root. Results go to $OUT (default ./out/device):
#   result.json  run.log  env.txt  smi-q.txt  smi-q.xml  parse-smi-q.json  parse-smi-x.json  run.tgz
set -u
OUT="${OUT:-$PWD/out/device}"
mkdir -p "$OUT"
RUN_DIR="$(mktemp -d /tmp/burnin-run.XXXXXX)"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "python: $("$PY" -V 2>&1)"
  "$PY" - <<'EOF' 2>&1
import importlib
for mod in ("torch", "pynvml"):
    try:
        m = importlib.import_module(mod)
        print(f"{mod}: {getattr(m, '__version__', 'present')}")
    except Exception as exc:  # report, do not stop
        print(f"{mod}: missing ({exc})")
EOF
  for tool in nvidia-smi dcgmi all_reduce_perf ibstat ibv_devinfo dmesg; do
    printf '%s: %s\n' "$tool" "$(command -v "$tool" || echo 'not on PATH')"
  done
} >"$OUT/env.txt" 2>&1

# Evidence captures, and burnin's own parsers run on real H200 output.
if command -v nvidia-smi >/dev/null; then
  timeout 60 nvidia-smi -q >"$OUT/smi-q.txt" 2>&1
  timeout 60 nvidia-smi -q -x >"$OUT/smi-q.xml" 2>&1
  "$PY" -m burnin parse nvidia-smi "$OUT/smi-q.txt" >"$OUT/parse-smi-q.json" 2>&1
  "$PY" -m burnin parse nvidia-smi "$OUT/smi-q.xml" >"$OUT/parse-smi-x.json" 2>&1
fi

# The burn-in itself. Exit 1 is expected on this machine (1 of 8 GPUs, tools absent).
timeout 420 "$PY" -m burnin run --profile h200-sxm-8 --level quick --out "$RUN_DIR" \
  >"$OUT/run.log" 2>&1
rc=$?
echo "burnin exit code: $rc" >>"$OUT/run.log"
cp "$RUN_DIR/result.json" "$OUT/result.json" 2>>"$OUT/run.log"
tar -C "$RUN_DIR" -czf "$OUT/run.tgz" . 2>>"$OUT/run.log"

# The GEMM verification must catch wrong results on the real GPU too: one corrupted
# element in one soak iteration (a flaky SM), and a GPU that is consistently wrong.
"$PY" - >>"$OUT/run.log" 2>&1 <<'PYEOF'
import torch
from burnin import gpu_stress

dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a local dry run of this script
n, nbytes = (8192, 1 << 28) if dev == "cuda" else (256, 1 << 20)
calls = [0]

def flaky(a, b, out):
    torch.matmul(a, b, out=out)
    calls[0] += 1
    if calls[0] == 40:  # inside the soak: call 1 is the reference, 2-11 are timed
        out[7, 7] += 1

g = gpu_stress.run(3, n, copy_bytes=nbytes, device_type=dev, matmul=flaky).gpus[0]
print(f"fault-injection flaky: mismatches={g.gemm_mismatches} iterations={g.gemm_iterations} "
      f"reference_ok={g.gemm_reference_ok}")
g = gpu_stress.run(2, n, copy_bytes=nbytes, device_type=dev,
                   matmul=lambda a, b, out: torch.matmul(a * 1.02, b, out=out)).gpus[0]
print(f"fault-injection wrong: mismatches={g.gemm_mismatches} reference_ok={g.gemm_reference_ok} "
      f"max_rel_error={g.gemm_reference_max_rel_error:.4f}")
PYEOF

# A short summary on stdout for the caller.
cat "$OUT/run.log"
"$PY" - "$OUT/result.json" <<'EOF' 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
print("verdict:", doc["verdict"])
for c in doc["checks"]:
    print(f'{c["verdict"]:5} {c["name"]:16} {c["reason"][:160]}')
    for f in c["findings"]:
        print(f'      {f["verdict"]:5} {f["name"]:26} measured={json.dumps(f["measured"])[:150]}')
EOF
exit 0
