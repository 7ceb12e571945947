"""AWS requests as the EKS eviction backend and the teardown sweep make them: one botocore
client per service, made from a boto3 session only when a real call needs one, and every failed
request in the words both use (no credentials, a permission the caller lacks, credentials AWS
rejected, an endpoint out of reach), raised as the caller's own error type."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import (
    ClientError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    SSOError,
    TokenRetrievalError,
)

if TYPE_CHECKING:
    import boto3.session

# Error codes that mean the caller is not allowed (IAM) and those that mean its credentials
# are not usable (expired, revoked, unknown to AWS).
ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
BAD_CREDENTIALS_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "AuthFailure",
        "SignatureDoesNotMatch",
    }
)
CREDENTIAL_ERRORS = (
    NoCredentialsError,
    PartialCredentialsError,
    CredentialRetrievalError,
    SSOError,
    TokenRetrievalError,
)
CREDENTIALS_HELP = (
    "run `aws configure` (access keys) or `aws sso login` (IAM Identity Center), or set AWS_PROFILE to a profile"
    " that has credentials for this account"
)


@dataclass(frozen=True)
class Refused:
    """A request AWS answered with an error code its caller expects (a resource already gone,
    one still in use): the code, AWS's message and the error itself."""

    code: str
    message: str
    error: ClientError


class AwsRequests:
    """Requests to AWS in one `region`; each failure a `fail(message)` exception.

    `clients` maps a service name ("ec2", "fis") to a botocore client used instead of one made
    from `session` (tests attach a Stubber, or use moto's); the session itself, when none is
    given, is made on the first real request, so that a dry run needs neither boto3's
    credentials nor the network."""

    def __init__(
        self,
        region: str,
        fail: Callable[[str], Exception],
        session: boto3.session.Session | None = None,
        clients: Mapping[str, Any] | None = None,
    ) -> None:
        self.region = region
        self._fail = fail
        self._session = session
        self._clients: dict[str, Any] = dict(clients or {})

    def client(self, service: str) -> Any:
        """The client of `service`: a handed-in one, else one of the (lazily made) session."""
        if service not in self._clients:
            if self._session is None:
                import boto3.session  # only a real call needs boto3

                self._session = boto3.session.Session(region_name=self.region)
            self._clients[service] = self._session.client(service, region_name=self.region)
        return self._clients[service]

    def send(
        self,
        service: str,
        operation: str,
        request: Callable[[Any], Any],
        *,
        named: str,
        expected: Collection[str] = (),
        extra_permissions: str = "",
    ) -> Any:
        """`request` with the client of `service` (its answer); a `Refused` for the `expected`
        error codes; every other failure raised as `fail`, naming the request as `named` and
        saying what to do. A denial names the IAM action `operation` needs, and
        `extra_permissions` after it."""
        client = None
        try:
            # Inside the try: making a client resolves some credentials already (a key
            # without its secret fails here, a missing one only when the request is signed).
            client = self.client(service)
            return request(client)
        except CREDENTIAL_ERRORS as e:
            raise self._fail(f"no usable AWS credentials for {named} ({e}); {CREDENTIALS_HELP}") from e
        except EndpointConnectionError as e:
            raise self._fail(f"cannot reach AWS in {self.region} for {named}: {e}") from e
        except ClientError as e:
            error = e.response.get("Error", {})
            code, message = str(error.get("Code", "")), error.get("Message", "")
            if code in expected:
                return Refused(code, message, e)
            if code in ACCESS_DENIED_CODES and client is not None:
                needed = _iam_action(client, operation) + (f" and {extra_permissions}" if extra_permissions else "")
                raise self._fail(f"AWS denied {named} ({code}): the caller needs {needed}; {message}") from e
            if code in BAD_CREDENTIALS_CODES:
                raise self._fail(f"AWS rejected the credentials for {named} ({code}); {CREDENTIALS_HELP}") from e
            raise self._fail(f"{named} failed ({code}): {message}") from e


def _iam_action(client: Any, operation: str) -> str:
    """The IAM action of a client's method: the service's prefix and the API's name
    (ec2:DescribeInstances)."""
    action = client.meta.method_to_api_mapping.get(operation, operation)
    return f"{client.meta.service_model.signing_name}:{action}"
