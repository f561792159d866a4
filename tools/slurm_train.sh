#!/usr/bin/env bash
# tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py arguments]: GPUS tasks
# (GPUS_PER_NODE per node, CPUS_PER_TASK cores each) started by srun, --launcher slurm.
# SRUN_ARGS goes to srun as it is; PORT sets the master port (else one derived from the job id).
set -x

PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
PY_ARGS=${@:5}
if [ -n "$PORT" ]; then export MASTER_PORT=$PORT; fi

PYTHONPATH="$(dirname "$0")/..":$PYTHONPATH \
srun -p "${PARTITION}" \
    --job-name="${JOB_NAME}" \
    --gres=gpu:"${GPUS_PER_NODE}" \
    --ntasks="${GPUS}" \
    --ntasks-per-node="${GPUS_PER_NODE}" \
    --cpus-per-task="${CPUS_PER_TASK}" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS} \
    python -u "$(dirname "$0")/train.py" "${CONFIG}" --work-dir="${WORK_DIR}" --launcher="slurm" ${PY_ARGS}
