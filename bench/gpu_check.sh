#!/usr/bin/env bash
# The device check in one call: `make test-gpu`, then `make bench-gpu`, on a machine with CUDA
# whose python3 has torch but reaches no package registry (see ../shared/gpu/README.md).
#
#   where a registry is reachable, once:   bash bench/gpu_check.sh prepare
#   on the device, from the checkout root: bash bench/gpu_check.sh [all|tests|bench] [BENCH_GPU_ARGS...]
#                                          bash bench/gpu_check.sh first-eval [NUM_NODES]
#
# `prepare` downloads the wheels the device lacks (hydra-core, omegaconf, pymetis, antlr4) into
# .gpu/ (git-ignored) by ../shared/gpu/prepare.sh's recipe, which works in a git worktree too,
# and copies ../shared/gpu/on-device.sh there; ship .gpu/ with the checkout (a device runner's
# `carry: [".gpu"]`). On the device the script re-enters itself through .gpu/on-device.sh
# (wheels into /tmp/site, versions and GPUs printed), runs both targets with that python3 in
# place of the project's .venv, and, when $OUT is set, leaves there the whole log
# (gpu_check.log), outputs/bench/results.json and the bench jobs' logs.
# `tests` or `bench` runs one target only (device time is short: split the check over two
# calls if both do not fit one). BENCH_GPU_ARGS go to `python -m bench.gpu` (e.g. `1000000
# --epochs=2`, or `2449029 --only=dist` for one part; default: products scale, every part). GPU_CHECK_TESTS_S / GPU_CHECK_BENCH_S, when set,
# bound each target in seconds (SIGINT at the bound, so pytest still prints its summary) and
# the logs and results gathered so far are kept: one device call has a fixed length.
# `first-eval` runs only `python -m bench.first_eval` on the GPU (products scale unless
# NUM_NODES): both workloads' models, the GPU-sampled job's path then the CPU-sampled one's, each
# bounded by GPU_CHECK_BENCH_S when set (a short device call; the dataset is generated once).
# Exit status: test-gpu's if it failed, else bench-gpu's (first-eval: its last failure's).
set -u
cd "$(dirname "$0")/.."

shared_dir() {
  local common
  for dir in "${DISTGNN_SHARED:-}" ../shared/gpu; do
    [ -n "$dir" ] && [ -f "$dir/on-device.sh" ] && { echo "$dir"; return 0; }
  done
  common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null) &&
    [ -f "$common/../../shared/gpu/on-device.sh" ] && { echo "$common/../../shared/gpu"; return 0; }
  echo "gpu_check: ../shared/gpu/on-device.sh not found; set DISTGNN_SHARED to that folder" >&2
  return 1
}

prepare() {
  local shared py plat pyver
  shared=$(shared_dir) || exit 3
  py=${PYTHON:-python3}
  pyver() { sed -n "s/.*\"$1==\([^\"]*\)\".*/\1/p" pyproject.toml | head -1; }
  plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
  mkdir -p .gpu
  # shellcheck disable=SC2086
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $plat -d .gpu "hydra-core==$(pyver hydra-core)" "omegaconf==$(pyver omegaconf)" \
    "pymetis==$(pyver pymetis)" || exit 3
  "$py" -m pip wheel -q --no-deps -w .gpu antlr4-python3-runtime==4.9.3 || exit 3
  cp "$shared/on-device.sh" .gpu/
  ls -la .gpu
}

bounded() {  # bounded SECONDS COMMAND...: COMMAND, interrupted after SECONDS when > 0
  local seconds=$1
  shift
  if [ "$seconds" -gt 0 ]; then
    timeout -s INT -k 30 "$seconds" "$@"
  else
    "$@"
  fi
}

inside() {
  local bin mk tests=0 bench=0 mode=all layers hidden sampler
  case "${1:-}" in all|tests|bench|first-eval) mode=$1; shift ;; esac
  bin=${TMPDIR:-/tmp}/distgnn-bin-$$
  mkdir -p "$bin" && touch "$bin/.installed"
  trap 'rm -rf "$bin"' EXIT
  printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > "$bin/python"
  chmod +x "$bin/python"
  mk=(make --no-print-directory "BIN=$bin" "STAMP=$bin/.installed")
  if [ "$mode" = first-eval ]; then
    for layers in 2 3; do
      hidden=$((layers == 2 ? 128 : 256))
      for sampler in cuda cpu; do
        bounded "${GPU_CHECK_BENCH_S:-0}" "$bin/python" -m bench.first_eval "${1:-2449029}" \
          --device=cuda --sampler=$sampler --layers=$layers --hidden=$hidden --threads=8 \
          --root=outputs/bench/gpu --tag=$sampler-sampler || bench=$?
      done
    done
  fi
  if [ "$mode" != bench ] && [ "$mode" != first-eval ]; then
    bounded "${GPU_CHECK_TESTS_S:-0}" "${mk[@]}" test-gpu
    tests=$?
  fi
  if [ "$mode" != tests ] && [ "$mode" != first-eval ]; then
    bounded "${GPU_CHECK_BENCH_S:-0}" "${mk[@]}" bench-gpu "BENCH_GPU_ARGS=$*"
    bench=$?
  fi
  if [ -n "${OUT:-}" ]; then
    cp outputs/bench/results.json "$OUT/" 2>/dev/null
    for run in outputs/bench/gpu/run-*; do
      [ -d "$run" ] && mkdir -p "$OUT/${run##*/}" && cp "$run"/*.log "$OUT/${run##*/}/" 2>/dev/null
    done
  fi
  echo "gpu_check ($mode): make test-gpu exit $tests, make bench-gpu exit $bench"
  [ "$tests" -ne 0 ] && exit "$tests"
  exit "$bench"
}

case "${1:-}" in
  prepare) prepare ;;
  --inside) shift; inside "$@" ;;
  *)
    [ -f .gpu/on-device.sh ] || {
      echo "gpu_check: .gpu/on-device.sh missing: run 'bash bench/gpu_check.sh prepare' where a registry is reachable, then ship .gpu/ with the checkout" >&2
      exit 3
    }
    if [ -n "${OUT:-}" ]; then
      bash .gpu/on-device.sh bash bench/gpu_check.sh --inside "$@" 2>&1 | tee "$OUT/gpu_check.log"
      exit "${PIPESTATUS[0]}"
    fi
    exec bash .gpu/on-device.sh bash bench/gpu_check.sh --inside "$@"
    ;;
esac
