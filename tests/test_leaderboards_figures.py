"""Figure data selections (Ditto Figures 3 and 5, learning curves) and the PNGs written from them."""

import pandas as pd

from fedarena.leaderboards.figures import (
    MAX_ROWS,
    curves_data,
    figure3_data,
    figure5_data,
    palette,
    write_figures,
)

PNG = b"\x89PNG\r\n\x1a\n"


def cells():
    rows = [
        ("fmnist", "global", "clean", 0.0, 0.91, 0.08),
        ("fmnist", "global", "a1", 0.5, 0.85, 0.10),
        ("fmnist", "krum", "a1", 0.5, 0.80, 0.20),
        ("fmnist", "local", "a1", 0.5, 0.87, 0.11),  # every row of the table is in the figures
        ("fmnist", "ditto", "a2", 0.2, 0.93, 0.07),
        ("fmnist", "ditto", "a1", 0.8, float("nan"), float("nan")),  # a mixed cell has no numbers
        ("femnist", "global", "clean", 0.0, 0.80, 0.11),
    ]
    return pd.DataFrame(
        rows, columns=["dataset_label", "method_label", "attack_label", "level", "acc_pooled", "acc_std"]
    )


def test_figure3_keeps_every_row_under_attack_with_numbers():
    data = figure3_data(cells(), "fmnist")
    assert sorted(zip(data.method_label, data.attack_label, data.level, strict=True)) == [
        ("ditto", "a2", 0.2), ("global", "a1", 0.5), ("krum", "a1", 0.5), ("local", "a1", 0.5),
    ]  # fmt: skip
    assert figure3_data(cells(), "femnist").empty


def test_figure3_shows_at_most_max_rows_the_first_in_table_order():
    many = pd.DataFrame({"dataset_label": "d", "method_label": [f"rule{i:02d}" for i in range(MAX_ROWS + 3)],
                         "attack_label": "a1", "level": 0.2, "acc_pooled": 0.5, "acc_std": 0.1})
    shown = sorted(figure3_data(many, "d")["method_label"])
    assert shown == [f"rule{i:02d}" for i in range(MAX_ROWS)]


def test_figure5_uses_the_data_poisoning_attack():
    data = figure5_data(cells(), "fmnist")
    assert sorted(data.method_label) == ["global", "krum", "local"]


def test_curves_average_the_seeds_per_round():
    runs = pd.DataFrame(
        {"run_id": ["a", "b", "c"], "dataset_label": ["fmnist", "fmnist", "femnist"], "method_label": "global",
         "attack_label": "clean", "level": 0.0}
    )  # fmt: skip
    history = pd.DataFrame(
        {"run_id": ["a", "a", "b", "b", "c"], "step": [0, 5, 0, 5, 0], "value": [0.1, 0.5, 0.3, 0.9, 0.7]}
    )
    data = curves_data(runs, history, "fmnist")
    assert data[["step", "value"]].to_dict("list") == {"step": [0, 5], "value": [0.2, 0.7]}


def test_palette_gives_every_method_its_own_colour():
    colors = palette(["ditto", "global", "krum", "ditto"])
    assert list(colors) == ["global", "krum", "ditto"] and len(set(colors.values())) == 3


def test_write_figures_writes_pngs(tmp_path):
    runs = pd.DataFrame({"run_id": ["a"], "dataset_label": ["fmnist"], "method_label": ["global"],
                         "attack_label": ["a1"], "level": [0.5]})  # fmt: skip
    history = pd.DataFrame({"run_id": ["a", "a"], "step": [0, 1], "value": [0.2, 0.85]})
    paths = write_figures(cells(), runs, history, tmp_path)
    assert [p.name for p in paths] == ["figure3_fmnist.png", "figure5_fmnist.png", "curves_fmnist.png"]
    assert all(p.read_bytes().startswith(PNG) for p in paths)
