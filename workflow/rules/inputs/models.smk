# The input and params functions of the rules in models.smk, which includes this file at its
# top. Those that several families share are in shared.smk.
from jtc.pipeline.fingerprint import model_fingerprint


def cached_spec(wildcards):
    """What the model cache is made from: a model's entry without device_map (where the
    model runs, not what is cached: the jobs that run the model get it as a param), and
    without cache when it is the default, copy (the params of the caches made before the key
    existed, so these are not made again)."""
    spec = config["models"][wildcards.model]
    return {
        key: value
        for key, value in spec.items()
        if key != "device_map" and (key, value) != ("cache", "copy")
    }


def model_content(wildcards):
    """The content fingerprint of a local or packaged model folder or GGUF file (None for a
    hub id): weights replaced with an older time stamp still rerun resolve_model."""
    return model_fingerprint(config["models"][wildcards.model])
