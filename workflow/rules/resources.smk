# What each job asks of the machine (jtc.pipeline.resources): memory and run time, for a
# cluster's scheduler, and its share of the local GPU's memory; and that GPU, probed once.
from jtc.pipeline.gpus import local_gpu
from jtc.pipeline.job_shape import stage_shape, trained_epochs
from jtc.pipeline.resources import gpu_memory_percent, memory_mb, runtime_minutes


def _stage_shape(stage, wildcards, split):
    """The job's model shape and sentences (jtc.pipeline.job_shape.stage_shape); a job with a
    split wildcard reads that split, a train_map job its method's rows."""
    return stage_shape(
        stage,
        config,
        wildcards.model,
        getattr(wildcards, "split", split),
        getattr(wildcards, "method", None),
    )


def _epochs(wildcards):
    """Epochs of a train_map job's method; 1 for a job that trains none."""
    method = getattr(wildcards, "method", None)
    return trained_epochs(config, [method] if method else [])


def mem_mb(stage, split="train"):
    """A job's memory request: grows with the model, the sentences and the attempt."""
    return lambda wildcards, attempt: memory_mb(
        stage, _stage_shape(stage, wildcards, split), attempt
    )


def runtime(stage, split="train"):
    """A job's wall-time request (minutes), likewise."""
    return lambda wildcards, attempt: runtime_minutes(
        stage, _stage_shape(stage, wildcards, split), attempt, _epochs(wildcards)
    )


_LOCAL_GPU = {}


def _local_gpu():
    """The GPU this machine's jobs run on (nvidia-smi, asked once per run), or None: no GPU,
    or jobs that run elsewhere (a cluster's nodes each have their own). Asked only once the
    executor is known, i.e. while the jobs are planned and run, never while this file is read.
    """
    if workflow.executor_plugin is None or not workflow.local_exec:
        return None
    if "gpu" not in _LOCAL_GPU:
        _LOCAL_GPU["gpu"] = local_gpu()
    return _LOCAL_GPU["gpu"]


def _local_gpu_mb():
    gpu = _local_gpu()
    return gpu.memory_mb if gpu else None


def gpu_share(stage, split="train"):
    """A GPU job's share (percent) of the local GPU's memory, the `gpu_memory_percent` resource:
    jobs run side by side on one GPU only while their shares add up to at most the limit that
    workflow/profiles/default sets (100). 0 without a GPU."""
    return lambda wildcards, attempt: gpu_memory_percent(
        stage, _stage_shape(stage, wildcards, split), _local_gpu_mb(), attempt
    )
