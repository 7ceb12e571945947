"""`elastic-lab check [--stack S]`: every prerequisite of the cloud path at once, each with its fix.

A new user otherwise meets them one per run (credentials, then the Pulumi CLI, then its login,
then the passphrase of a local backend). Each check asks the tool's own client: the Pulumi
Automation API's `PulumiCommand` (the CLI and its version) and `LocalWorkspace.who_am_i` (the
backend login), azure-identity and azure-mgmt-resource (credentials, the subscription, the
resource providers the stack creates resources of, the caller's permissions on the subscription
against what the stack creates), boto3 (credentials, the account through STS, IAM's policy
simulator for what the EKS stack creates), the `kubernetes` client (a byo cluster's API server).
`up` runs the checks of its stack first and stops with every problem found, before anything
starts.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from lab.cluster.unreachable import unreachable_reason
from lab.plan.quota_needs import StackQuota
from lab.stacks import quota as quota_checks
from lab.stacks.prerequisite import Prerequisite as Prerequisite
from lab.stacks.prerequisite import not_checked
from lab.stacks.prerequisite import said as _said
from lab.vocab.layout import ROOT
from lab.vocab.names import PROJECT

PULUMI_INSTALL = "https://www.pulumi.com/docs/install/"
AWS_CLI_INSTALL = "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
DOCKER_INSTALL = "https://docs.docker.com/engine/install/"
# The resource providers an AKS stack creates resources of (a subscription that never used
# one must register it: `az provider register --namespace <ns>`).
AZURE_PROVIDERS = (
    "Microsoft.ContainerService",
    "Microsoft.ContainerRegistry",
    "Microsoft.Compute",
    "Microsoft.Network",
    "Microsoft.Storage",
    "Microsoft.ManagedIdentity",
)
SUBSCRIPTION_ENV = ("ARM_SUBSCRIPTION_ID", "AZURE_SUBSCRIPTION_ID")
# What the identity that runs `up` must be allowed on the subscription, one action per kind of
# thing the AKS stack creates: Contributor has all but the role assignments (the kubelet's
# AcrPull, the jobs' storage role), for which it needs User Access Administrator too (or Owner).
AZURE_ACTIONS = (
    "Microsoft.Resources/subscriptions/resourceGroups/write",
    "Microsoft.ContainerService/managedClusters/write",
    "Microsoft.ContainerRegistry/registries/write",
    "Microsoft.Storage/storageAccounts/write",
    "Microsoft.ManagedIdentity/userAssignedIdentities/write",
    "Microsoft.Authorization/roleAssignments/write",
)
AZURE_PERMISSIONS_API = "2022-04-01"
# The same for the EKS stack's AWS identity (IAM's policy simulator).
AWS_ACTIONS = (
    "eks:CreateCluster",
    "eks:CreateNodegroup",
    "ec2:CreateVpc",
    "iam:CreateRole",
    "iam:PassRole",
    "ecr:CreateRepository",
    "s3:CreateBucket",
    "fis:CreateExperimentTemplate",
)
PASSPHRASE_ENV = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")


# ----------------------------------------------------------------------------- Pulumi
def pulumi_cli() -> tuple[Prerequisite, Any]:
    """The Pulumi CLI on PATH at a version the Automation API supports, and its command."""
    from pulumi.automation import PulumiCommand
    from pulumi.automation.errors import InvalidVersionError

    try:
        command = PulumiCommand()
    except FileNotFoundError:
        return Prerequisite("Pulumi CLI", False, "not on PATH", f"install it: {PULUMI_INSTALL}"), None
    except InvalidVersionError as exc:
        return Prerequisite("Pulumi CLI", False, _said(exc), f"upgrade it: {PULUMI_INSTALL}"), None
    return Prerequisite("Pulumi CLI", True, f"version {command.version}"), command


def pulumi_login(command: Any, env: Mapping[str, str]) -> list[Prerequisite]:
    """The backend the CLI is logged in to, and a passphrase where that backend needs one."""
    from pulumi.automation import LocalWorkspace
    from pulumi.automation.errors import CommandError

    try:
        who = LocalWorkspace(work_dir=str(ROOT), pulumi_command=command).who_am_i()
    except CommandError as exc:
        return [
            Prerequisite(
                "Pulumi backend login",
                False,
                f"not logged in ({_said(exc)})",
                "`pulumi login` (Pulumi Cloud), or `pulumi login --local` / `pulumi login s3://<bucket>` / "
                "`pulumi login azblob://<container>` (a backend of your own)",
            )
        ]
    url = who.url or ""
    out = [Prerequisite("Pulumi backend login", True, f"{who.user} at {url or 'Pulumi Cloud'}")]
    self_managed = url.startswith(("file://", "s3://", "azblob://", "gs://"))
    if self_managed:
        given = [name for name in PASSPHRASE_ENV if env.get(name)]
        out.append(
            Prerequisite(
                "secrets passphrase",
                bool(given),
                f"{given[0]} is set" if given else f"neither {' nor '.join(PASSPHRASE_ENV)} is set",
                "a self-managed backend encrypts the stack's secrets with a passphrase: "
                "export PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE, a file holding it)",
            )
        )
    return out


def _quota_names(quota: StackQuota | None) -> list[str]:
    return [need.check_name for need in quota.needs] if quota is not None else []


# ------------------------------------------------------------------------------ Azure
def azure(
    stack_config: Mapping[str, Any], env: Mapping[str, str], quota: StackQuota | None = None, **client_kwargs: Any
) -> list[Prerequisite]:
    """Credentials, the subscription the stack deploys to, its resource providers, and (given
    the stack's `quota` needs) the compute quota of its region. `client_kwargs` go to the
    azure-mgmt clients (a `credential`, a `transport` in tests)."""
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import CredentialUnavailableError, DefaultAzureCredential
    from azure.mgmt.resource.resources import ResourceManagementClient

    credential = client_kwargs.pop("credential", None)
    if credential is None:
        logging.getLogger("azure.identity").setLevel(logging.ERROR)  # its report is said once, below
        credential = DefaultAzureCredential()
    login = "`az login` (or AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET, or a managed identity)"
    # What each early stop leaves unchecked, in the order the checks run.
    later = ["Azure resource providers", "Azure role rights", *_quota_names(quota)]
    if stack_config.get(f"{PROJECT}:location"):
        later.append("AKS in the stack's location")
    try:
        credential.get_token("https://management.azure.com/.default")
    except (CredentialUnavailableError, ClientAuthenticationError) as exc:
        return [
            Prerequisite("Azure credentials", False, _said(exc, last=False), login),
            *not_checked(["Azure subscription", *later], "Azure credentials"),
        ]
    out = [Prerequisite("Azure credentials", True, "a token for Azure Resource Manager")]
    subscription, source = chosen_subscription(stack_config, env)
    if subscription is None:
        return [
            *out,
            Prerequisite(
                "Azure subscription",
                False,
                "none chosen (no ARM_SUBSCRIPTION_ID, no azure-native:subscriptionId, no `az account set` default)",
                "set ARM_SUBSCRIPTION_ID (or `pulumi config set azure-native:subscriptionId <id>`)",
            ),
            *not_checked(later, "an Azure subscription"),
        ]
    out.append(Prerequisite("Azure subscription", True, f"{subscription} (from {source})"))
    resources = ResourceManagementClient(credential, subscription, **client_kwargs)
    providers, aks_regions = _azure_providers(resources, subscription)
    out.append(providers)
    if aks_regions is None:  # the subscription could not be read
        return out + not_checked(later[1:], f"subscription {subscription} can be read")
    out.append(azure_rights(resources, subscription))
    if quota is not None and quota.needs:
        from azure.mgmt.compute import ComputeManagementClient

        compute = ComputeManagementClient(credential, subscription, **client_kwargs)
        out += quota_checks.azure_quota(quota, compute, subscription)
    return out + _aks_location(stack_config, aks_regions)


def _azure_providers(resources: Any, subscription: str) -> tuple[Prerequisite, set[str] | None]:
    """Whether the stack's resource providers are registered on the subscription, and the
    regions where AKS runs (None where the subscription cannot be read; empty where
    Microsoft.ContainerService lists none)."""
    from azure.core.exceptions import AzureError

    unregistered = []
    aks_regions: set[str] = set()
    for namespace in AZURE_PROVIDERS:
        try:
            provider = resources.providers.get(namespace)
            state = provider.registration_state
            if namespace == "Microsoft.ContainerService":
                aks_regions = {
                    _region_name(location)
                    for kind in provider.resource_types or []
                    if str(kind.resource_type).lower() == "managedclusters"
                    for location in kind.locations or []
                }
        except AzureError as exc:
            cannot = Prerequisite(
                "Azure resource providers",
                False,
                f"cannot read {namespace} in subscription {subscription}: {_said(exc)}",
                "use a subscription these credentials can see (`az account list`); the identity needs "
                "Contributor and User Access Administrator on it to create the stack",
            )
            return cannot, None
        if state != "Registered":
            unregistered.append(f"{namespace} ({state})")
    registered = Prerequisite(
        "Azure resource providers",
        not unregistered,
        "unregistered: " + ", ".join(unregistered) if unregistered else f"{len(AZURE_PROVIDERS)} registered",
        "; ".join(f"az provider register --namespace {u.split(' ')[0]}" for u in unregistered),
    )
    return registered, aks_regions


def _aks_location(stack_config: Mapping[str, Any], aks_regions: set[str]) -> list[Prerequisite]:
    """Whether Azure offers AKS in the stack's location (nothing where either is unknown)."""
    location = str(stack_config.get(f"{PROJECT}:location") or "")
    if not (location and aks_regions):
        return []
    return [
        Prerequisite(
            "AKS in the stack's location",
            location in aks_regions,
            f"{location}: " + ("AKS runs there" if location in aks_regions else "Azure offers no AKS there"),
            f"a location where Azure offers AKS (e.g. {', '.join(sorted(aks_regions)[:4])}): "
            "set elastic-spot-lab:location",
        )
    ]


def _allowed(action: str, permissions: Iterable[Mapping[str, Any]]) -> bool:
    """Whether ARM's permissions (each entry its actions less its notActions, wildcards and
    case as ARM matches them) allow `action`."""
    from fnmatch import fnmatch

    wanted = action.lower()
    return any(
        any(fnmatch(wanted, str(a).lower()) for a in entry.get("actions") or [])
        and not any(fnmatch(wanted, str(n).lower()) for n in entry.get("notActions") or [])
        for entry in permissions
    )


def azure_rights(resources: Any, subscription: str) -> Prerequisite:
    """What the caller may do on the subscription (ARM's permissions of the caller), against
    what the stack creates."""
    from azure.core.exceptions import AzureError
    from azure.core.rest import HttpRequest

    name = "Azure role rights"
    url = (
        f"https://management.azure.com/subscriptions/{subscription}/providers/Microsoft.Authorization/permissions"
        f"?api-version={AZURE_PERMISSIONS_API}"
    )
    entries: list[Mapping[str, Any]] = []
    try:
        while url:
            response = resources.send_request(HttpRequest("GET", url))
            response.raise_for_status()
            page = response.json()
            entries += page.get("value") or []
            url = page.get("nextLink") or ""
    except (AzureError, ValueError) as exc:
        return Prerequisite(name, False, f"cannot read them on {subscription}: {_said(exc)}", required=False)
    missing = [a for a in AZURE_ACTIONS if not _allowed(a, entries)]
    return Prerequisite(
        name,
        not missing,
        f"lacks {', '.join(missing)}" if missing else f"may create what the stack creates ({len(AZURE_ACTIONS)} kinds)",
        f"the identity needs Contributor and User Access Administrator (or Owner) on /subscriptions/{subscription}",
    )


def _region_name(display: str) -> str:
    """ARM lists a provider's locations by display name ("East US"); config names them "eastus"."""
    return "".join(display.split()).lower()


def chosen_subscription(stack_config: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str | None, str]:
    """The subscription the azure-native provider deploys to, and where it was read: the
    environment, the stack's config, else the Azure CLI's default (its azureProfile.json)."""
    for name in SUBSCRIPTION_ENV:
        if env.get(name):
            return env[name], name
    if stack_config.get("azure-native:subscriptionId"):
        return str(stack_config["azure-native:subscriptionId"]), "azure-native:subscriptionId"
    profile = Path(env.get("AZURE_CONFIG_DIR") or Path.home() / ".azure") / "azureProfile.json"
    try:
        # The CLI writes it with a byte-order mark.
        subscriptions = json.loads(profile.read_text(encoding="utf-8-sig")).get("subscriptions") or []
    except (OSError, ValueError, AttributeError):
        return None, ""
    default = next((s for s in subscriptions if isinstance(s, dict) and s.get("isDefault")), None)
    return (str(default["id"]), "the Azure CLI's default") if default and default.get("id") else (None, "")


# -------------------------------------------------------------------------------- AWS
def aws(quota: StackQuota | None = None, **client_kwargs: Any) -> list[Prerequisite]:
    """Credentials and the account they belong to (STS), (given the stack's `quota` needs) its
    EC2 vCPU quotas in the stack's region, and the `aws` CLI the EKS kubeconfig runs for its
    tokens. `client_kwargs` go to boto3's clients (`sts`, `iam`, `service_quotas`: made ones)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    out = []
    session = boto3.session.Session()
    login = "`aws configure` or `aws sso login`, or set AWS_PROFILE"
    later = ["AWS role rights", *_quota_names(quota)]
    if session.get_credentials() is None:
        out.append(Prerequisite("AWS credentials", False, "none found in boto3's credential chain", login))
        out += not_checked(later, "AWS credentials")
    else:
        try:
            sts = client_kwargs.pop("sts", None) or session.client("sts", **client_kwargs)
            who = sts.get_caller_identity()
            out.append(Prerequisite("AWS credentials", True, f"account {who['Account']} as {who['Arn']}"))
            iam = client_kwargs.pop("iam", None) or session.client("iam", **client_kwargs)
            out.append(aws_rights(iam, str(who["Arn"])))
            if quota is not None and quota.needs:
                service_quotas = client_kwargs.pop("service_quotas", None) or session.client(
                    "service-quotas", region_name=quota.region, **client_kwargs
                )
                out += quota_checks.aws_quota(quota, service_quotas)
        except (BotoCoreError, ClientError) as exc:
            checked = {p.name for p in out}
            out.append(Prerequisite("AWS credentials", False, _said(exc), login))
            out += not_checked([name for name in later if name not in checked], "AWS credentials")
    cli = shutil.which("aws")
    out.append(
        Prerequisite(
            "AWS CLI",
            cli is not None,
            cli or "not on PATH (the cluster's kubeconfig runs `aws eks get-token`)",
            f"install it: {AWS_CLI_INSTALL}",
        )
    )
    return out


def aws_rights(iam: Any, caller: str) -> Prerequisite:
    """Whether the caller's policies allow what the EKS stack creates (IAM's policy simulator).
    An assumed role (SSO, a CI role) is simulated as its role, whose path IAM knows."""
    from botocore.exceptions import BotoCoreError, ClientError

    name = "AWS role rights"
    try:
        principal = caller
        if ":assumed-role/" in caller:  # arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION
            principal = str(iam.get_role(RoleName=caller.split(":assumed-role/", 1)[1].split("/")[0])["Role"]["Arn"])
        results = iam.simulate_principal_policy(PolicySourceArn=principal, ActionNames=list(AWS_ACTIONS))
    except (BotoCoreError, ClientError) as exc:
        return Prerequisite(
            name,
            False,
            f"cannot check them ({_said(exc)})",
            "allow iam:SimulatePrincipalPolicy (and iam:GetRole) to check, or make sure the identity may create "
            "EKS clusters, VPCs, IAM roles, an ECR repository, an S3 bucket and FIS templates",
            required=False,
        )
    denied = [r["EvalActionName"] for r in results.get("EvaluationResults", []) if r["EvalDecision"] != "allowed"]
    return Prerequisite(
        name,
        not denied,
        f"denied {', '.join(denied)}" if denied else f"may create what the stack creates ({len(AWS_ACTIONS)} kinds)",
        f"attach a policy allowing them to {principal} (AdministratorAccess, or the EKS stack's own list)",
    )


# ---------------------------------------------------------------------------- clusters
def cluster_reachable(kubeconfig: str | None, context: str | None = None) -> Prerequisite:
    """The API server of a byo cluster's kubeconfig answers."""
    from kubernetes import client, config

    fix = "point KUBECONFIG (or the stack's kubeconfig) at a cluster you can reach: `kubectl get nodes`"
    try:
        api = config.new_client_from_config(config_file=kubeconfig, context=context)
    except Exception as exc:  # noqa: BLE001 - a missing or malformed file, a context it lacks: said alike
        return Prerequisite("cluster API server", False, f"the kubeconfig cannot be used: {_said(exc)}", fix)
    try:
        version = client.VersionApi(api).get_code()
    except client.ApiException as exc:  # it answered, with an error (unauthorised, forbidden)
        return Prerequisite("cluster API server", False, f"it answered {exc.status} {exc.reason}", fix)
    except Exception as exc:  # noqa: BLE001 - no answer at all: refused, DNS, TLS, a timeout
        return Prerequisite("cluster API server", False, unreachable_reason(exc, api.configuration.host), fix)
    return Prerequisite("cluster API server", True, f"Kubernetes {version.git_version}")


def docker(run: Callable[..., Any] = subprocess.run) -> Prerequisite:
    """Docker, for building and pushing the training image (only `elastic-lab image` needs it):
    the CLI and a daemon it reaches (`docker version` asks the daemon for its version, through
    whatever DOCKER_HOST or context the CLI uses, and fails when none answers)."""
    name = "Docker (for `elastic-lab image`)"
    fix = f"install Docker to build the image here ({DOCKER_INSTALL}), or build it elsewhere"
    cli = shutil.which("docker")
    if cli is None:
        return Prerequisite(name, False, "not on PATH", fix, required=False)
    try:
        answer = run([cli, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Prerequisite(name, False, f"{cli}: no answer from its daemon ({exc})", _DOCKER_DAEMON, required=False)
    version = str(answer.stdout).strip()
    if answer.returncode != 0 or not version:
        why = [line.strip() for line in str(answer.stderr).splitlines() if line.strip()] or ["no server version"]
        return Prerequisite(
            name,
            False,
            f"{cli}, but no daemon: {why[-1]}",
            _DOCKER_DAEMON,
            required=False,
        )
    return Prerequisite(name, True, f"{cli}, daemon {version}")


_DOCKER_DAEMON = (
    "start the Docker daemon (`sudo systemctl start docker`, or Docker Desktop), or point DOCKER_HOST or "
    "`docker context use` at one"
)


def azure_cli() -> Prerequisite:
    """The Azure CLI `elastic-lab image` logs Docker in to the stack's ACR with (`az acr login`)."""
    found = shutil.which("az")
    return Prerequisite(
        "Azure CLI (for `elastic-lab image`)",
        found is not None,
        found or "not on PATH: `elastic-lab image` logs Docker in to the ACR with `az acr login`",
        "install it (https://learn.microsoft.com/cli/azure/install-azure-cli) and `az login`",
        required=False,
    )


# ------------------------------------------------------------------------------- all
def check(
    cloud: str | None,
    stack_config: Mapping[str, Any] | None = None,
    *,
    kubeconfig: str | None = None,
    env: Mapping[str, str] | None = None,
    cloud_checks: Mapping[str, Callable[[], Iterable[Prerequisite]]] | None = None,
    quota: StackQuota | None = None,
) -> list[Prerequisite]:
    """Every prerequisite of a stack of `cloud` (aks, eks, byo; None: every cloud's), in order;
    with `quota`, the stack's vCPU needs against its cloud's quotas. `cloud_checks` replaces a
    cloud's checks (tests)."""
    env = os.environ if env is None else env
    config = dict(stack_config or {})
    found, command = pulumi_cli()
    out = [found]
    out += (
        pulumi_login(command, env) if command is not None else not_checked(["Pulumi backend login"], "the Pulumi CLI")
    )
    checks: dict[str, Callable[[], Iterable[Prerequisite]]] = {
        "aks": lambda: azure(config, env, quota if quota and quota.cloud == "azure" else None),
        "eks": lambda: aws(quota if quota and quota.cloud == "aws" else None),
        "byo": lambda: [cluster_reachable(kubeconfig)],
    }
    checks.update(cloud_checks or {})
    for name in [cloud] if cloud else ["aks", "eks"]:
        if name in checks:
            out += list(checks[name]())
    if cloud in ("aks", "eks", None):
        out.append(docker())
    if cloud in ("aks", None):
        out.append(azure_cli())
    return out


def problems(found: Iterable[Prerequisite]) -> list[Prerequisite]:
    """The required prerequisites that do not hold (one not checked is not among them: what
    kept it from being checked is)."""
    return [p for p in found if p.required and p.checked and not p.ok]


def later_needs(found: Iterable[Prerequisite]) -> list[Prerequisite]:
    """What a later step needs and does not have yet (Docker, the Azure CLI for `image`): not a
    reason to stop `up`, but better said before a billed cluster exists than after."""
    return [p for p in found if not p.required and p.checked and not p.ok]
