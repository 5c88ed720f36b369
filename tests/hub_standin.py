"""A small stand-in Hugging Face Hub on 127.0.0.1, for testing the real client over real HTTP.

It implements only what ``huggingface_hub`` 2.x calls for a pinned download and a
checksum look-up, with the headers the client insists on (read in its
``file_download.get_hf_file_metadata`` and ``utils/_http.hf_raise_for_status``):

- ``GET /api/models/{repo}[/revision/{rev}]`` (``?blobs=True`` adds files metadata): model info
  with ``sha`` and ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs.sha256``);
- ``GET /api/models/{repo}/tree/{rev}`` (``?recursive=...``): the file listing ``snapshot_download`` uses;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, ``ETag``, ``Content-Length``;
- errors as the hub sends them: 404 with ``X-Error-Code`` ``RepoNotFound``/``RevisionNotFound``/``EntryNotFound``.

And what ``HfApi.create_commit`` (``upload_file``, ``upload_folder``) calls to commit to a branch, read in
``_commit_api.py`` and ``lfs.py`` (Xet is off: :func:`go_online` sets ``HF_HUB_DISABLE_XET``, so the client
takes the LFS path a hub without Xet offers):

- ``POST /api/models/{repo}/preupload/{branch}``: each file's ``uploadMode`` (``lfs`` for weights, ``regular``
  otherwise) and the ``oid`` of the file already there (the client leaves unchanged files out);
- ``POST /{repo}.git/info/lfs/objects/batch``: an ``upload`` and a ``verify`` action per object not yet stored;
  ``PUT`` of the bytes to the upload href (refused unless they hash to the oid), ``POST`` to the verify href;
- ``POST /api/models/{repo}/commit/{branch}``: the NDJSON body (``header``; ``file`` with base64 content;
  ``lfsFile`` by oid and size, which must have been uploaded; ``deletedFile``): a new commit (40 hex) on the
  branch, which later downloads see, answered with ``commitOid`` and ``commitUrl``;
- ``POST /api/validate-yaml`` (a README.md in a commit): no errors.

With ``write_token`` set, a write without ``Authorization: Bearer <write_token>`` is refused (401).

Scenarios are data: a repo has commits (path -> bytes) and branches; ``advertise`` makes
the hub claim another sha256 for a file than its bytes have; ``serve_bytes`` makes it
serve other bytes than it advertises; ``damage_on_commit`` makes a commit store other bytes
for a path than were uploaded (and advertise those). Every request is recorded (method, path, whether an
Authorization header came), so tests can see what the client did.
"""

from __future__ import annotations

import base64
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
    """Let huggingface_hub reach a hub (the stand-in): offline switches and a token off, progress bars quiet,
    uploads by LFS (the stand-in does not speak Xet; a subprocess needs HF_HUB_DISABLE_XET=1 in its env)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)


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
    # path -> bytes a commit stores instead of the ones uploaded there (a hub that damages a file on upload)
    damage_on_commit: dict[str, bytes] = field(default_factory=dict)

    def commit_of(self, rev: str) -> str | None:
        if rev in self.commits:
            return rev
        return self.branches.get(rev)

    def entry(self, commit: str, path: str) -> dict:
        data = self.commits[commit][path]
        sha = self.advertise.get((commit, path), hashlib.sha256(data).hexdigest())
        lfs = path.endswith(LFS_SUFFIXES)
        return {"path": path, "size": len(data), "blob_id": git_blob_sha1(data), "sha256": sha if lfs else None}

    def commit(self, branch: str, files: dict[str, bytes], deleted: set[str], summary: str) -> str:
        """A new commit on ``branch``: its head's files, ``files`` written over them, ``deleted`` removed."""
        parent = self.branches[branch]
        tree = {p: d for p, d in self.commits[parent].items() if p not in deleted}
        tree.update({p: self.damage_on_commit.get(p, d) for p, d in files.items()})
        listing = "".join(f"{p}\0{hashlib.sha256(d).hexdigest()}\n" for p, d in sorted(tree.items()))
        oid = hashlib.sha1(f"{parent}\n{len(self.commits)}\n{summary}\n{listing}".encode(),
                           usedforsecurity=False).hexdigest()
        self.commits[oid] = tree
        self.branches[branch] = oid
        return oid


@dataclass
class Request:
    method: str
    path: str
    authorized: bool


class StandinHub:
    def __init__(self, repos: list[StandinRepo], *, echo_auth_in_errors: bool = False,
                 write_token: str | None = None) -> None:
        self.repos = {r.repo_id: r for r in repos}
        self.requests: list[Request] = []
        # A misbehaving hub/proxy that quotes the Authorization header back in error bodies.
        self.echo_auth_in_errors = echo_auth_in_errors
        # The token a write must carry (None: any or none).
        self.write_token = write_token
        # LFS objects uploaded (sha256 -> bytes), shared by every repository as the hub's storage is.
        self.lfs_objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
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

            def do_POST(self) -> None:
                hub._handle_write(self)

            def do_PUT(self) -> None:
                hub._handle_write(self)

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

    # ---- writes (create_commit)
    def _handle_write(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        # Split before unquoting: a branch comes quoted whole (refs%2Fpr%2F1 is one part).
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        self.requests.append(Request(h.command, h.path, "authorization" in {k.lower() for k in h.headers}))
        body = self._read_body(h)
        if parts == ["api", "validate-yaml"] and h.command == "POST":
            return self._json(h, {"errors": [], "warnings": []})
        # The upload href stands for a presigned storage URL: the client sends it no Authorization.
        if self.write_token is not None and parts[0] != "lfs-upload" \
                and h.headers.get("Authorization") != f"Bearer {self.write_token}":
            return self._error(h, 401, "Unauthorized", "Invalid credentials in Authorization header")
        if h.command == "POST" and parts[:2] == ["api", "models"] and len(parts) == 6:
            repo_id, action, branch = "/".join(parts[2:4]), parts[4], parts[5]
            if action == "preupload":
                return self._preupload(h, repo_id, branch, json.loads(body))
            if action == "commit":
                return self._commit(h, repo_id, branch, body)
        if h.command == "POST" and len(parts) == 6 and parts[2:] == ["info", "lfs", "objects", "batch"] \
                and parts[1].endswith(".git"):
            return self._lfs_batch(h, f"{parts[0]}/{parts[1][:-4]}", json.loads(body))
        if h.command == "PUT" and len(parts) == 2 and parts[0] == "lfs-upload":
            if hashlib.sha256(body).hexdigest() != parts[1]:
                return self._error(h, 400, "BadRequest", f"the uploaded bytes do not hash to {parts[1]}")
            with self._lock:
                self.lfs_objects[parts[1]] = body
            return self._json(h, {})
        if h.command == "POST" and len(parts) == 2 and parts[0] == "lfs-verify":
            want = json.loads(body)
            stored = self.lfs_objects.get(parts[1])
            if stored is None or len(stored) != want.get("size"):
                return self._error(h, 404, "EntryNotFound", f"LFS object {parts[1]} was not uploaded")
            return self._json(h, {})
        self._error(h, 404, "RepoNotFound", f"no route {h.command} {url.path}")

    @staticmethod
    def _read_body(h: BaseHTTPRequestHandler) -> bytes:
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += h.rfile.read(size)
                h.rfile.readline()
        return h.rfile.read(int(h.headers.get("Content-Length") or 0))

    def _branch(self, h: BaseHTTPRequestHandler, repo_id: str, branch: str) -> StandinRepo | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            self._error(h, 404, "RepoNotFound", f"Repository {repo_id} not found")
            return None
        if branch not in repo.branches:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {branch} (not a branch)")
            return None
        return repo

    def _preupload(self, h: BaseHTTPRequestHandler, repo_id: str, branch: str, payload: dict) -> None:
        repo = self._branch(h, repo_id, branch)
        if repo is None:
            return
        head = repo.commits[repo.branches[branch]]
        out = []
        for f in payload["files"]:
            lfs = f["path"].endswith(LFS_SUFFIXES)
            there = head.get(f["path"])
            oid = None if there is None else hashlib.sha256(there).hexdigest() if lfs else git_blob_sha1(there)
            out.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                        "oid": oid})
        self._json(h, {"files": out, "commitOid": repo.branches[branch]})

    def _lfs_batch(self, h: BaseHTTPRequestHandler, repo_id: str, payload: dict) -> None:
        if repo_id not in self.repos:
            return self._error(h, 404, "RepoNotFound", f"Repository {repo_id} not found")
        objects = []
        for obj in payload["objects"]:
            item: dict = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.lfs_objects:
                item["actions"] = {"upload": {"href": f"{self.url}/lfs-upload/{obj['oid']}"},
                                   "verify": {"href": f"{self.url}/lfs-verify/{obj['oid']}"}}
            objects.append(item)
        self._json(h, {"transfer": "basic", "objects": objects})

    def _commit(self, h: BaseHTTPRequestHandler, repo_id: str, branch: str, body: bytes) -> None:
        repo = self._branch(h, repo_id, branch)
        if repo is None:
            return
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            return self._error(h, 400, "BadRequest", "the commit's first line must be its header")
        header = lines[0]["value"]
        files: dict[str, bytes] = {}
        deleted: set[str] = set()
        for line in lines[1:]:
            key, value = line.get("key"), line.get("value") or {}
            if key == "file" and value.get("encoding") == "base64":
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "lfsFile":
                data = self.lfs_objects.get(value.get("oid"))
                if data is None or len(data) != value.get("size"):
                    return self._error(h, 400, "BadRequest", f"{value.get('path')}: LFS object not uploaded")
                files[value["path"]] = data
            elif key == "deletedFile":
                deleted.add(value["path"])
            else:
                return self._error(h, 400, "BadRequest", f"unsupported commit operation {key!r}")
        with self._lock:
            parent = header.get("parentCommit")
            if parent is not None and parent != repo.branches[branch]:
                return self._error(h, 412, "PreconditionFailed", f"{branch} is not at {parent}")
            oid = repo.commit(branch, files, deleted, header.get("summary", ""))
        self._json(h, {"success": True, "commitOid": oid, "commitUrl": f"{self.url}/{repo_id}/commit/{oid}",
                       "commitMessage": header.get("summary", ""), "hookOutput": "", "pullRequestUrl": None})
