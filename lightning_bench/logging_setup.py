"""Loggers: CSV by default; W&B on request, offline unless the user is logged in and the server answers."""

from __future__ import annotations

import os
import socket
import sys
import threading
from urllib.parse import urlparse

from lightning_bench.errors import PROG, ConfigError

WANDB_DEFAULT_URL = "https://api.wandb.ai"


def wandb_logged_in() -> bool:
    """True when an API key is available (env var or ~/.netrc), without touching the network."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc

    try:
        auth = netrc.netrc().authenticators("api.wandb.ai")
    except (FileNotFoundError, netrc.NetrcParseError):
        return False
    return bool(auth and auth[2])


def server_reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to `url`'s host opens within `timeout` seconds. The name lookup has no
    timeout of its own, so the whole attempt runs in a thread that is abandoned after `timeout`."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    opened = []

    def connect():
        try:
            socket.create_connection((parsed.hostname, port), timeout=timeout).close()
            opened.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(opened)


def wandb_logger(project: str, save_dir: str, name: str | None = None, **init):
    """A WandbLogger, offline unless W&B is logged in and reachable; `init`: more of wandb.init's arguments
    (group, job_type)."""
    from lightning.pytorch.loggers import WandbLogger

    mode = os.environ.get("WANDB_MODE")
    offline = mode in ("offline", "disabled") or (mode != "online" and not wandb_logged_in())
    if not offline:
        # wandb.init with a key but no server raises AuthenticationError (or waits for its own timeouts)
        url = os.environ.get("WANDB_BASE_URL") or WANDB_DEFAULT_URL
        if not server_reachable(url):
            if mode == "online":
                raise ConfigError(f"WANDB_MODE=online but the W&B server {url} is unreachable; "
                                  "unset WANDB_MODE to log offline")
            offline = True
            print(f"{PROG}: W&B server {url} unreachable: logging offline under {save_dir}/wandb "
                  "(upload later with `wandb sync`)", file=sys.stderr)
    os.makedirs(save_dir, exist_ok=True)
    logger = WandbLogger(project=project, save_dir=save_dir, offline=offline, name=name, **init)
    # Lightning always hands wandb.init `anonymous=None` (its own default, unasked); recent wandb (0.31) warns
    # "The anonymous setting has no effect and will be removed", a line the user cannot act on. Leaving the
    # argument out is what wandb asks for and means the same to every wandb version (None is its default).
    getattr(logger, "_wandb_init", {}).pop("anonymous", None)
    return logger


def csv_logger(save_dir: str, name: str = "lightning_bench", version: str | None = None):
    """`{save_dir}/{name}/{version}/metrics.csv`; the run id as version names the same run as its record."""
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(save_dir=save_dir, name=name, version=version)
