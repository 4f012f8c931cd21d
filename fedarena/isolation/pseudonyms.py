"""What an isolated rule may know of who sent which row and of the round's randomness: pseudonyms under a key.

The malicious devices are drawn from the trial's seed by fedarena's own (public) code, and the battery's seeds
are public, so a rule handed the devices' ids and the round's seed could redraw who is malicious. An isolated
rule gets neither:

- **ids**: each device's pseudonym is its place in a permutation of the population drawn from the trial's key
  (stable within a trial, so per-device state works; unrelated across trials), and the rows come sorted by
  pseudonym, not by id;
- **order**: the rows' draw order is the pseudonyms' order (``arange``): the true draw order is a function of the
  seed, and with it a rule could match rows to the seed's draws;
- **seed**: the round's seed passed through the key (HMAC-SHA256), so the rule's random stream is as reproducible
  as the key, and unrelated to the trial's seed.

The trial's key is HMAC-SHA256(builder's secret, the trial's config but its rule): a resumed trial and a rerun on
the same builder get the same pseudonyms and streams (reproducibility), and two rules of one trial see their rows in
the same order (their numbers compare to the last bit); the secret never enters the sandbox.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ENV_KEY = "FEDARENA_ISOLATION_KEY"  # hex; the site builder sets it per work folder
KEY_FILE = Path.home() / ".fedarena" / "isolation.key"  # else this user's own, made once


def builder_secret() -> bytes:
    """The secret the trials' keys are derived from: ``FEDARENA_ISOLATION_KEY`` (hex), or this user's key file
    (made on first use, readable by the user alone)."""
    text = os.environ.get(ENV_KEY, "").strip()
    if text:
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"{ENV_KEY} is not hexadecimal") from None
    if not KEY_FILE.exists():
        KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
        fresh = KEY_FILE.with_suffix(f".{os.getpid()}")
        descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_hex(32))
        os.replace(fresh, KEY_FILE)  # whole or not at all: a parallel first run never reads it half written
    secret = bytes.fromhex(KEY_FILE.read_text().strip())
    if len(secret) < 16:
        raise ValueError(f"{KEY_FILE} holds {len(secret)} bytes; a key has 32 (delete it to make a new one)")
    return secret


def trial_key(secret: bytes, config: dict) -> bytes:
    """The key of the trial with ``config`` (its whole config, seed included)."""
    text = json.dumps(config, sort_keys=True, default=repr).encode()
    return hmac.new(secret, b"trial\0" + text, hashlib.sha256).digest()


@dataclass(frozen=True)
class Pseudonyms:
    """A trial's pseudonyms (see the module docstring)."""

    key: bytes
    population: int

    def _draw(self, label: bytes) -> int:
        return int.from_bytes(hmac.new(self.key, label, hashlib.sha256).digest()[:8], "big") & (2**63 - 1)

    def seed(self, seed: int) -> int:
        """The rule's seed for the round whose seed is ``seed``."""
        return self._draw(b"seed\0" + str(int(seed)).encode())

    def table(self, size: int) -> torch.Tensor:
        """Each id's pseudonym, for ids below ``size`` (the population, or more where a round names more)."""
        population = max(self.population, size)
        rng = np.random.default_rng(self._draw(b"ids\0" + str(population).encode()))
        return torch.as_tensor(rng.permutation(population), dtype=torch.int64)

    def arrange(self, ids: torch.Tensor | None, n: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the rows in the order the rule sees them, their pseudonyms): sorted by pseudonym where the rows have
        ids, else as they come (rows the pre-aggregators merged have no ids)."""
        if ids is None:
            return torch.arange(n), None
        ids = ids.to("cpu", torch.int64)
        pseudo = self.table(int(ids.max()) + 1 if ids.numel() else 0)[ids]
        rows = torch.argsort(pseudo, stable=True)
        return rows, pseudo[rows]
