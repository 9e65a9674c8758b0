"""What every config section shares: unknown keys refused, floats finite, seeds in numpy's range."""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Seed", "Strict"]


class Strict(BaseModel):
    """Unknown keys are refused and every float must be finite (NaN and ±inf are refused)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# a seed: numpy's range (np.random.seed takes 0 .. 2**32 - 1; default_rng refuses a negative one)
Seed = Annotated[int, Field(ge=0, lt=2**32)]
