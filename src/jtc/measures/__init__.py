"""Pruned models measured as the literature measures them: accuracy on standard tasks through
lm-evaluation-harness, perplexity of contiguous text at a real context, and the fidelity of
greedy generation, for the full model and each pruned model (jtc.measures.subjects)."""
