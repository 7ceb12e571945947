"""The EKS eviction backend: a spot interruption of one GPU node, sent by AWS Fault Injection
Service (FIS), the only way to have AWS itself interrupt a spot instance (a rebalance
recommendation at once, the interruption after the template's notice, two minutes by default).

The stack (components/eks/fis.py) deploys an experiment template that interrupts one running
instance of the GPU spot node group, chosen by FIS. The drill, though, picks a node and wants
that node gone, so by default (`target_instance=True`) this backend copies the stack
template's action and role into a one-off template aimed at exactly that instance's ARN,
starts it, and deletes the one-off template in `cleanup()`. FIS allows deleting a template
while an experiment started from it runs (the experiment keeps its own copy and runs on), so
`cleanup()` may be called as soon as the experiment started; the template is kept until then
so that the FIS console still shows where a running drill's experiment came from. With
`target_instance=False` the stack's template is started as is, and the instance FIS chose is
read back from the experiment's resolved targets. Either way `evict()` returns only once the
experiment runs: FIS accepts a start and may fail the experiment afterwards (a role that may
not interrupt the instance, a target that resolves to nothing), and a drill that did not look
would wait for an eviction that never comes until its deadline. `evict_all()` evicts several
nodes at once (a replayed trace's loss of several slots): it starts every node's experiment
before it waits for any, so that one experiment slow to run does not hold the next node back.
The one-off template's instance ARN takes its partition and account from the FIS role's ARN (a
role acts in the account its single-account experiments run in), so no STS request is needed.

`check(node)` reads the instance from EC2 and refuses one that is not a spot instance of this
cluster's GPU node group, whatever the node's labels say. Every AWS error becomes an
`EvictionError` saying what to do: no credentials, a permission the caller lacks, a template
that does not exist. boto3 is imported only when a real call needs a session, so dry runs and
the tests (which hand in stubbed clients through `clients`) need no credentials and no network.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from lab.cluster.aws_requests import AwsRequests, Refused
from lab.cluster.eviction import ApiCall, EvictionError, EvictionRefused, EvictionStarted, Node
from lab.cluster.polling import Poll
from lab.vocab.aws_tags import EKS_CLUSTER_NAME_TAG, EKS_NODEGROUP_TAG, FIS_SPOT_INTERRUPTION
from lab.vocab.placeholders import is_placeholder, placeholder

if TYPE_CHECKING:
    import boto3.session

# What the stack's template (components/eks/fis.py) does and what EKS tags a managed node
# group's instances with, from the vocabulary both share.
SPOT_INTERRUPTION = FIS_SPOT_INTERRUPTION
DURATION_PARAMETER = "durationBeforeInterruption"
SPOT_RESOURCE_TYPE = "aws:ec2:spot-instance"
CLUSTER_TAG = EKS_CLUSTER_NAME_TAG
NODEGROUP_TAG = EKS_NODEGROUP_TAG

# Tags of the one-off templates, so that one left behind (a drill killed before its cleanup)
# can be found with `leftover_templates()` and removed.
PURPOSE_TAG = "elastic-spot-lab/purpose"
PURPOSE = "eviction-drill"
DRILL_CLUSTER_TAG = "elastic-spot-lab/cluster"
DRILL_NODE_TAG = "elastic-spot-lab/node"
DRILL_INSTANCE_TAG = "elastic-spot-lab/instance"
SOURCE_TEMPLATE_TAG = "elastic-spot-lab/source-template"

# The one-off template's names for its single action and target.
ONE_OFF_ACTION = "interrupt-drill-node"
ONE_OFF_TARGET = "drill-node-instance"

PROVIDER_ID_FORMAT = "aws:///<availability-zone>/<instance-id>, e.g. aws:///us-east-1a/i-0123456789abcdef0"
# Instance ids are "i-" and 8 (older) or 17 hex digits; zones are the region's name and a
# letter, or a local/wavelength zone's longer name (us-west-2-lax-1a).
_PROVIDER_ID = re.compile(r"aws:///(?P<zone>[a-z]{2}(?:-[a-z0-9]+)+)/(?P<instance>[^/]*)")
_INSTANCE_ID = re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})")
_ROLE_ARN = re.compile(r"arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):role/.+")

# Experiment states (botocore's ExperimentStatus): the interruption went out once the
# experiment runs (its action starts at once) or it already completed; the others end it.
STARTED_STATES = frozenset({"running", "completed"})
STARTING_STATES = frozenset({"pending", "initiating"})


def parse_provider_id(provider_id: str) -> tuple[str, str]:
    """(availability zone, instance id) of an EKS node's spec.providerID."""
    match = _PROVIDER_ID.fullmatch(provider_id or "")
    if match is None:
        raise EvictionError(
            f"provider id {provider_id!r} is not an EC2 instance's; expected {PROVIDER_ID_FORMAT}"
            " (is the node on AWS, not on another cloud or Fargate?)"
        )
    instance_id = match["instance"]
    if _INSTANCE_ID.fullmatch(instance_id) is None:
        raise EvictionError(
            f"provider id {provider_id!r} names no EC2 instance id ({instance_id!r} is not i- and 8 or 17"
            f" hex digits); expected {PROVIDER_ID_FORMAT}"
        )
    return match["zone"], instance_id


class _Missing(EvictionError):
    """What a request asked for does not exist (its message says what); cleanup() treats
    a template already gone as deleted."""


def _role_account(role_arn: str) -> tuple[str, str]:
    """(partition, account) of an IAM role's ARN."""
    match = _ROLE_ARN.fullmatch(role_arn)
    if match is None:
        raise EvictionError(
            f"FIS role {role_arn!r} is not an IAM role ARN (arn:aws:iam::<account>:role/<name>); pass the"
            " stack's fisRoleArn"
        )
    return match["partition"], match["account"]


def _tags(tags: list[Mapping[str, str]] | None) -> dict[str, str]:
    """EC2's [{Key, Value}] tag list as a mapping."""
    return {t["Key"]: t.get("Value", "") for t in tags or []}


class FisEvictor(AbstractContextManager["FisEvictor"]):
    """Evicts an EKS GPU spot node with an FIS spot interruption; an `Evictor`.

    `region`, `cluster_name`, `gpu_node_group` (nodeGroupNames["gpu-spot"]), `template_id`
    and `role_arn` are the stack's outputs. `clients` maps a service name ("ec2", "fis") to a
    botocore client to use instead of one made from the session (tests attach a Stubber);
    `client_token` makes the idempotency tokens (uuid4 by default); `sleep` and `clock` pace
    `wait_started`, which `evict` calls (up to `start_timeout_s`, a look every `poll_s`).
    Used as a context manager, it deletes its one-off templates on exit.
    """

    name = "eks"

    def __init__(
        self,
        region: str,
        cluster_name: str,
        gpu_node_group: str,
        template_id: str,
        role_arn: str | None = None,
        target_instance: bool = True,
        session: boto3.session.Session | None = None,
        *,
        clients: Mapping[str, Any] | None = None,
        client_token: Callable[[], str] | None = None,
        start_timeout_s: float = 120.0,
        poll_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.region = region
        self.cluster_name = cluster_name
        self.gpu_node_group = gpu_node_group
        self.template_id = template_id
        self.role_arn = role_arn
        self.target_instance = target_instance
        self.start_timeout_s = start_timeout_s
        self._aws = AwsRequests(region, EvictionError, session, clients)
        self._client_token = client_token or (lambda: str(uuid.uuid4()))
        self._poll = Poll(poll_s, sleep, clock)
        # The one-off templates this evictor created and has not deleted yet (cleanup()).
        self.one_off_templates: list[str] = []
        # The experiments it started, oldest first (wait_started() takes one of them).
        self.experiment_ids: list[str] = []

    parse_provider_id = staticmethod(parse_provider_id)

    # ------------------------------------------------------------------ the Evictor protocol

    def calls(self, node: Node) -> list[ApiCall]:
        """Every request a drill with this backend makes, in order, with the values known
        before any is made (the others in <angle brackets>): check(), evict() (its
        get_experiment repeats until the experiment runs) and, for a one-off template,
        cleanup(). Makes no request. A node a dry run stands in for (`Node.to_be_found`) gets
        a placeholder instance id."""
        instance_id = parse_provider_id(node.provider_id)[1] if node.known else placeholder("the node's instance id")
        ec2, fis = "aws ec2", "aws fis"
        first = [ApiCall(ec2, "describe_instances", {"InstanceIds": [instance_id]}, reads_only=True)]
        if not self.target_instance:
            return [
                *first,
                ApiCall(fis, "start_experiment", {"experimentTemplateId": self.template_id, "clientToken": "<uuid4>"}),
                ApiCall(fis, "get_experiment", {"id": "<experiment id>"}, reads_only=True),
                ApiCall(fis, "list_experiment_resolved_targets", {"experimentId": "<experiment id>"}, reads_only=True),
            ]
        # Known here only when the role is given; otherwise it comes from the stack's template.
        role = self.role_arn or "<the stack template's roleArn>"
        arn = (
            self._instance_arn(instance_id, self.role_arn)
            if self.role_arn and not is_placeholder(self.role_arn)
            else f"arn:aws:ec2:{self.region}:<the role's account>:instance/{instance_id}"
        )
        one_off = self._one_off_params(
            node,
            instance_id,
            arn=arn,
            role=role,
            parameters={DURATION_PARAMETER: "<the stack template's>"},
            stop_conditions=[{"source": "none"}],
            token="<uuid4>",
        )
        return [
            *first,
            ApiCall(fis, "get_experiment_template", {"id": self.template_id}, reads_only=True),
            ApiCall(fis, "create_experiment_template", one_off),
            ApiCall(
                fis, "start_experiment", {"experimentTemplateId": "<one-off template id>", "clientToken": "<uuid4>"}
            ),
            ApiCall(fis, "get_experiment", {"id": "<experiment id>"}, reads_only=True),
            ApiCall(fis, "delete_experiment_template", {"id": "<one-off template id>"}),
        ]

    def check(self, node: Node) -> None:
        """Refuse a node whose instance is not a spot instance of this cluster's GPU node
        group (EvictionRefused), or that does not exist or is not running (EvictionError)."""
        zone, instance_id = parse_provider_id(node.provider_id)
        if not zone.startswith(self.region):
            raise EvictionRefused(
                f"node {node.name} is in availability zone {zone}, outside the stack's region {self.region}"
            )
        not_found = f"instance {instance_id} of node {node.name} does not exist in {self.region} (was it replaced?)"
        reply = self._call(
            "ec2",
            "describe_instances",
            missing={"InvalidInstanceID.NotFound": not_found, "InvalidInstanceID.Malformed": not_found},
            InstanceIds=[instance_id],
        )
        found = [i for r in reply.get("Reservations", []) for i in r.get("Instances", [])]
        if not found:
            raise EvictionError(not_found)
        instance = found[0]
        tags = _tags(instance.get("Tags"))
        cluster = tags.get(CLUSTER_TAG)
        if cluster != self.cluster_name:
            raise EvictionRefused(
                f"node {node.name} ({instance_id}) is a node of another cluster: its {CLUSTER_TAG} tag is"
                f" {cluster!r}, this stack's cluster is {self.cluster_name!r}"
            )
        group = tags.get(NODEGROUP_TAG)
        if group != self.gpu_node_group:
            raise EvictionRefused(
                f"node {node.name} ({instance_id}) is not in the GPU spot node group: its {NODEGROUP_TAG} tag is"
                f" {group!r}, the stack's GPU spot group is {self.gpu_node_group!r}"
            )
        lifecycle = instance.get("InstanceLifecycle")
        if lifecycle != "spot":
            raise EvictionRefused(
                f"node {node.name} ({instance_id}) is not a spot instance (its lifecycle is"
                f" {lifecycle or 'on-demand'}); FIS can interrupt only spot instances"
            )
        state = instance.get("State", {}).get("Name")
        if state != "running":
            raise EvictionError(f"instance {instance_id} of node {node.name} is {state}, not running")
        actual_zone = instance.get("Placement", {}).get("AvailabilityZone")
        if actual_zone and actual_zone != zone:
            raise EvictionError(
                f"node {node.name}'s provider id says {zone}, but instance {instance_id} is in {actual_zone}"
            )

    def evict(self, node: Node) -> EvictionStarted:
        """Start the spot interruption and wait (up to start_timeout_s) until the experiment
        runs; see the module docstring for the two modes. EvictionError with FIS's reason
        when the experiment failed or never ran. The EvictionStarted's time is when FIS
        accepted the start (the drill's request time), not when this wait saw it run."""
        return self.evict_all([node])[0]

    def evict_all(self, nodes: Sequence[Node]) -> list[EvictionStarted]:
        """evict() of each node, every experiment started before the first is waited for."""
        waits = [self._begin(node) for node in nodes]
        return [wait() for wait in waits]

    # ------------------------------------------------------------------ after evict()

    def wait_started(self, experiment_id: str, timeout_s: float | None = None) -> str:
        """Poll the experiment until it runs or completed (the interruption went out) and
        return that state; EvictionError with FIS's reason when it failed or was stopped,
        or when it is still starting after `timeout_s` (default: start_timeout_s)."""
        timeout = self.start_timeout_s if timeout_s is None else timeout_s
        states: list[Mapping[str, Any]] = []

        def started() -> str | None:
            reply = self._call(
                "fis",
                "get_experiment",
                missing={"ResourceNotFoundException": f"FIS experiment {experiment_id} does not exist"},
                id=experiment_id,
            )
            states.append(reply["experiment"].get("state", {}))
            status = states[-1].get("status", "")
            if status in STARTED_STATES:
                return str(status)
            if status not in STARTING_STATES:
                raise EvictionError(self._failure(experiment_id, reply["experiment"]))
            return None

        status = self._poll.until(started, timeout)
        if status is None:
            # Not stopped here: it may still run, and interrupt the instance, after this gives up.
            raise EvictionError(
                f"FIS experiment {experiment_id} is still {states[-1].get('status', '')} after {timeout:g} s"
                f" ({states[-1].get('reason') or 'no reason given'}); it may still start: stop it with"
                f" `aws fis stop-experiment --id {experiment_id}` and look at it in the FIS console"
            )
        return status

    def cleanup(self) -> None:
        """Delete the one-off templates this evictor created (safe while their experiments
        run: FIS lets them run on). One already gone counts as deleted; the others are
        named in the EvictionError raised after trying them all."""
        failed: list[str] = []
        for template_id in list(self.one_off_templates):
            try:
                self._call(
                    "fis", "delete_experiment_template", missing={"ResourceNotFoundException": "gone"}, id=template_id
                )
            except _Missing:
                pass  # already deleted (by hand, or by an earlier cleanup that lost its answer)
            except EvictionError as e:
                failed.append(f"{template_id} ({e})")
                continue
            self.one_off_templates.remove(template_id)
        if failed:
            raise EvictionError(
                f"could not delete the one-off FIS templates {', '.join(failed)}; they carry the tag"
                f" {PURPOSE_TAG}={PURPOSE} (delete them with `aws fis delete-experiment-template --id <id>`)"
            )

    def leftover_templates(self) -> list[str]:
        """Ids of this cluster's one-off drill templates that still exist (a drill stopped
        before its cleanup), found by their tags."""
        found: list[str] = []
        token: str | None = None
        while True:
            page: dict[str, Any] = {"nextToken": token} if token else {}
            reply = self._call("fis", "list_experiment_templates", **page)
            for summary in reply.get("experimentTemplates", []):
                tags = summary.get("tags") or {}
                if tags.get(PURPOSE_TAG) == PURPOSE and tags.get(DRILL_CLUSTER_TAG) == self.cluster_name:
                    found.append(summary["id"])
            token = reply.get("nextToken")
            if not token:
                return found

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # ------------------------------------------------------------------ the two modes

    def _begin(self, node: Node) -> Callable[[], EvictionStarted]:
        """The node's experiment started: what waits until it runs and says so."""
        _, instance_id = parse_provider_id(node.provider_id)
        if self.target_instance:
            return self._start_instance(node, instance_id)
        return self._start_any(node, instance_id)

    def _start_instance(self, node: Node, instance_id: str) -> Callable[[], EvictionStarted]:
        """A one-off template aimed at this instance alone, from the stack template's action
        and role, then an experiment of it."""
        source = self._call(
            "fis",
            "get_experiment_template",
            missing={
                "ResourceNotFoundException": f"the stack's FIS experiment template {self.template_id} does not exist"
                f" in {self.region} (is the stack deployed? `pulumi stack output fisTemplateId`)"
            },
            id=self.template_id,
        )["experimentTemplate"]
        action = next(
            (a for a in (source.get("actions") or {}).values() if a.get("actionId") == SPOT_INTERRUPTION), None
        )
        if action is None or DURATION_PARAMETER not in (action.get("parameters") or {}):
            raise EvictionError(
                f"the stack's FIS template {self.template_id} has no {SPOT_INTERRUPTION} action with a"
                f" {DURATION_PARAMETER}; redeploy the stack (components/eks/fis.py)"
            )
        role = self.role_arn or source.get("roleArn") or ""
        params = self._one_off_params(
            node,
            instance_id,
            arn=self._instance_arn(instance_id, role),
            role=role,
            parameters=dict(action["parameters"]),
            stop_conditions=list(source.get("stopConditions") or [{"source": "none"}]),
            token=self._client_token(),
        )
        created = self._call(
            "fis",
            "create_experiment_template",
            extra_permissions=f"fis:TagResource and iam:PassRole on {role}",
            **params,
        )
        one_off = created["experimentTemplate"]["id"]
        # Remembered before starting it: a failed start still leaves a template to delete.
        self.one_off_templates.append(one_off)
        experiment, accepted_at = self._started(one_off)
        notice = action["parameters"][DURATION_PARAMETER]

        def running() -> EvictionStarted:
            status = self.wait_started(experiment)
            return EvictionStarted(
                node=node.name,
                backend=self.name,
                at=accepted_at,
                detail=f"experiment {experiment} {status} (one-off template {one_off} aimed at {instance_id},"
                f" {notice} notice)",
            )

        return running

    def _start_any(self, node: Node, instance_id: str) -> Callable[[], EvictionStarted]:
        """The stack's template as is: FIS picks one running instance of the group, which
        is known once the experiment runs (its targets are resolved by then)."""
        experiment, accepted_at = self._started(self.template_id)

        def running() -> EvictionStarted:
            self.wait_started(experiment)
            chosen = self._resolved_instances(experiment)
            if not chosen:
                which = "FIS did not say which instance it interrupts"
            elif instance_id in chosen:
                which = f"FIS chose {instance_id}, node {node.name}'s instance"
            else:
                which = f"FIS chose {', '.join(chosen)}, not node {node.name}'s instance {instance_id}"
            return EvictionStarted(
                node=node.name,
                backend=self.name,
                at=accepted_at,
                detail=f"experiment {experiment} of the stack's template {self.template_id}: {which}",
            )

        return running

    # ------------------------------------------------------------------ helpers

    def _started(self, template_id: str) -> tuple[str, float]:
        """Start an experiment of the template: its id and when FIS accepted the start (unix
        seconds)."""
        experiment_id = self._start(template_id)
        # Wall-clock time, as the drill stamps its events (lab/cluster/drill.py): the request's
        # time, from which the drill looks for the disruption's first sign (lab/cluster/disruption.py).
        return experiment_id, time.time()

    def _start(self, template_id: str) -> str:
        # Only the stack's own template can be missing because the stack is not deployed.
        hint = (
            " (is the stack deployed? `pulumi stack output fisTemplateId`)" if template_id == self.template_id else ""
        )
        gone = f"the FIS experiment template {template_id} does not exist in {self.region}{hint}"
        missing = {"ResourceNotFoundException": gone}
        reply = self._call(
            "fis",
            "start_experiment",
            missing=missing,
            experimentTemplateId=template_id,
            clientToken=self._client_token(),
        )
        experiment_id = str(reply["experiment"]["id"])
        self.experiment_ids.append(experiment_id)
        return experiment_id

    def _resolved_instances(self, experiment_id: str) -> list[str]:
        """The instance ids the experiment's targets resolved to, where this botocore knows
        ListExperimentResolvedTargets (FIS does not document targetInformation's keys, so
        every value is searched for an instance id)."""
        fis = self._aws.client("fis")
        if "ListExperimentResolvedTargets" not in fis.meta.service_model.operation_names:
            return []
        found: list[str] = []
        token: str | None = None
        while True:
            page: dict[str, Any] = {"nextToken": token} if token else {}
            reply = self._call("fis", "list_experiment_resolved_targets", experimentId=experiment_id, **page)
            for target in reply.get("resolvedTargets", []):
                for value in (target.get("targetInformation") or {}).values():
                    found += [i for i in re.findall(r"\bi-[0-9a-f]{8,17}\b", value) if i not in found]
            token = reply.get("nextToken")
            if not token:
                return found

    def _one_off_params(
        self,
        node: Node,
        instance_id: str,
        *,
        arn: str,
        role: str,
        parameters: Mapping[str, str],
        stop_conditions: list[Mapping[str, str]],
        token: str,
    ) -> dict[str, Any]:
        """create_experiment_template's arguments: one action, one target, this instance."""
        return {
            "clientToken": token,
            "description": (
                f"elastic-spot-lab eviction drill: spot interruption of {instance_id} (node {node.name})"
                f" of {self.cluster_name}"
            )[:512],
            "stopConditions": stop_conditions,
            "targets": {
                ONE_OFF_TARGET: {
                    "resourceType": SPOT_RESOURCE_TYPE,
                    "resourceArns": [arn],
                    "selectionMode": "ALL",
                }
            },
            "actions": {
                ONE_OFF_ACTION: {
                    "actionId": SPOT_INTERRUPTION,
                    "parameters": dict(parameters),
                    "targets": {"SpotInstances": ONE_OFF_TARGET},
                }
            },
            "roleArn": role,
            "tags": {
                PURPOSE_TAG: PURPOSE,
                DRILL_CLUSTER_TAG: self.cluster_name,
                DRILL_NODE_TAG: node.name,
                DRILL_INSTANCE_TAG: instance_id,
                SOURCE_TEMPLATE_TAG: self.template_id,
            },
        }

    def _instance_arn(self, instance_id: str, role_arn: str) -> str:
        """The instance's ARN, in the role's partition and account (an FIS experiment's role
        is in the account the experiment runs in, and so are its single-account targets)."""
        partition, account = _role_account(role_arn)
        return f"arn:{partition}:ec2:{self.region}:{account}:instance/{instance_id}"

    def _failure(self, experiment_id: str, experiment: Mapping[str, Any]) -> str:
        """Why an experiment did not start, with FIS's reason and error and what to check."""
        state = experiment.get("state", {})
        error = state.get("error") or {}
        where = f" (error {error.get('code')} at {error.get('location')})" if error.get("code") else ""
        role = experiment.get("roleArn") or self.role_arn or "the template's role"
        return (
            f"FIS experiment {experiment_id} {state.get('status')}: {state.get('reason', 'no reason given')}{where};"
            f" check that {role} may ec2:SendSpotInstanceInterruptions on the instance (it must carry"
            f" {CLUSTER_TAG}={self.cluster_name} and {NODEGROUP_TAG}={self.gpu_node_group}) and ec2:DescribeInstances"
        )

    def _call(
        self,
        service: str,
        operation: str,
        *,
        missing: Mapping[str, str] | None = None,
        extra_permissions: str = "",
        **params: Any,
    ) -> Any:
        """One request; every failure becomes an EvictionError saying what to do. `missing`
        maps error codes meaning "does not exist" to the message to raise instead."""
        answer = self._aws.send(
            service,
            operation,
            lambda client: getattr(client, operation)(**params),
            named=f"{service} {operation}",
            expected=missing or {},
            extra_permissions=extra_permissions,
        )
        if isinstance(answer, Refused):
            raise _Missing((missing or {})[answer.code]) from answer.error
        return answer
