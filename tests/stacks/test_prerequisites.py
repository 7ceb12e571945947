"""`elastic-lab check`: each prerequisite through the tool's own client, against a fake Pulumi
CLI on PATH, Azure Resource Manager through an azure-core transport, STS through botocore's
Stubber; every problem is said at once, with its fix."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import boto3
import pytest
from azure.identity import CredentialUnavailableError
from botocore.stub import Stubber

from lab.plan.quota_needs import StackQuota
from lab.stacks import prerequisites
from lab.stacks.prerequisites import AWS_ACTIONS, AZURE_PROVIDERS, Prerequisite
from lab.vocab.quota import QuotaNeed
from tests.cluster.test_aks_eviction import Answer, ArmTransport, FakeCredential, arm_error

SUB = "00000000-0000-0000-0000-0000000000aa"


def fake_pulumi(bin_dir: Path, version: str = "v3.200.0", whoami: dict | None = None) -> None:
    """A `pulumi` executable answering `version` and `whoami --json` as the CLI does (the
    Automation API runs the latter as `pulumi --non-interactive whoami --json`)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    answer = (
        f"echo '{json.dumps(whoami)}'"
        if whoami is not None
        else "echo 'error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions' >&2; exit 255"
    )
    script = bin_dir / "pulumi"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$*" in\n  version) echo {version} ;;\n  *" whoami --json") {answer} ;;\n'
        '  *) echo "unexpected: $*" >&2; exit 3 ;;\nesac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def path_with(monkeypatch, tmp_path):
    """PATH holding only a directory of fakes (and /bin for the fakes' shell)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/bin")
    monkeypatch.delenv("PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK", raising=False)
    return bin_dir


def test_a_missing_pulumi_cli_is_named_with_where_to_get_it(path_with):
    found, command = prerequisites.pulumi_cli()
    assert command is None and not found.ok
    assert found.line() == "✗ Pulumi CLI: not on PATH\n    fix: install it: https://www.pulumi.com/docs/install/"


def test_an_old_pulumi_cli_is_refused(path_with):
    fake_pulumi(path_with, version="v3.0.5")
    found, command = prerequisites.pulumi_cli()
    assert command is None and not found.ok
    assert "3.0.5" in found.found and found.fix.startswith("upgrade it")


def test_a_local_backend_needs_a_passphrase(path_with):
    fake_pulumi(path_with, whoami={"user": "alice", "url": "file:///home/alice"})
    found, command = prerequisites.pulumi_cli()
    assert found.ok and found.found == "version 3.200.0"
    login, passphrase = prerequisites.pulumi_login(command, env={})
    assert login.ok and login.found == "alice at file:///home/alice"
    assert not passphrase.ok and "export PULUMI_CONFIG_PASSPHRASE" in passphrase.fix
    _, passphrase = prerequisites.pulumi_login(command, env={"PULUMI_CONFIG_PASSPHRASE_FILE": "/secret/file"})
    assert passphrase.ok and passphrase.found == "PULUMI_CONFIG_PASSPHRASE_FILE is set"


def test_pulumi_cloud_needs_no_passphrase(path_with):
    fake_pulumi(path_with, whoami={"user": "alice", "url": "https://app.pulumi.com/alice"})
    _, command = prerequisites.pulumi_cli()
    (login,) = prerequisites.pulumi_login(command, env={})
    assert login.ok


def test_a_cli_not_logged_in_says_how_to_log_in(path_with):
    fake_pulumi(path_with, whoami=None)
    _, command = prerequisites.pulumi_cli()
    (login,) = prerequisites.pulumi_login(command, env={})
    assert not login.ok and "PULUMI_ACCESS_TOKEN must be set" in login.found
    assert "`pulumi login --local`" in login.fix


OWNER = [{"actions": ["*"], "notActions": []}]
# Contributor's permissions as ARM lists them: everything but writing roles and assignments.
CONTRIBUTOR = [
    {
        "actions": ["*"],
        "notActions": [
            "Microsoft.Authorization/*/Delete",
            "Microsoft.Authorization/*/Write",
            "Microsoft.Authorization/elevateAccess/Action",
        ],
    }
]
USER_ACCESS_ADMINISTRATOR = [{"actions": ["*/read", "Microsoft.Authorization/*"], "notActions": []}]
PERMISSIONS = f"/subscriptions/{SUB}/providers/Microsoft.Authorization/permissions"


def _providers(states: dict[str, str], permissions: list | None = None) -> dict:
    answers = {
        ("GET", f"/subscriptions/{SUB}/providers/{ns}"): Answer(200, {"namespace": ns, "registrationState": state})
        for ns, state in states.items()
    }
    answers[("GET", PERMISSIONS)] = Answer(200, {"value": OWNER if permissions is None else permissions})
    return answers


def test_azure_subscription_and_providers_through_arm():
    transport = ArmTransport(_providers(dict.fromkeys(AZURE_PROVIDERS, "Registered")))
    found = prerequisites.azure({}, {"ARM_SUBSCRIPTION_ID": SUB}, credential=FakeCredential(), transport=transport)
    assert [(p.name, p.ok) for p in found] == [
        ("Azure credentials", True),
        ("Azure subscription", True),
        ("Azure resource providers", True),
        ("Azure role rights", True),
    ]
    assert found[1].found == f"{SUB} (from ARM_SUBSCRIPTION_ID)"
    assert {s.path.rsplit("/", 1)[-1] for s in transport.sent} == {*AZURE_PROVIDERS, "permissions"}
    assert next(s for s in transport.sent if s.path == PERMISSIONS).api_version == "2022-04-01"


def test_contributor_alone_cannot_grant_the_kubelet_its_pull_rights():
    def rights(permissions):
        transport = ArmTransport(_providers(dict.fromkeys(AZURE_PROVIDERS, "Registered"), permissions))
        found = prerequisites.azure({}, {"ARM_SUBSCRIPTION_ID": SUB}, credential=FakeCredential(), transport=transport)
        return next(p for p in found if p.name == "Azure role rights")

    alone = rights(CONTRIBUTOR)
    assert not alone.ok and alone.found == "lacks Microsoft.Authorization/roleAssignments/write"
    assert "User Access Administrator" in alone.fix and SUB in alone.fix
    assert rights(CONTRIBUTOR + USER_ACCESS_ADMINISTRATOR).ok
    reader = rights([{"actions": ["*/read"], "notActions": []}])
    assert not reader.ok and "managedClusters/write" in reader.found


def test_unreadable_role_rights_are_a_warning():
    answers = _providers(dict.fromkeys(AZURE_PROVIDERS, "Registered"))
    answers[("GET", PERMISSIONS)] = Answer(403, arm_error("AuthorizationFailed", "no access to permissions"))
    found = prerequisites.azure(
        {}, {"ARM_SUBSCRIPTION_ID": SUB}, credential=FakeCredential(), transport=ArmTransport(answers)
    )
    rights = found[-1]
    assert rights.name == "Azure role rights" and not rights.ok and not rights.required
    assert "no access to permissions" in rights.found


def test_a_location_without_aks_is_said():
    answers = _providers(dict.fromkeys(AZURE_PROVIDERS, "Registered"))
    answers[("GET", f"/subscriptions/{SUB}/providers/Microsoft.ContainerService")] = Answer(
        200,
        {
            "namespace": "Microsoft.ContainerService",
            "registrationState": "Registered",
            "resourceTypes": [
                {"resourceType": "managedClusters", "locations": ["East US", "West Europe", "Sweden Central"]},
                {"resourceType": "fleets", "locations": ["Central India"]},
            ],
        },
    )
    config = {"elastic-spot-lab:location": "centralindia"}
    found = prerequisites.azure(
        config, {"ARM_SUBSCRIPTION_ID": SUB}, credential=FakeCredential(), transport=ArmTransport(answers)
    )
    aks = found[-1]
    assert aks.name == "AKS in the stack's location" and not aks.ok
    assert aks.found == "centralindia: Azure offers no AKS there" and "eastus" in aks.fix
    config = {"elastic-spot-lab:location": "swedencentral"}
    found = prerequisites.azure(
        config, {"ARM_SUBSCRIPTION_ID": SUB}, credential=FakeCredential(), transport=ArmTransport(answers)
    )
    assert found[-1].ok


def test_an_unregistered_provider_is_named_with_its_register_command():
    states = dict.fromkeys(AZURE_PROVIDERS, "Registered") | {"Microsoft.ContainerService": "NotRegistered"}
    found = prerequisites.azure(
        {"azure-native:subscriptionId": SUB},
        {},
        credential=FakeCredential(),
        transport=ArmTransport(_providers(states)),
    )
    assert found[1].found == f"{SUB} (from azure-native:subscriptionId)"
    providers = found[2]
    assert not providers.ok and providers.found == "unregistered: Microsoft.ContainerService (NotRegistered)"
    assert providers.fix == "az provider register --namespace Microsoft.ContainerService"


def test_a_subscription_the_credentials_cannot_see_is_said():
    transport = ArmTransport(
        {
            ("GET", f"/subscriptions/{SUB}/providers/Microsoft.ContainerService"): Answer(
                404, arm_error("SubscriptionNotFound", f"The subscription '{SUB}' could not be found.")
            )
        }
    )
    found = prerequisites.azure({}, {"AZURE_SUBSCRIPTION_ID": SUB}, credential=FakeCredential(), transport=transport)
    unreadable = found[-2]
    assert not unreadable.ok and "could not be found" in unreadable.found and "`az account list`" in unreadable.fix
    assert found[-1].line() == f"? Azure role rights: not checked until subscription {SUB} can be read works"


def test_the_azure_cli_default_subscription_is_used_when_none_is_chosen(tmp_path):
    profile = {"subscriptions": [{"id": "other", "isDefault": False}, {"id": SUB, "isDefault": True}]}
    (tmp_path / "azureProfile.json").write_text(json.dumps(profile), encoding="utf-8-sig")  # as the CLI writes it
    assert prerequisites.chosen_subscription({}, {"AZURE_CONFIG_DIR": str(tmp_path)}) == (
        SUB,
        "the Azure CLI's default",
    )
    assert prerequisites.chosen_subscription({}, {"AZURE_CONFIG_DIR": str(tmp_path / "none")}) == (None, "")


def test_no_subscription_at_all_is_a_problem(tmp_path):
    found = prerequisites.azure({}, {"AZURE_CONFIG_DIR": str(tmp_path)}, credential=FakeCredential())
    assert [(p.name, p.ok, p.checked) for p in found] == [
        ("Azure credentials", True, True),
        ("Azure subscription", False, True),
        ("Azure resource providers", False, False),
        ("Azure role rights", False, False),
    ]
    assert "ARM_SUBSCRIPTION_ID" in found[1].fix
    assert prerequisites.problems(found) == [found[1]]  # what was not checked is not a problem of its own


def test_azure_without_credentials_says_az_login():
    class NoCredential:
        def get_token(self, *scopes, **kwargs):
            raise CredentialUnavailableError("DefaultAzureCredential failed to retrieve a token.\nmore detail")

    need = QuotaNeed("azure", "lowPriorityCores", "Total Regional Spot vCPUs", "eastus", 12, ("gpu",))
    config = {"elastic-spot-lab:location": "eastus"}
    found, *unchecked = prerequisites.azure(
        config, {}, StackQuota("azure", "eastus", [need]), credential=NoCredential()
    )
    assert not found.ok and found.found == "DefaultAzureCredential failed to retrieve a token."
    assert found.fix.startswith("`az login`")
    # Everything the credentials would have let it check is listed, as not checked yet.
    assert [(p.name, p.checked, p.found) for p in unchecked] == [
        (name, False, "not checked until Azure credentials works")
        for name in (
            "Azure subscription",
            "Azure resource providers",
            "Azure role rights",
            "quota Total Regional Spot vCPUs (lowPriorityCores) (eastus)",
            "AKS in the stack's location",
        )
    ]


@pytest.fixture
def aws_keys(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))


def test_aws_account_through_sts_and_the_cli(aws_keys, path_with):
    (path_with / "aws").write_text("#!/bin/sh\n")
    (path_with / "aws").chmod(0o755)
    sts = boto3.client("sts", region_name="us-east-1")
    iam = boto3.client("iam", region_name="us-east-1")
    alice = "arn:aws:iam::123456789012:user/alice"
    with Stubber(sts) as stub, Stubber(iam) as iam_stub:
        stub.add_response("get_caller_identity", {"Account": "123456789012", "Arn": alice, "UserId": "AIDAEXAMPLE"})
        iam_stub.add_response(
            "simulate_principal_policy",
            _simulated(dict.fromkeys(AWS_ACTIONS, "allowed")),
            {"PolicySourceArn": alice, "ActionNames": list(AWS_ACTIONS)},
        )
        found = prerequisites.aws(sts=sts, iam=iam)
    assert [(p.name, p.ok) for p in found] == [("AWS credentials", True), ("AWS role rights", True), ("AWS CLI", True)]
    assert found[0].found == f"account 123456789012 as {alice}"


def _simulated(decisions: dict[str, str]) -> dict:
    return {
        "EvaluationResults": [{"EvalActionName": a, "EvalDecision": d} for a, d in decisions.items()],
        "IsTruncated": False,
    }


def test_an_assumed_role_is_simulated_as_its_role_and_denials_are_named():
    iam = boto3.client("iam", region_name="us-east-1")
    role = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Dev_abc"
    with Stubber(iam) as stub:
        stub.add_response(
            "get_role",
            {
                "Role": {
                    "Path": "/aws-reserved/sso.amazonaws.com/",
                    "RoleName": "AWSReservedSSO_Dev_abc",
                    "RoleId": "AROAEXAMPLEEXAMPLE00",
                    "Arn": role,
                    "CreateDate": "2026-01-01T00:00:00Z",
                }
            },
            {"RoleName": "AWSReservedSSO_Dev_abc"},
        )
        decisions = dict.fromkeys(AWS_ACTIONS, "allowed") | {
            "iam:CreateRole": "implicitDeny",
            "iam:PassRole": "explicitDeny",
        }
        stub.add_response(
            "simulate_principal_policy",
            _simulated(decisions),
            {"PolicySourceArn": role, "ActionNames": list(AWS_ACTIONS)},
        )
        rights = prerequisites.aws_rights(iam, "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Dev_abc/alice")
    assert not rights.ok and rights.required
    assert rights.found == "denied iam:CreateRole, iam:PassRole" and role in rights.fix


def test_role_rights_that_cannot_be_simulated_are_a_warning():
    iam = boto3.client("iam", region_name="us-east-1")
    with Stubber(iam) as stub:
        stub.add_client_error(
            "simulate_principal_policy", "AccessDenied", "not authorized to perform iam:SimulatePrincipalPolicy"
        )
        rights = prerequisites.aws_rights(iam, "arn:aws:iam::123456789012:user/alice")
    assert not rights.ok and not rights.required and "iam:SimulatePrincipalPolicy" in rights.found


def test_expired_aws_credentials_and_no_cli_are_both_said(aws_keys, path_with):
    sts = boto3.client("sts", region_name="us-east-1")
    with Stubber(sts) as stub:
        stub.add_client_error(
            "get_caller_identity", "ExpiredToken", "The security token included in the request is expired"
        )
        found = prerequisites.aws(sts=sts)
    assert [(p.name, p.ok, p.checked) for p in found] == [
        ("AWS credentials", False, True),
        ("AWS role rights", False, False),
        ("AWS CLI", False, True),
    ]
    assert "expired" in found[0].found and "aws eks get-token" in found[2].found
    assert "not-a-real-secret" not in " ".join(p.line() for p in found)


def test_an_unreachable_byo_cluster_is_named(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    found = prerequisites.cluster_reachable(str(kubeconfig))
    assert not found.ok and "kubectl get nodes" in found.fix
    # Said in plain words, not urllib3's text (cut mid-word before).
    assert found.found == "connection refused at 127.0.0.1:1 (nothing listens there)"
    missing = prerequisites.cluster_reachable(str(tmp_path / "none"))
    assert not missing.ok and missing.found.startswith("the kubeconfig cannot be used: ")


def test_every_problem_is_said_at_once(path_with):
    found = prerequisites.check(
        "aks",
        {},
        env={},
        cloud_checks={"aks": lambda: [Prerequisite("Azure credentials", False, "none", "`az login`")]},
    )
    missing = prerequisites.problems(found)
    assert [p.name for p in missing] == ["Pulumi CLI", "Azure credentials"]
    assert found[1].line() == "? Pulumi backend login: not checked until the Pulumi CLI works"
    # What only `elastic-lab image` needs is a warning: the Docker CLI and the Azure CLI it runs.
    assert [(p.name, p.required) for p in found[-2:]] == [
        ("Docker (for `elastic-lab image`)", False),
        ("Azure CLI (for `elastic-lab image`)", False),
    ]
    assert [p.name for p in prerequisites.later_needs(found)] == [p.name for p in found[-2:]]


def test_the_command_line_prints_them_as_json_and_fails_while_one_is_missing(path_with, capsys):
    from lab.cli import main

    code = main(["check", "--stack", "byo", "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["stack"] == "byo"
    found = {p["name"]: p for p in doc["prerequisites"]}
    assert found["Pulumi CLI"]["ok"] is False and found["Pulumi CLI"]["fix"].startswith("install it")
    assert "cluster API server" in found


def fake_docker(bin_dir: Path, *, daemon: bool) -> None:
    """A `docker` CLI answering `version --format {{.Server.Version}}` as the real one does with
    and without a daemon (the client's part printed, the server's error on stderr, exit 1)."""
    answer = (
        "echo 28.2.2"
        if daemon
        else "echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?' >&2; exit 1"
    )
    script = bin_dir / "docker"
    script.write_text(
        f'#!/bin/sh\ncase "$*" in\n  "version --format {{{{.Server.Version}}}}") {answer} ;;\n'
        '  *) echo "unexpected: $*" >&2; exit 3 ;;\nesac\n'
    )
    script.chmod(0o755)


def test_docker_without_a_daemon_is_not_called_ready(path_with):
    fake_docker(path_with, daemon=False)
    found = prerequisites.docker()
    assert not found.ok and not found.required
    assert "no daemon: Cannot connect to the Docker daemon" in found.found and "start the Docker daemon" in found.fix
    fake_docker(path_with, daemon=True)
    found = prerequisites.docker()
    assert found.ok and found.found == f"{path_with / 'docker'}, daemon 28.2.2"


def test_the_azure_cli_image_runs_is_checked_for_aks_stacks_only(path_with):
    aks = prerequisites.check("aks", {}, env={}, cloud_checks={"aks": lambda: []})
    eks = prerequisites.check("eks", {}, env={}, cloud_checks={"eks": lambda: []})
    assert "Azure CLI (for `elastic-lab image`)" in [p.name for p in aks]
    assert "Azure CLI (for `elastic-lab image`)" not in [p.name for p in eks]
    (path_with / "az").write_text("#!/bin/sh\n")
    (path_with / "az").chmod(0o755)
    assert prerequisites.azure_cli().ok


def test_the_command_line_counts_what_it_could_not_check_and_what_comes_later(path_with, capsys):
    from lab.cli import main

    assert main(["check", "--stack", "byo"]) == 1
    out = capsys.readouterr().out
    assert "? Pulumi backend login: not checked until the Pulumi CLI works" in out
    assert out.rstrip().splitlines()[-1].startswith("2 missing; 1 not checked until what they need works")
