"""The fixture the prediction and early-exit tests share."""

import numpy as np
import pyarrow as pa
import pytest
from decoding import LAYERS
from tiny import SENTENCES, save_model

from jtc.files.io import write_table
from jtc.model.cache import cache_model
from jtc.shortcuts.maps import save_maps
from jtc.stages.hidden import extract_hidden


@pytest.fixture(scope="module", params=["gpt2", "bert-mlm"])
def validation(request, tmp_path_factory):
    """A cached tiny model, its validation states, and identity and random maps into layer L."""
    kind = request.param
    work = tmp_path_factory.mktemp(kind)
    cache_model(kind, {"source": str(save_model(kind, work / "src", layers=LAYERS))}, work / "m")
    texts = SENTENCES * 3
    sentences = pa.table(
        {
            "sentence_id": np.arange(len(texts)),
            "text": texts,
            "split": ["validation"] * len(texts),
            "order": np.arange(len(texts)),
        }
    )
    write_table(sentences, work / "sentences.parquet")
    extract_hidden(
        str(work / "m"),
        str(work / "sentences.parquet"),
        str(work / "val"),
        model=kind,
        corpus="c",
        split="validation",
        n=len(texts),
        seed=0,
        batch_size=5,
        max_tokens=32,
        dtype="float32",
        threads=1,
    )
    rng = np.random.default_rng(0)
    identity, noisy = str(work / "identity.safetensors"), str(work / "noisy.safetensors")
    save_maps(identity, {s: {LAYERS: np.eye(32)} for s in range(LAYERS)}, {"method": "mat"})
    noise = {s: {LAYERS: np.eye(32) + rng.normal(size=(32, 32))} for s in range(LAYERS)}
    save_maps(noisy, noise, {"method": "mat"})
    return kind, work, identity, noisy
