"""What Azure's SDK exceptions say, in the words both the eviction backend and the teardown
sweep use: the cloud's own error, why a credential failed, how to sign in, and one translation
of every exception the SDK and azure-identity raise into the caller's own error type."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
)

LOGIN_HELP = (
    "Run `az login` (and `az account set --subscription ...`), or set AZURE_CLIENT_ID, AZURE_TENANT_ID and "
    "AZURE_CLIENT_SECRET for a service principal, or run where a managed identity is assigned"
)


def cloud_message(error: HttpResponseError) -> str:
    """The cloud's own words for a failed call: the ARM error's code and message when there is
    one, else the SDK's summary of the response."""
    body = getattr(error, "error", None)
    code, message = getattr(body, "code", None), getattr(body, "message", None)
    if message:
        return f"{code}: {message}" if code else str(message)
    return (error.message or str(error)).strip()


def credential_cause(error: ClientAuthenticationError) -> str:
    """Why no call could be made: no credential at all (CredentialUnavailableError, raised
    before any request) or a token Azure Resource Manager refused (a 401)."""
    if error.response is not None:
        return f"Azure refused the credential (HTTP {error.response.status_code}: {cloud_message(error)})"
    return f"no Azure credential is available ({error.message})"


@dataclass(frozen=True)
class Wording:
    """How a caller words a failed call. `cannot` follows "cannot " where no call could be made
    (no credential, no connection); `failed` leads an answer that is an error; a 403 reads
    "`denied` (HTTP 403: <the cloud's words>); `grant`"; with `not_found`, a 404 reads
    "cannot `cannot`: `not_found` (HTTP 404: ...)", else it is an error like the others."""

    cannot: str
    failed: str
    denied: str
    grant: str
    not_found: str | None = None


@contextmanager
def azure_errors(wording: Wording, fail: Callable[[str], Exception]) -> Iterator[None]:
    """The SDK's and azure-identity's exceptions raised as `fail(message)`, worded by `wording`."""
    try:
        yield
    except ClientAuthenticationError as e:
        raise fail(f"cannot {wording.cannot}: {credential_cause(e)}. {LOGIN_HELP}") from e
    except HttpResponseError as e:
        raise fail(_answered(wording, e)) from e
    except ServiceRequestError as e:
        raise fail(f"cannot {wording.cannot}: Azure Resource Manager could not be reached ({e.message})") from e
    except AzureError as e:
        raise fail(f"{wording.failed}: {e.message}") from e


def _answered(wording: Wording, error: HttpResponseError) -> str:
    """What an error answer means: a resource not found (where the caller says what that
    means), a permission missing (403), or the cloud's own words."""
    if isinstance(error, ResourceNotFoundError) and wording.not_found is not None:
        return f"cannot {wording.cannot}: {wording.not_found} (HTTP 404: {cloud_message(error)})"
    if error.status_code == 403:
        return f"{wording.denied} (HTTP 403: {cloud_message(error)}); {wording.grant}"
    return f"{wording.failed}: Azure answered HTTP {error.status_code}: {cloud_message(error)}"
