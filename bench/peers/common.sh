# Sourced by the bench/peers scripts (run.sh, ddp_run.sh, cnn_run.sh).
#
# The peers' venv ($venv, created with $py when missing, shared by every script) at
# requirements.txt's pins. Needs: here, venv, py. Each function sets vpy, the venv's python.
#   peers_venv_full   every peer (run.sh), reinstalled when requirements.txt changed
#   peers_venv_torch  torch and numpy only (ddp_run.sh, cnn_run.sh), installed when missing
# torch: the CPU-only wheel from download.pytorch.org when that index answers, else the
# PyPI wheel (it pulls ~3 GB of CUDA wheels it never uses on the CPU).

peers_venv_create() {
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "== creating the venv $venv"
    "$py" -m venv "$venv"
  fi
  vpy="$venv/bin/python"
}

# Installs requirements.txt's torch pin from the CPU-only index when it answers.
peers_venv_cpu_torch() {
  local torch_pin
  torch_pin=$(grep -E '^torch==' "$here/requirements.txt" || true)
  if [[ -n "$torch_pin" ]] &&
     curl -sf -o /dev/null --max-time 15 https://download.pytorch.org/whl/cpu/torch/; then
    echo "   download.pytorch.org answers: the CPU-only $torch_pin first"
    "$vpy" -m pip install "$torch_pin" --index-url https://download.pytorch.org/whl/cpu
  else
    echo "   download.pytorch.org does not answer: the default PyPI wheel"
  fi
}

peers_venv_full() {
  peers_venv_create
  local req="$here/requirements.txt" stamp="$venv/.tide-peers-requirements.sha256" want
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "== installing $req into $venv"
    "$vpy" -m pip install -q --upgrade pip
    peers_venv_cpu_torch
    "$vpy" -m pip install -r "$req"
    echo "$want" > "$stamp"
  fi
}

peers_venv_torch() {
  peers_venv_create
  if ! "$vpy" -c "import torch, numpy" 2>/dev/null; then
    echo "== installing torch and numpy into $venv"
    peers_venv_cpu_torch
    "$vpy" -m pip install $(grep -E '^(torch|numpy)==' "$here/requirements.txt")
  fi
}

# The machine's 1-, 5- and 15-minute load.
load() { cut -d' ' -f1-3 /proc/loadavg; }

# Prints the machine's context, then each argument as a line of its own ("command: ..."),
# and keeps it in $out/context.txt. Needs: out.
peers_context() {
  {
    echo "date (UTC):    $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "cpu:           $(lscpu | sed -n 's/^Model name: *//p')"
    echo "cores:         $(nproc) (lscpu: $(lscpu | sed -n 's/^CPU(s): *//p') CPUs)"
    echo "kernel:        $(uname -r)"
    echo "load at start: $(load)"
    printf '%s\n' "$@"
  } | tee "$out/context.txt"
}

# Runs `run_one CONFIG ROUND` for every config in every round, the order rotated by one per
# round so that no config always runs first. Usage: peers_rotated_rounds ROUNDS CONFIG...
peers_rotated_rounds() {
  local rounds=$1 r i
  shift
  local configs=("$@") n=$#
  for ((r = 1; r <= rounds; r++)); do
    for ((i = 0; i < n; i++)); do run_one "${configs[$(((i + r) % n))]}" "$r"; done
  done
}
