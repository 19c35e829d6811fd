#!/usr/bin/env bash
# Distributed training: tools/dist_train.sh CONFIG GPUS [train.py args...]
# On a CPU-only machine GPUS is the number of processes (gloo backend).
exec "$(dirname "$0")/dist_launch.sh" "$2" train.py "$1" "${@:3}"
