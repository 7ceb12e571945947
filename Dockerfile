# The training image a PyTorchJob runs (JobSpec.image): PyTorch 2.13.0 from PyPI (its CUDA
# and NCCL libraries come as wheels; the GPU driver comes from the node), TorchFT, python-etcd
# for the etcd-v2 rendezvous and the kubernetes client, and of this project the runtime and
# the vocabulary only (`python -m lab.runtime.launch`, `-m lab.runtime.train`, the spot-notice
# handler `-m lab.runtime.notice`, the c10d store `-m lab.runtime.store`): no Pulumi, no
# components, no infrastructure tooling (tests/runtime/test_image.py imports every module of
# this copy with only the base dependencies).
#
#   docker build -t <registry>/elastic-spot-lab/trainer:0.1.0 .
#   elastic-lab submit --stack aks-dev --image <registry>/elastic-spot-lab/trainer:0.1.0
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/elastic-spot-lab
# PyPI's torch 2.13.0 is a CUDA 13 build: the GPU nodes need NVIDIA driver 580 or newer (EKS's
# AL2023 NVIDIA AMIs ship 580; AKS node images installed 570 before their R580 rollout). For nodes
# with an older driver, build with a CUDA 12 variant of the same release from PyTorch's own index,
# where it publishes one:  docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
ARG TORCH_INDEX_URL=""
RUN pip install "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
COPY pyproject.toml README.md ./
COPY lab/__init__.py ./lab/
COPY lab/vocab ./lab/vocab
COPY lab/runtime ./lab/runtime
# Not traces/: a replay of a spot trace is driven from outside the job (the drill evicts and adds
# its nodes), and nothing the image runs reads one.
# The base install only: the training runtime, no infrastructure tooling.
RUN pip install . && python -c "import torch, etcd, torchft.manager, lab.runtime.launch, lab.runtime.train, lab.runtime.train_per_step, lab.runtime.warm, lab.runtime.store, lab.runtime.notice.cli, lab.runtime.sharded_checkpoint, boto3, azure.storage.blob, azure.identity" && command -v torchft_lighthouse
# The user the job's pods run as (lab/vocab/job.py TRAINER_UID), also their fsGroup.
RUN useradd --uid 10001 --create-home trainer
USER 10001
CMD ["python", "-m", "lab.runtime.launch", "--help"]
