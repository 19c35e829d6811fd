#!/usr/bin/env bash
# Distributed testing: tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args...]
exec "$(dirname "$0")/dist_launch.sh" "$3" test.py "$1" "$2" "${@:4}"
