#!/usr/bin/env bash
# Set up, then run the main job on the embedded default: the whole self-distillation loop of
# examples/quickstart.yaml (Qwen2.5-Coder-0.5B as root and sub, in process, on CPU):
#   pull the model -> 4 training + 4 held-out CUAD rooms (no shared document) -> base root on
#   the held-out rooms -> training episodes with the worked example -> grade -> rejection
#   sampling -> export with the plain prompt -> LoRA SFT (a checkpoint per epoch) -> each
#   checkpoint checked on the training rooms, the best by behaviour kept -> tuned root on the
#   held-out rooms (same seeds) -> report (experiments/quickstart/reports/r1/report.md).
# `bash scripts/quickstart.sh --seed N` offsets the training and evaluation seeds (not the
# rooms) and runs in experiments/quickstart-seedN.
# Re-running resumes: finished stages are skipped. Extra arguments go to `rlmdistill loop`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/rlmdistill models pull qwen2.5-coder-0.5b
.venv/bin/rlmdistill loop examples/quickstart.yaml "$@"
ws=experiments/quickstart  # --seed N (N > 0) runs in experiments/quickstart-seedN
args=("$@")
for i in "${!args[@]}"; do
  case "${args[$i]}" in
    --seed=*) seed="${args[$i]#--seed=}" ;;
    --seed) seed="${args[$((i + 1))]:-0}" ;;
  esac
done
if [[ -n "${seed:-}" && "$seed" != 0 ]]; then ws="$ws-seed$seed"; fi
.venv/bin/rlmdistill lineage "$ws"
echo "report: $ws/reports/r1/report.md"
