"""The one place bitsandbytes is imported: only when a low-bit module or the 8-bit optimizer is needed.

Importing bitsandbytes costs a second and, on some CPUs, prints a line (below), so an fp32 run must
never import it: `import_bitsandbytes()` is called where `--bits 8|4` or `--optimizer_8bit` needs it.

Two of bitsandbytes' log lines say nothing a user can act on, so they are dropped (exactly those
messages; every other bitsandbytes warning still shows). The filters sit on bitsandbytes' loggers from
the moment this module is imported, so they also hold when transformers imports bitsandbytes itself
(BitsAndBytesConfig).
"""

from __future__ import annotations

import logging

from lightning_bench.errors import ConfigError


class _DropNotice(logging.Filter):
    """Drops the records of one logger whose message starts with `prefix`."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


# logged on *every* eval-mode int8 matmul of an fp32 input (bitsandbytes casts it to fp16 itself)
logging.getLogger("bitsandbytes.autograd._functions").addFilter(_DropNotice("MatMul8bitLt: inputs will be cast"))
# logged at import on AVX512-BF16 CPUs without the optional `kernels` package (a hub download of a fused
# bf16 4-bit CPU kernel): the pure-PyTorch fallback is used instead, and the fused kernel is switched off
# by default anyway (export.py, `cpu_bf16_kernel`), so there is nothing for the user to install or fix
logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(_DropNotice("Failed to load CPU gemm_4bit_forward"))


def import_bitsandbytes():
    """The bitsandbytes module (imported on first use), or a ConfigError saying how to install it."""
    try:
        import bitsandbytes
    except ImportError as err:  # pragma: no cover - a dependency of the project
        raise ConfigError(f"--bits 8/4 needs bitsandbytes ({err}); pip install bitsandbytes") from err
    return bitsandbytes
