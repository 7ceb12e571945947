"""AwsRequests: the AWS client factory and error translation the EKS eviction backend and the
AWS teardown sweep share, against botocore's real models (Stubber)."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError, NoCredentialsError
from botocore.stub import Stubber

from lab.cluster.aws_requests import CREDENTIALS_HELP, AwsRequests, Refused
from lab.vocab.errors import LabError

REGION = "us-east-1"


class Failed(LabError):
    """The caller's own error type."""


@pytest.fixture
def ec2():
    session = boto3.session.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    client = session.client("ec2")
    with Stubber(client) as stub:
        yield client, stub
    stub.assert_no_pending_responses()


def _describe(requests: AwsRequests, **kwargs):
    return requests.send(
        "ec2",
        "describe_instances",
        lambda c: c.describe_instances(InstanceIds=["i-0123456789abcdef0"]),
        named="ec2 describe_instances",
        **kwargs,
    )


def test_a_handed_in_client_is_used_and_its_answer_returned(ec2):
    client, stub = ec2
    stub.add_response("describe_instances", {"Reservations": []}, {"InstanceIds": ["i-0123456789abcdef0"]})
    requests = AwsRequests(REGION, Failed, clients={"ec2": client})
    assert requests.client("ec2") is client
    assert _describe(requests) == {"Reservations": []}


def test_an_expected_code_comes_back_as_refused(ec2):
    client, stub = ec2
    stub.add_client_error("describe_instances", service_error_code="InvalidInstanceID.NotFound", service_message="no")
    answer = _describe(AwsRequests(REGION, Failed, clients={"ec2": client}), expected={"InvalidInstanceID.NotFound"})
    assert isinstance(answer, Refused)
    assert (answer.code, answer.message) == ("InvalidInstanceID.NotFound", "no")


@pytest.mark.parametrize(
    ("code", "extra", "said"),
    [
        (
            "UnauthorizedOperation",
            "",
            "AWS denied ec2 describe_instances (UnauthorizedOperation): the caller needs"
            " ec2:DescribeInstances; not allowed",
        ),
        ("AccessDenied", "iam:PassRole", "the caller needs ec2:DescribeInstances and iam:PassRole; not allowed"),
        (
            "AuthFailure",
            "",
            f"AWS rejected the credentials for ec2 describe_instances (AuthFailure); {CREDENTIALS_HELP}",
        ),
        ("Throttling", "", "ec2 describe_instances failed (Throttling): not allowed"),
    ],
)
def test_other_codes_are_raised_as_the_callers_error_saying_what_to_do(ec2, code, extra, said):
    client, stub = ec2
    stub.add_client_error("describe_instances", service_error_code=code, service_message="not allowed")
    with pytest.raises(Failed) as raised:
        _describe(AwsRequests(REGION, Failed, clients={"ec2": client}), extra_permissions=extra)
    assert said in str(raised.value)


def test_no_credentials_and_no_endpoint_are_said_with_what_to_do():
    def no_credentials(_client):
        raise NoCredentialsError()

    def unreachable(_client):
        raise EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com/")

    requests = AwsRequests(REGION, Failed, clients={"ec2": object()})
    with pytest.raises(Failed, match=r"no usable AWS credentials for ec2 describe_instances .*aws configure"):
        requests.send("ec2", "describe_instances", no_credentials, named="ec2 describe_instances")
    with pytest.raises(Failed, match=r"cannot reach AWS in us-east-1 for ec2 describe_instances: "):
        requests.send("ec2", "describe_instances", unreachable, named="ec2 describe_instances")


def test_a_session_is_made_once_and_only_when_a_client_is_needed(monkeypatch):
    made: list[str] = []

    class FakeSession:
        def __init__(self, region_name: str) -> None:
            made.append(region_name)

        def client(self, service: str, region_name: str) -> tuple[str, str]:
            return service, region_name

    monkeypatch.setattr(boto3.session, "Session", FakeSession)
    requests = AwsRequests(REGION, Failed)
    assert made == []
    assert requests.client("fis") == ("fis", REGION)
    assert requests.client("ec2") == ("ec2", REGION)
    assert requests.client("fis") == ("fis", REGION)
    assert made == [REGION]
