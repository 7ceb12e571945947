"""azure_errors: the one translation of azure-core's and azure-identity's exceptions that the
AKS eviction backend and the Azure teardown sweep share, each with its own wording."""

from __future__ import annotations

import pytest
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.core.rest import HttpRequest
from azure.identity import CredentialUnavailableError
from azure.mgmt.core.exceptions import ARMErrorFormat

from lab.cluster.azure_errors import LOGIN_HELP, Wording, azure_errors
from lab.vocab.errors import LabError
from tests.cluster.test_aks_eviction import Answer, CannedResponse, arm_error

WORDING = Wording(
    cannot="read the thing",
    failed="reading the thing failed",
    denied="Azure denied reading the thing",
    grant="grant a role",
    not_found="the thing is gone",
)


class Failed(LabError):
    """The caller's own error type."""


def _answer(error_type: type[HttpResponseError], status: int, code: str) -> HttpResponseError:
    """The error azure-mgmt raises for an ARM error answer (its error_map and ARMErrorFormat)."""
    response = CannedResponse(
        HttpRequest("GET", "https://management.azure.com/x"), Answer(status, arm_error(code, "why"))
    )
    return error_type(response=response, error_format=ARMErrorFormat)


def _said(error: Exception, wording: Wording = WORDING) -> str:
    with pytest.raises(Failed) as raised, azure_errors(wording, Failed):
        raise error
    assert raised.value.__cause__ is error
    return str(raised.value)


def test_a_missing_credential_says_how_to_sign_in():
    said = _said(CredentialUnavailableError(message="no az login"))
    assert said == f"cannot read the thing: no Azure credential is available (no az login). {LOGIN_HELP}"


def test_a_refused_token_is_a_credential_cause_too():
    said = _said(_answer(ClientAuthenticationError, 401, "InvalidAuthenticationToken"))
    assert said.startswith("cannot read the thing: Azure refused the credential (HTTP 401: InvalidAuthenticationToken")


def test_a_404_is_what_the_caller_says_it_means_or_else_an_error_answer():
    error = _answer(ResourceNotFoundError, 404, "ResourceNotFound")
    assert _said(error) == "cannot read the thing: the thing is gone (HTTP 404: ResourceNotFound: why)"
    plain = Wording("read the thing", "reading the thing failed", "denied", "grant")
    assert _said(error, plain) == "reading the thing failed: Azure answered HTTP 404: ResourceNotFound: why"


def test_a_403_is_the_callers_denial_with_the_clouds_words():
    said = _said(_answer(HttpResponseError, 403, "AuthorizationFailed"))
    assert said == "Azure denied reading the thing (HTTP 403: AuthorizationFailed: why); grant a role"


def test_other_answers_unreachable_and_other_errors():
    assert _said(_answer(HttpResponseError, 409, "Conflict")) == (
        "reading the thing failed: Azure answered HTTP 409: Conflict: why"
    )
    assert _said(ServiceRequestError("connection refused")) == (
        "cannot read the thing: Azure Resource Manager could not be reached (connection refused)"
    )
    assert _said(AzureError("something else")) == "reading the thing failed: something else"


def test_nothing_raised_passes_through():
    with azure_errors(WORDING, Failed):
        value = 1
    assert value == 1
