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
# It runs the bare C JSON Lines ping-pong (the baseline), then
# bench/host_bench.lua inside smolwf against the minimal C provider.
# STREAM_BYTES (default 1 GiB) is what the peak-RSS run streams.
set -eu
build=${1:?usage: bench/host_bench.sh BUILD_DIR [STREAM_BYTES]}
here=$(cd "$(dirname "$0")" && pwd)
stream=${2:-1073741824}

pingpong=$("$build/bench/smolwf-bench-pingpong" 20000)
echo "$pingpong" | sed 's/^/bare C ping-pong: /'
median=$(echo "$pingpong" | awk '/median/ {print $2}')
exec "$build/smolwf" "$here/host_bench.lua" "$build/bench/smolwf-bench-provider" "$median" "$stream"
