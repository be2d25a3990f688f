#!/usr/bin/env bash
# Set up, then run the main job on the embedded default:
# pull Qwen2.5-Coder-0.5B -> build a 10-contract CUAD room -> 4 RLM episodes -> grade -> summary.
# Extra arguments go to `rlmdistill quickstart` (see --help), e.g. --episodes 1 --contracts 3.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The 360-contract CUAD subset beside the checkout when present, else the packaged 16-contract sample.
src=()
[ -d ../shared/data/cuad/contracts ] && src=(--cuad ../shared/data/cuad)
.venv/bin/rlmdistill quickstart "${src[@]}" "$@"
