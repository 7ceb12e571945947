"""What Azure's SDK exceptions say, in the words both the eviction backend and the teardown
sweep use: the cloud's own error, why a credential failed, and how to sign in."""

from __future__ import annotations

from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

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
