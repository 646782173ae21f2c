#!/usr/bin/env bash
# The character GPT's training step in tide (eager, traced) and PyTorch (eager,
# torch.compile) on this machine, in alternating rounds, and the ratios.
#
# Usage: bench/peers/gpt_run.sh BUILD_DIR [ROUNDS=3]
#   BUILD_DIR   a tide build with the tide command (-DTIDE_BUILD_EXAMPLES=ON), e.g. build
# Environment (all optional):
#   STEPS=300        steps per run; ms/step is the median over the second half
#   DATA             the corpus (default .data/text/shakespeare.txt: scripts/fetch_text_data.sh)
#   MODES            the configurations (default "tide-eager tide-traced torch-eager torch-compile")
#   TIDE_PEERS_VENV  the peers' venv (default ~/.cache/tide-peers-venv; torch installed if missing)
#   OUT              where the raw JSON lines go (default a new /tmp/tide-gpt.XXXXXX)
# Each round runs every configuration once, in an order rotated per round. Every step ends
# with the host reading the loss (tide: --policy per_batch; torch: float(loss)).
set -euo pipefail
build=${1:?usage: bench/peers/gpt_run.sh BUILD_DIR [ROUNDS=3]}
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${TIDE_PEERS_VENV:-$HOME/.cache/tide-peers-venv}
py=${PYTHON:-python3}
steps=${STEPS:-300}
data=${DATA:-$root/.data/text/shakespeare.txt}
read -r -a modes <<< "${MODES:-tide-eager tide-traced torch-eager torch-compile}"
out=${OUT:-$(mktemp -d /tmp/tide-gpt.XXXXXX)}
mkdir -p "$out"
tide="$build/examples/tide"
[[ -x "$tide" ]] || { echo "no $tide: build tide with -DTIDE_BUILD_EXAMPLES=ON" >&2; exit 1; }
[[ -f "$data" ]] || { echo "no $data: bash scripts/fetch_text_data.sh" >&2; exit 1; }
. "$here/common.sh"
peers_venv_torch  # sets vpy
peers_context "command:       bench/peers/gpt_run.sh $* (STEPS=$steps)" "data:          $data" \
  "out:           $out"

run_one() {  # mode -> one JSON line appended to $out/results.jsonl
  local mode=$1 line
  case $mode in
    tide-eager | tide-traced)
      "$tide" gpt train --data "$data" --steps "$steps" --mode "${mode#tide-}" --eval-every 0 \
        --eval-batches 2 --sample-tokens 0 --json "$out/last.json" > /dev/null
      line=$(cat "$out/last.json") ;;
    torch-eager | torch-compile)
      line=$("$vpy" "$here/gpt_step.py" --data "$data" --steps "$steps" --eval-batches 2 \
        --mode "${mode#torch-}" 2>/dev/null | tail -1) ;;
  esac
  echo "{\"round\": $2, \"config\": \"$mode\", \"result\": $line}" | tee -a "$out/results.jsonl"
}

peers_rotated_rounds "$rounds" "${modes[@]}"
"$py" - "$out/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["config"], {})[r["round"]] = r["result"]["ms_per_step"]
print("\nms/step, median over rounds (per-round values)")
for c, v in by.items():
    print(f"  {c:14s} {statistics.median(v.values()):7.2f}   {[round(x, 2) for x in v.values()]}")
base = by.get("torch-eager")
if base:
    print("ratios to torch-eager, median of per-round ratios")
    for c, v in by.items():
        ratios = [v[k] / base[k] for k in v if k in base]
        print(f"  {c:14s} {statistics.median(ratios):6.3f}")
PY
