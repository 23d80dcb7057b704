"""Stage of workflow/rules/hidden.smk: the hidden states h_0..h_L of a split; and `record_split`,
which it shares with record_parts (workflow/rules/submodules.smk, the states of every block
part): the two rules differ only in what is recorded at the drawn positions."""

from __future__ import annotations


def extract_hidden(model_dir: str, sentences: str, out: str, **options) -> None:
    """The states h_0..h_L at the drawn positions of each sentence of a split, one Parquet file per
    layer, with positions.parquet and info.json (`options`: those of record_split)."""
    record_split(model_dir, sentences, out, parts=False, **options)


def record_split(
    model_dir: str,
    sentences: str,
    out: str,
    *,
    model: str,
    corpus: str,
    split: str,
    parts: bool,
    n: int,
    positions: int | str = 1,
    seed: int,
    batch_size: int,
    max_tokens: int,
    dtype: str,
    threads: int,
    device_map: str | None = None,
) -> None:
    """Run the cached model over the first `n` sentences of `split` of a sentence table and
    write the states at `positions` drawn positions per sentence (an integer or "all";
    jtc.data.extract.extract: every layer's, or with `parts` the input and output of every
    block part) into the folder `out`, written whole or not at all. `seed`, `batch_size`,
    `max_tokens` and `dtype` are the workflow's sampling settings; `device_map` is
    models.NAME.device_map."""
    from jtc.data.corpus import select_split
    from jtc.data.extract import extract
    from jtc.files.io import atomic_dir, read_table
    from jtc.logs import ready
    from jtc.model.cache import load_model

    net, tokenizer, info = load_model(model_dir, threads, device_map)
    ready()  # the job's fixed cost (imports, the model) ends here
    table = select_split(read_table(sentences), split, n, corpus)
    with atomic_dir(out) as tmp:
        extract(
            net,
            tokenizer,
            info,
            table,
            tmp,
            seed=seed,
            batch_size=batch_size,
            max_tokens=max_tokens,
            dtype=dtype,
            meta={"model": model, "corpus": corpus, "split": split},
            parts=parts,
            positions=positions,
        )
