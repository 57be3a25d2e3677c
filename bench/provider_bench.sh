#!/bin/sh
# The provider benchmark: prints figures, passes or fails nothing.
#
#   bench/provider_bench.sh BUILD_DIR [EXECS] [STREAM_BYTES]
#
# BUILD_DIR is a cmake build of this repo with the targets smolwf,
# smolwf-provider, smolwf-bench-spawn-loop, smolwf-bench-exec-client and
# smolwf-bench-exec-floor built, e.g.
#   cmake -S . -B /tmp/build && cmake --build /tmp/build -j2 \
#     --target smolwf smolwf-provider smolwf-bench-spawn-loop smolwf-bench-exec-client \
#     smolwf-bench-exec-floor
#   bench/provider_bench.sh /tmp/build
# It runs the exec comparison pinned to one CPU, then everything as the
# scheduler places the processes (see provider_bench.lua).
# EXECS (default 1000) is how many execs each figure is the median of;
# STREAM_BYTES (default 1 GiB) is what the peak-RSS run streams.
set -eu
build=${1:?usage: bench/provider_bench.sh BUILD_DIR [EXECS] [STREAM_BYTES]}
here=$(cd "$(dirname "$0")" && pwd)
set -- "$build/smolwf" "$here/provider_bench.lua" "$build/smolwf-provider" \
  "$build/bench/smolwf-bench-spawn-loop" "${2:-1000}" "${3:-1073741824}"
cpu=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')
echo "== exec pinned to CPU $cpu (both sides: their CPU cost and context switches)"
taskset -c "$cpu" "$@" exec
echo "== as the scheduler places them (cross-CPU wake-ups included)"
"$@" all
