"""The drill's verdict on scripts of one's own, every class of the catalogue under every
eviction: is each verdict the one deserved (no false PASS, no false FAIL), and how long the drill
took to give it. The classes are toy_ddp.py's habits (tests/drill/scripts/catalogue.py): the
right one, and each that loses work under some eviction.

Run: .venv/bin/python benchmarks/script_verdicts.py [--classes NAME ...] [--evictions hard notice silent]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from lab.drill.run import Progress, run_drill
from lab.vocab.layout import ROOT

sys.path.insert(0, str(ROOT))  # the catalogue lives with the tests: this script's own process
from tests.drill.scripts.catalogue import CLASSES, EVICTIONS, toy_drill


def one(name: str, eviction: str, root: Path) -> dict:
    args, deserved = CLASSES[name]
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-{eviction}-", dir=root))
    cfg = toy_drill(workdir, eviction, args, timeout_s=240)
    started = time.monotonic()
    with open("/dev/null", "w") as quiet:
        report = run_drill(cfg, Progress(out=quiet))
    found = [f["name"] for f in report.findings if not f["accepted"]]
    expected = deserved[eviction]
    right = report.passed == (not expected) and set(expected) <= set(found)
    return {
        "class": name,
        "eviction": eviction,
        "verdict": "PASS" if report.passed else "FAIL",
        "findings": found,
        "deserved": expected,
        "right": right,
        "seconds": time.monotonic() - started,
        "first": report.problems[0] if report.problems else "",
    }


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--classes", nargs="+", choices=sorted(CLASSES), default=list(CLASSES))
    p.add_argument("--evictions", nargs="+", choices=EVICTIONS, default=list(EVICTIONS))
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()
    rows = []
    with tempfile.TemporaryDirectory(prefix="verdicts-") as root:
        for name in args.classes:
            for eviction in args.evictions:
                row = one(name, eviction, Path(root))
                rows.append(row)
                mark = "ok" if row["right"] else "WRONG"
                print(
                    f"{name:34} {eviction:7} {row['verdict']:5} {row['seconds']:5.1f} s  {mark:5} "
                    f"{', '.join(row['findings']) or '-'}",
                    flush=True,
                )
                if not row["right"]:
                    print(
                        f"    deserved {row['deserved'] or 'a PASS'}; first problem: {row['first'][:300]}", flush=True
                    )
    wrong = [r for r in rows if not r["right"]]
    false_pass = sum(1 for r in wrong if r["verdict"] == "PASS")
    false_fail = len(wrong) - false_pass
    print(f"{len(rows)} drills: {len(rows) - len(wrong)} right, {false_pass} false PASS, {false_fail} false FAIL")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
