"""How the devices of a deployment behave: failures, availability, stragglers, asynchronous aggregation
(``base``: the ``system`` config section; ``synchronous``: what a round of the lab's loop does with them;
``asynchronous``: FedBuff's loop)."""

from fedarena.system.base import SYSTEMS, SystemSpec, system_from

__all__ = ["SYSTEMS", "SystemSpec", "system_from"]
