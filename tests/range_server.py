"""A local HTTP file server with HEAD and byte ranges (what GDAL's /vsicurl needs), for remote-input tests.

`serve(folder)` starts it on 127.0.0.1 in its own process (GDAL holds the GIL while it waits on a
request, so a server thread in the reading process would never answer) and yields its base URL. Query
strings are ignored, as a presigned S3/GCS/Azure URL's signature is by a server that accepts it; the server
logs every request line to `requests.log` in the folder so tests can assert that a query string reached it.
`etag` gives each file an ETag and Last-Modified from its size and mtime, so a changed file is seen as
changed.

A server that replaces a file while it is read: `serve(folder, switch_after=N)` serves `NAME.next` in place
of `NAME` (where one lies beside it) from the (N+1)th ranged GET of `NAME` on, counted across all clients (the
switch comes at a fixed request, never after a delay; None: never); `etag=False` sends no ETag (Last-Modified
only). The log line of each request of a file with a NAME.next says which version it got (`v0`, `v1`) and
its Range header.
"""

from __future__ import annotations

import email.utils
import os
import threading
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class RangeHandler(SimpleHTTPRequestHandler):
    switch_after: int | None = None  # ranged GETs of a file before its NAME.next is served instead
    etag = True
    ranged: dict = {}  # path -> ranged GETs so far
    lock = threading.Lock()

    def log_message(self, *args) -> None:  # quiet
        pass

    def _seen(self, method: str, note: str = "") -> None:
        with open(os.path.join(self.directory, "requests.log"), "a") as f:
            f.write(f"{method} {self.path}{note}\n")

    def _file(self, method: str = "HEAD"):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self._seen(method)
            return None
        nxt = path + ".next"
        if not os.path.isfile(nxt):
            self._seen(method)
            return path
        with self.lock:  # counted and logged together: the log's order is the count's, whatever the threads
            if method == "GET" and self.headers.get("Range"):
                self.ranged[path] = self.ranged.get(path, 0) + 1
            switched = self.switch_after is not None and self.ranged.get(path, 0) > self.switch_after
            self._seen(method, f" v{int(switched)} {self.headers.get('Range', '')}".rstrip())
        return nxt if switched else path

    def _headers(self, path: str, length: int, status: int, extra: dict) -> None:
        st = os.stat(path)
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if path.endswith(".json") else "image/tiff")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if self.etag:
            self.send_header("ETag", f'"{st.st_size:x}-{st.st_mtime_ns:x}"')
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()

    def do_HEAD(self) -> None:
        path = self._file("HEAD")
        if path is None:
            self.send_error(404)
            return
        self._headers(path, os.path.getsize(path), 200, {})

    def do_GET(self) -> None:
        path = self._file("GET")
        if path is None:
            self.send_error(404)
            return
        size = os.path.getsize(path)
        rng = self.headers.get("Range")
        start, end, status, extra = 0, size - 1, 200, {}
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].split(",")[0].partition("-")
            if a:
                start, end = int(a), min(int(b) if b else size - 1, size - 1)
            else:
                start, end = max(0, size - int(b)), size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.end_headers()
                return
            status, extra = 206, {"Content-Range": f"bytes {start}-{end}/{size}"}
        self._headers(path, end - start + 1, status, extra)
        with open(path, "rb") as f:
            f.seek(start)
            self.wfile.write(f.read(end - start + 1))


def _main(folder: str, port_file: str, switch_after: str = "", etag: str = "1") -> None:
    RangeHandler.switch_after = int(switch_after) if switch_after else None
    RangeHandler.etag = etag == "1"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(RangeHandler, directory=folder))
    with open(port_file + ".part", "w") as f:
        f.write(str(httpd.server_address[1]))
    os.replace(port_file + ".part", port_file)
    httpd.serve_forever()


@contextmanager
def serve(folder, switch_after: int | None = None, etag: bool = True):
    """Serve `folder` on 127.0.0.1 (a free port) from a child process; yields the base URL. `switch_after`,
    `etag`: see the module doc."""
    import subprocess
    import sys
    import tempfile
    import time

    port_file = os.path.join(tempfile.mkdtemp(prefix="range-server-"), "port")
    proc = subprocess.Popen([sys.executable, __file__, str(folder), port_file,
                             "" if switch_after is None else str(switch_after), "1" if etag else "0"])
    try:
        for _ in range(300):
            if os.path.exists(port_file) or proc.poll() is not None:
                break
            time.sleep(0.05)
        with open(port_file) as f:
            yield f"http://127.0.0.1:{f.read().strip()}"
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    import sys

    _main(*sys.argv[1:])
