#!/usr/bin/env bash
# Shared by slurm_train.sh / slurm_test.sh: srun tools/SCRIPT with ARGS on PARTITION.
# Environment: GPUS (tasks, default 8), GPUS_PER_NODE (8), CPUS_PER_TASK (5), SRUN_ARGS; PYTHON (see
# pick_python.sh; on a cluster the path must exist on every node).
source "$(dirname "$0")/pick_python.sh"
PARTITION=$1
JOB_NAME=$2
SCRIPT=$3
: "${GPUS:=8}" "${GPUS_PER_NODE:=8}" "${CPUS_PER_TASK:=5}" "${SRUN_ARGS:=}"  # the stock defaults
RESOURCES=(-p "${PARTITION}" --gres=gpu:${GPUS_PER_NODE} --ntasks=${GPUS} --ntasks-per-node=${GPUS_PER_NODE}
           --cpus-per-task=${CPUS_PER_TASK} ${SRUN_ARGS})

# a request Slurm cannot place fails here in one line, before any task starts
if ! command -v srun > /dev/null; then
    echo "error: srun is not on PATH: tools/slurm_${SCRIPT%.py}.sh runs where Slurm's commands are (a login node);" \
         "on one machine use tools/dist_${SCRIPT%.py}.sh" >&2
    exit 1
fi
if ! refusal=$(srun --test-only "${RESOURCES[@]}" true 2>&1); then
    echo "error: Slurm refuses GPUS=${GPUS} tasks, GPUS_PER_NODE=${GPUS_PER_NODE}, CPUS_PER_TASK=${CPUS_PER_TASK}" \
         "on partition '${PARTITION}': ${refusal##*: }" >&2
    exit 1
fi

set -x
PYTHONPATH="$(dirname "$0")/..":$PYTHONPATH \
exec srun "${RESOURCES[@]}" \
    --job-name=${JOB_NAME} \
    --kill-on-bad-exit=1 \
    "$PYTHON" -u "$(dirname "$0")/$SCRIPT" "${@:4}" --launcher slurm
