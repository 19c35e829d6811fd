#!/usr/bin/env bash
# Shared by dist_train.sh / dist_test.sh: torchrun NPROC copies of tools/SCRIPT with ARGS.
# Environment: NNODES, NODE_RANK, PORT, MASTER_ADDR (the stock OpenMMLab variables); PYTHON (see pick_python.sh).
# On one node without PORT, torchrun's --standalone rendezvous takes a free port, so that two jobs on
# one machine do not both take 29500; several nodes must agree on one, PORT (default 29500).
source "$(dirname "$0")/pick_python.sh"
NPROC=$1
SCRIPT=$2
: "${NNODES:=1}" "${NODE_RANK:=0}" "${MASTER_ADDR:=127.0.0.1}"  # the stock defaults
if [ "$NNODES" = 1 ] && [ -z "${PORT:-}" ]; then
    RENDEZVOUS=(--standalone)
else
    RENDEZVOUS=(--nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" --master_port="${PORT:-29500}")
fi

PYTHONPATH="$(dirname "$0")/..":$PYTHONPATH \
exec "$PYTHON" -m torch.distributed.run \
    "${RENDEZVOUS[@]}" \
    --nproc_per_node=$NPROC \
    "$(dirname "$0")/$SCRIPT" "${@:3}" --launcher pytorch
