"""Why a request to an API server never got an answer, in plain words (the Kubernetes client's
urllib3 errors read for their structure, not their text): for every command that reaches a
cluster, `elastic-lab check`'s probe included."""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

import urllib3


def unreachable_reason(exc: BaseException, url: str) -> str:
    """Why a request never got an answer, in plain words, from the exception's structure: urllib3's
    MaxRetryError holds the last try's error as `reason`; a failed connection keeps the socket's
    OSError as its cause and a failed name lookup its gaierror. Never urllib3's own text, which
    names its objects and retries."""
    parts = urlsplit(url)
    host = parts.hostname or url
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    error: BaseException = exc
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason
    cause = error.__cause__ or error.__context__
    if isinstance(error, urllib3.exceptions.NameResolutionError):
        looked_up = cause.strerror if isinstance(cause, OSError) and cause.strerror else "no such host"
        return f"the name {host!r} does not resolve (DNS: {looked_up})"
    if isinstance(error, urllib3.exceptions.NewConnectionError):
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused at {address} (nothing listens there)"
        if isinstance(cause, OSError) and cause.strerror:
            return f"cannot connect to {address}: {cause.strerror.lower()}"
        return f"cannot connect to {address}"
    if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
        return f"no answer from {address} to a connection (timed out)"
    if isinstance(error, urllib3.exceptions.ReadTimeoutError):
        return f"{address} took the connection but did not answer in time"
    if isinstance(error, urllib3.exceptions.SSLError):
        tls = error.args[0] if error.args and isinstance(error.args[0], ssl.SSLError) else cause
        if isinstance(tls, ssl.SSLCertVerificationError) and tls.verify_message:
            return f"the TLS handshake with {address} failed: {tls.verify_message}"
        if isinstance(tls, ssl.SSLError) and tls.reason:
            return f"the TLS handshake with {address} failed ({tls.reason.lower().replace('_', ' ')})"
        return f"the TLS handshake with {address} failed"
    if isinstance(error, urllib3.exceptions.ProtocolError):
        dropped = next((a for a in error.args if isinstance(a, OSError)), None)
        what = dropped.strerror.lower() if dropped is not None and dropped.strerror else "the connection was dropped"
        return f"{address} broke off the request: {what}"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused at {address} (nothing listens there)"
    if isinstance(error, OSError) and error.strerror:
        return f"{address}: {error.strerror.lower()}"
    return f"{address}: {type(error).__name__}"
