#!/usr/bin/env bash
# The one script for a machine with an NVIDIA GPU (what `make gpu-check` runs).
#
# In one run (a few minutes on an H200): build generated/cuda in place, run its generated
# tests on the GPU, run the chain test of a patched transformers model on the GPU (needs
# transformers), compare CUDA with CPU bit for bit, check batch invariance on the
# device, benchmark the det_gemm family against torch.matmul (cuBLAS), and render det_gemm's
# tensor-core kernel through the generator with other tile configurations, rebuilt, to time
# them.  Writes gpu_report.md and gpu_check.log to $OUT if set, else to the current directory.
# Every stage runs even when an earlier one fails; the exit status is 0 only when all passed.
#
# Needs: python3 with a CUDA build of torch, PyYAML, nvcc, ninja, pytest; for the tiles stage
# also the generator's pydantic and Jinja2 (generated/ itself is committed).  Overrides: PYTHON,
# MAX_JOBS (default: all CPUs), TORCH_CUDA_ARCH_LIST (default: this GPU's arch), CUDA_HOME
# (default: /usr/local/cuda).  Extra arguments go to tools/gpu_check.py (e.g. --only build,tests,
# --dry-run, --op rms_norm --op logp for other ops in the compare, invariance and bench stages).
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=$(pwd)
exec "${PYTHON:-python3}" tools/gpu_check.py --out "${OUT:-$out_dir}" "$@"
