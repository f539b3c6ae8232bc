#!/bin/bash
# Pretrains the tiny LM on one node. Usage: run_pretrain.sh [BF16|FP32]
set -eo pipefail

PRECISION=${1:-BF16}
export NEURON_CC_FLAGS="--model-type transformer"
if [[ "$PRECISION" == "BF16" ]]; then
    echo "training in bf16"
    export XLA_USE_BF16=1
else
    echo "training in fp32"
fi

torchrun --nproc_per_node=1 train.py --steps "${STEPS:-8}" --lr 0.05
