"""The Hugging Face hub, asked once per process whether it answers: without network, huggingface_hub retries
a miss five times (~36 s, one line each) before the error a user can act on."""

from __future__ import annotations

import os

reachable_hubs: list[str] = []  # the hub this process found answering (asked once: each probe can take 3 s)
unreachable_hubs: list[str] = []  # the hub this process found unreachable, and went offline for


def hub_offline_reason() -> str | None:
    """None when the HF hub is used; else why not, and what to do if a model is not in the local cache.

    An unreachable hub (checked once, with a short timeout) makes the process go offline, as HF_HUB_OFFLINE=1
    would: what is in the local cache still loads, and a miss fails at once instead of after
    huggingface_hub's five retries (~36 s, one line each)."""
    from huggingface_hub import constants

    from lightning_bench.logging_setup import server_reachable

    not_cached = f"and it is not in the local cache ({constants.HF_HUB_CACHE})"
    if unreachable_hubs:
        return f"the hub {unreachable_hubs[0]} is unreachable {not_cached}; connect, or pass a local folder"
    if constants.is_offline_mode():
        return f"HF_HUB_OFFLINE is set {not_cached}; unset it to download, or pass a local folder"
    if constants.ENDPOINT in reachable_hubs:
        return None
    if server_reachable(constants.ENDPOINT):
        reachable_hubs.append(constants.ENDPOINT)
        return None
    os.environ["HF_HUB_OFFLINE"] = "1"  # for processes started from this one
    constants.HF_HUB_OFFLINE = True  # read at import: what huggingface_hub and transformers ask from now on
    unreachable_hubs.append(constants.ENDPOINT)
    return hub_offline_reason()
