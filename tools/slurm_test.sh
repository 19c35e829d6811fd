#!/usr/bin/env bash
# Testing under slurm: [GPUS=8] tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]
exec "$(dirname "$0")/slurm_launch.sh" "$1" "$2" test.py "$3" "$4" "${@:5}"
