#!/usr/bin/env bash
# Download the wheels .ci/gpu_check.sh installs on a GPU machine that cannot reach a package index, into
# .whl/ (git-ignored): what assocmem needs beyond that machine's image (torch, triton, transformers,
# einops, PyYAML, safetensors, ... are there; pydantic and FLA are not). Versions: constraints.txt where
# it pins them, else pyproject's [cuda] extra. Python 3.12 on x86-64 Linux, as the device image has.
#   make gpu-wheels        (or: bash .ci/gpu_wheels.sh [PYTHON])
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:-${PYTHON:-python3}}
FLA=flash-linear-attention==0.6.0  # as pyproject's [cuda] extra
pinned() {  # NAME==VERSION from constraints.txt (names compared case- and -/_-insensitively)
  local want line
  want=$(echo "$1" | tr 'A-Z_' 'a-z-')
  while IFS= read -r line; do
    [[ $line == *==* && $line != \#* ]] || continue
    if [[ $(echo "${line%%==*}" | tr 'A-Z_' 'a-z-') == "$want" ]]; then echo "$line"; return; fi
  done < constraints.txt
  echo "gpu_wheels: $1 is not pinned in constraints.txt" >&2; exit 1
}
wheels=("$FLA")
for name in fla-core pydantic pydantic-core annotated-types typing-inspection typing-extensions; do
  wheels+=("$(pinned "$name")")
done
rm -rf .whl && mkdir .whl
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${wheels[@]}"
ls -l .whl
du -sh .whl
