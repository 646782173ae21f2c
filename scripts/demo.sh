#!/usr/bin/env bash
# Builds the `tide` command (Release, in build/) and runs `tide demo` with this script's
# arguments. Installs missing Debian packages first. Usage: bash scripts/demo.sh [ARGS...]
set -euo pipefail
# shellcheck source=scripts/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
cd "$TIDE_ROOT"

tide_deps
tide_configure build -DCMAKE_BUILD_TYPE=Release -DTIDE_BUILD_EXAMPLES=ON
tide_build build --target tide_cli
tide_log "./build/examples/tide demo $*"
exec ./build/examples/tide demo "$@"
