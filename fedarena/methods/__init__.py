"""FL methods (registered by name) and, in ``aggregators``, the server-side rules.

Importing this package imports every module in it, which registers every method (``@method``)."""

from fedarena.methods.base import METHODS, Method, StepContext, build_method
from fedarena.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["METHODS", "Method", "StepContext", "build_method"]
