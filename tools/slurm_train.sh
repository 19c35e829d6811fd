#!/usr/bin/env bash
# Training under slurm: [GPUS=8] tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py args...]
exec "$(dirname "$0")/slurm_launch.sh" "$1" "$2" train.py "$3" --work-dir "$4" "${@:5}"
