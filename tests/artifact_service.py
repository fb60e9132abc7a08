"""GitHub's artifact service, as actions/upload-artifact v4+ and download-artifact v4+ speak
it, over a folder: for running the nightly under act with the real actions.

act's own artifact server (`--artifact-server-path`, act 0.2.89) refuses upload-artifact v7's
requests (`unknown field "mime_type"` at CreateArtifact, then a signed-URL check the Azure SDK
breaks: nektos/act#6022, #6114; its fix, nektos/act#6115, is not released). This is the part
of the protocol the two actions use, as GitHub answers it:

- Twirp JSON at ``/twirp/github.actions.results.api.v1.ArtifactService/``: CreateArtifact
  (a second artifact of one name in one run is refused with 409, as GitHub does),
  FinalizeArtifact, ListArtifacts (with ``digest``, so download-artifact checks it),
  GetSignedArtifactURL;
- the blob store behind the signed URL: Azure block blob uploads (``comp=block`` per chunk,
  ``comp=blocklist`` to commit them in order, the content type from
  ``x-ms-blob-content-type``) and a plain GET.

The actions find it through ``ACTIONS_RESULTS_URL``/``ACTIONS_RUNTIME_URL`` and the run's ids
in ``ACTIONS_RUNTIME_TOKEN`` (:meth:`ArtifactService.runner_env`). An artifact is kept as
``ROOT/<run>/<name>/blob`` (the zip the action uploaded) beside ``meta.json``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import xml.etree.ElementTree as ET
import zipfile
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

TWIRP = "/twirp/github.actions.results.api.v1.ArtifactService/"
BLOB = "/blob/"


class ArtifactService:
    """The service on 127.0.0.1 (a free port), storing under ``root``; a context manager."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def __enter__(self) -> ArtifactService:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def runner_env(self, run: str) -> dict[str, str]:
        """What a job's environment needs to use this service for run ``run``."""
        return {
            "ACTIONS_RESULTS_URL": self.url,
            "ACTIONS_RUNTIME_URL": self.url,
            "ACTIONS_RUNTIME_TOKEN": runtime_token(run),
        }

    def names(self, run: str) -> list[str]:
        """The artifacts finalized in ``run``."""
        folder = self.root / run
        return sorted(
            p.name for p in folder.iterdir() if (p / "meta.json").is_file()
        ) if folder.is_dir() else []  # fmt: skip

    def files(self, run: str, name: str) -> dict[str, bytes]:
        """The files of a zipped artifact, by their path inside it."""
        with zipfile.ZipFile(self.root / run / name / "blob") as archive:
            return {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}

    # The protocol.

    def create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        run, name = body["workflow_run_backend_id"], body["name"]
        if not name or name in {".", ".."} or "/" in name or "\\" in name:
            return 400, {"code": "invalid_argument", "msg": f"invalid artifact name {name!r}"}
        folder = self.root / run / name
        with self._lock:
            if folder.exists():
                return 409, {"code": "already_exists", "msg": (
                    "an artifact with this name already exists on the workflow run"
                )}  # fmt: skip
            folder.mkdir(parents=True)
        token = f"{run}/{name}".encode().hex()
        return 200, {"ok": True, "signed_upload_url": f"{self.url.rstrip('/')}{BLOB}{token}"}

    def finalize(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        folder = self.root / body["workflow_run_backend_id"] / body["name"]
        if not (folder / "blob").is_file():
            return 404, {"code": "not_found", "msg": "no upload for this artifact"}
        artifact_id = _artifact_id(folder)
        meta = json.loads((folder / "blob.json").read_text())
        meta |= {
            "id": artifact_id,
            "size": int(body.get("size") or 0),
            "digest": body.get("hash") or "",
            "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        }
        (folder / "meta.json").write_text(json.dumps(meta))
        return 200, {"ok": True, "artifact_id": str(artifact_id)}

    def list(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        run = body["workflow_run_backend_id"]
        artifacts = []
        for name in self.names(run):
            meta = json.loads((self.root / run / name / "meta.json").read_text())
            if body.get("name_filter") not in (None, name):
                continue
            if body.get("id_filter") not in (None, str(meta["id"])):
                continue
            artifacts.append({
                "workflow_run_backend_id": run,
                "workflow_job_run_backend_id": body.get("workflow_job_run_backend_id", ""),
                "database_id": str(meta["id"]),
                "name": name,
                "size": str(meta["size"]),
                "created_at": meta["created_at"],
                **({"digest": meta["digest"]} if meta["digest"] else {}),
            })  # fmt: skip
        return 200, {"artifacts": artifacts}

    def signed_url(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        run, name = body["workflow_run_backend_id"], body["name"]
        if not (self.root / run / name / "meta.json").is_file():
            return 404, {"code": "not_found", "msg": f"artifact {name} not found"}
        token = f"{run}/{name}".encode().hex()
        return 200, {"signed_url": f"{self.url.rstrip('/')}{BLOB}{token}"}

    def put_blob(self, folder: Path, query: dict[str, list[str]], headers: Any, data: bytes) -> int:
        comp = query.get("comp", [""])[0]
        if comp == "block":
            block = hashlib.sha256(query["blockid"][0].encode()).hexdigest()
            (folder / "blocks").mkdir(exist_ok=True)
            (folder / "blocks" / block).write_bytes(data)
        elif comp == "blocklist":
            ids = [e.text or "" for e in ET.fromstring(data)]
            blocks = [folder / "blocks" / hashlib.sha256(i.encode()).hexdigest() for i in ids]
            (folder / "blob").write_bytes(b"".join(b.read_bytes() for b in blocks))
            content_type = headers.get("x-ms-blob-content-type") or "application/octet-stream"
            (folder / "blob.json").write_text(json.dumps({"content_type": content_type}))
        else:  # a single-shot upload (Put Blob)
            (folder / "blob").write_bytes(data)
            content_type = headers.get("x-ms-blob-content-type") or "application/octet-stream"
            (folder / "blob.json").write_text(json.dumps({"content_type": content_type}))
        return 201


def runtime_token(run: str, job: str = "job") -> str:
    """An unsigned JWT whose scope names the run's and the job's backend ids (the actions
    read the ids from it; only GitHub's services check the signature)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    claims = {"scp": f"Actions.GenericRead Actions.Results:{run}:{job}"}
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.x"


def _artifact_id(folder: Path) -> int:
    return int(hashlib.sha256(str(folder).encode()).hexdigest()[:8], 16)


def _handler(service: ArtifactService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:  # quiet: act's log is the record
            pass

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _send(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def _blob_folder(self, path: str) -> Path | None:
            token = path.removeprefix(BLOB)
            try:
                run, name = bytes.fromhex(token).decode().split("/", 1)
            except ValueError:
                return None
            folder = service.root / run / name
            return folder if folder.is_dir() else None

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            method = {
                "CreateArtifact": service.create,
                "FinalizeArtifact": service.finalize,
                "ListArtifacts": service.list,
                "GetSignedArtifactURL": service.signed_url,
            }.get(path.removeprefix(TWIRP)) if path.startswith(TWIRP) else None  # fmt: skip
            body = self._body()
            if method is None:
                self._send(404, b'{"code":"bad_route"}', "application/json")
                return
            status, answer = method(json.loads(body or b"{}"))
            self._send(status, json.dumps(answer).encode(), "application/json")

        def do_PUT(self) -> None:
            parts = urlsplit(self.path)
            data = self._body()
            folder = self._blob_folder(parts.path)
            if folder is None:
                self._send(404, b"", "text/plain")
                return
            status = service.put_blob(folder, parse_qs(parts.query), self.headers, data)
            self._send(status, b"", "text/plain")

        def do_GET(self) -> None:
            folder = self._blob_folder(urlsplit(self.path).path)
            if folder is None or not (folder / "meta.json").is_file():
                self._send(404, b"", "text/plain")
                return
            meta = json.loads((folder / "meta.json").read_text())
            self._send(
                200, (folder / "blob").read_bytes(), meta["content_type"],
                Content_Disposition=f"attachment; filename*=UTF-8''{quote(folder.name)}",
            )  # fmt: skip

    return Handler
