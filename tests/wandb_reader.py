"""Read an offline W&B run's `.wandb` file back (test support).

wandb >= 0.2x writes offline runs only into this binary file (no config.yaml / summary json) and no
longer ships a Python reader. The file is a 7-byte header (":W&B", magic 0xBEE1, version 0) followed
by the LevelDB log format: 32 KiB blocks of chunks [crc32c:4][length:2 LE][type:1][payload], type
1 = a whole record, 2/3/4 = first/middle/last piece. Each record is a protobuf `Record`.
"""

import json
import struct
import time

BLOCK = 32 * 1024
HEADER = 7


def read_records(path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B", "not a .wandb file"
    pos, pieces = HEADER, b""
    while pos + HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:  # block trailer padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos: pos + HEADER])
        payload = data[pos + HEADER: pos + HEADER + length]
        if len(payload) < length:  # a chunk still being written: the records before it are whole
            return
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        pieces = payload if kind in (1, 2) else pieces + payload
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pieces)
            yield record
            pieces = b""


def complete_records(path, timeout: float = 60.0) -> list:
    """The run's records once its `exit` record (the last one wandb writes) is in the file: `finish()` can return
    before wandb's service has flushed the rest (seen on a loaded machine), so read again until it has."""
    deadline = time.monotonic() + timeout
    while True:
        records = list(read_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def config_history_summary(path):
    """(config, history rows, summary) of an offline run's `.wandb` file, once complete."""
    config, history, summary = {}, [], {}
    for record in complete_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            summary.update({u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in record.summary.update})
    return config, history, summary
