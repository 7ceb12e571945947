"""Connecting to a cluster's API server from a kubeconfig, and its refusals in plain words,
against a loopback API server and closed ports."""

from __future__ import annotations

import pytest

from lab.cluster.job_status import status
from lab.cluster.kube import KubeError, connect

NS = "training"


def test_context_picks_the_cluster_and_namespace(api_server, tmp_path):
    import json

    path = api_server.kubeconfig(tmp_path, namespace="training")
    cfg = json.loads(path.read_text())
    cfg["clusters"].append({"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}})
    cfg["contexts"].append({"name": "dead", "context": {"cluster": "dead", "user": "fake"}})
    cfg["current-context"] = "dead"
    path.write_text(json.dumps(cfg))
    with pytest.raises(KubeError, match=r"no Kubernetes API server reachable with kubeconfig .* context dead"):
        connect(str(path))
    live = connect(str(path), "fake")
    assert live.namespace == "training" and "context fake" in live.source
    with pytest.raises(KubeError, match=r"--context 'nope': no such context in .* \(it has: dead, fake\)"):
        connect(str(path), "nope")


def test_kubeconfig_env_is_used_when_no_file_is_given(api_server, tmp_path, monkeypatch):
    path = api_server.kubeconfig(tmp_path)
    other = tmp_path / "empty.yaml"
    other.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setenv("KUBECONFIG", f"{other}:{path}")  # a list, merged as kubectl merges it
    assert connect().api.configuration.host == api_server.url


def _kubeconfig_for(server: str, directory) -> str:
    """A kubeconfig whose only cluster is at `server`."""
    import json

    path = directory / "kubeconfig-unreachable.yaml"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def _free_loopback_port() -> int:
    """A port nothing listens on: bound, read and released again."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_api_server_that_is_not_there_is_said_in_plain_words(tmp_path):
    """A closed loopback port: "connection refused at ADDRESS", from urllib3's structure (its
    MaxRetryError's reason and the socket error beneath), never urllib3's own text."""
    port = _free_loopback_port()
    with pytest.raises(KubeError) as refused:
        connect(_kubeconfig_for(f"https://127.0.0.1:{port}", tmp_path))
    said = str(refused.value)
    assert said.endswith(f"(https://127.0.0.1:{port}): connection refused at 127.0.0.1:{port} (nothing listens there)")
    assert "MaxRetryError" not in said and "NewConnectionError" not in said and "object at" not in said


def test_tls_against_a_server_that_speaks_plain_http_is_named(api_server, tmp_path):
    """The fake API server speaks HTTP; a kubeconfig that says https meets it with a TLS handshake."""
    port = api_server.url.rpartition(":")[2]
    with pytest.raises(KubeError) as refused:
        connect(_kubeconfig_for(f"https://127.0.0.1:{port}", tmp_path))
    assert f": the TLS handshake with 127.0.0.1:{port} failed (wrong version number)" in str(refused.value)


def test_a_name_that_does_not_resolve_is_named(tmp_path, monkeypatch):
    """No DNS here: the resolver's own error (socket.gaierror), raised where urllib3 resolves."""
    import socket

    def no_such_name(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    with pytest.raises(KubeError) as refused:
        connect(_kubeconfig_for("https://api.cluster.example:6443", tmp_path))
    assert str(refused.value).endswith(
        "the name 'api.cluster.example' does not resolve (DNS: Name or service not known)"
    )


def test_a_missing_kubeconfig_names_the_file(tmp_path):
    with pytest.raises(KubeError, match=r"nothing\.yaml"):
        connect(str(tmp_path / "nothing.yaml"))


def test_refused_credentials_are_explained(api_server, kube, monkeypatch):
    api_server.on_request = lambda method, path: None
    import tests.cluster.fake_kube as fake

    def refuse(self, http, method, path, query, body):
        self._send(http, 401, fake._status(401, "Unauthorized", "Unauthorized"))

    monkeypatch.setattr(fake.FakeKube, "_handle", refuse)
    with pytest.raises(KubeError, match=r"401 Unauthorized \(the kubeconfig's credentials were refused"):
        status(kube, "demo", NS)
