#!/bin/sh
# The host benchmark: prints figures, passes or fails nothing.
#
#   bench/host_bench.sh BUILD_DIR [STREAM_BYTES]
#
# BUILD_DIR is a cmake build of this repo with the targets smolwf,
# smolwf-bench-provider and smolwf-bench-pingpong built, e.g.
#   cmake -S . -B /tmp/build && cmake --build /tmp/build -j2 \
#     --target smolwf smolwf-bench-provider smolwf-bench-pingpong
#   bench/host_bench.sh /tmp/build
# It runs bench/host_bench.lua inside smolwf against the minimal C
# provider, with rounds of the bare C JSON Lines ping-pong (the baseline)
# interleaved: pinned to one CPU, then as the scheduler places the
# processes (see host_bench.lua), then throughput and memory.
# STREAM_BYTES (default 1 GiB) is what the peak-RSS run streams.
set -eu
build=${1:?usage: bench/host_bench.sh BUILD_DIR [STREAM_BYTES]}
here=$(cd "$(dirname "$0")" && pwd)
stream=${2:-1073741824}

set -- "$build/smolwf" "$here/host_bench.lua" "$build/bench/smolwf-bench-provider" \
  "$build/bench/smolwf-bench-pingpong" "$stream"
cpu=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')
echo "== pinned to CPU $cpu (both sides: their CPU cost and context switches)"
taskset -c "$cpu" "$@" sequential
echo "== as the scheduler places them (cross-CPU wake-ups included)"
"$@" sequential
echo "== throughput and memory"
"$@" rest
