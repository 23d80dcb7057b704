"""Stage of workflow/rules/hidden.smk: the hidden states h_0..h_L of a split."""

from __future__ import annotations


def extract_hidden(
    model_dir: str,
    sentences: str,
    out: str,
    *,
    model: str,
    corpus: str,
    split: str,
    threads: int,
    device_map: str | None = None,
    **sampling: int | str,
) -> None:
    """The states h_0..h_L at one drawn position per sentence of a split (`sampling`: n, seed,
    batch_size, max_tokens, dtype; see jtc.data.extract.record_states), one Parquet file per
    layer, with positions.parquet and info.json."""
    from jtc.data.extract import record_states

    record_states(
        model_dir,
        sentences,
        out,
        meta={"model": model, "corpus": corpus, "split": split},
        threads=threads,
        parts=False,
        device_map=device_map,
        **sampling,
    )
