"""The small workload's arithmetic count and its products-only timer (figures are printed, never asserted)."""

import dataclasses
import math

from fedarena.perf.small import products_seconds, round_flops, small_config


def test_round_flops_counts_forward_weight_and_input_gradients():
    # Prepare: widths 2-3-4, one client, one step of one sample: products 2*3 and 3*4
    cfg = dataclasses.replace(small_config(), clients_per_round=1, local_steps=1, batch_size=1)
    # Execute / Assert: forward 2*(6+12), weight gradients as much, input gradients of the second layer 2*12
    assert round_flops(cfg, (2, 3, 4)) == 36 + 36 + 24
    assert round_flops(small_config(), (64, 200, 200, 10)) == 10 * 2 * 16 * round_flops(cfg, (64, 200, 200, 10))


def test_products_seconds_times_a_round_of_products():
    seconds = products_seconds(dataclasses.replace(small_config(), clients_per_round=2, local_steps=1, batch_size=4),
                               (8, 6, 3), repeats=2)
    assert math.isfinite(seconds) and seconds > 0
