#!/usr/bin/env bash
# Formats tide's C++ and CUDA sources with the checked-in .clang-format (docs/contributing.md, Comments and
# documents), or checks that they are formatted.
#   bash scripts/format.sh           rewrite every tracked *.h, *.cpp, *.cu in place
#   bash scripts/format.sh --check   list what differs and exit 1 if anything does (CI)
# The output depends on clang-format's major version: the tree is formatted with 14
# (Debian 12's clang-format package, which scripts/deps.sh installs). With another major
# version --check says so and passes, since its rules differ.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
want=14
cf=""
for c in clang-format-$want clang-format; do
  if command -v "$c" >/dev/null 2>&1; then cf=$c; break; fi
done
if [[ -z "$cf" ]]; then
  echo "format.sh: clang-format not found (Debian: apt-get install clang-format)" >&2
  exit 1
fi
major=$("$cf" --version | grep -o 'version [0-9]*' | grep -o '[0-9]*$')
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu')
if [[ "${1:-}" == "--check" ]]; then
  if [[ "$major" != "$want" ]]; then
    echo "format.sh: $cf is version $major, the tree is formatted with $want: not checked"
    exit 0
  fi
  bad=()
  for f in "${files[@]}"; do
    "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    echo "format.sh: ${#bad[@]} of ${#files[@]} files differ from .clang-format (fix: bash scripts/format.sh):"
    printf '  %s\n' "${bad[@]}"
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted ($cf $major)"
  exit 0
fi
[[ "$major" == "$want" ]] || echo "format.sh: warning: $cf is version $major, not $want" >&2
"$cf" -i "${files[@]}"
