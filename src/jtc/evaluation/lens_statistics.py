"""What the lens of jtc.api reads at every layer and position: the columns of its predictions
and trajectories tables, and the statistic its figure colours (top-1 probability, entropy, KL
against the model's own prediction, rank of the model's own top-1 token)."""

from __future__ import annotations

import pyarrow as pa

LENS_COLUMNS = {
    "method": pa.string(),
    "layer": pa.int32(),
    "position": pa.int32(),
    "input_token": pa.string(),
    "rank": pa.int32(),
    "token_id": pa.int64(),
    "token": pa.string(),
    "probability": pa.float64(),
}


# what the lens figure colours: per method, layer and position, of the distribution D(mapped
# state) against the model's own D(h_L) at the same position
LENS_STATS = {
    "prob": "top-1 probability",
    "entropy": "entropy (nats)",
    "kl": "KL(final ‖ lens) (nats)",
    "rank": "rank of the model's own top-1 token",
}
TRAJECTORY_COLUMNS = {
    "method": pa.string(),
    "layer": pa.int32(),
    "position": pa.int32(),
    "input_token": pa.string(),
    "token": pa.string(),  # the top-1 token read at that layer
    "value": pa.float64(),  # the statistic
}


def lens_statistic(stat: str, log_probs, final_log_probs):
    """LENS_STATS' `stat` per row of log-probabilities (n, V) against the model's own (n, V)."""
    if stat == "prob":
        return log_probs.max(1).values.exp()
    if stat == "entropy":
        return -(log_probs.exp() * log_probs).sum(1)
    if stat == "kl":
        return (final_log_probs.exp() * (final_log_probs - log_probs)).sum(1).clamp(min=0)
    own = final_log_probs.argmax(1, keepdim=True)
    return 1 + (log_probs > log_probs.gather(1, own)).sum(1)
