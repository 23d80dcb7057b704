"""What is wrong with the measures' settings (config pruning.context, pruning.generation), for
a model of a known number of positions: torch-free, so that planning refuses it before a job
runs (jtc.pipeline.planning) and the jobs themselves refuse it too."""

from __future__ import annotations

from collections.abc import Sequence

# the logits a measures job holds at once (context windows are batched to stay below; the
# jobs' memory requests count it, jtc.pipeline.resources)
LOGITS_ELEMENTS = 1 << 26


def context_problem(
    contexts: Sequence[int], windows: int, max_positions: int | None, model: str
) -> str | None:
    """What is wrong with the context settings for `model` of `max_positions` positions (None:
    unknown), or None."""
    if windows < 1:
        return f"pruning.context.windows is {windows}: it must be at least 1"
    for context in contexts:
        if context < 2:
            return f"pruning.context.lengths has {context}: a window needs at least 2 tokens"
    if not usable_contexts(contexts, max_positions):
        return (
            f"pruning.context.lengths {list(contexts)}: every length is more than model "
            f"'{model}' takes ({max_positions} positions): add one of at most {max_positions}"
        )
    return None


def usable_contexts(contexts: Sequence[int], max_positions: int | None) -> list[int]:
    """The context lengths a model of `max_positions` positions (None: unknown) can score: a
    single list serves every pruned model, so a length beyond one model's positions (2,048 on
    GPT-2's 1,024) is left out for that model alone (context_perplexity logs it)."""
    return [c for c in contexts if max_positions is None or c <= max_positions]


def generation_problem(prompts: int, new_tokens: int) -> str | None:
    """What is wrong with the generation settings, or None."""
    if prompts < 1:
        return f"pruning.generation.prompts is {prompts}: it must be at least 1"
    if new_tokens < 1:
        return f"pruning.generation.new_tokens is {new_tokens}: it must be at least 1"
    return None
