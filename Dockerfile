# The training image a PyTorchJob runs (JobSpec.image): PyTorch 2.13.0 from PyPI (its CUDA
# and NCCL libraries come as wheels; the GPU driver comes from the node), python-etcd for the
# etcd-v2 rendezvous, and this project for `python -m lab.runtime.launch` and `-m lab.runtime.train`.
#
#   docker build -t <registry>/elastic-spot-lab/trainer:0.1.0 .
#   elastic-lab submit --stack aks-dev --image <registry>/elastic-spot-lab/trainer:0.1.0
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/elastic-spot-lab
RUN pip install "torch==2.13.0"
COPY pyproject.toml README.md ./
COPY lab ./lab
COPY components ./components
# The base install only: training runtime, no infrastructure tooling.
RUN pip install . && python -c "import torch, etcd, torchft.manager, lab.runtime.launch, lab.runtime.train, lab.runtime.train_per_step, lab.runtime.warm, lab.runtime.store, lab.runtime.notice" && command -v torchft_lighthouse
RUN useradd --uid 10001 --create-home trainer
USER 10001
CMD ["python", "-m", "lab.runtime.launch", "--help"]
