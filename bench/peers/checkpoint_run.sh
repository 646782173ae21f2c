#!/usr/bin/env bash
# Activation recomputation side by side: the character GPT's step in tide (eager with
# outputs allocated at execution, where memory follows execution; traced) with and without
# --recompute or --recompute-selective, and in PyTorch eager with and without
# torch.utils.checkpoint per block (and its selective policy saving the same ops), in
# alternating rounds. Memory: tide's activation peak (allocator) and every run's RSS growth
# over the training loop (peak RSS - RSS at the start); time: ms/step, median of the second
# half.
#
# Usage: bench/peers/checkpoint_run.sh BUILD_DIR [ROUNDS=2]
# Environment (optional): STEPS=40, BATCH=64, DATA, TIDE_PEERS_VENV, OUT (as gpt_run.sh).
set -euo pipefail
build=${1:?usage: bench/peers/checkpoint_run.sh BUILD_DIR [ROUNDS=2]}
rounds=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${TIDE_PEERS_VENV:-$HOME/.cache/tide-peers-venv}
py=${PYTHON:-python3}
steps=${STEPS:-40}
batch=${BATCH:-64}
data=${DATA:-$root/.data/text/shakespeare.txt}
out=${OUT:-$(mktemp -d /tmp/tide-ckpt.XXXXXX)}
mkdir -p "$out"
tide="$build/examples/tide"
[[ -x "$tide" ]] || { echo "no $tide: build tide with -DTIDE_BUILD_EXAMPLES=ON" >&2; exit 1; }
[[ -f "$data" ]] || { echo "no $data: bash scripts/fetch_text_data.sh" >&2; exit 1; }
. "$here/common.sh"
peers_venv_torch  # sets vpy
peers_context "command:       bench/peers/checkpoint_run.sh $* (STEPS=$steps BATCH=$batch)" \
  "data:          $data" "out:           $out"
configs=(tide-exec tide-exec-recompute tide-exec-selective tide-traced tide-traced-recompute
         tide-traced-selective torch torch-checkpoint torch-selective)

run_one() {  # config round -> one JSON line appended to $out/results.jsonl
  local c=$1 line flags=()
  case $c in
    tide-*)
      [[ $c == *-recompute ]] && flags+=(--recompute)
      [[ $c == *-selective ]] && flags+=(--recompute-selective)
      local mode=eager alloc=execution
      [[ $c == tide-traced* ]] && mode=traced && alloc=enqueue
      TIDE_ALLOC=$alloc "$tide" gpt train --data "$data" --steps "$steps" --batch "$batch" \
        --mode "$mode" "${flags[@]}" --eval-every 0 --eval-batches 1 --sample-tokens 0 \
        --json "$out/last.json" > /dev/null
      line=$(cat "$out/last.json") ;;
    torch*)
      [[ $c == torch-checkpoint ]] && flags+=(--checkpoint)
      [[ $c == torch-selective ]] && flags+=(--checkpoint-selective)
      line=$("$vpy" "$here/gpt_step.py" --data "$data" --steps "$steps" --batch "$batch" \
        --eval-batches 1 "${flags[@]}" 2>/dev/null | tail -1) ;;
  esac
  echo "{\"round\": $2, \"config\": \"$c\", \"result\": $line}" >> "$out/results.jsonl"
  echo "   round $2: $c done"
}

peers_rotated_rounds "$rounds" "${configs[@]}"
"$py" - "$out/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["config"], []).append(r["result"])
def rss(x):
    if "rss_peak_bytes" in x:
        return (x["rss_peak_bytes"] - x["rss_start_bytes"]) / 2**20
    return x["rss_peak_mb"] - x["rss_start_mb"]
print("\n| config | ms/step | RSS growth MB | activation peak MB | train loss |")
print("|---|---:|---:|---:|---:|")
for c, xs in by.items():
    ms = statistics.median(x["ms_per_step"] for x in xs)
    r = statistics.median(rss(x) for x in xs)
    act = [x.get("activation_peak_bytes") for x in xs]
    a = f"{statistics.median(act) / 2**20:.1f}" if act[0] is not None else "-"
    print(f"| {c} | {ms:.1f} | {r:.1f} | {a} | {xs[0]['train_loss']:.4f} |")
PY
