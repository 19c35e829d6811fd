#!/usr/bin/env bash
# Shared by dist_train.sh / dist_test.sh: torchrun NPROC copies of tools/SCRIPT with ARGS.
# Environment: NNODES, NODE_RANK, PORT, MASTER_ADDR (the stock OpenMMLab variables); PYTHON (see pick_python.sh).
source "$(dirname "$0")/pick_python.sh"
NPROC=$1
SCRIPT=$2
: "${NNODES:=1}" "${NODE_RANK:=0}" "${PORT:=29500}" "${MASTER_ADDR:=127.0.0.1}"  # the stock defaults

PYTHONPATH="$(dirname "$0")/..":$PYTHONPATH \
exec "$PYTHON" -m torch.distributed.run \
    --nnodes=$NNODES \
    --node_rank=$NODE_RANK \
    --master_addr=$MASTER_ADDR \
    --nproc_per_node=$NPROC \
    --master_port=$PORT \
    "$(dirname "$0")/$SCRIPT" "${@:3}" --launcher pytorch
