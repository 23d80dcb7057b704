"""GPU paths: run only where CUDA is visible (marked cuda; skipped elsewhere, e.g. in CI)."""

import numpy as np
import pytest
import torch
from tiny import make_model

from jtc.adapters import get_adapter
from jtc.decode import Head, final_reference, score

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])  # a head without a bias, and GPT-2's
def test_scores_on_the_gpu_equal_the_cpu(kind):
    """Decoding and scoring with the model on the GPU give the CPU's numbers (a Llama head has
    no bias: its expected bias must be made on the head's device)."""
    model, tokenizer = make_model(kind, layers=2, width=32)
    adapter = get_adapter(model.config.model_type)
    rng = np.random.default_rng(0)
    final = rng.normal(size=(40, 32)).astype(np.float32)
    early = (final + rng.normal(size=final.shape)).astype(np.float32)
    gold = rng.integers(0, len(tokenizer), size=40)

    def scores():
        head = Head.from_model(model, adapter)
        return score(head, final_reference(head, final, 5), early, gold)

    on_cpu = scores()
    model.cuda()
    on_gpu = scores()
    assert next(model.parameters()).is_cuda
    for name, values in on_cpu.items():
        np.testing.assert_allclose(on_gpu[name], values, rtol=1e-4, atol=1e-5, err_msg=name)
