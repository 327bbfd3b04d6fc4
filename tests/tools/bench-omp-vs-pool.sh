#!/bin/bash
# OpenMP's own waiting settings against um-pool, 2 threads, same model, 0/1/2 busy processes.
# usage: UNMASK_BEFORE=old-unmask-cli (built with OpenMP loops) tests/tools/bench-omp-vs-pool.sh MODEL.gguf
set -u
unset OPENBLAS_CORETYPE
M=${1:?model}
U=${UNMASK_CLI:-build-ci/app/unmask-cli}
OLD=${UNMASK_BEFORE:?an unmask-cli built before um-pool}
PASSES=${PASSES:-20}
ms () { /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f" % (1000*d["seconds_per_forward"]))' 2>/dev/null || echo err; }
run () { # busy "VAR=value or empty" binary [--threads N]
  local busy=$1 var=$2 bin=$3; shift 3
  local pids=()
  for ((i = 0; i < busy; i++)); do (while :; do :; done) & pids+=($!); done
  env $var "$bin" bench -m "$M" --canvas 96 --passes $PASSES --no-sgemm "$@" 2>/dev/null | ms
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
}
echo "| load | OpenMP default | OMP_WAIT_POLICY=passive | GOMP_SPINCOUNT=10000 | OMP_WAIT_POLICY=active | um-pool 2 threads | um-pool default |"
echo "|---|---|---|---|---|---|---|"
for busy in 0 1 2; do
  echo "| $([ $busy = 0 ] && echo quiet || echo "$busy busy") | $(run $busy "" $OLD --threads 2) | $(run $busy OMP_WAIT_POLICY=passive $OLD --threads 2) | $(run $busy GOMP_SPINCOUNT=10000 $OLD --threads 2) | $(run $busy OMP_WAIT_POLICY=active $OLD --threads 2) | $(run $busy "" $U --threads 2) | $(run $busy "" $U) |"
done
