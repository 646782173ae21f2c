#!/usr/bin/env bash
# Makes, here, everything one call on a GPU machine needs, in folders git ignores, and
# prints the folders to carry along and the command to run there (docs/gpu.md):
#   .deps/tide-gpu-deps.tar.xz  OpenBLAS, GoogleTest, Google Benchmark and zlib from this
#                               machine's Debian packages (scripts/gpu_deps.sh pack), for a
#                               GPU machine without a package registry
#   .data/fashion-mnist/        the Fashion-MNIST IDX files (the CNN and MLP runs of `all`)
#   .data/text/                 the Shakespeare corpus and GPT-2's BPE files (about 6.5 MB,
#                               scripts/fetch_text_data.sh), which the text suite reads
# Nothing is fetched at run time there. The device tool carries at most 64 MiB: the total is
# checked here.
#   bash scripts/gpu_prepare.sh
set -euo pipefail
# shellcheck source=scripts/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
cd "$TIDE_ROOT"

tide_deps
bash scripts/gpu_deps.sh pack
data=/usr/share/datasets/fashion-mnist
if [ -d "$data" ]; then
  mkdir -p .data/fashion-mnist
  cp -u "$data"/* .data/fashion-mnist/
  tide_log "copied Fashion-MNIST to .data/fashion-mnist"
else
  tide_log "no $data (Debian's dataset-fashion-mnist): the training runs of 'all' will skip"
fi
bash scripts/fetch_text_data.sh
carry=(.deps)
[ -d .data ] && carry+=(.data)
total=$(du -scm "${carry[@]}" | tail -n 1 | cut -f1)
if [ "$total" -gt 64 ]; then
  echo "the folders to carry take ${total} MiB, more than the 64 MiB a device call carries" >&2
  exit 1
fi
echo "carry (${total} MiB): ${carry[*]}"
echo "run:   TIDE_FASHION_MNIST=.data/fashion-mnist bash scripts/gpu_check.sh quick"
echo "then:  bash scripts/gpu_check.sh gpt   (GPT-2 124M against PyTorch, about 8 minutes)"
