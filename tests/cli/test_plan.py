"""`elastic-lab plan`: text and JSON, exit codes, no torch, no credentials."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lab.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _plan(capsys, *args):
    """`elastic-lab plan ARGS`, of aks-dev unless ARGS name the stacks."""
    named = {"--stack", "-s", "--all-stacks"} & set(args)
    code = main(["plan", *args, *([] if named else ["--stack", "aks-dev"])])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_plan(capsys):
    code, out, _ = _plan(capsys, "--stack", "aks-dev")
    assert code == 0
    assert out.startswith("Plan of stack 'aks-dev' (cloud: aks)")
    assert "└─ elastic-spot-lab:aks:Cluster aks" in out or "├─ elastic-spot-lab:aks:Cluster aks" in out
    assert "azure-native:containerservice:AgentPool aks-gpu-spot" in out
    assert "gpuspot User Spot Standard_NC4as_T4_v3 nodes 0..3 eviction Delete maxPrice -1" in out
    assert "[ignore_changes=['count']]" in out
    assert "kubeconfig                [secret]  (secret)" in out
    assert "apiVersion: v1" not in out  # the (mock) kubeconfig is not printed
    assert "Hourly cost estimate:" in out and "ESTIMATES" in out and "spot saves about" in out
    assert (
        "      query: https://prices.azure.com/api/retail/prices?$filter=serviceName eq 'Virtual Machines' and "
        "armRegionName eq 'eastus' and armSkuName eq 'Standard_NC4as_T4_v3'"
    ) in out
    assert "✓ arm-conformance: ok" in out and "0 error(s)" in out


def test_json_plan(capsys):
    code, out, _ = _plan(capsys, "--stack", "aks-dev", "--json")
    assert code == 0
    doc = json.loads(out)
    assert {"stack", "resources", "outputs", "cost", "findings", "ok"} <= set(doc)
    # Only the warning of a stack whose trainer image is not pushed yet (no spot-notice handler).
    assert doc["stack"] == "aks-dev" and doc["ok"] is True
    assert [(f["check"], f["severity"]) for f in doc["findings"]] == [("platform:trainer-image", "warning")]
    gpu = next(r for r in doc["resources"] if r["name"] == "aks-gpu-spot")
    assert {"type", "name", "parent", "inputs", "options"} <= set(gpu)
    assert gpu["type"] == "azure-native:containerservice:AgentPool"
    assert gpu["parent_type"] == "elastic-spot-lab:aks:Cluster" and gpu["parent_name"] == "aks"
    assert gpu["options"]["ignore_changes"] == ["count"]
    assert gpu["inputs"]["scaleSetPriority"] == "Spot"
    provider = next(
        r for r in doc["resources"] if r["type"] == "pulumi:providers:kubernetes" and r["parent_name"] == "aks"
    )
    assert provider["inputs"]["kubeconfig"] == "[secret]"
    assert doc["outputs"]["kubeconfig"] == "[secret]" and "kubeconfig" in doc["secret_outputs"]
    cost = doc["cost"]
    assert cost["currency"] == "USD" and cost["hourly_min"] < cost["hourly_max"] < cost["hourly_max_on_demand"]
    assert {p["pool"] for p in cost["pools"]} == {"system", "cpu", "gpuspot", "gpuspot2", "gpuondemand"}
    # The GPU capacity ranks: each in rank 1's place; the totals count rank 1 only.
    ranks = cost["ranks"]
    assert [(r["rank"], r["pool"], r["capacity"]) for r in ranks] == [
        (1, "gpuspot", "spot"),
        (2, "gpuspot2", "spot"),
        (3, "gpuondemand", "on-demand"),
    ]
    assert ranks[0]["cluster_at_max"] == cost["hourly_max"] and ranks[0]["extra"] == 0
    assert ranks[2]["cluster_at_max"] == cost["hourly_max_on_demand"]  # the same T4s on demand
    assert ranks[1]["extra"] == round(ranks[1]["at_max"] - ranks[0]["at_max"], 4) > 0


def test_plan_prices_the_on_demand_rank_for_the_job_s_whole_life(capsys):
    """A worker on the on-demand rank keeps its node until the job ends or it is moved: the
    text says so with that rank's cost over rank 1 a worker, at its maximum and for a week,
    from the price table; the JSON gives the same figures per rank."""
    from lab.plan.cost import load_prices

    t4 = load_prices()["azure"]["vm"]["eastus"]["Standard_NC4as_T4_v3"]
    per_worker = t4["on_demand"] - t4["spot"]
    code, out, _ = _plan(capsys, "--stack", "aks-dev")
    assert code == 0
    assert (
        "A worker placed on a fallback rank keeps that node, and its price, until the job ends or the worker is "
        "moved (a spot rank's node also ends at its eviction)"
    ) in out
    assert (
        "The on-demand rank 3 (gpuondemand, Standard_NC4as_T4_v3), kept until the job ends or the worker is moved, "
        f"costs over rank 1: +{per_worker:.3f} USD/h a worker, +{3 * per_worker:.3f} USD/h at 3 worker(s), "
        f"+{3 * per_worker * 24 * 7:.2f} USD a week of the job's life."
    ) in out
    code, out, _ = _plan(capsys, "--stack", "aks-dev", "--json")
    ranks = json.loads(out)["cost"]["ranks"]
    assert [(r["rank"], r["kept_until"]) for r in ranks] == [
        (1, None),
        (2, "until the job ends, the worker is moved or the node is evicted"),
        (3, "until the job ends or the worker is moved"),
    ]
    assert ranks[2]["extra_per_node"] == round(per_worker, 4)
    assert ranks[2]["extra_per_week"] == round(ranks[2]["extra"] * 24 * 7, 2)


def test_show_secrets(capsys):
    _, out, _ = _plan(capsys, "--json", "--show-secrets")
    assert json.loads(out)["outputs"]["kubeconfig"].startswith("apiVersion: v1")


def test_override_and_failing_guardrail_exit_1(capsys):
    code, out, _ = _plan(capsys, "--set", "gpuMinNodes=1")
    assert code == 1
    assert "ERROR [guardrail:gpu-pool] azure-native:containerservice:AgentPool 'aks-gpu-spot': minCount=1" in out


def test_bad_config_exit_2(capsys):
    code, out, err = _plan(capsys, "--set", "gpuVmSize=Standard_D4s_v5")
    assert code == 2 and out == ""
    assert "elastic-spot-lab:gpuVmSize='Standard_D4s_v5' is invalid: expected an NVIDIA GPU VM size" in err


def test_bad_config_json(capsys):
    code, out, _ = _plan(capsys, "--json", "--set", "location=East US")
    doc = json.loads(out)
    assert code == 2 and doc["ok"] is False and "did you mean 'eastus'" in doc["error"]


def test_unknown_stack_exit_2(capsys):
    code, _, err = _plan(capsys, "--stack", "nope")
    assert code == 2 and "stack 'nope' has no config file" in err and "aks-dev" in err


def test_all_stacks_json(capsys):
    code, out, _ = _plan(capsys, "--all-stacks", "--json")
    docs = json.loads(out)
    assert code == 0 and "aks-dev" in {d["stack"] for d in docs} and all(d["ok"] for d in docs)
    # Dependencies are sets to the engine, gathered in an order that changes from run to run
    # (hash seeds): sorted in the output, two plans of the same program diff as equal.
    for doc in docs:
        for r in doc["resources"]:
            opts = r["options"]
            assert opts["depends_on"] == sorted(opts["depends_on"]), r["urn"]
            assert opts["dependencies"] == sorted(opts["dependencies"]), r["urn"]
            assert all(v == sorted(v) for v in opts["property_dependencies"].values()), r["urn"]


@pytest.mark.processes
def test_entry_point_offline_without_torch_or_credentials(tmp_path):
    """The installed command, in a clean environment: no Azure credentials, no Pulumi CLI,
    no network needed, and torch is never imported on the plan path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "ARM_", "PULUMI_"))}
    env["HOME"] = str(tmp_path)
    code = (
        "import sys, json\n"
        "from lab.cli import main\n"
        "rc = main(['plan', '--stack', 'aks-dev', '--json'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["ok"] is True
    exe = Path(sys.executable).with_name("elastic-lab")
    if exe.exists():
        proc = subprocess.run(
            [str(exe), "plan", "--stack", "aks-dev"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "0 error(s)" in proc.stdout


@pytest.mark.parametrize("bad", ["gpuMaxNodes", "=3"])
def test_set_needs_key_value(capsys, bad):
    code, out, err = _plan(capsys, "--set", bad)
    assert code == 2 and out == ""
    assert err.strip() == f"elastic-lab plan: --set={bad!r} is invalid: expected KEY=VALUE, e.g. --set gpuMaxNodes=5"


def test_unknown_check_exit_2_lists_known_checks(capsys):
    code, out, err = _plan(capsys, "--check", "guardrail:gpu-pool", "--check", "guardrail:nope")
    assert code == 2 and out == ""
    assert err.startswith("elastic-lab plan: --check: unknown check(s) 'guardrail:nope': expected one of ")
    assert "guardrail:gpu-pool" in err and "arm-conformance" in err and "Traceback" not in err
    code, out, _ = _plan(capsys, "--json", "--check", "nope")
    doc = json.loads(out)
    assert code == 2 and doc["ok"] is False and "unknown check(s) 'nope'" in doc["error"]


def test_known_check_runs_alone(capsys):
    code, out, _ = _plan(capsys, "--json", "--check", "guardrail:network-policy")
    doc = json.loads(out)
    assert code == 0 and [c["name"] for c in doc["checks"]] == ["guardrail:network-policy"]


def test_cloud_without_cluster_component_exit_2(capsys):
    code, out, err = _plan(capsys, "--set", "cloud=gke")
    assert code == 2 and out == "" and "Traceback" not in err
    assert "elastic-spot-lab:cloud='gke' is invalid: expected one of aks, eks, byo" in err


def test_the_plan_gives_the_checkpoint_interval_at_each_eviction_band(capsys):
    from lab.vocab.checkpoint_interval import daly_interval_s, job_mtbf_s

    _, out, _ = _plan(capsys, "--stack", "eks-dev", "--json", "--save-cost", "1.4")
    rows = json.loads(out)["evictions"]["rows"]
    assert [r["band"] for r in rows] == ["<5%", "5-10%", "10-15%", "15-20%", ">20%"]
    assert {r["pool"] for r in rows} == {"gpu-spot"} and rows[0]["nodes"] == 3
    assert rows[2]["interval_s"] == pytest.approx(daly_interval_s(1.4, job_mtbf_s(0.125, 3)), abs=0.1)
    _, out, _ = _plan(capsys, "--stack", "eks-dev")
    assert "Evictions and checkpoints:" in out and "gpu-spot at 3 node(s): <5% " in out
    _, out, _ = _plan(capsys, "--stack", "byo")
    assert "(no spot pool in this plan)" in out


def test_the_plan_shows_what_spot_saves_at_a_chosen_band(capsys):
    """Per fault-tolerance mode at the band: goodput from the measured figures, the price of a
    useful node-hour on spot against on demand, the saving; the same in text and JSON."""
    from lab.vocab.checkpoint_interval import job_mtbf_s
    from lab.vocab.spot_goodput import goodput

    code, out, _ = _plan(capsys, "--stack", "eks-dev", "-o", "json", "--band", "10-15%")
    doc = json.loads(out)
    rows = doc["evictions"]["saving"]
    assert code == 0 and doc["evictions"]["band"] == "10-15%"
    assert [r["mode"] for r in rows] == ["elastic", "per-step", "restart-everything"]
    by_mode = {r["mode"]: r for r in rows}
    assert by_mode["elastic"]["goodput"] == pytest.approx(goodput("elastic", 3, job_mtbf_s(0.125, 3)), abs=1e-6)
    on_demand = by_mode["elastic"]["on_demand_per_node_hour"]
    for r in rows:  # spot is cheaper on demand at every mode here, and the saving is what the prices say
        assert 0 < r["spot_per_useful_node_hour"] < on_demand
        assert r["saving"] == pytest.approx(1 - r["spot_per_useful_node_hour"] / on_demand, abs=1e-3)
    # Per-step pays its overhead at every step: it trains less of the time than elastic.
    assert by_mode["per-step"]["goodput"] < by_mode["elastic"]["goodput"]
    _, text, _ = _plan(capsys, "--stack", "eks-dev", "--band", "10-15%")
    assert "at the 10-15% band, per fault-tolerance mode" in text
    assert f"gpu-spot at 3 node(s), elastic: {100 * by_mode['elastic']['goodput']:.2f} % / " in text
    _, without, _ = _plan(capsys, "--stack", "eks-dev", "-o", "json")
    assert "saving" not in json.loads(without)["evictions"]  # only when a band is asked for


def test_the_plan_shows_goodput_and_cost_over_a_chosen_trace_window(capsys):
    """Per fault-tolerance mode over the window: the model's goodput on the pool at its largest
    (the trace's counts scaled to its 3 nodes, the stack's cloud's notice), the price of a useful
    node-hour on spot (the capacity offered, billed) against on demand; in text and JSON."""
    from lab.plan.trace_saving import CLUSTER_COSTS
    from lab.vocab.spot_goodput import MeasuredCosts
    from lab.vocab.trace_files import load_trace
    from lab.vocab.trace_goodput import replay_prediction
    from lab.vocab.trace_schedule import schedule

    flags = ("--trace", "bamboo-p3-32", "--window", "130m:310m")
    code, out, _ = _plan(capsys, "--stack", "eks-dev", "-o", "json", *flags)
    doc = json.loads(out)
    rows = doc["evictions"]["trace_saving"]
    assert code == 0 and doc["evictions"]["trace"]["window_s"] == [7800.0, 18600.0]
    assert doc["evictions"]["trace"]["notice"] == "aws"  # an EKS stack's
    window = schedule(load_trace("bamboo-p3-32"), 3, (7800.0, 18600.0), 1.0, "aws")
    assert [r["mode"] for r in rows] == ["elastic", "per-step", "restart-everything"]
    for r in rows:
        # A cluster's noticed worker trains on only for its pod's grace period (the kubelet kills it then).
        assert r["goodput"] == pytest.approx(replay_prediction(r["mode"], window, CLUSTER_COSTS).ratio, abs=1e-6)
        assert r["goodput"] < replay_prediction(r["mode"], window).ratio
        # ... and above a worker that left at its notice.
        told = replace(MeasuredCosts(), notice_lead_s=math.inf)
        assert r["goodput"] >= replay_prediction(r["mode"], window, told).ratio
        if r["mode"] == "elastic":
            assert r["goodput"] > replay_prediction(r["mode"], window, told).ratio
        assert r["capacity_share"] == pytest.approx(0.848148, abs=1e-6)  # 0.85 of full capacity, as named
        assert r["full_size_share"] == pytest.approx(r["goodput"] * r["capacity_share"], abs=1e-5)
        assert r["saving"] == pytest.approx(1 - r["spot_per_useful_node_hour"] / r["on_demand_per_node_hour"], abs=1e-3)
        # The pool's seconds with capacity over its loss events: what a derived interval starts from.
        assert r["mean_s_between_losses"] == round(window.mean_s_between_losses(), 1)
    by_mode = {r["mode"]: r for r in rows}
    # Restart-everything trains only at full size: the window is partial 46 % of the time.
    assert by_mode["restart-everything"]["goodput"] < 0.6 < 0.9 < by_mode["elastic"]["goodput"]
    assert by_mode["restart-everything"]["spot_per_useful_node_hour"] > by_mode["elastic"]["spot_per_useful_node_hour"]
    _, text, _ = _plan(capsys, "--stack", "eks-dev", *flags)
    assert "over the trace window bamboo-p3-32 (uclasystem/bamboo" in text and "7800:18600" in text
    assert f"gpu-spot at 3 node(s), elastic: {100 * by_mode['elastic']['goodput']:.2f} % of 84.8 % offered" in text
    given = rows[0]["mean_s_between_losses"]
    assert f"a derived checkpoint interval starts from it with --eviction-mtbf {given:.0f}" in text
    _, out, _ = _plan(capsys, "--stack", "aks-dev", "-o", "json", *flags, "--notice", "none")
    assert json.loads(out)["evictions"]["trace"]["notice"] == "none"
    _, out, _ = _plan(capsys, "--stack", "aks-dev", "-o", "json", *flags)
    assert json.loads(out)["evictions"]["trace"]["notice"] == "azure"  # an AKS stack's
    _, without, _ = _plan(capsys, "--stack", "eks-dev", "-o", "json")
    assert "trace_saving" not in json.loads(without)["evictions"]  # only when a trace is asked for


def test_a_trace_window_counts_the_costs_measured_at_the_model_size_asked_for(capsys):
    """A bigger model's stalls at each change are longer: its elastic goodput over the window
    is the model's with gpt-small's measured costs, below the tiny model's."""
    from lab.plan.trace_saving import cluster_costs
    from lab.vocab.trace_files import load_trace
    from lab.vocab.trace_goodput import replay_prediction
    from lab.vocab.trace_schedule import schedule

    flags = ("--stack", "eks-dev", "-o", "json", "--trace", "bamboo-p3-32", "--window", "130m:310m")
    _, out, _ = _plan(capsys, *flags, "--model", "gpt-small")
    doc = json.loads(out)["evictions"]
    _, out, _ = _plan(capsys, *flags)
    tiny = json.loads(out)["evictions"]
    assert (doc["trace"]["model"], tiny["trace"]["model"]) == ("gpt-small", "tiny")
    window = schedule(load_trace("bamboo-p3-32"), 3, (7800.0, 18600.0), 1.0, "aws")
    for row, tiny_row in zip(doc["trace_saving"], tiny["trace_saving"], strict=True):
        expected = replay_prediction(row["mode"], window, cluster_costs("gpt-small")).ratio
        assert row["goodput"] == pytest.approx(expected, abs=1e-6)
        if row["mode"] != "restart-everything":  # it never stalls at a change: it restarts
            assert row["goodput"] < tiny_row["goodput"]


def test_a_trace_window_that_offers_the_pool_nothing_says_so(capsys, tmp_path):
    from tests.traces import ticks_file

    trace = ticks_file(tmp_path, [4, 0, 0, 0, 4])
    code, out, _ = _plan(capsys, "--stack", "eks-dev", "--trace", str(trace), "--window", "100:400")
    assert code == 0
    assert "gpu-spot at 3 node(s): window=(100.0, 400.0) is invalid: expected a window of" in out
    assert "that offers 3 slot(s) capacity under proportional (it offers none)" in out


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--trace", "nope"], ["--trace='nope' is invalid", "bamboo-p3-32"]),
        (
            ["--trace", "bamboo-p3-32", "--window", "5:2", "--notice", "soon"],
            ["--window=(5.0, 2.0) is invalid", "0 s to 40980 s", "--notice='soon' is invalid", "aws, gcp, azure"],
        ),
        (["--trace", "bamboo-p3-32", "--window", "soon"], ["--window='soon' is invalid", "A:B"]),
        (["--window", "1:2", "--notice", "aws"], ["--window='1:2' is invalid", "--notice='aws' is invalid"]),
        (["--model", "gpt-small"], ["--model='gpt-small' is invalid: expected --trace too"]),
        (["--trace", "bamboo-p3-32", "--model", "gpt-2"], ["--model='gpt-2' is invalid: expected one of tiny"]),
    ],
)
def test_a_bad_trace_option_is_named_before_anything_is_planned(capsys, monkeypatch, args, named):
    from lab.program import harness

    def not_planned(*_args, **_kw):
        raise AssertionError("planned")

    monkeypatch.setattr(harness, "run_program", not_planned)
    code, _, err = _plan(capsys, "--stack", "eks-dev", *args)
    assert code == 2
    for text in named:
        assert text in err


def test_a_bad_line_of_a_trace_file_is_named_with_its_file_and_line(capsys, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("1000,add,a\n2000,remove,b\n")
    code, _, err = _plan(capsys, "--stack", "eks-dev", "--trace", str(trace))
    assert code == 2 and f"{trace}:2='2000,remove,b' is invalid: expected the remove of a running instance" in err


def test_a_band_that_is_not_one_of_the_published_ones_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        _plan(capsys, "--band", "12%")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--band" in err and "'12%'" in err and "10-15%" in err


@pytest.mark.parametrize("bad", ["0", "-1", "inf", "nan"])
def test_a_save_cost_that_is_no_duration_is_refused(capsys, bad):
    code, _, err = _plan(capsys, "--save-cost", bad)
    assert code == 2 and "--save-cost" in err and "expected seconds > 0" in err


def test_output_json_is_the_same_as_json(capsys):
    _, by_flag, _ = _plan(capsys, "--stack", "byo", "--json")
    _, by_output, _ = _plan(capsys, "--stack", "byo", "-o", "json")
    assert json.loads(by_flag)["stack"] == json.loads(by_output)["stack"] == "byo"
