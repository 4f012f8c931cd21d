"""FL methods (registered by name) and, in ``aggregators``, the server-side rules."""

from fedarena.methods import basic, ditto, fair, fedprox, fedtilt, finetune, personalized  # noqa: F401  (register the methods)
from fedarena.methods.base import METHODS, Method, StepContext, build_method

__all__ = ["METHODS", "Method", "StepContext", "build_method"]
