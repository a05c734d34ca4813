"""Loggers: CSV by default; W&B on request, offline unless the user is logged in."""

from __future__ import annotations

import os


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


def wandb_logger(project: str, save_dir: str, name: str | None = None):
    from lightning.pytorch.loggers import WandbLogger

    mode = os.environ.get("WANDB_MODE")
    offline = mode in ("offline", "disabled") or (mode != "online" and not wandb_logged_in())
    os.makedirs(save_dir, exist_ok=True)
    return WandbLogger(project=project, save_dir=save_dir, offline=offline, name=name)


def csv_logger(save_dir: str, name: str = "lightning_bench"):
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(save_dir=save_dir, name=name)
