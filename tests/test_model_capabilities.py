"""What a model declares lives in models/ (capabilities.py, scan_flops.py, token_nll.py) and the packages above
re-export it; what needs a package above the model (bitsandbytes' AdamW8bit, a low-bit loader) is passed in."""

from types import SimpleNamespace

import torch

from lightning_bench.models import HFLanguageModel, capabilities, scan_flops, token_nll
from tests.helpers import tiny_model


def test_the_packages_above_re_export_the_models_declarations():
    from lightning_bench import profiling, quantization
    from lightning_bench.data import windows as data_windows
    from lightning_bench.quantization import precision

    assert profiling.AnalyticFlops is capabilities.AnalyticFlops
    assert profiling.bk_scan_forward_flops is scan_flops.bk_scan_forward_flops
    assert profiling.mamba_scan_forward_flops is scan_flops.mamba_scan_forward_flops
    assert profiling.mamba_mixer_forward_flops is scan_flops.mamba_mixer_forward_flops
    assert quantization.QuantizableLayers is capabilities.QuantizableLayers
    assert quantization.ActivationRange is capabilities.ActivationRange
    assert precision.bf16_support is capabilities.bf16_support
    assert data_windows.IGNORE_INDEX == token_nll.IGNORE_INDEX == -100


def test_the_8bit_optimizer_is_the_one_passed_in():
    model = tiny_model(50)
    model.trainer = SimpleNamespace(estimated_stepping_batches=10)  # all the optimizer reads from it
    made = []

    def adamw(groups, **kwargs):
        made.append(kwargs)
        return torch.optim.AdamW(groups, **kwargs)

    model.use_8bit_optimizer(optimizer=adamw)
    assert model.configure_optimizers()["optimizer"].defaults["lr"] == model.hparams.learning_rate
    assert made and made[0]["lr"] == model.hparams.learning_rate
    model.use_8bit_optimizer(False)
    assert isinstance(model.configure_optimizers()["optimizer"], torch.optim.AdamW) and len(made) == 1


def test_a_pretrained_model_loads_low_bit_with_the_loader_passed_in(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    module = HFLanguageModel(str(tmp_path))
    calls = []

    def loader(name, bits, **kwargs):
        calls.append((name, bits, kwargs))
        return LlamaForCausalLM(config), "report"

    assert module.load_quantized(8, 100, loader=loader, method="export") == "report"
    (name, bits, kwargs), = calls
    assert (name, bits, kwargs["method"]) == (str(tmp_path), 8, "export")
    assert kwargs["describe_layers"](module.net).keep_fp32 == {}  # the family's QuantizableLayers (none for Llama)
    assert module.net is not None
