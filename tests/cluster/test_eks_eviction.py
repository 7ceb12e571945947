"""The EKS eviction backend against botocore's Stubber on real ec2 and fis clients: each
test queues the answers AWS would give and the exact requests it must receive, so a
request with other parameters, an extra request or a missing one fails the test. One test
runs the whole flow against moto's EC2 and FIS. Nothing reaches the network."""

from __future__ import annotations

import itertools
import os
import time
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from lab.cluster.eks_eviction import (
    DRILL_CLUSTER_TAG,
    DRILL_INSTANCE_TAG,
    DRILL_NODE_TAG,
    PURPOSE,
    PURPOSE_TAG,
    SOURCE_TEMPLATE_TAG,
    FisEvictor,
    parse_provider_id,
)
from lab.cluster.eviction import EvictionError, EvictionRefused, Node

REGION = "us-east-1"
CLUSTER = "spotlab"
GPU_GROUP = "spotlab-gpu-spot"
CPU_GROUP = "spotlab-cpu"
TEMPLATE = "EXTstack0000001"
ONE_OFF = "EXToneoff000001"
EXPERIMENT = "EXPdrill0000001"
ACCOUNT = "123456789012"
STACK_ROLE = f"arn:aws:iam::{ACCOUNT}:role/spotlab-fis"
IID = "i-0123456789abcdef0"
OTHER_IID = "i-0fedcba9876543210"
NODE = Node(name="ip-10-0-1-23.ec2.internal", provider_id=f"aws:///us-east-1a/{IID}")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# ------------------------------------------------------------------ fixtures and answers


@pytest.fixture(scope="module")
def session():
    # One session for the module: it caches the service models its clients load.
    return boto3.session.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture
def ec2(session):
    client = session.client("ec2")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


@pytest.fixture
def fis(session):
    client = session.client("fis")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def _tokens():
    """Idempotency tokens token-1, token-2, ... so the requests can be asserted exactly."""
    counter = itertools.count(1)
    return lambda: f"token-{next(counter)}"


@pytest.fixture
def make(ec2, fis):
    """A FisEvictor on the stubbed clients; keyword arguments override the defaults."""

    def build(**kwargs: Any) -> FisEvictor:
        args: dict[str, Any] = {
            "region": REGION,
            "cluster_name": CLUSTER,
            "gpu_node_group": GPU_GROUP,
            "template_id": TEMPLATE,
            "clients": {"ec2": ec2[0], "fis": fis[0]},
            "client_token": _tokens(),
            "poll_s": 0.0,
            **kwargs,
        }
        return FisEvictor(**args)

    return build


def _instance(
    *,
    kube: str | None = CLUSTER,
    group: str | None = GPU_GROUP,
    lifecycle: str | None = "spot",
    state: str = "running",
    zone: str = "us-east-1a",
    instance_id: str = IID,
) -> dict[str, Any]:
    """describe_instances' answer for `instance_id`."""
    tags = [{"Key": k, "Value": v} for k, v in (("eks:cluster-name", kube), ("eks:nodegroup-name", group)) if v]
    codes = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}
    instance: dict[str, Any] = {
        "InstanceId": instance_id,
        "State": {"Name": state, "Code": codes[state]},
        "Placement": {"AvailabilityZone": zone},
        "Tags": tags,
    }
    if lifecycle:
        instance["InstanceLifecycle"] = lifecycle
    return {"Reservations": [{"Instances": [instance]}]}


def _stack_template(*, role: str = STACK_ROLE, action_id: str = "aws:ec2:send-spot-instance-interruptions") -> dict:
    """get_experiment_template's answer: the template components/eks/fis.py deploys."""
    return {
        "experimentTemplate": {
            "id": TEMPLATE,
            "description": "Spot interruption of one spotlab-gpu-spot node of spotlab (PT2M notice)",
            "roleArn": role,
            "stopConditions": [{"source": "none"}],
            "actions": {
                "interrupt-one-gpu-spot-node": {
                    "actionId": action_id,
                    "parameters": {"durationBeforeInterruption": "PT2M"},
                    "targets": {"SpotInstances": "gpu-spot-instance"},
                }
            },
            "targets": {
                "gpu-spot-instance": {
                    "resourceType": "aws:ec2:spot-instance",
                    "resourceTags": {"eks:nodegroup-name": GPU_GROUP},
                    "filters": [{"path": "State.Name", "values": ["running"]}],
                    "selectionMode": "COUNT(1)",
                }
            },
            "tags": {"stack": "dev"},
        }
    }


def _one_off_request(
    *, role: str = STACK_ROLE, account: str = ACCOUNT, token: str = "token-1", node: str = NODE.name, iid: str = IID
) -> dict[str, Any]:
    """The exact create_experiment_template request of a targeted eviction of node `node`, instance `iid`."""
    return {
        "clientToken": token,
        "description": f"elastic-spot-lab eviction drill: spot interruption of {iid} (node {node}) of {CLUSTER}",
        "stopConditions": [{"source": "none"}],
        "targets": {
            "drill-node-instance": {
                "resourceType": "aws:ec2:spot-instance",
                "resourceArns": [f"arn:aws:ec2:{REGION}:{account}:instance/{iid}"],
                "selectionMode": "ALL",
            }
        },
        "actions": {
            "interrupt-drill-node": {
                "actionId": "aws:ec2:send-spot-instance-interruptions",
                "parameters": {"durationBeforeInterruption": "PT2M"},
                "targets": {"SpotInstances": "drill-node-instance"},
            }
        },
        "roleArn": role,
        "tags": {
            PURPOSE_TAG: PURPOSE,
            DRILL_CLUSTER_TAG: CLUSTER,
            DRILL_NODE_TAG: node,
            DRILL_INSTANCE_TAG: iid,
            SOURCE_TEMPLATE_TAG: TEMPLATE,
        },
    }


def _experiment(status: str, reason: str = "", error: dict[str, str] | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"status": status, "reason": reason or f"Experiment is {status}"}
    if error:
        state["error"] = error
    return {"experiment": {"id": EXPERIMENT, "experimentTemplateId": ONE_OFF, "roleArn": STACK_ROLE, "state": state}}


def _created(template_id: str = ONE_OFF) -> dict[str, Any]:
    return {"experimentTemplate": {"id": template_id, "creationTime": NOW}}


def _queue_targeted_start(fis_stub: Stubber, *, role: str = STACK_ROLE, account: str = ACCOUNT) -> None:
    """The first three requests of a targeted evict(NODE), up to the experiment's start."""
    fis_stub.add_response("get_experiment_template", _stack_template(), {"id": TEMPLATE})
    fis_stub.add_response("create_experiment_template", _created(), _one_off_request(role=role, account=account))
    fis_stub.add_response(
        "start_experiment", _experiment("pending"), {"experimentTemplateId": ONE_OFF, "clientToken": "token-2"}
    )


def _queue_targeted_evict(fis_stub: Stubber, *, role: str = STACK_ROLE, account: str = ACCOUNT) -> None:
    """The requests of a targeted evict(NODE) whose experiment runs at the first look."""
    _queue_targeted_start(fis_stub, role=role, account=account)
    fis_stub.add_response("get_experiment", _experiment("running"), {"id": EXPERIMENT})


# ------------------------------------------------------------------ provider ids


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        pytest.param(f"aws:///us-east-1a/{IID}", ("us-east-1a", IID), id="current-17-hex-id"),
        pytest.param("aws:///eu-west-1c/i-0abc1234", ("eu-west-1c", "i-0abc1234"), id="older-8-hex-id"),
        pytest.param(f"aws:///us-west-2-lax-1a/{IID}", ("us-west-2-lax-1a", IID), id="local-zone"),
    ],
)
def test_provider_ids_give_zone_and_instance(provider_id, expected):
    assert parse_provider_id(provider_id) == expected
    assert FisEvictor.parse_provider_id(provider_id) == expected


@pytest.mark.parametrize(
    "provider_id",
    [
        pytest.param(
            "azure:///subscriptions/0000/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/"
            "aks-gpu-1/virtualMachines/3",
            id="azure-node",
        ),
        pytest.param("gce://project/us-central1-a/gke-node-1", id="gce-node"),
        pytest.param("", id="empty"),
        pytest.param(f"aws://us-east-1a/{IID}", id="two-slashes"),
        pytest.param(f"aws:///{IID}", id="no-zone"),
        pytest.param("aws:///us-east-1a/", id="no-instance"),
        pytest.param("aws:///us-east-1a/i-0123", id="instance-id-too-short"),
        pytest.param("aws:///us-east-1a/i-0123456789ABCDEF0", id="instance-id-upper-case"),
        pytest.param("aws:///us-east-1a/vol-0123456789abcdef0", id="not-an-instance"),
        pytest.param(f"aws:///us-east-1a/{IID}/extra", id="trailing-path"),
    ],
)
def test_malformed_provider_ids_are_named_with_the_expected_format(provider_id):
    with pytest.raises(EvictionError) as raised:
        parse_provider_id(provider_id)
    assert repr(provider_id) in str(raised.value)
    assert "aws:///<availability-zone>/<instance-id>" in str(raised.value)


# ------------------------------------------------------------------ check()


def test_a_running_spot_instance_of_the_gpu_group_passes(make, ec2):
    ec2[1].add_response("describe_instances", _instance(), {"InstanceIds": [IID]})
    make().check(NODE)


@pytest.mark.parametrize(
    ("instance", "error", "words"),
    [
        pytest.param(
            _instance(kube="prod"),
            EvictionRefused,
            ["another cluster", "'prod'", repr(CLUSTER)],
            id="node-of-another-cluster",
        ),
        pytest.param(_instance(kube=None), EvictionRefused, ["another cluster", "None"], id="no-cluster-tag"),
        pytest.param(
            _instance(group=CPU_GROUP),
            EvictionRefused,
            ["not in the GPU spot node group", repr(CPU_GROUP), repr(GPU_GROUP)],
            id="cpu-group",
        ),
        pytest.param(
            _instance(lifecycle=None), EvictionRefused, ["not a spot instance", "on-demand"], id="on-demand-instance"
        ),
        pytest.param(
            _instance(lifecycle="capacity-block"), EvictionRefused, ["capacity-block"], id="capacity-block-instance"
        ),
        pytest.param(_instance(state="stopped"), EvictionError, ["stopped, not running"], id="stopped-instance"),
        pytest.param(
            _instance(state="terminated"), EvictionError, ["terminated, not running"], id="terminated-instance"
        ),
        pytest.param(
            _instance(zone="us-east-1b"),
            EvictionError,
            ["us-east-1a", "us-east-1b"],
            id="zone-differs-from-provider-id",
        ),
    ],
)
def test_check_refuses_what_it_must_not_evict(make, ec2, instance, error, words):
    ec2[1].add_response("describe_instances", instance, {"InstanceIds": [IID]})
    with pytest.raises(EvictionError) as raised:
        make().check(NODE)
    assert type(raised.value) is error
    for word in words:
        assert word in str(raised.value)


@pytest.mark.parametrize(
    "queue",
    [
        pytest.param(
            lambda stub: stub.add_client_error(
                "describe_instances",
                service_error_code="InvalidInstanceID.NotFound",
                service_message=f"The instance ID '{IID}' does not exist",
                http_status_code=400,
                expected_params={"InstanceIds": [IID]},
            ),
            id="not-found-error",
        ),
        pytest.param(
            lambda stub: stub.add_response("describe_instances", {"Reservations": []}, {"InstanceIds": [IID]}),
            id="no-reservations",
        ),
    ],
)
def test_an_unknown_instance_is_an_error_not_a_refusal(make, ec2, queue):
    queue(ec2[1])
    with pytest.raises(EvictionError, match=f"instance {IID} of node {NODE.name} does not exist") as raised:
        make().check(NODE)
    assert not isinstance(raised.value, EvictionRefused)


@pytest.mark.parametrize(
    ("provider_id", "error"),
    [
        pytest.param("azure:///subscriptions/0000/virtualMachines/3", EvictionError, id="azure-node"),
        pytest.param("aws:///us-east-1a/i-zzz", EvictionError, id="malformed-instance-id"),
        pytest.param(f"aws:///eu-west-1a/{IID}", EvictionRefused, id="zone-outside-the-region"),
    ],
)
def test_check_refuses_bad_provider_ids_without_asking_aws(make, provider_id, error):
    # The stubbed clients have no answers queued: any request would fail with Stubber's error.
    with pytest.raises(EvictionError) as raised:
        make().check(Node(name="n", provider_id=provider_id))
    assert type(raised.value) is error


# ------------------------------------------------------------------ calls()


class _NoSession:
    """A session that fails the test if a client is asked of it."""

    def client(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"calls() asked for a client: {args}")


def test_calls_lists_a_targeted_run_without_any_request(make):
    evictor = make(clients={}, session=_NoSession(), role_arn=STACK_ROLE)
    calls = evictor.calls(NODE)
    assert [(c.api, c.operation, c.reads_only) for c in calls] == [
        ("aws ec2", "describe_instances", True),
        ("aws fis", "get_experiment_template", True),
        ("aws fis", "create_experiment_template", False),
        ("aws fis", "start_experiment", False),
        ("aws fis", "get_experiment", True),
        ("aws fis", "delete_experiment_template", False),
    ]
    assert calls[0].params == {"InstanceIds": [IID]}
    assert calls[1].params == {"id": TEMPLATE}
    expected = _one_off_request(token="<uuid4>")
    expected["actions"]["interrupt-drill-node"]["parameters"] = {"durationBeforeInterruption": "<the stack template's>"}
    assert calls[2].params == expected
    assert "create_experiment_template(" in str(calls[2])


def test_calls_without_a_role_names_what_the_template_will_supply(make):
    calls = make(clients={}, session=_NoSession()).calls(NODE)
    create = calls[2].params
    assert create["roleArn"] == "<the stack template's roleArn>"
    assert create["targets"]["drill-node-instance"]["resourceArns"] == [
        f"arn:aws:ec2:{REGION}:<the role's account>:instance/{IID}"
    ]


def test_calls_lists_an_untargeted_run_without_any_request(make):
    calls = make(clients={}, session=_NoSession(), target_instance=False).calls(NODE)
    assert [(c.operation, dict(c.params)) for c in calls] == [
        ("describe_instances", {"InstanceIds": [IID]}),
        ("start_experiment", {"experimentTemplateId": TEMPLATE, "clientToken": "<uuid4>"}),
        ("get_experiment", {"id": "<experiment id>"}),
        ("list_experiment_resolved_targets", {"experimentId": "<experiment id>"}),
    ]


def test_calls_makes_no_request_on_stubbed_clients_either(make):
    # Stubbed and activated with nothing queued: a request would raise.
    assert len(make().calls(NODE)) == 6


def _record(*clients: Any) -> list[str]:
    """The operations the clients make, in order (botocore's before-parameter-build event,
    which comes before the Stubber answers)."""
    made: list[str] = []
    for client in clients:
        # The event names the API operation (DescribeInstances); calls() names the method.
        methods = {api: method for method, api in client.meta.method_to_api_mapping.items()}
        client.meta.events.register(
            "before-parameter-build.*.*", lambda model, methods=methods, **_: made.append(methods[model.name])
        )
    return made


def test_calls_are_the_requests_a_targeted_drill_makes(make, ec2, fis):
    made = _record(ec2[0], fis[0])
    evictor = make()
    ec2[1].add_response("describe_instances", _instance(), {"InstanceIds": [IID]})
    _queue_targeted_evict(fis[1])
    fis[1].add_response("delete_experiment_template", _created(), {"id": ONE_OFF})
    evictor.check(NODE)
    evictor.evict(NODE)
    evictor.cleanup()
    assert made == [c.operation for c in evictor.calls(NODE)]


def test_calls_are_the_requests_an_untargeted_drill_makes(make, ec2, fis):
    made = _record(ec2[0], fis[0])
    evictor = make(target_instance=False)
    ec2[1].add_response("describe_instances", _instance(), {"InstanceIds": [IID]})
    fis[1].add_response(
        "start_experiment", _experiment("running"), {"experimentTemplateId": TEMPLATE, "clientToken": "token-1"}
    )
    fis[1].add_response("get_experiment", _experiment("running"), {"id": EXPERIMENT})
    fis[1].add_response("list_experiment_resolved_targets", {"resolvedTargets": []}, {"experimentId": EXPERIMENT})
    evictor.check(NODE)
    evictor.evict(NODE)
    assert made == [c.operation for c in evictor.calls(NODE)]


# ------------------------------------------------------------------ evict(): one-off template


@pytest.mark.parametrize(
    ("role_arn", "role", "account"),
    [
        pytest.param(None, STACK_ROLE, ACCOUNT, id="template-role"),
        pytest.param(
            "arn:aws:iam::210987654321:role/other-fis",
            "arn:aws:iam::210987654321:role/other-fis",
            "210987654321",
            id="role-arn-overrides",
        ),
    ],
)
def test_targeted_evict_aims_a_one_off_template_at_the_instance(make, fis, role_arn, role, account):
    evictor = make(role_arn=role_arn)
    _queue_targeted_evict(fis[1], role=role, account=account)
    started = evictor.evict(NODE)
    assert started.node == NODE.name
    assert started.backend == "eks" == evictor.name
    assert started.detail.startswith(f"experiment {EXPERIMENT} ")
    assert ONE_OFF in started.detail and IID in started.detail and "PT2M" in started.detail
    assert evictor.one_off_templates == [ONE_OFF]
    assert evictor.experiment_ids == [EXPERIMENT]


def test_cleanup_deletes_the_one_off_template(make, fis):
    evictor = make()
    _queue_targeted_evict(fis[1])
    evictor.evict(NODE)
    fis[1].add_response("delete_experiment_template", _created(), {"id": ONE_OFF})
    evictor.cleanup()
    assert evictor.one_off_templates == []
    evictor.cleanup()  # nothing left: no request (none queued)


def test_leaving_the_context_deletes_the_one_off_template(make, fis):
    _queue_targeted_evict(fis[1])
    fis[1].add_response("delete_experiment_template", _created(), {"id": ONE_OFF})
    with make() as evictor:
        evictor.evict(NODE)
    assert evictor.one_off_templates == []


def test_a_failed_start_still_leaves_the_template_to_clean_up(make, fis):
    evictor = make()
    fis[1].add_response("get_experiment_template", _stack_template(), {"id": TEMPLATE})
    fis[1].add_response("create_experiment_template", _created(), _one_off_request())
    fis[1].add_client_error(
        "start_experiment",
        service_error_code="ServiceQuotaExceededException",
        service_message="too many experiments",
        http_status_code=402,
        expected_params={"experimentTemplateId": ONE_OFF, "clientToken": "token-2"},
    )
    with pytest.raises(EvictionError, match="ServiceQuotaExceededException"):
        evictor.evict(NODE)
    assert evictor.one_off_templates == [ONE_OFF]
    fis[1].add_response("delete_experiment_template", _created(), {"id": ONE_OFF})
    evictor.cleanup()
    assert evictor.one_off_templates == []


def test_cleanup_counts_a_template_already_gone_and_names_one_it_cannot_delete(make, fis):
    evictor = make()
    evictor.one_off_templates[:] = ["EXTgone", "EXTstuck"]
    fis[1].add_client_error(
        "delete_experiment_template",
        service_error_code="ResourceNotFoundException",
        http_status_code=404,
        expected_params={"id": "EXTgone"},
    )
    fis[1].add_client_error(
        "delete_experiment_template",
        service_error_code="AccessDeniedException",
        http_status_code=403,
        expected_params={"id": "EXTstuck"},
    )
    with pytest.raises(EvictionError) as raised:
        evictor.cleanup()
    assert "EXTstuck" in str(raised.value) and "fis:DeleteExperimentTemplate" in str(raised.value)
    assert "EXTgone" not in str(raised.value)
    assert evictor.one_off_templates == ["EXTstuck"]


def test_a_template_without_a_spot_interruption_action_is_refused(make, fis):
    fis[1].add_response(
        "get_experiment_template", _stack_template(action_id="aws:ec2:stop-instances"), {"id": TEMPLATE}
    )
    with pytest.raises(EvictionError, match="has no aws:ec2:send-spot-instance-interruptions action"):
        make().evict(NODE)


# ------------------------------------------------------------------ evict(): the experiment must run


def _record_times(fis_client: Any) -> dict[str, list[float]]:
    """When (time.time()) FIS accepted start_experiment (botocore's after-call event) and when
    each get_experiment began (before-parameter-build: the Stubber answers at before-call)."""
    times: dict[str, list[float]] = {"accepted": [], "looked": []}
    fis_client.meta.events.register("after-call.fis.StartExperiment", lambda **_: times["accepted"].append(time.time()))
    fis_client.meta.events.register(
        "before-parameter-build.fis.GetExperiment", lambda **_: times["looked"].append(time.time())
    )
    return times


def test_targeted_evict_returns_once_the_experiment_runs(make, fis):
    """pending -> initiating -> running: evict() looks until the interruption went out, and
    dates the eviction from FIS's acceptance of the start, before its first look."""
    slept: list[float] = []
    evictor = make(poll_s=2.0, sleep=slept.append)
    times = _record_times(fis[0])
    _queue_targeted_start(fis[1])
    fis[1].add_response("get_experiment", _experiment("pending"), {"id": EXPERIMENT})
    fis[1].add_response("get_experiment", _experiment("initiating"), {"id": EXPERIMENT})
    fis[1].add_response("get_experiment", _experiment("running"), {"id": EXPERIMENT})
    started = evictor.evict(NODE)
    fis[1].assert_no_pending_responses()
    assert slept == [2.0, 2.0]
    assert started.detail.startswith(f"experiment {EXPERIMENT} running ")
    (accepted,), looks = times["accepted"], times["looked"]
    assert len(looks) == 3
    assert accepted <= started.at <= looks[0]


def test_targeted_evict_raises_with_fis_reason_when_the_experiment_fails(make, fis):
    reason = "Target resolution returned empty set"
    evictor = make(sleep=lambda _: None)
    _queue_targeted_start(fis[1])
    fis[1].add_response("get_experiment", _experiment("pending"), {"id": EXPERIMENT})
    fis[1].add_response(
        "get_experiment",
        _experiment("failed", reason, {"code": "TargetResolutionFailed", "location": "drill-node-instance"}),
        {"id": EXPERIMENT},
    )
    with pytest.raises(EvictionError) as raised:
        evictor.evict(NODE)
    message = str(raised.value)
    assert f"FIS experiment {EXPERIMENT} failed: {reason}" in message
    assert "error TargetResolutionFailed at drill-node-instance" in message
    # The one-off template is still the drill's to delete.
    assert evictor.one_off_templates == [ONE_OFF]


def test_targeted_evict_gives_up_on_an_experiment_that_stays_pending(make, fis):
    now = iter([100.0, 150.0, 230.0])  # the deadline (start_timeout_s=120 from 100) passes at the second look
    slept: list[float] = []
    evictor = make(clock=lambda: next(now), sleep=slept.append, poll_s=2.0)
    _queue_targeted_start(fis[1])
    fis[1].add_response("get_experiment", _experiment("pending", "Experiment is pending"), {"id": EXPERIMENT})
    fis[1].add_response("get_experiment", _experiment("pending", "Experiment is pending"), {"id": EXPERIMENT})
    with pytest.raises(EvictionError) as raised:
        evictor.evict(NODE)
    message = str(raised.value)
    assert f"FIS experiment {EXPERIMENT} is still pending after 120 s (Experiment is pending)" in message
    assert f"aws fis stop-experiment --id {EXPERIMENT}" in message
    assert slept == [2.0]


def test_leftover_templates_are_found_by_their_tags_across_pages(make, fis):
    ours = {PURPOSE_TAG: PURPOSE, DRILL_CLUSTER_TAG: CLUSTER}
    fis[1].add_response(
        "list_experiment_templates",
        {
            "experimentTemplates": [
                {"id": "EXTa", "tags": ours},
                {"id": TEMPLATE, "tags": {"stack": "dev"}},
                {"id": "EXTother", "tags": {PURPOSE_TAG: PURPOSE, DRILL_CLUSTER_TAG: "prod"}},
            ],
            "nextToken": "page-2",
        },
        {},
    )
    fis[1].add_response(
        "list_experiment_templates", {"experimentTemplates": [{"id": "EXTb", "tags": ours}]}, {"nextToken": "page-2"}
    )
    assert make().leftover_templates() == ["EXTa", "EXTb"]


# ------------------------------------------------------------------ evict(): the stack's template


@pytest.mark.parametrize(
    ("resolved", "words"),
    [
        pytest.param(IID, [f"FIS chose {IID}, node {NODE.name}'s instance"], id="fis-chose-the-node"),
        pytest.param(
            OTHER_IID, [f"FIS chose {OTHER_IID}, not node {NODE.name}'s instance {IID}"], id="fis-chose-another"
        ),
    ],
)
def test_untargeted_evict_starts_the_stack_template_and_reports_the_chosen_instance(make, fis, resolved, words):
    slept: list[float] = []
    evictor = make(target_instance=False, poll_s=0.5, sleep=slept.append)
    fis[1].add_response(
        "start_experiment", _experiment("initiating"), {"experimentTemplateId": TEMPLATE, "clientToken": "token-1"}
    )
    fis[1].add_response("get_experiment", _experiment("initiating"), {"id": EXPERIMENT})
    fis[1].add_response("get_experiment", _experiment("running"), {"id": EXPERIMENT})
    fis[1].add_response(
        "list_experiment_resolved_targets",
        {
            "resolvedTargets": [
                {
                    "resourceType": "aws:ec2:spot-instance",
                    "targetName": "gpu-spot-instance",
                    "targetInformation": {"arn": f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{resolved}"},
                }
            ]
        },
        {"experimentId": EXPERIMENT},
    )
    started = evictor.evict(NODE)
    assert started.detail.startswith(f"experiment {EXPERIMENT} of the stack's template {TEMPLATE}: ")
    for word in words:
        assert word in started.detail
    assert slept == [0.5]
    assert evictor.one_off_templates == []


def test_untargeted_evict_says_when_fis_names_no_instance(make, fis):
    evictor = make(target_instance=False)
    fis[1].add_response(
        "start_experiment", _experiment("running"), {"experimentTemplateId": TEMPLATE, "clientToken": "token-1"}
    )
    fis[1].add_response("get_experiment", _experiment("running"), {"id": EXPERIMENT})
    fis[1].add_response("list_experiment_resolved_targets", {"resolvedTargets": []}, {"experimentId": EXPERIMENT})
    assert "FIS did not say which instance it interrupts" in evictor.evict(NODE).detail


# ------------------------------------------------------------------ wait_started()


@pytest.mark.parametrize("final", ["running", "completed"])
def test_wait_started_returns_once_the_experiment_runs(make, fis, final):
    fis[1].add_response("get_experiment", _experiment("pending"), {"id": EXPERIMENT})
    fis[1].add_response("get_experiment", _experiment(final), {"id": EXPERIMENT})
    assert make().wait_started(EXPERIMENT) == final


def test_a_failed_experiment_raises_with_fis_reason(make, fis):
    reason = "The role is not authorized to perform: ec2:SendSpotInstanceInterruptions"
    fis[1].add_response("get_experiment", _experiment("initiating"), {"id": EXPERIMENT})
    fis[1].add_response(
        "get_experiment",
        _experiment("failed", reason, {"code": "AccessDenied", "location": "interrupt-drill-node"}),
        {"id": EXPERIMENT},
    )
    with pytest.raises(EvictionError) as raised:
        make().wait_started(EXPERIMENT)
    message = str(raised.value)
    assert f"FIS experiment {EXPERIMENT} failed: {reason}" in message
    assert "error AccessDenied at interrupt-drill-node" in message
    assert STACK_ROLE in message


@pytest.mark.parametrize("status", ["stopping", "stopped", "cancelled"])
def test_an_experiment_ended_before_running_is_no_eviction(make, fis, status):
    fis[1].add_response("get_experiment", _experiment(status, "Stopped by user"), {"id": EXPERIMENT})
    with pytest.raises(EvictionError, match=f"{EXPERIMENT} {status}: Stopped by user"):
        make().wait_started(EXPERIMENT)


def test_wait_started_gives_up_after_its_timeout(make, fis):
    now = iter([0.0, 5.0, 11.0])
    evictor = make(clock=lambda: next(now), sleep=lambda _: None)
    fis[1].add_response("get_experiment", _experiment("initiating"), {"id": EXPERIMENT})
    fis[1].add_response("get_experiment", _experiment("initiating"), {"id": EXPERIMENT})
    with pytest.raises(EvictionError, match=f"{EXPERIMENT} is still initiating after 10 s"):
        evictor.wait_started(EXPERIMENT, timeout_s=10)


# ------------------------------------------------------------------ AWS errors


@pytest.mark.parametrize(
    ("operation", "code", "run", "words"),
    [
        pytest.param(
            "describe_instances",
            "UnauthorizedOperation",
            lambda e: e.check(NODE),
            ["ec2:DescribeInstances", "UnauthorizedOperation"],
            id="describe-instances",
        ),
        pytest.param(
            "get_experiment_template",
            "AccessDeniedException",
            lambda e: e.evict(NODE),
            ["fis:GetExperimentTemplate"],
            id="get-template",
        ),
        pytest.param(
            "create_experiment_template",
            "AccessDeniedException",
            lambda e: e.evict(NODE),
            ["fis:CreateExperimentTemplate", "fis:TagResource", f"iam:PassRole on {STACK_ROLE}"],
            id="create-template",
        ),
    ],
)
def test_access_denied_names_the_call_and_the_permission(make, ec2, fis, operation, code, run, words):
    stub = ec2[1] if operation == "describe_instances" else fis[1]
    if operation == "create_experiment_template":
        fis[1].add_response("get_experiment_template", _stack_template(), {"id": TEMPLATE})
    stub.add_client_error(operation, service_error_code=code, service_message="not authorized", http_status_code=403)
    with pytest.raises(EvictionError) as raised:
        run(make())
    for word in [*words, "not authorized"]:
        assert word in str(raised.value)


@pytest.mark.parametrize(
    ("operation", "target_instance"),
    [("get_experiment_template", True), ("start_experiment", False)],
    ids=["targeted", "untargeted"],
)
def test_a_missing_stack_template_asks_whether_the_stack_is_deployed(make, fis, operation, target_instance):
    fis[1].add_client_error(
        operation,
        service_error_code="ResourceNotFoundException",
        service_message="Experiment template not found",
        http_status_code=404,
    )
    with pytest.raises(EvictionError) as raised:
        make(target_instance=target_instance).evict(NODE)
    assert f"template {TEMPLATE} does not exist in {REGION}" in str(raised.value)
    assert "is the stack deployed?" in str(raised.value)


def test_rejected_credentials_tell_how_to_log_in(make, ec2):
    ec2[1].add_client_error("describe_instances", service_error_code="AuthFailure", http_status_code=401)
    with pytest.raises(EvictionError, match="aws sso login"):
        make().check(NODE)


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """An environment that cannot supply AWS credentials: no AWS_* variables, empty config
    and credentials files, a home without an SSO token cache, no instance metadata service."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


SSO_PROFILE = """\
[profile drill]
sso_session = corp
sso_account_id = 123456789012
sso_role_name = Admin

[sso-session corp]
sso_start_url = https://example.awsapps.com/start
sso_region = us-east-1
"""


def _sso_profile_without_login(monkeypatch, home):
    config = home / "config"
    config.write_text(SSO_PROFILE)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "drill")


@pytest.mark.parametrize(
    ("setup", "explicit_session", "cause"),
    [
        pytest.param(None, True, "Unable to locate credentials", id="nothing-given-session"),
        pytest.param(None, False, "Unable to locate credentials", id="nothing-default-session"),
        pytest.param(_sso_profile_without_login, False, "Token for corp does not exist", id="sso-not-logged-in"),
        pytest.param(
            lambda monkeypatch, _: monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            False,
            "Partial credentials",
            id="key-without-secret",
        ),
    ],
)
def test_missing_credentials_tell_how_to_get_them(monkeypatch, no_credentials, setup, explicit_session, cause):
    if setup:
        setup(monkeypatch, no_credentials)
    session = boto3.session.Session(region_name=REGION) if explicit_session else None
    evictor = FisEvictor(REGION, CLUSTER, GPU_GROUP, TEMPLATE, session=session)
    with pytest.raises(EvictionError) as raised:
        evictor.check(NODE)
    message = str(raised.value)
    assert "no usable AWS credentials" in message and "ec2 describe_instances" in message and cause in message
    for hint in ("aws configure", "aws sso login", "AWS_PROFILE"):
        assert hint in message
    assert "AKIDEXAMPLE" not in message


# ------------------------------------------------------------------ the whole flow on moto


def test_the_whole_targeted_flow_on_moto(monkeypatch):
    for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    with mock_aws():
        session = boto3.session.Session(
            region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        ec2, fis = session.client("ec2"), session.client("fis")
        image = ec2.describe_images()["Images"][0]["ImageId"]
        tags = [{"Key": "eks:cluster-name", "Value": CLUSTER}, {"Key": "eks:nodegroup-name", "Value": GPU_GROUP}]
        instance = ec2.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            InstanceType="g5.xlarge",
            InstanceMarketOptions={"MarketType": "spot"},
            Placement={"AvailabilityZone": "us-east-1a"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )["Instances"][0]["InstanceId"]
        stack = _stack_template()["experimentTemplate"]
        template = fis.create_experiment_template(
            clientToken="stack",
            description=stack["description"],
            stopConditions=stack["stopConditions"],
            targets=stack["targets"],
            actions=stack["actions"],
            roleArn=STACK_ROLE,
        )["experimentTemplate"]["id"]
        node = Node(name="gpu-0", provider_id=f"aws:///us-east-1a/{instance}")

        evictor = FisEvictor(REGION, CLUSTER, GPU_GROUP, template, clients={"ec2": ec2, "fis": fis}, poll_s=0)
        evictor.check(node)
        started = evictor.evict(node)  # returns once moto's experiment runs (or completed)
        (one_off,) = evictor.one_off_templates
        assert started.detail.startswith(f"experiment {evictor.experiment_ids[0]} ")
        assert fis.get_experiment(id=evictor.experiment_ids[0])["experiment"]["state"]["status"] in (
            "running",
            "completed",
        )

        made = fis.get_experiment_template(id=one_off)["experimentTemplate"]
        assert made["targets"]["drill-node-instance"]["resourceArns"] == [
            f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance}"
        ]
        assert made["actions"]["interrupt-drill-node"]["parameters"] == {"durationBeforeInterruption": "PT2M"}
        assert made["roleArn"] == STACK_ROLE
        assert made["tags"][DRILL_NODE_TAG] == "gpu-0"
        assert evictor.leftover_templates() == [one_off]

        evictor.cleanup()
        assert evictor.leftover_templates() == []
        assert [t["id"] for t in fis.list_experiment_templates()["experimentTemplates"]] == [template]
