"""Registers the papers' downloaded datasets (importing a module registers its builders and sources).

fmnist, fmnist_fedtilt, mnist, cifar10 (torchvision files), femnist, femnist_skewed, celeba (LEAF
JSON), vehicle (MOCHA's .mat) and stackoverflow (registered, not supported yet). The data directory
and the partition cache are described in storage.py and cache.py; fetch.py serves the CLI.
"""

from fedarena.datasets import celeba, femnist, stackoverflow, vehicle, vision  # noqa: F401
