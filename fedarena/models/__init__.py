"""Model zoo and the flat-parameter functional view used by the simulation."""

from fedarena.models.functional import FlatModel, build_model
from fedarena.models.zoo import MODELS

__all__ = ["FlatModel", "MODELS", "build_model"]
