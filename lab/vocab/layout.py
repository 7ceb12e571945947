"""Where the project's own files are: the root of the checkout, its charts and schemas."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHARTS_DIR = ROOT / "charts"
JOB_CHART = CHARTS_DIR / "elastic-pytorchjob"
ETCD_CHART = CHARTS_DIR / "etcd-rendezvous"
NOTICE_CHART = CHARTS_DIR / "spot-notice-handler"
# Schemas the offline checks validate against (the PyTorchJob CRD), carried with the project.
SCHEMAS_DIR = ROOT / "schemas"
