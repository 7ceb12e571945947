"""What each AWS service validates beyond its botocore model (EKS node group sizes and access
scopes, FIS references and action parameters, S3 bucket names, EC2 CIDR sizes, Auto Scaling
tag keys), and the reshapes that put Pulumi's inputs where the request wants them where
Pulumi's structure differs (FIS's maps keyed by name, S3's configuration objects, EKS's
logging, ECR's single encryption configuration). The targets of lab/plan/aws_api.py name them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lab.plan.aws_request import Issue, Moved, Reshape, Rule, indexed, is_int, is_unknown, join_path

_EKS_RULE = "EKS validation beyond botocore eks CreateNodegroupRequest"


def nodegroup_sizes(inputs: dict[str, Any]) -> Iterator[Issue]:
    """EKS refuses a scaling config unless minSize <= desiredSize <= maxSize."""
    scaling = inputs.get("scalingConfig")
    if not isinstance(scaling, dict):
        return
    low, want, high = (
        scaling.get(k) if is_int(scaling.get(k)) else None for k in ("minSize", "desiredSize", "maxSize")
    )
    if low is not None and high is not None and low > high:
        yield Issue("scalingConfig.maxSize", high, f"at least minSize ({low:g})", _EKS_RULE)
    if want is not None and low is not None and want < low:
        yield Issue("scalingConfig.desiredSize", want, f"at least minSize ({low:g})", _EKS_RULE)
    if want is not None and high is not None and want > high:
        yield Issue("scalingConfig.desiredSize", want, f"at most maxSize ({high:g})", _EKS_RULE)


def access_scope(inputs: dict[str, Any]) -> Iterator[Issue]:
    """A namespace-scoped access policy names its namespaces (botocore's AccessScope docs)."""
    scope = inputs.get("accessScope")
    if isinstance(scope, dict) and scope.get("type") == "namespace" and not scope.get("namespaces"):
        yield Issue(
            "accessScope.namespaces",
            scope.get("namespaces"),
            "at least one namespace when accessScope.type is namespace",
            "EKS validation beyond botocore eks AccessScope",
        )


def eks_cluster_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """Pulumi's `enabledClusterLogTypes` is EKS's `logging.clusterLogging[0].types` (enabled),
    and its single `encryptionConfig` object the request's list of one."""
    request = dict(inputs)
    if "enabledClusterLogTypes" in request:
        types = Moved(request.pop("enabledClusterLogTypes"), "enabledClusterLogTypes")
        request["logging"] = Moved({"clusterLogging": [Moved({"types": types, "enabled": True}, "")]}, "")
    if isinstance(request.get("encryptionConfig"), dict):
        request["encryptionConfig"] = [Moved(request["encryptionConfig"], "encryptionConfig")]
    return request


@dataclass(frozen=True)
class _FisAction:
    """What FIS validates about one action beyond the model: its target key, the target's
    resource type, and duration parameters' ranges (seconds)."""

    target_key: str
    resource_type: str
    durations: Mapping[str, tuple[int, int]]
    doc: str


# FIS actions the lab uses, per the AWS FIS actions reference.
_FIS_ACTIONS: dict[str, _FisAction] = {
    "aws:ec2:send-spot-instance-interruptions": _FisAction(
        "SpotInstances",
        "aws:ec2:spot-instance",
        {"durationBeforeInterruption": (120, 900)},
        "durationBeforeInterruption: the time to wait before interrupting the instance, range 2-15 minutes",
    ),
}
_FIS_RULE = "FIS validation beyond botocore fis CreateExperimentTemplateRequest"
_SELECTION_MODE = re.compile(r"ALL|COUNT\(([1-9][0-9]*)\)|PERCENT\(([1-9][0-9]*)\)")
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")
_STOP_SOURCES = ("none", "aws:cloudwatch:alarm")


def _iso_seconds(text: str) -> float | None:
    """Seconds of an ISO-8601 duration (PnDTnHnMnS); None if it is not one."""
    m = _DURATION.fullmatch(text)
    if not m or text in ("P", "PT") or text.endswith("T"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def _named(items: Any, path: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (path, item) of a Pulumi list of named objects (FIS actions, targets)."""
    return {
        item["name"]: (where, item)
        for where, item in indexed(items, path)
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    }


def fis_rules(inputs: dict[str, Any]) -> Iterator[Issue]:
    """Names unique, actions' targets defined, targets' selection, actions' parameters, stop conditions."""
    for key in ("actions", "targets"):
        names = [item.get("name") for _, item in indexed(inputs.get(key), key) if isinstance(item, dict)]
        for name in sorted({n for n in names if isinstance(n, str) and names.count(n) > 1}):
            yield Issue(key, name, f"unique {key} names (FIS keys them by name)", _FIS_RULE)
    targets = _named(inputs.get("targets"), "targets")
    for where, target in targets.values():
        yield from _fis_target(target, where)
    for where, action in _named(inputs.get("actions"), "actions").values():
        yield from _fis_action(action, where, targets)
    for where, stop in indexed(inputs.get("stopConditions"), "stopConditions"):
        if isinstance(stop, dict):
            yield from _fis_stop(stop, where)


def _fis_target(target: dict[str, Any], where: str) -> Iterator[Issue]:
    if target.get("resourceTags") and target.get("resourceArns"):
        yield Issue(
            join_path(where, "resourceArns"),
            target["resourceArns"],
            "resourceArns or resourceTags, not both",
            _FIS_RULE,
        )
    mode = target.get("selectionMode")
    if isinstance(mode, str) and not is_unknown(mode):
        m = _SELECTION_MODE.fullmatch(mode)
        if not m or (m.group(2) and int(m.group(2)) > 100):
            yield Issue(
                join_path(where, "selectionMode"), mode, "ALL, COUNT(n) or PERCENT(n) with n >= 1 (n <= 100)", _FIS_RULE
            )


def _fis_action(action: dict[str, Any], where: str, targets: dict[str, tuple[str, dict[str, Any]]]) -> Iterator[Issue]:
    """An action's target names a defined target (of the type its action wants); its duration
    parameters are in range."""
    action_id = action.get("actionId")
    spec = _FIS_ACTIONS.get(action_id) if isinstance(action_id, str) else None
    target = action.get("target")
    if isinstance(target, dict):
        name = target.get("value")
        if isinstance(name, str) and not is_unknown(name) and name not in targets:
            defined = ", ".join(sorted(targets)) or "none"
            yield Issue(
                join_path(where, "target.value"),
                name,
                f"the name of a target in targets (defined: {defined})",
                _FIS_RULE,
            )
        if spec and target.get("key") != spec.target_key:
            yield Issue(
                join_path(where, "target.key"), target.get("key"), f"{spec.target_key} for {action_id}", _FIS_RULE
            )
        kind = targets[name][1].get("resourceType") if name in targets else None
        if spec and isinstance(kind, str) and not is_unknown(kind) and kind != spec.resource_type:
            yield Issue(
                join_path(where, "target.value"), name, f"a target of {spec.resource_type} (it is {kind})", _FIS_RULE
            )
    elif spec:
        yield Issue(join_path(where, "target"), target, f"a target {spec.target_key} for {action_id}", _FIS_RULE)
    if spec:
        yield from _fis_durations(action, where, spec)


def _fis_durations(action: dict[str, Any], where: str, spec: _FisAction) -> Iterator[Issue]:
    for at, parameter in indexed(action.get("parameters"), join_path(where, "parameters")):
        if not isinstance(parameter, dict) or parameter.get("key") not in spec.durations:
            continue
        value, (low, high) = parameter.get("value"), spec.durations[parameter["key"]]
        if is_unknown(value):
            continue
        seconds = _iso_seconds(value) if isinstance(value, str) else None
        if seconds is None or not low <= seconds <= high:
            span = f"PT{low // 60}M to PT{high // 60}M"
            yield Issue(join_path(at, "value"), value, f"an ISO-8601 duration {span} ({spec.doc})", _FIS_RULE)


def _fis_stop(stop: dict[str, Any], where: str) -> Iterator[Issue]:
    source = stop.get("source")
    if isinstance(source, str) and not is_unknown(source) and source not in _STOP_SOURCES:
        yield Issue(join_path(where, "source"), source, f"one of {', '.join(_STOP_SOURCES)}", _FIS_RULE)
    if source == "aws:cloudwatch:alarm" and not stop.get("value"):
        yield Issue(join_path(where, "value"), stop.get("value"), "the alarm's ARN", _FIS_RULE)


def _key_values(items: Any, path: str) -> Any:
    """A Pulumi list of {key, value} as the map the API takes (anything else as given)."""
    if not isinstance(items, list):
        return items
    return Moved(
        {
            item["key"]: Moved(item.get("value"), f"{where}.value")
            for where, item in indexed(items, path)
            if isinstance(item, dict) and isinstance(item.get("key"), str)
        },
        path,
    )


def _fis_action_request(action: dict[str, Any], where: str) -> dict[str, Any]:
    request = {k: v for k, v in action.items() if k != "name"}
    request["parameters"] = _key_values(action.get("parameters"), join_path(where, "parameters"))
    target = action.get("target")
    if isinstance(target, dict) and isinstance(target.get("key"), str):
        path = join_path(where, "target")
        request["target"] = Moved({target["key"]: Moved(target.get("value"), f"{path}.value")}, path)
    return request


def _fis_target_request(target: dict[str, Any], where: str) -> dict[str, Any]:
    request = {k: v for k, v in target.items() if k != "name"}
    request["resourceTags"] = _key_values(target.get("resourceTags"), join_path(where, "resourceTags"))
    return request


def fis_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """Pulumi's lists of named actions and targets as the maps keyed by name FIS takes."""
    request = dict(inputs)
    for key, convert in (("actions", _fis_action_request), ("targets", _fis_target_request)):
        if isinstance(inputs.get(key), list):
            request[key] = Moved(
                {name: Moved(convert(item, where), where) for name, (where, item) in _named(inputs[key], key).items()},
                key,
            )
    return request


def nest(member: str, keep: tuple[str, ...]) -> Reshape:
    """A reshape putting every input but `keep` into the request member `member` (S3's
    configuration objects), where findings still name the inputs' own paths."""

    def reshape(inputs: dict[str, Any]) -> dict[str, Any]:
        request = {k: v for k, v in inputs.items() if k in keep}
        request[member] = Moved({k: v for k, v in inputs.items() if k not in keep}, "")
        return request

    return reshape


def ecr_repository_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """Pulumi's `encryptionConfigurations` (a list of at most one) is the request's single
    `encryptionConfiguration`."""
    request = dict(inputs)
    configs = request.pop("encryptionConfigurations", None)
    if isinstance(configs, list) and len(configs) == 1:
        request["encryptionConfiguration"] = Moved(configs[0], "encryptionConfigurations[0]")
    elif configs is not None:
        request["encryptionConfigurations"] = configs  # not one: reported as the unknown member it is
    return request


def _nest_with_rules(member: str, keep: tuple[str, ...], rule: Callable[[Any, str], Any]) -> Reshape:
    """A reshape putting every input but `keep` into the request member `member` (`nest`), each
    item of the `rules` input reshaped by `rule` (the item, its path)."""

    def reshape(inputs: dict[str, Any]) -> dict[str, Any]:
        request = nest(member, keep)(inputs)
        rules = inputs.get("rules")
        if isinstance(rules, list):
            rules = [Moved(rule(item, where), where) for where, item in indexed(rules, "rules")]
        request[member].value["rules"] = Moved(rules, "rules")
        return request

    return reshape


def s3_encryption_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """`rules` go in ServerSideEncryptionConfiguration.Rules; each rule's
    `blockedEncryptionTypes` list in BlockedEncryptionTypes.EncryptionType."""
    keep = ("bucket", "expectedBucketOwner", "region")
    return _nest_with_rules("ServerSideEncryptionConfiguration", keep, _s3_rule)(inputs)


def _s3_rule(rule: Any, where: str) -> Any:
    if not isinstance(rule, dict) or rule.get("blockedEncryptionTypes") is None:
        return rule
    path = join_path(where, "blockedEncryptionTypes")
    return {
        **rule,
        "blockedEncryptionTypes": Moved({"EncryptionType": Moved(rule["blockedEncryptionTypes"], path)}, path),
    }


def s3_lifecycle_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """`rules` go in LifecycleConfiguration.Rules; a rule filter's `and.tags` map is the
    request's list of Tag objects."""
    keep = ("bucket", "expectedBucketOwner", "transitionDefaultMinimumObjectSize")
    return _nest_with_rules("LifecycleConfiguration", keep, _lifecycle_rule)(inputs)


def _lifecycle_rule(rule: Any, where: str) -> Any:
    conjunction: Any = (rule.get("filter") or {}).get("and") if isinstance(rule, dict) else None
    tags = conjunction.get("tags") if isinstance(conjunction, dict) else None
    if not isinstance(tags, dict):
        return rule
    path = join_path(where, "filter.and.tags")
    listed = Moved(
        [{"Key": Moved(k, join_path(path, k)), "Value": Moved(v, join_path(path, k))} for k, v in tags.items()], path
    )
    return {**rule, "filter": {**rule["filter"], "and": {**conjunction, "tags": listed}}}


_S3_NAME_RULE = "S3 bucket naming rules"
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*[a-z0-9]")
_BUCKET_PREFIX = re.compile(r"[a-z0-9][a-z0-9.-]*")
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_PREFIX_MAX = 37  # pulumi_aws appends 26 characters to a bucketPrefix


def _bucket_name_problem(name: str, prefix: bool = False) -> str | None:
    """What is wrong with a general purpose bucket name (or a bucketPrefix), None if nothing."""
    if prefix and len(name) > _PREFIX_MAX:
        return f"a bucketPrefix of at most {_PREFIX_MAX} characters"
    if not prefix and not 3 <= len(name) <= 63:
        return "a bucket name of 3-63 characters"
    if not (_BUCKET_PREFIX if prefix else _BUCKET_NAME).fullmatch(name):
        return "lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"
    if ".." in name:
        return "no two adjacent dots"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name):
        return "a name not formatted as an IP address"
    if name.startswith(_RESERVED_PREFIXES):
        return f"a name not starting with {', '.join(_RESERVED_PREFIXES)}"
    if not prefix and name.endswith(_RESERVED_SUFFIXES):
        return f"a name not ending with {', '.join(_RESERVED_SUFFIXES)}"
    return None


def bucket_names(inputs: dict[str, Any]) -> Iterator[Issue]:
    for key, prefix in (("bucket", False), ("bucketPrefix", True)):
        name = inputs.get(key)
        if isinstance(name, str) and not is_unknown(name) and (problem := _bucket_name_problem(name, prefix)):
            yield Issue(key, name, problem, _S3_NAME_RULE)


def cidrs(key: str, prefixes: tuple[int, int]) -> Rule:
    """A rule: input `key` is an IPv4 CIDR block (network address) with a prefix in `prefixes`."""

    def rule(inputs: dict[str, Any]) -> Iterator[Issue]:
        value = inputs.get(key)
        if not isinstance(value, str) or is_unknown(value):
            return
        low, high = prefixes
        expected = f"an IPv4 CIDR block with a prefix /{low} to /{high}"
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as e:
            yield Issue(key, value, f"{expected} ({e})", "EC2 CIDR rules")
            return
        if "/" not in value or not low <= network.prefixlen <= high:
            yield Issue(key, value, expected, "EC2 CIDR rules")

    return rule


def asg_tag_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """One Pulumi `tag` of an Auto Scaling group as the request's Tags[0]."""
    request = {k: v for k, v in inputs.items() if k not in ("autoscalingGroupName", "tag")}
    tag = inputs.get("tag")
    if isinstance(tag, dict):
        group = Moved(inputs.get("autoscalingGroupName"), "autoscalingGroupName")
        tag = {**tag, "ResourceId": group, "ResourceType": "auto-scaling-group"}
    request["Tags"] = [Moved(tag, "tag")]
    return request


def asg_tag_key(inputs: dict[str, Any]) -> Iterator[Issue]:
    tag = inputs.get("tag")
    key = tag.get("key") if isinstance(tag, dict) else None
    if isinstance(key, str) and key.lower().startswith("aws:"):
        yield Issue("tag.key", key, "a tag key not starting with aws: (reserved for AWS's own tags)", "AWS tag rules")
