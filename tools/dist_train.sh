#!/usr/bin/env bash
# tools/dist_train.sh CONFIG GPUS [train.py arguments]: GPUS processes on this machine through
# torchrun. Several machines: run it on each with NNODES, NODE_RANK, MASTER_ADDR (the first
# machine's address) and PORT set alike.
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}

PYTHONPATH="$(dirname "$0")/..":$PYTHONPATH \
torchrun \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$(dirname "$0")/train.py" \
    "$CONFIG" \
    --seed 0 \
    --launcher pytorch "${@:3}"
