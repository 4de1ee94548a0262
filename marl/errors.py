"""The run's own failures, raised in one role and reported by another (so no role imports another's main)."""


class NonFiniteError(FloatingPointError):
    """The loss or the gradients became NaN or Inf; raised before the optimizer step that would use them."""


class AllActorsLost(RuntimeError):
    """Every actor failed: the run cannot go on."""
