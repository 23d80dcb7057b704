"""Study behind docs/performance.md, "Qwen2.5 on 2 cores" (hidden states against plain
transformers; numbers of commit 8d82e58).

A finished run's hidden states against a plain transformers forward of the same weights.

The first --sentences validation sentences of a model and corpus, as extract_hidden stored them
(results/hidden/MODEL/CORPUS/validation), beside the states transformers computes from the
source itself (a GGUF file: the joined one of a "parts:" source, or a folder), one unpadded
sentence at a time with output_hidden_states; the last layer's state before the final norm (what
jtc stores), from a hook on the norm's input. Prints, per layer, the largest relative error
||jtc - transformers|| / ||transformers|| over the sentences, and whether all are <= --tolerance.

    .venv/bin/python studies/hidden_fidelity.py --dir /tmp/qwen --configfile config/qwen2.5.yaml
        --model qwen-1_5b [--corpus news] [--sentences 16] [--tolerance 1e-4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from jtc import paths
from jtc.data.extract import prepare_inputs
from jtc.data.states import read_states
from jtc.files.io import read_json, read_table
from jtc.model.cache import available_memory
from jtc.model.discover import find_adapter
from jtc.model.joined import Parts, is_parts
from jtc.model.sources import candidates


def reference_model(spec: dict, root: Path):
    """The model as transformers loads it from the source itself (no jtc cache)."""
    if is_parts(spec):
        joined = root / paths.JOINED / Parts.of(spec).joined.name
        folder, kwargs = joined.parent, {"gguf_file": joined.name}
    else:
        found, _ = candidates(spec)
        folder = Path(found[0].location)
        kwargs = {"gguf_file": found[0].gguf_file} if found[0].gguf_file else {}
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    return model.eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--configfile", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--corpus", default="news")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    config = yaml.safe_load(args.configfile.read_text())
    model_dir = paths.under(args.dir / "results", paths.MODEL, model=args.model)
    states = paths.under(
        args.dir / "results", paths.HIDDEN, model=args.model, corpus=args.corpus, split="validation"
    )
    info = read_json(model_dir / "info.json")
    layers = info["num_layers"]
    print(f"{args.model}: {info['parameters'] / 1e9:.2f}B parameters, {layers} layers")
    print(f"memory available: {(available_memory() or 0) / 1e9:.1f} GB")

    ids, _ = read_states(states, 0)
    ids = ids[: args.sentences]
    corpus = read_table(paths.under(args.dir / "results", paths.CORPUS, corpus=args.corpus))
    text_of = dict(zip(corpus["sentence_id"].to_pylist(), corpus["text"].to_pylist(), strict=True))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prepared = prepare_inputs(
        tokenizer,
        [text_of[int(i)] for i in ids],
        ids,
        "causal",
        config.get("seed", 0),
        config.get("max_tokens", 64),
        None,
    )
    assert np.array_equal(prepared.sentence_ids, ids), "the sentences are not those extracted"

    start = time.perf_counter()
    model = reference_model(config["models"][args.model], args.dir)
    print(f"transformers loaded the source in {time.perf_counter() - start:.0f} s")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    norm = find_adapter(model, "causal").final_norm(model)
    captured: list[torch.Tensor] = []
    norm.register_forward_pre_hook(lambda _module, inputs: captured.append(inputs[0]))
    worst = np.zeros(layers + 1)
    stored = [read_states(states, layer)[1][: len(ids)] for layer in range(layers + 1)]
    with torch.no_grad():
        for row, (inputs, position) in enumerate(
            zip(prepared.inputs, prepared.positions, strict=True)
        ):
            captured.clear()
            tokens = torch.from_numpy(np.asarray(inputs)[None])
            out = model(input_ids=tokens, output_hidden_states=True)
            reference = [h[0, position].double().numpy() for h in out.hidden_states[:layers]]
            reference.append(captured[-1][0, position].double().numpy())
            for layer in range(layers + 1):
                error = np.linalg.norm(stored[layer][row] - reference[layer])
                worst[layer] = max(worst[layer], error / np.linalg.norm(reference[layer]))
    for layer in range(layers + 1):
        print(f"layer {layer:2d}: largest relative error {worst[layer]:.2e}")
    ok = bool(worst.max() <= args.tolerance)
    print(f"{len(ids)} sentences, every layer <= {args.tolerance:g}: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
