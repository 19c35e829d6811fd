#!/usr/bin/env bash
# Shared by slurm_train.sh / slurm_test.sh: srun tools/SCRIPT with ARGS on PARTITION.
# Environment: GPUS (tasks, default 8), GPUS_PER_NODE (8), CPUS_PER_TASK (5), SRUN_ARGS; PYTHON (see
# pick_python.sh; on a cluster the path must exist on every node).
source "$(dirname "$0")/pick_python.sh"
set -x
PARTITION=$1
JOB_NAME=$2
SCRIPT=$3
: "${GPUS:=8}" "${GPUS_PER_NODE:=8}" "${CPUS_PER_TASK:=5}" "${SRUN_ARGS:=}"  # the stock defaults

PYTHONPATH="$(dirname "$0")/..":$PYTHONPATH \
exec srun -p ${PARTITION} \
    --job-name=${JOB_NAME} \
    --gres=gpu:${GPUS_PER_NODE} \
    --ntasks=${GPUS} \
    --ntasks-per-node=${GPUS_PER_NODE} \
    --cpus-per-task=${CPUS_PER_TASK} \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS} \
    "$PYTHON" -u "$(dirname "$0")/$SCRIPT" "${@:4}" --launcher slurm
