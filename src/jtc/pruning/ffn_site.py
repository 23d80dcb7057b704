"""Where ReplaceMe reads a block's feed-forward output X and folds its transform: the block's
feed-forward module, whose output the block adds to the stream it returns, h_i = r_i + X. From
the adapter alone (plain Python), so that the workflow refuses what cannot be folded while it
plans (jtc.pruning.spans.pruning_problem), and the calibration hooks (jtc.pruning.sums), the
export's reference (jtc.pruning.export_check) and the fold (jtc.pruning.mlp_fold) read the same
module.

- pre-norm blocks with separable parts (GPT-2, Llama, Mistral, Qwen, Phi-3, OLMo, the MoE blocks
  of Mixtral, Qwen2/3-MoE, OLMoE): the `ffn` part;
- parallel blocks, h_i = h_{i-1} + attn(ln(h_{i-1})) + mlp(ln'(h_{i-1})) (GPT-NeoX, GPT-J,
  Falcon, Phi, Cohere): the adapter's `parallel_ffn`, found and checked when the model was
  cached (jtc.model.discover); they have no parts, so no sub-module shortcuts.

Refused by name: post-norm blocks (a norm after each residual add), a norm after the MLP before
its residual add (Gemma 2/3's post_feedforward_layernorm), and blocks where neither was found
(BLOOM and MPT add the residual inside their MLP module, OPT has none).
"""

from __future__ import annotations

from jtc.model.adapters import Adapter, UnsupportedArchitecture


def feed_forward_output(adapter: Adapter) -> str:
    """The dotted path from a block to the module whose output is its feed-forward output X
    (the `ffn` part's output module, or `parallel_ffn`); UnsupportedArchitecture where the
    adapter names none."""
    if adapter.parts:
        return adapter.part("ffn").output
    if adapter.parallel_ffn:
        return adapter.parallel_ffn
    raise UnsupportedArchitecture(
        f"architecture '{adapter.name}': no feed-forward module was found whose output X its "
        "blocks add to the residual stream (h = r + X): its blocks are neither pre-norm "
        "attention then MLP, each with its own residual add, nor attention and MLP in parallel "
        "(GPT-NeoX, GPT-J, Falcon, Phi, Cohere); BLOOM and MPT add the residual inside their "
        "MLP, OPT has no MLP module (a model cached by an older jtc: delete its results/models "
        "folder to cache it again)"
    )


def replaceme_ffn(adapter: Adapter) -> str:
    """The dotted path from a block to the feed-forward module ReplaceMe reads X from and folds
    its transform into; UnsupportedArchitecture saying why there is none that folds."""
    path = feed_forward_output(adapter)
    if not adapter.parts:
        return path
    part = adapter.part("ffn")
    if adapter.parts[0].name == "attn":
        raise UnsupportedArchitecture(
            f"architecture '{adapter.name}' has post-norm blocks (a norm after each residual "
            "add), so a block's output is not r + X with X its MLP output: ReplaceMe's "
            "transform cannot be folded into the MLP"
        )
    if part.output != part.input_path:
        raise UnsupportedArchitecture(
            f"architecture '{adapter.name}' has a norm after its MLP ({part.output}, before the "
            "residual add), so the transform cannot be folded into the MLP's final linear layer"
        )
    return part.input_path
