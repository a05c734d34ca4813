"""A masker stack: parsing, the masked attention of one call, and its meter (density, attention error).

`MaskerStack.parse("sink:128,local:128,oracle_topk:0.05")` (or a YAML list: `[{sink: 128}, "local:128",
{name: magic_pig, lsh_k: 8, lsh_l: 75}]`): maskers in order, each `name:value:value...` with values positional
(in the masker's declared order) or `key=value`; the stack's own options may stand among them:
`dense_layers:0:16` (layers left dense), `seed:7` (of the sampling maskers' draws). The maskers' entries merge by adding and clamping to [0, 1]; at
most one sampling masker per stack.

The output of one (row, query head, query) over its visible keys V, with e_j = exp(s_j - max_V s) and the merged
mask m, is the self-normalised importance-weighted sum

    o = sum_{j in V, m_j > 0} (e_j / m_j) v_j  /  sum_{j in V, m_j > 0} (e_j / m_j)

(MagicPIG's and vAttention's estimator; dense attention is m = 1). A row whose mask is empty or 1 on every
visible key IS dense attention: it takes the model's own attention output for that row, bit for bit. The
masked rows are computed here in float32, in chunks of query rows whose scores stay under
`capture.CHUNK_ELEMENTS`, each over the keys it can see: written by hand because no attention kernel takes
per-entry weights 1/m (sdpa's float mask adds to the scores: log(1/m) would do it, but not the exact-dense rows
or the per-masker entries the maskers need to see).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Optional, Union

import torch

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.sparsity.masking.base import MaskContext, Masker
from lightning_bench.sparsity.parameters import build

ALIASES = {"sink_masker": "sink", "local_masker": "local"}  # the earlier tuning system's config names


_REGISTERED: dict[str, type[Masker]] = {}  # maskers added with `register_masker`


def register_masker(cls: type[Masker]) -> type[Masker]:
    """Add a masker class to the registry (usable as a decorator): the extension point of the maskers this
    library does not ship, e.g. learned ones (HashAttention, DoubleSparsity) whose `needs_weights` names the
    parameter holding their weight file, loaded in their own __post_init__."""
    if not cls.name or cls.name in registry():
        raise ValueError(f"a masker needs a name no other masker has, got {cls.name!r}")
    _REGISTERED[cls.name] = cls
    return cls


def unregister_masker(name: str) -> None:
    """Remove a masker `register_masker` added (a plugin unloaded, a test cleaning up)."""
    _REGISTERED.pop(name, None)


def registry() -> dict[str, type[Masker]]:
    from lightning_bench.sparsity.masking.fixed import Local, OracleTopK, OracleTopP, Quest, Sink
    from lightning_bench.sparsity.masking.sampled import AdaptiveSampling, MagicPig, RandomSampling

    return {**{m.name: m for m in (Sink, Local, OracleTopK, OracleTopP, Quest, RandomSampling, MagicPig,
                                   AdaptiveSampling)}, **_REGISTERED}


def _value(text: str):
    """'128' -> 128, '0.05' -> 0.05, 'true' -> True, anything else stays a string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def make_masker(name: str, args=(), params: Optional[dict] = None) -> Masker:
    """A masker from its name (or alias), positional values in its declared parameter order and named ones."""
    maskers = registry()
    name = ALIASES.get(name, name)
    if name not in maskers:
        raise unknown_name("masker", name, maskers)
    order = list(maskers[name].param_specs())
    if len(args) > len(order):
        raise ConfigError(f"masker {name!r} takes at most {len(order)} values ({', '.join(order)}), got {len(args)}")
    given = dict(zip(order, args))
    for key, value in (params or {}).items():
        if key in given:
            raise ConfigError(f"masker {name!r}: {key} given twice")
        given[key] = value
    return build("masker", maskers, name, given)


def _item(item) -> Masker:
    if isinstance(item, Masker):
        return item
    if isinstance(item, str):
        name, *rest = [part.strip() for part in item.split(":")]
        args, named = [], {}
        for part in rest:
            key, eq, value = part.partition("=")
            if eq:
                named[key.strip()] = _value(value)
            elif named:
                raise ConfigError(f"masker {item!r}: a positional value after a named one")
            else:
                args.append(_value(part))
        return make_masker(name, args, named)
    if isinstance(item, dict) and "name" in item:
        return make_masker(item["name"], (), {k: v for k, v in item.items() if k != "name"})
    if isinstance(item, dict) and len(item) == 1:
        (name, value), = item.items()
        if isinstance(value, dict):
            return make_masker(name, (), value)
        return make_masker(name, value if isinstance(value, (list, tuple)) else (() if value is None else (value,)))
    raise ConfigError(f"a masker is 'name:value', {{name: value}} or {{name: NAME, param: value}}, got {item!r}")


SUMS = ("kept", "visible", "error_sq", "dense_sq")  # what the meter adds up per layer (and per batch row)


def attention_figures(sums: dict) -> dict:
    """density and attention error per layer and their means over layers, from {layer: [kept entries, visible
    causal entries, sum ||o_dense - o||^2, sum ||o_dense||^2]} over the metered queries (a query whose own slot
    is padding is not metered; a dense-fallback row counts as full):
    density = kept / visible, attention_error = ||o_dense - o||_F / ||o_dense||_F."""
    layers = sorted(sums, key=int)
    density = [sums[i][0] / sums[i][1] if sums[i][1] else None for i in layers]
    error = [(sums[i][2] / sums[i][3]) ** 0.5 if sums[i][3] else None for i in layers]

    def mean(values):
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    return {"density": mean(density), "attention_error": mean(error), "layers": [int(i) for i in layers],
            "density_per_layer": density, "attention_error_per_layer": error}


def add_sums(total: dict, more: dict) -> dict:
    """`more`'s per-layer sums added into `total` (both {layer: [4 floats]}); returns `total`."""
    for layer, values in more.items():
        into = total.setdefault(int(layer), [0.0] * len(SUMS))
        for j, value in enumerate(values):
            into[j] += float(value)
    return total


STACK_OPTIONS = ("dense_layers", "seed")


def _stack_option(item):
    """(option, values) for an item naming a stack option ('dense_layers:0:16', {dense_layers: [0, 16]}), else
    (None, None)."""
    if isinstance(item, str) and item.split(":")[0].strip() in STACK_OPTIONS:
        name, *values = [part.strip() for part in item.split(":")]
        return name, [_value(v) for v in values]
    if isinstance(item, dict) and len(item) == 1 and next(iter(item)) in STACK_OPTIONS:
        (name, value), = item.items()
        return name, list(value) if isinstance(value, (list, tuple)) else [value]
    return None, None


def _one(name: str, values: list):
    if len(values) != 1 or not isinstance(values[0], int):
        raise ConfigError(f"the stack option {name} takes one integer, got {values}")
    return values[0]


@dataclass
class MaskerStack:
    maskers: list
    seed: int = 0
    dense_layers: tuple = ()  # layers left dense (MagicPIG's and Quest's authors keep the first ones dense)
    prefill_sparse: bool = False  # the context's queries sparse too (perplexity always is)
    meters: dict = field(default_factory=dict, repr=False)  # {layer: sums} over everything absorbed
    pending: dict = field(default_factory=dict, repr=False)  # {layer: (4, B) sums per batch row} since `drain`
    metering: bool = field(default=True, repr=False, compare=False)  # False: a step the meter skips (meter_every)

    def __post_init__(self):
        if not self.maskers:
            raise ConfigError("an attention sparsity stack needs at least one masker")
        sampling = [m.name for m in self.maskers if m.sampling]
        if len(sampling) > 1:
            raise ConfigError(f"at most one sampling masker per stack, got {', '.join(sampling)}")
        if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in self.dense_layers):
            raise ConfigError(f"dense_layers are layer indices (integers >= 0), got {list(self.dense_layers)}")
        self.dense_layers = tuple(self.dense_layers)

    @classmethod
    def parse(cls, spec: Union[str, list, "MaskerStack"], **options) -> "MaskerStack":
        if isinstance(spec, MaskerStack):
            return spec
        if isinstance(spec, str):
            items = [part for part in re.split(r"\s*,\s*", spec.strip()) if part]
        elif isinstance(spec, (list, tuple)):
            items = list(spec)
        else:
            raise ConfigError(f"--attention_sparsity takes 'name:value,...' or a list of maskers, got {spec!r}")
        maskers = []
        for item in items:  # the stack's own options may stand among the maskers: dense_layers:0:16, seed:7
            name, values = _stack_option(item)
            if name is None:
                maskers.append(_item(item))
            else:
                options[name] = values if name == "dense_layers" else _one(name, values)
        return cls(maskers, **options)

    @property
    def name(self) -> str:
        """'sink:128+local:128+oracle_topk:0.05': each masker with the parameters that differ from its defaults
        after the first (magic_pig:8:lsh_l=150), then the stack's own options when set (dense_layers:0:16)."""
        parts = []
        for m in self.maskers:
            first, *rest = fields(m) or [None]
            text = m.name + (f":{getattr(m, first.name)}" if first is not None else "")
            text += "".join(f":{f.name}={getattr(m, f.name)}" for f in rest if getattr(m, f.name) != f.default)
            parts.append(text)
        if self.dense_layers:
            parts.append("dense_layers:" + ":".join(map(str, self.dense_layers)))
        if self.seed:
            parts.append(f"seed:{self.seed}")
        return "+".join(parts)

    @property
    def slug(self) -> str:
        """The name as a file name: 'sink128-local128-oracle_topk0.05'."""
        return self.name.replace(":", "").replace("+", "-").replace("=", "")

    def describe(self) -> dict:
        return {"mechanism": "masking", "slug": self.slug, "maskers": [m.describe() for m in self.maskers], "seed": self.seed,
                "dense_layers": list(self.dense_layers), "prefill_sparse": self.prefill_sparse}

    def applies(self, layer_idx: int) -> bool:
        return layer_idx not in self.dense_layers

    # ---- one attention call --------------------------------------------------------------
    @torch.no_grad()
    def attend(self, layer_idx: int, query, key, value, attention_mask, scaling, softcap,
               dense: torch.Tensor) -> torch.Tensor:
        """The masked output (B, q, Hq, D) of one call, `dense` (the model's own output, same layout) in the rows
        the mask leaves dense; the layer's meter is updated."""
        from lightning_bench.sparsity.capture import CHUNK_ELEMENTS, _hidden_keys

        B, Hq, q, D = query.shape
        Hkv, S = key.shape[1], key.shape[2]
        G = Hq // Hkv
        scale = D ** -0.5 if scaling is None else scaling
        queries = query.float().reshape(B, Hkv, G, q, D)
        keys, values = key.float(), value.float()
        hidden = _hidden_keys(attention_mask, B, Hkv, G, S, query.device)
        valid = torch.ones(B, S, dtype=torch.bool, device=query.device) if hidden is None \
            else ~hidden.reshape(B, -1, S)[:, 0]
        rank = (valid.long().cumsum(-1) - 1).masked_fill(~valid, -1)
        key_rank = rank.view(B, 1, 1, 1, S)
        out = dense.clone()
        sums = self.pending.setdefault(layer_idx, torch.zeros(len(SUMS), B, dtype=torch.float64))
        if sums.shape[1] != B:
            raise RuntimeError(f"layer {layer_idx}: {sums.shape[1]} rows metered since the last drain, this call has "
                               f"{B}; drain (or absorb) the stack after every forward")
        step = max(1, CHUNK_ELEMENTS // max(1, B * Hq * S))
        for lo in range(0, q, step):
            hi = min(q, lo + step)
            c, end = hi - lo, S - q + hi
            chunk = queries[:, :, :, lo:hi]
            scores = torch.matmul(chunk.reshape(B, Hkv, G * c, D) * scale,
                                  keys[:, :, :end].transpose(-1, -2)).view(B, Hkv, G, c, end)
            if softcap is not None:
                scores = torch.tanh(scores / softcap) * softcap
            causal = torch.ones(c, end, dtype=torch.bool, device=scores.device).tril_(end - c)
            visible = causal & valid[:, None, None, None, :end]
            scores = scores.masked_fill(~visible, float("-inf"))
            query_rank = rank[:, S - q + lo:S - q + hi].view(B, 1, 1, c, 1)
            ctx = MaskContext(scores, visible, key_rank[..., :end], query_rank, chunk, keys[:, :, :end],
                              torch.zeros_like(scores), layer_idx, self.seed)
            for masker in self.maskers:
                ctx.mask = (ctx.mask + masker.entries(ctx)).clamp_(0.0, 1.0)
            mask = ctx.mask.masked_fill_(~visible, 0.0)
            kept = mask > 0
            dense_rows = ~kept.any(-1) | ((mask == 1) | ~visible).all(-1)  # (B, Hkv, G, c)
            # the largest KEPT score: the max over every visible key could leave every kept weight underflowed to 0
            top = scores.masked_fill(~kept, float("-inf")).amax(-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
            weights = torch.where(kept, torch.exp(scores - top) / mask.clamp(min=1e-30), 0.0)
            sparse = torch.matmul(weights.view(B, Hkv, G * c, end), values[:, :, :end]).view(B, Hkv, G, c, D)
            sparse = sparse / weights.sum(-1, keepdim=True).clamp(min=1e-30)
            reference = dense[:, lo:hi].float().transpose(1, 2).reshape(B, Hkv, G, c, D)
            sparse = torch.where(dense_rows[..., None], reference, sparse)
            out[:, lo:hi] = sparse.reshape(B, Hq, c, D).transpose(1, 2).to(out.dtype)
            if not self.metering:
                continue
            metered = (query_rank >= 0).view(B, 1, 1, c).double()
            n_visible = visible.sum(-1).expand(B, Hkv, G, c).double()
            n_kept = torch.where(dense_rows, n_visible, kept.sum(-1).double())
            per_row = torch.stack([n_kept, n_visible, ((sparse - reference) ** 2).sum(-1).double(),
                                   (reference ** 2).sum(-1).double()])  # (4, B, Hkv, G, c)
            sums += (per_row * metered).sum((2, 3, 4)).cpu()
        return out

    # ---- what a record holds ----------------------------------------------------------------
    def drain(self) -> dict:
        """{layer: (4, B) sums per batch row} of the calls since the last drain (the caller knows which row is
        which: an engine's rows change as they finish), cleared."""
        pending, self.pending = self.pending, {}
        return pending

    def absorb(self, pending: Optional[dict] = None, row: Optional[int] = None) -> dict:
        """Add drained sums (default: drain now) into the stack's own meter, every row or one; returns them as
        {layer: [4 floats]}."""
        pending = self.drain() if pending is None else pending
        sums = {layer: (t.sum(1) if row is None else t[:, row]).tolist() for layer, t in pending.items()}
        add_sums(self.meters, sums)
        return sums

    def reset(self) -> None:
        self.meters, self.pending = {}, {}

    def figures(self) -> dict:
        """attention_figures of everything metered (what is pending absorbed first)."""
        if self.pending:
            self.absorb()
        return attention_figures(self.meters)


def check_named_stacks(stacks: dict, methods) -> dict:
    """A grid's `attention_sparsity` ({name: stack}): every stack parses, under a name a cell file can hold that no
    eviction method has; {name: MaskerStack}."""
    from lightning_bench.sparsity.methods import METHODS

    out = {}
    for name, spec in stacks.items():
        if not re.fullmatch(r"[a-z0-9_]+", str(name)) or name in METHODS or name in methods:
            raise ConfigError(f"--attention_sparsity name {name!r}: use lowercase letters, digits and _, and not the "
                              "name of a method")
        out[name] = MaskerStack.parse(spec)
    return out

