#!/usr/bin/env python3
"""mk-mock-hub - a small Hugging Face Hub of the test suite's own, on
127.0.0.1, for mk's download and streaming tests (Python's standard library
only).

    mk-mock-hub.py --root DIR --port-file FILE

Repositories are folders: DIR/ORG/NAME is the branch "main" of ORG/NAME,
DIR/ORG/NAME@REV another branch.  A folder's optional .mock.json sets
{"token": "..."} (the repository is gated: requests need "Authorization:
Bearer TOKEN", else 401) and {"sizes": {"PATH": N}} (the listing says PATH
has N bytes, whatever it holds: a lying Hub).  Each revision's commit is a hash of its files.
Files of more than 1 KiB, and weights (.safetensors, .bin, .pt, .pth,
.model), are LFS files: their id is their sha256 and resolve/ redirects
them to /cdn/ on the same server (an absolute URL naming it localhost, as
the real Hub sends them to its CDN, another host); the others are git blobs (git blob sha1), served directly.

Endpoints (what mk and huggingface_hub use):
    GET  /api/models/ORG/NAME/revision/REV[?blobs=true]   listing (JSON)
    GET  /api/models/ORG/NAME/tree/REV[?recursive=true]   huggingface_hub's
    HEAD/GET /ORG/NAME/resolve/REV/PATH   X-Repo-Commit, ETag, X-Linked-*
    GET  /cdn/SHA256                      LFS bytes, with Range
Control:
    POST /_mock/faults   JSON list of faults, each
         {"kind": K, "match": "substring of the path", "count": N,
          "after": BYTES, "delay": SECONDS, "retry_after": SECONDS}
         K: drop (the connection is closed after `after` body bytes),
         500, 503, 429 (with Retry-After), 401, slow (the body in 4 KiB
         pieces, `delay` apart), corrupt (the byte at `after` is flipped),
         trickle (the body a byte at a time, `rate` bytes a second, for as
         long as the client stays), long (`extra` bytes more than the
         file, counted in Content-Length), redirect (302 to `location`,
         which may be any URL: ftp://, file://, ...)
    GET  /_mock/log      JSON list of {method, path, range, status, sent, auth,
                         headers}  (auth: the request had an Authorization
                         header; headers: the names of all its headers)
    POST /_mock/reset    forget the log and the faults left
"""
import argparse
import hashlib
import http.server
import json
import os
import socketserver
import sys
import threading
import time
import urllib.parse

LFS_EXT = (".safetensors", ".bin", ".pt", ".pth", ".model")
lock = threading.Lock()
faults = []
log = []


def file_id(path, rel):
    data_size = os.path.getsize(path)
    if data_size > 1024 or rel.endswith(LFS_EXT):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for b in iter(lambda: f.read(1 << 20), b""):
                h.update(b)
        return True, h.hexdigest(), data_size
    with open(path, "rb") as f:
        data = f.read()
    return False, hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(), data_size


class Repo:
    def __init__(self, root, repo_id, folder):
        self.id, self.folder, self.files = repo_id, folder, {}
        conf = os.path.join(folder, ".mock.json")
        conf = json.load(open(conf)) if os.path.exists(conf) else {}
        self.token, self.sizes = conf.get("token"), conf.get("sizes", {})
        for d, dirs, names in os.walk(folder):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            for n in sorted(names):
                if n.startswith("."):
                    continue
                p = os.path.join(d, n)
                rel = os.path.relpath(p, folder)
                self.files[rel] = (p,) + file_id(p, rel)
        h = hashlib.sha1()
        for rel, (_, lfs, etag, size) in sorted(self.files.items()):
            h.update(("%s %s %d\n" % (rel, etag, size)).encode())
        self.commit = h.hexdigest()


def scan(root):
    """Every revision: {(id, rev): Repo}, revs by name and by commit."""
    revs = {}
    for org in sorted(os.listdir(root)):
        od = os.path.join(root, org)
        if not os.path.isdir(od):
            continue
        for nm in sorted(os.listdir(od)):
            folder = os.path.join(od, nm)
            name, _, rev = nm.partition("@")
            repo_id = org + "/" + name
            r = Repo(root, repo_id, folder)
            revs[(repo_id, rev or "main")] = r
            revs[(repo_id, r.commit)] = r
    return revs


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def take_fault(self, path):
        with lock:
            for f in faults:
                if f.get("match", "") in path and f.get("count", 1) > 0:
                    f["count"] = f.get("count", 1) - 1
                    return dict(f)
        return None

    def record(self, status, sent):
        with lock:
            log.append({"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                        "status": status, "sent": sent, "auth": "Authorization" in self.headers,
                        "headers": list(self.headers.keys())})

    def plain(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.record(status, 0 if self.command == "HEAD" else len(body))

    def authorised(self, repo):
        if repo.token is None:
            return True
        return self.headers.get("Authorization") == "Bearer " + repo.token

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        if self.path == "/_mock/faults":
            with lock:
                faults.extend(json.loads(body))
            return self.plain(200, b"{}")
        if self.path == "/_mock/reset":
            with lock:
                faults.clear()
                log.clear()
            return self.plain(200, b"{}")
        self.plain(404)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(u.path)
        if path == "/_mock/log":
            with lock:
                body = json.dumps(log).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        f = self.take_fault(path)
        if f and f["kind"] in ("500", "503", "429", "401"):
            hdr = [("Retry-After", str(f.get("retry_after", 1)))] if f["kind"] in ("429", "503") else []
            return self.plain(int(f["kind"]), b'{"error": "injected"}', hdr)
        if f and f["kind"] == "redirect":
            return self.plain(302, b"", [("Location", f["location"])])
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            return self.listing(parts[2] + "/" + parts[3], "/".join(parts[5:]))
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
            return self.tree(parts[2] + "/" + parts[3], "/".join(parts[5:]))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), f)
        if len(parts) == 2 and parts[0] == "cdn":
            for r in self.server.revs.values():
                for p, lfs, etag, size in r.files.values():
                    if lfs and etag == parts[1]:
                        return self.send_file(p, etag, size, f, [])
        self.plain(404, b'{"error": "not found"}')

    def listing(self, repo_id, rev):
        r = self.server.revs.get((repo_id, rev))
        if r is None:
            return self.plain(404, b'{"error": "Repository or revision not found"}')
        if not self.authorised(r):
            return self.plain(401, b'{"error": "Access to this repository is restricted"}')
        sib = []
        for rel, (_, lfs, etag, size) in sorted(r.files.items()):
            size = r.sizes.get(rel, size)
            e = {"rfilename": rel, "size": size}
            if lfs:
                e["blobId"] = hashlib.sha1(etag.encode()).hexdigest()
                e["lfs"] = {"sha256": etag, "size": size, "pointerSize": 134}
            else:
                e["blobId"] = etag
            sib.append(e)
        body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": r.commit, "private": False,
                           "gated": bool(r.token), "siblings": sib}).encode()
        self.plain(200, body, [("Content-Type", "application/json")])

    def tree(self, repo_id, rev):
        """huggingface_hub's file listing (list_repo_tree, recursive)."""
        r = self.server.revs.get((repo_id, rev))
        if r is None:
            return self.plain(404, b'{"error": "Repository or revision not found"}')
        if not self.authorised(r):
            return self.plain(401, b'{"error": "Access to this repository is restricted"}')
        out, dirs = [], set()
        for rel, (_, lfs, etag, size) in sorted(r.files.items()):
            for i in range(1, rel.count("/") + 1):
                dirs.add("/".join(rel.split("/")[:i]))
            e = {"type": "file", "path": rel, "size": size,
                 "oid": hashlib.sha1(etag.encode()).hexdigest() if lfs else etag}
            if lfs:
                e["lfs"] = {"oid": etag, "size": size, "pointerSize": 134}
            out.append(e)
        out += [{"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0}
                for d in sorted(dirs)]
        self.plain(200, json.dumps(out).encode(), [("Content-Type", "application/json")])

    def resolve(self, repo_id, rev, rel, fault):
        r = self.server.revs.get((repo_id, rev))
        if r is None or rel not in r.files:
            return self.plain(404, b'{"error": "Entry not found"}',
                              [("X-Error-Code", "EntryNotFound")] if r else [("X-Error-Code", "RepoNotFound")])
        if not self.authorised(r):
            return self.plain(401, b'{"error": "Access restricted"}', [("X-Error-Code", "GatedRepo")])
        p, lfs, etag, size = r.files[rel]
        common = [("X-Repo-Commit", r.commit)]
        if lfs:
            # another host name for the same server, as the Hub's CDN is
            # another host: clients follow the redirect to fetch the bytes,
            # not to learn the file's commit and id
            host = "http://localhost:%d" % self.server.server_address[1]
            return self.plain(302, b"", common + [
                ("ETag", '"%s"' % hashlib.sha1(etag.encode()).hexdigest()),
                ("X-Linked-Etag", '"%s"' % etag), ("X-Linked-Size", str(size)),
                ("Location", host + "/cdn/" + etag)])
        self.send_file(p, etag, size, fault, common)

    def send_file(self, p, etag, size, fault, extra):
        rng = self.headers.get("Range")
        a, b, status = 0, size - 1, 200
        if rng and rng.startswith("bytes="):
            lo, _, hi = rng[6:].partition("-")
            a = int(lo)
            b = min(int(hi), size - 1) if hi else size - 1
            if a >= size or a > b:
                return self.plain(416, b"", [("Content-Range", "bytes */%d" % size)])
            status = 206
        n = b - a + 1
        kind = fault["kind"] if fault else None
        more = fault.get("extra", 0) if kind == "long" else 0
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("ETag", '"%s"' % etag)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(n + more))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, size))
        self.end_headers()
        if self.command == "HEAD":
            return self.record(status, 0)
        with open(p, "rb") as fh:
            fh.seek(a)
            data = fh.read(n) + b"x" * more
        if kind == "corrupt":
            at = min(fault.get("after", 0), len(data) - 1)
            if at >= 0:
                data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
        if kind == "drop":
            cut = min(fault.get("after", 0), len(data))
            self.wfile.write(data[:cut])
            self.wfile.flush()
            self.record(status, cut)
            self.close_connection = True
            import socket
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if kind == "trickle":
            # logged as it begins (sent: 0), not when the client has gone
            self.record(status, 0)
            try:
                for i in range(len(data)):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(1.0 / fault.get("rate", 2))
            except OSError:
                self.close_connection = True
            return
        if kind == "slow":
            for i in range(0, len(data), 4096):
                self.wfile.write(data[i:i + 4096])
                self.wfile.flush()
                time.sleep(fault.get("delay", 0.05))
        else:
            self.wfile.write(data)
        self.record(status, len(data))


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    srv.revs = scan(args.root)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, args.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
