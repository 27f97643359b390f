#!/usr/bin/env bash
# GPU check: exactness tests and the engine benchmark on this machine's GPU, as a report.
#   infra/gpu-check.sh [OUT_DIR] [--pair pair.yaml] [--n 50] [--samples 2000]
# Uses the bundled toy pairs (and a pair spec of local checkpoints with --pair); writes
# OUT_DIR/report.md (default gpu-check/). Exit 0: all checks passed; 1: a check failed;
# 2: no CUDA device (or bad input).
set -euo pipefail
cd "$(dirname "$0")/.."
out="gpu-check"
if [[ $# -gt 0 && "$1" != --* ]]; then out="$1"; shift; fi
if [[ -x .venv/bin/specsweep ]]; then bin=.venv/bin/specsweep; else bin=specsweep; fi
exec "$bin" bench gpu --out "$out" "$@"
