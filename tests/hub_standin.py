"""A small stand-in Hugging Face Hub on 127.0.0.1, for testing the real client over real HTTP.

It implements only what ``huggingface_hub`` 2.x calls for a pinned download and a
checksum look-up, with the headers the client insists on (read in its
``file_download.get_hf_file_metadata`` and ``utils/_http.hf_raise_for_status``):

- ``GET /api/models/{repo}[/revision/{rev}]`` (``?blobs=True`` adds files metadata): model info
  with ``sha`` and ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs.sha256``);
- ``GET /api/models/{repo}/tree/{rev}`` (``?recursive=...``): the file listing ``snapshot_download`` uses;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, ``ETag``, ``Content-Length``;
- errors as the hub sends them: 404 with ``X-Error-Code`` ``RepoNotFound``/``RevisionNotFound``/``EntryNotFound``.

Scenarios are data: a repo has commits (path -> bytes) and branches; ``advertise`` makes
the hub claim another sha256 for a file than its bytes have; ``serve_bytes`` makes it
serve other bytes than it advertises. Every request is recorded (method, path, whether an
Authorization header came), so tests can see what the client did.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt")


def go_online(monkeypatch: Any) -> None:
    """Let huggingface_hub reach a hub (the stand-in): offline switches and a token off, progress bars quiet."""
    from huggingface_hub import constants
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class StandinRepo:
    repo_id: str
    commits: dict[str, dict[str, bytes]]
    branches: dict[str, str] = field(default_factory=dict)
    # (commit, path) -> sha256 the hub claims instead of the real one
    advertise: dict[tuple[str, str], str] = field(default_factory=dict)
    # (commit, path) -> bytes served instead of the committed ones (metadata unchanged)
    serve_bytes: dict[tuple[str, str], bytes] = field(default_factory=dict)

    def commit_of(self, rev: str) -> str | None:
        if rev in self.commits:
            return rev
        return self.branches.get(rev)

    def entry(self, commit: str, path: str) -> dict:
        data = self.commits[commit][path]
        sha = self.advertise.get((commit, path), hashlib.sha256(data).hexdigest())
        lfs = path.endswith(LFS_SUFFIXES)
        return {"path": path, "size": len(data), "blob_id": git_blob_sha1(data), "sha256": sha if lfs else None}


@dataclass
class Request:
    method: str
    path: str
    authorized: bool


class StandinHub:
    def __init__(self, repos: list[StandinRepo], *, echo_auth_in_errors: bool = False) -> None:
        self.repos = {r.repo_id: r for r in repos}
        self.requests: list[Request] = []
        # A misbehaving hub/proxy that quotes the Authorization header back in error bodies.
        self.echo_auth_in_errors = echo_auth_in_errors
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    @contextmanager
    def serving(self) -> Iterator[StandinHub]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet: tests read hub.requests instead
                pass

            def end_headers(self) -> None:
                # No keep-alive: a stopped hub must stop answering, not keep serving pooled connections.
                self.send_header("Connection", "close")
                self.close_connection = True
                super().end_headers()

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

            def do_GET(self) -> None:
                hub._handle(self, head=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)

    # ---- routing
    def _handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        url = urlsplit(h.path)
        path = unquote(url.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        self.requests.append(Request("HEAD" if head else "GET", h.path, "authorization" in
                                     {k.lower() for k in h.headers}))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id = "/".join(parts[2:4])
            rest = parts[4:]
            if not rest:
                return self._model_info(h, repo_id, "main", query)
            if rest[0] == "revision" and len(rest) == 2:
                return self._model_info(h, repo_id, rest[1], query)
            if rest[0] == "tree" and len(rest) >= 2:
                return self._tree(h, repo_id, rest[1], "/".join(rest[2:]))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(h, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), head=head)
        self._error(h, 404, "RepoNotFound", f"no route {path}")

    def _error(self, h: BaseHTTPRequestHandler, code: int, error_code: str, message: str,
               commit: str | None = None) -> None:
        if self.echo_auth_in_errors and h.headers.get("Authorization"):
            message += f" (request had Authorization: {h.headers['Authorization']})"
        body = json.dumps({"error": message}).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("X-Error-Code", error_code)
        h.send_header("X-Error-Message", message)
        if commit:
            h.send_header("X-Repo-Commit", commit)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _json(self, h: BaseHTTPRequestHandler, data: object) -> None:
        body = json.dumps(data).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _lookup(self, h: BaseHTTPRequestHandler, repo_id: str, rev: str) -> tuple[StandinRepo, str] | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            self._error(h, 404, "RepoNotFound", f"Repository {repo_id} not found")
            return None
        commit = repo.commit_of(rev)
        if commit is None:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return repo, commit

    def _model_info(self, h: BaseHTTPRequestHandler, repo_id: str, rev: str, query: dict[str, str]) -> None:
        found = self._lookup(h, repo_id, rev)
        if found is None:
            return
        repo, commit = found
        siblings = []
        for path in sorted(repo.commits[commit]):
            e = repo.entry(commit, path)
            sib: dict = {"rfilename": path}
            if query.get("blobs", "").lower() == "true":
                sib.update(size=e["size"], blobId=e["blob_id"])
                if e["sha256"]:
                    sib["lfs"] = {"sha256": e["sha256"], "size": e["size"], "pointerSize": 134}
            siblings.append(sib)
        self._json(h, {"_id": repo_id, "id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                       "siblings": siblings, "lastModified": "2026-08-30T00:00:00.000Z"})

    def _tree(self, h: BaseHTTPRequestHandler, repo_id: str, rev: str, prefix: str) -> None:
        found = self._lookup(h, repo_id, rev)
        if found is None:
            return
        repo, commit = found
        out = []
        for path in sorted(repo.commits[commit]):
            if prefix and not path.startswith(prefix.rstrip("/") + "/"):
                continue
            e = repo.entry(commit, path)
            item: dict = {"type": "file", "oid": e["blob_id"], "size": e["size"], "path": path}
            if e["sha256"]:
                item["lfs"] = {"oid": e["sha256"], "size": e["size"], "pointerSize": 134}
            out.append(item)
        self._json(h, out)

    def _resolve(self, h: BaseHTTPRequestHandler, repo_id: str, rev: str, path: str, *, head: bool) -> None:
        found = self._lookup(h, repo_id, rev)
        if found is None:
            return
        repo, commit = found
        if path not in repo.commits[commit]:
            self._error(h, 404, "EntryNotFound", f"{path} does not exist at {commit}", commit=commit)
            return
        e = repo.entry(commit, path)
        data = repo.serve_bytes.get((commit, path), repo.commits[commit][path])
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(len(data)))
        h.send_header("X-Repo-Commit", commit)
        h.send_header("ETag", f'"{e["sha256"] or e["blob_id"]}"')
        h.end_headers()
        if not head:
            h.wfile.write(data)
