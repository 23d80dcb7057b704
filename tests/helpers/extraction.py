"""Hidden-state extraction of the tiny sentences on a tiny model, and the inputs it prepared."""

import numpy as np
import pyarrow as pa
from tiny import SENTENCES, make_model

from jtc.data.extract import extract, prepare_inputs
from jtc.model.cache import model_info


def sentences_table(texts):
    return pa.table({"sentence_id": np.arange(len(texts)) * 7 + 3, "text": texts})


def run_extract(kind, tmp_path, batch_size=3, seed=0):
    model, tokenizer = make_model(kind)
    info = model_info(kind, model, tokenizer, "test")
    out = tmp_path / f"{kind}-{batch_size}"
    out.mkdir()
    summary = extract(
        model,
        tokenizer,
        info,
        sentences_table(SENTENCES),
        out,
        seed=seed,
        batch_size=batch_size,
        max_tokens=64,
        dtype="float32",
    )
    return model, tokenizer, info, out, summary


def prepare_tiny(tokenizer, task):
    """The model inputs run_extract used (same ids, seed and length limit)."""
    ids = sentences_table(SENTENCES).column("sentence_id").to_numpy()
    return prepare_inputs(tokenizer, SENTENCES, ids, task, 0, 64, tokenizer.mask_token_id)
