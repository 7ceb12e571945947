"""An Azure Blob Storage service on loopback, in memory: the REST calls azure-storage-blob
makes for lab.runtime.object_store (Put Blob, Put Block and Put Block List, Get Blob with a
range, List Blobs, Delete Blob). A blob appears only when its Put Blob or Put Block List
completes, as on Azure; blocks staged without a list stay invisible. Requests are checked
against the API's own shape (methods, `comp`, headers the SDK must send); anything else is
answered 400 and recorded, so a request the service would refuse cannot pass unnoticed."""

from __future__ import annotations

import threading
import xml.etree.ElementTree as ET
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape


class FakeBlobService:
    def __init__(self, account: str = "devstoreaccount1") -> None:
        self.account = account
        self.blobs: dict[tuple[str, str], bytes] = {}  # (container, name) -> committed bytes
        self.staged: dict[tuple[str, str, str], bytes] = {}  # (container, name, block id) -> bytes
        self.refused: list[str] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def account_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/{self.account}"

    def __enter__(self) -> FakeBlobService:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _target(self) -> tuple[str, str, dict[str, list[str]]]:
                url = urlsplit(self.path)
                parts = unquote(url.path).lstrip("/").split("/", 2)
                if parts[0] != service.account or len(parts) < 2:
                    return "", "", {}
                return parts[1], parts[2] if len(parts) > 2 else "", parse_qs(url.query)

            def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                base = {
                    "Content-Length": str(len(body)),
                    "ETag": '"0x1"',
                    "Last-Modified": formatdate(usegmt=True),
                    "x-ms-request-id": "1",
                    "x-ms-version": self.headers.get("x-ms-version", ""),
                }
                for key, value in {**base, **(headers or {})}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def _refuse(self, why: str) -> None:
                service.refused.append(f"{self.command} {self.path}: {why}")
                self._reply(400, why.encode())

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", "0")))

            def do_PUT(self) -> None:
                container, name, query = self._target()
                body = self._body()
                if not container or not name:
                    return self._refuse("Put needs a container and a blob name")
                comp = query.get("comp", [None])[0]
                with service.lock:
                    if comp is None:
                        if self.headers.get("x-ms-blob-type") != "BlockBlob":
                            return self._refuse("Put Blob needs x-ms-blob-type: BlockBlob")
                        service.blobs[(container, name)] = body
                    elif comp == "block":
                        block = query.get("blockid", [""])[0]
                        service.staged[(container, name, block)] = body
                    elif comp == "blocklist":
                        ids = [
                            e.text or "" for e in ET.fromstring(body) if e.tag in ("Latest", "Uncommitted", "Committed")
                        ]
                        missing = [i for i in ids if (container, name, i) not in service.staged]
                        if missing:
                            return self._refuse(f"Put Block List names blocks never staged: {missing}")
                        service.blobs[(container, name)] = b"".join(
                            service.staged.pop((container, name, i)) for i in ids
                        )
                    else:
                        return self._refuse(f"comp={comp} is not a call the checkpoints make")
                self._reply(201, headers={"x-ms-request-server-encrypted": "true"})

            def do_GET(self) -> None:
                container, name, query = self._target()
                if query.get("comp") == ["list"]:
                    if query.get("restype") != ["container"]:
                        return self._refuse("List Blobs needs restype=container")
                    return self._list(container, query.get("prefix", [""])[0])
                with service.lock:
                    data = service.blobs.get((container, name))
                if data is None:
                    return self._reply(404, b"", {"x-ms-error-code": "BlobNotFound"})
                start, end = 0, len(data) - 1
                rng = self.headers.get("x-ms-range") or self.headers.get("Range")
                status = 200
                if rng:
                    lo, _, hi = rng.removeprefix("bytes=").partition("-")
                    start, end = int(lo), min(int(hi) if hi else len(data) - 1, len(data) - 1)
                    status = 206
                chunk = data[start : end + 1]
                headers = {"x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream"}
                if status == 206:
                    headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                self._reply(status, chunk, headers)

            def _list(self, container: str, prefix: str) -> None:
                with service.lock:
                    found = sorted(
                        (n, len(d)) for (c, n), d in service.blobs.items() if c == container and n.startswith(prefix)
                    )
                blobs = "".join(
                    f"<Blob><Name>{escape(n)}</Name><Properties><Content-Length>{size}</Content-Length>"
                    f"<BlobType>BlockBlob</BlobType></Properties></Blob>"
                    for n, size in found
                )
                body = (
                    '<?xml version="1.0" encoding="utf-8"?>'
                    f'<EnumerationResults ServiceEndpoint="{service.account_url}" ContainerName="{container}">'
                    f"<Prefix>{escape(prefix)}</Prefix><Blobs>{blobs}</Blobs><NextMarker /></EnumerationResults>"
                ).encode()
                self._reply(200, body, {"Content-Type": "application/xml"})

            def do_DELETE(self) -> None:
                container, name, _ = self._target()
                with service.lock:
                    gone = service.blobs.pop((container, name), None)
                if gone is None:
                    return self._reply(404, b"", {"x-ms-error-code": "BlobNotFound"})
                self._reply(202)

        return Handler
