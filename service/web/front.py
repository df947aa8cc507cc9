"""The buffering front of the web process: nginx reads every request in full (however slowly a client sends it)
before gunicorn sees it, and a response in full before a slow reader gets it. A slow client then costs nginx one
idle connection (a few kB; thousands fit in one event loop) instead of one of gunicorn's threads, which valid
deliveries need: with 200 slow-body connections and gunicorn alone, every delivery waited past GitHub's 10 s.

Why nginx in front rather than an async gunicorn worker class: the app stays the threaded WSGI app it is (SQLAlchemy,
redis-py and Celery's producer block; no monkey-patching), and request buffering is nginx's default, the setup
gunicorn's own documentation asks for in front of sync and threaded workers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# GitHub caps payloads at 25 MB; bodies above the in-memory buffer go to a file under the front's temp directory.
MAX_BODY = "25m"
BODY_BUFFER = "64k"  # per connection while its body arrives: 500 slow clients hold 32 MB at most


def nginx_config(listen: str, upstream: str, temp_dir: Path, workers: int = 1) -> str:
    """nginx.conf for `listen` (HOST:PORT) proxying to gunicorn at `upstream` (HOST:PORT)."""
    temp = {kind: temp_dir / kind for kind in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    return f"""# Written by `compile-ci front` (service/web/front.py); not edited by hand.
daemon off;
worker_processes {workers};
worker_rlimit_nofile 16384;  # two descriptors per proxied connection: slow clients by the thousand need them
pid {temp_dir / "nginx.pid"};
error_log stderr warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;  # gunicorn logs every request that reaches the app
    server_tokens off;
    client_body_temp_path {temp["body"]};
    proxy_temp_path {temp["proxy"]};
    fastcgi_temp_path {temp["fastcgi"]};
    uwsgi_temp_path {temp["uwsgi"]};
    scgi_temp_path {temp["scgi"]};
    client_max_body_size {MAX_BODY};
    client_body_buffer_size {BODY_BUFFER};
    # Between two reads, not for the whole body: a trickling client stays (cheaply) until it stops sending.
    client_header_timeout 10s;
    client_body_timeout 10s;
    send_timeout 30s;
    keepalive_timeout 30s;
    upstream gunicorn {{
        server {upstream};
        keepalive 32;
    }}
    server {{
        listen {listen} backlog=4096;
        location / {{
            proxy_pass http://gunicorn;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_request_buffering on;
            proxy_buffering on;
            proxy_read_timeout 120s;
        }}
    }}
}}
"""


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found is None:
        raise RuntimeError("nginx is not installed (apt-get install nginx)")
    return found


def front_command(listen: str, upstream: str, workers: int = 1, temp_dir: Path | None = None) -> list[str]:
    """Write the config into a fresh directory (under /tmp: the image's root is read-only) and return the command
    that runs nginx in the foreground with it."""
    temp = temp_dir or Path(tempfile.mkdtemp(prefix="compile-ci-front-"))
    # Started as root, nginx's workers run as nobody: they need to reach their temp directories in here.
    os.chmod(temp, 0o711)
    config = temp / "nginx.conf"
    config.write_text(nginx_config(listen, upstream, temp, workers))
    return [nginx_binary(), "-c", str(config), "-e", "stderr"]
