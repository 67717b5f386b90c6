"""A small fake Hugging Face Hub (and GitHub release) on 127.0.0.1, served with the standard library.

It answers the requests huggingface_hub makes (0.23 to 2.x), in the shapes their sources expect:

* ``GET /api/collections?owner=O`` (items truncated to 4, no ``position``), ``GET /api/collections/<slug>``
  (with ``position``), ``GET /api/models?author=O``, ``GET /api/models/<repo>[/revision/<rev>]`` (siblings with
  LFS size and sha256 when ``blobs=true``);
* ``HEAD|GET /<repo>/resolve/<rev>/<file>``: ``X-Repo-Commit``, ``ETag``, and for LFS files ``X-Linked-Etag`` /
  ``X-Linked-Size``; ``Range`` requests (resumed downloads) get 206; errors carry ``X-Error-Code``
  (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``) as the real Hub's do;
* ``GET /api/agent-harnesses`` (huggingface_hub's first request of a process unless telemetry is off);
* ``GET /release/<file>``: plain files, as GitHub release assets are.

Faults for the tests: ``fail(n, status, match)`` answers the next ``n`` matching requests with ``status``;
``truncate(n, match, keep)`` sends the full ``Content-Length`` but only ``keep`` bytes of the next ``n``
matching GETs, then closes the connection. Every request is logged in ``requests`` ("METHOD /path?query").
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".pth", ".pt", ".safetensors", ".bin", ".ckpt")
# Fields the real Hub sends with every model (listing and info); huggingface_hub before 0.24 requires them.
_MODEL_STATS = {"private": False, "downloads": 0, "likes": 0, "tags": []}


def commit_of(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


@dataclass
class Repo:
    repo_id: str
    files: dict[str, bytes]
    commit: str
    lfs_sha256: dict[str, str] = field(default_factory=dict)  # a declared sha256 that may differ from the bytes

    def sha256(self, name: str) -> str:
        return self.lfs_sha256.get(name) or hashlib.sha256(self.files[name]).hexdigest()


@dataclass
class Fault:
    kind: str  # "status" or "truncate"
    count: int
    match: str
    status: int = 500
    keep: int = 0
    methods: tuple[str, ...] = ("GET", "HEAD")


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.collections: list[dict] = []
        self.release: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-hub", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- content --------------------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes], *, lfs_sha256: dict[str, str] | None = None) -> Repo:
        repo = Repo(repo_id, dict(files), commit_of(repo_id + repr(sorted(files))), dict(lfs_sha256 or {}))
        self.repos[repo_id] = repo
        return repo

    def add_collection(self, owner: str, name: str, title: str, repo_ids: list[str]) -> str:
        slug = f"{owner}/{name}-{len(self.collections):024x}"
        items = [
            {"_id": f"{i:024x}", "id": repo_id, "type": "model", "position": i, "author": owner}
            for i, repo_id in enumerate(repo_ids)
        ]
        self.collections.append({"slug": slug, "title": title, "owner": {"name": owner}, "items": items})
        return slug

    # --- faults ---------------------------------------------------------------------------------------------
    def fail(self, count: int, status: int = 500, match: str = "", methods: tuple[str, ...] = ("GET", "HEAD")) -> None:
        self.faults.append(Fault("status", count, match, status=status, methods=methods))

    def truncate(self, count: int, match: str = "/resolve/", keep: int = 0) -> None:
        self.faults.append(Fault("truncate", count, match, keep=keep, methods=("GET",)))

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.count > 0 and method in fault.methods and fault.match in path:
                    fault.count -= 1
                    return fault
        return None

    def log(self, line: str) -> None:
        with self._lock:
            self.requests.append(line)

    def api_requests(self) -> list[str]:
        return [r for r in self.requests if " /api/" in r and "agent-harnesses" not in r]


def _collection_json(c: dict, position: int | None, truncate_items: bool) -> dict:
    data = {
        "slug": c["slug"],
        "title": c["title"],
        "owner": c["owner"],
        "items": c["items"][:4] if truncate_items else c["items"],
        "lastUpdated": "2024-08-01T00:00:00.000Z",
        "private": False,
        "theme": "blue",
        "upvotes": 0,
        "description": None,
    }
    if position is not None:
        data["position"] = position
    return data


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        # --- plumbing -------------------------------------------------------------------------------------
        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, data: object, status: int = 200) -> None:
            self._send(status, json.dumps(data).encode(), {"Content-Type": "application/json"})

        def _error(self, status: int, code: str | None = None, extra: dict[str, str] | None = None) -> None:
            headers = {"Content-Type": "application/json", **(extra or {})}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, json.dumps({"error": code or f"HTTP {status}"}).encode(), headers)

        def do_HEAD(self) -> None:
            self._dispatch()

        def do_GET(self) -> None:
            self._dispatch()

        def _dispatch(self) -> None:
            hub.log(f"{self.command} {self.path}")
            parts = urlsplit(self.path)
            path, query = unquote(parts.path), parse_qs(parts.query)
            fault = hub.take_fault(self.command, self.path)
            if fault is not None and fault.kind == "status":
                self._error(fault.status)
                return
            if path == "/api/agent-harnesses":
                self._json({"standardEnvVars": [], "harnesses": {}})
            elif path == "/api/collections":
                owner = query.get("owner", [""])[0]
                found = [c for c in hub.collections if c["owner"]["name"] == owner]
                self._json([_collection_json(c, None, truncate_items=True) for c in found])
            elif path.startswith("/api/collections/"):
                slug = path[len("/api/collections/") :]
                for position, c in enumerate(hub.collections):
                    if c["slug"] == slug:
                        self._json(_collection_json(c, position, truncate_items=False))
                        return
                self._error(404, "CollectionNotFound")
            elif path == "/api/models":
                author = query.get("author", [""])[0]
                repos = [r for r in hub.repos.values() if r.repo_id.split("/")[0] == author]
                self._json([{"id": r.repo_id, "author": author, "sha": r.commit, **_MODEL_STATS} for r in repos])
            elif path.startswith("/api/models/"):
                self._model_info(path[len("/api/models/") :], "blobs" in query)
            elif "/resolve/" in path:
                self._resolve(path, fault)
            elif path.startswith("/release/"):
                name = path[len("/release/") :]
                if name in hub.release:
                    self._file(hub.release[name], {}, fault)
                else:
                    self._send(404, b"Not Found")
            else:
                self._send(404, b"Not Found")

        def _model_info(self, rest: str, blobs: bool) -> None:
            match = re.fullmatch(r"([^/]+/[^/]+)(?:/revision/(.+))?", rest)
            repo = hub.repos.get(match[1]) if match else None
            if repo is None:
                self._error(404, "RepoNotFound")
                return
            if match[2] not in (None, "main", repo.commit):
                self._error(404, "RevisionNotFound")
                return
            siblings = []
            for name, data in repo.files.items():
                sibling: dict = {"rfilename": name}
                if blobs:
                    sibling |= {"size": len(data), "blobId": hashlib.sha1(data).hexdigest()}
                    if name.endswith(LFS_SUFFIXES):
                        sibling["lfs"] = {"size": len(data), "sha256": repo.sha256(name), "pointerSize": 134}
                siblings.append(sibling)
            self._json({"id": repo.repo_id, "author": repo.repo_id.split("/")[0], "sha": repo.commit,
                        "siblings": siblings, **_MODEL_STATS})  # fmt: skip

        def _resolve(self, path: str, fault: object) -> None:
            match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            repo = hub.repos.get(match[1]) if match else None
            if repo is None:
                self._error(404, "RepoNotFound")
                return
            revision, name = match[2], match[3]
            if revision not in ("main", repo.commit):
                self._error(404, "RevisionNotFound")
                return
            if name not in repo.files:
                self._error(404, "EntryNotFound", {"X-Repo-Commit": repo.commit})
                return
            data = repo.files[name]
            headers = {"X-Repo-Commit": repo.commit}
            if name.endswith(LFS_SUFFIXES):
                headers |= {
                    "ETag": f'"{hashlib.sha1(b"pointer" + data).hexdigest()}"',
                    "X-Linked-Etag": f'"{repo.sha256(name)}"',
                    "X-Linked-Size": str(len(data)),
                }
            else:
                headers["ETag"] = f'"{hashlib.sha1(data).hexdigest()}"'
            self._file(data, headers, fault)

        def _file(self, data: bytes, headers: dict[str, str], fault: object) -> None:
            start = 0
            status = 200
            requested = self.headers.get("Range")
            if requested and self.command == "GET":
                found = re.fullmatch(r"bytes=(\d+)-", requested.strip())
                if found:
                    start, status = int(found[1]), 206
                    headers = {**headers, "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
            body = data[start:]
            if isinstance(fault, Fault) and fault.kind == "truncate" and self.command == "GET":
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body[: fault.keep])
                self.wfile.flush()
                self.close_connection = True
                return
            self._send(status, body, headers)

    return Handler
