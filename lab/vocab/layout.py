"""Where the project's own files are: the root of the checkout, its charts, schemas and the spot
traces it carries."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHARTS_DIR = ROOT / "charts"
JOB_CHART = CHARTS_DIR / "elastic-pytorchjob"
ETCD_CHART = CHARTS_DIR / "etcd-rendezvous"
NOTICE_CHART = CHARTS_DIR / "spot-notice-handler"
# Schemas the offline checks validate against (the PyTorchJob CRD), carried with the project.
SCHEMAS_DIR = ROOT / "schemas"
# Real spot capacity traces the project carries (their licences allow it; traces/README.md
# names each one's source), replayed by name (lab.vocab.spot_trace).
TRACES_DIR = ROOT / "traces"
