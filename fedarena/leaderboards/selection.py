"""Selected methods: one table row chosen per column among a method's variants (``suites.select``).

A suite entry with ``select: {by: val_acc_pooled, over: {aggregator.eps: [0, 0.1, 0.5, 1]}}`` runs one
variant per eps (method labels ``fedmgda_plus_eps0`` ...; tags ``select_group``, ``select_by``,
``variant``). Here, per position (dataset, attack, level), the variant with the best mean ``by`` metric
(direction from the engine's metric registry; ties: the first variant in label order) becomes the group's
row (``fedmgda_plus``), as Ditto chooses FedMGDA+'s eps on benign validation data. The variants
themselves leave the paper tables (the chosen one would tie with its own row) and get a table of their
own, ``selection_<group>``, with the selection metric of every variant and the chosen one in bold.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedarena.leaderboards.cells import HIGHER_IS_BETTER
from fedarena.leaderboards.specs import TableSpec, fraction, significance_notes, tidy_frame
from fedarena.leaderboards.tables import Table, pivot, setting_label, sort_key


def is_variant(cells: pd.DataFrame) -> pd.Series:
    groups = cells["select_group"] if "select_group" in cells else pd.Series("", index=cells.index)
    return groups.fillna("").astype(str) != ""


def choose(variants: pd.DataFrame, by: str):
    """The index of the variant cell with the best finite mean ``by`` (None when no variant has one)."""
    usable = variants[~variants["mixed"] & np.isfinite(variants[by])] if by in variants else variants.iloc[0:0]
    if usable.empty:
        return None
    order = sorted(range(len(usable)), key=lambda i: sort_key("method_label", usable["method_label"].iloc[i]))
    ordered = usable.iloc[order][by]
    return ordered.idxmax() if HIGHER_IS_BETTER[by] else ordered.idxmin()


def select_variants(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, str]]]:
    """(cells for the tables: the chosen variant of every group and position under the group's label, the
    variants removed; the variant cells; (group, note naming the choice per column) pairs)."""
    mask = is_variant(cells)
    if not mask.any():
        return cells, cells.iloc[0:0], []
    variants, chosen, notes = cells[mask], [], []
    for (group, dataset), part in variants.groupby(["select_group", "dataset_label"], sort=True):
        by = str(part["select_by"].iloc[0])
        picks = {}
        for setting, options in part.groupby(["attack_label", "level"], sort=False):
            pick = choose(options, by)
            if pick is not None:
                chosen.append(pick)
            picks[setting] = "none (no variant logged it)" if pick is None else variants.at[pick, "variant"]
        notes.append((group, _choice_note(group, dataset, by, picks)))
    rows = variants.loc[chosen].assign(method_label=variants.loc[chosen, "select_group"])
    table_cells = pd.concat([cells[~mask], rows], ignore_index=True)
    return table_cells, variants.reset_index(drop=True), notes


def chosen_runs(runs: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """The runs behind the table cells: a variant's runs only where it was chosen, under the group's label
    (for the learning curves); runs of other methods unchanged."""
    mask = is_variant(runs)
    if not mask.any():
        return runs
    keys = ["dataset_label", "attack_label", "level", "variant"]
    picked = cells[is_variant(cells)][["method_label", *keys]].rename(columns={"method_label": "group"})
    variants = runs[mask].merge(picked, on=keys, how="inner")
    variants = variants[variants["group"] == variants["select_group"]]
    variants = variants.assign(method_label=variants["group"]).drop(columns="group")
    return pd.concat([runs[~mask], variants], ignore_index=True)


def _choice_note(group: str, dataset: str, by: str, picks: dict[tuple, str]) -> str:
    """``fedmgda_plus on digits: per column, the variant with the highest mean val_acc_pooled: eps=0.1 at
    clean, A1 20%; eps=0.5 at A2 50%.``"""
    by_variant: dict[str, list[str]] = {}
    ordered = sorted(picks.items(), key=lambda kv: (sort_key("attack_label", kv[0][0]), kv[0][1]))
    for (attack, level), variant in ordered:
        by_variant.setdefault(variant, []).append(setting_label(attack, level))
    choices = "; ".join(f"{variant} at {', '.join(settings)}" for variant, settings in by_variant.items())
    best = "highest" if HIGHER_IS_BETTER.get(by, True) else "lowest"
    return f"{group} on {dataset}: per column, the variant with the {best} mean {by}: {choices}."


def selection_tables(variants: pd.DataFrame) -> list[Table]:
    """One table per group: every variant's mean selection metric ± CI per column, the chosen one bold."""
    tables = []
    for group, part in variants.groupby("select_group", sort=True):
        by = str(part["select_by"].iloc[0])
        frame = part.assign(text=[_text(r, by) for r in part.itertuples(index=False)],
                            score=part[by] if HIGHER_IS_BETTER[by] else -part[by],
                            score_sd=part.get(f"{by}_sd", np.nan))
        pairs = pivot(frame, row_key="method_label", column_by=("attack_label", "level"), block_by=("dataset_label",))
        for key, block in pairs:
            block.title = str(key[0])
        blocks = [block for _, block in pairs]
        notes = [f"Mean {by} over seeds of every variant of {group}; bold: the best (of tied variants, the "
                 f"first listed is the one the {group} row shows in the other tables).",
                 "±: half-width of the 95% Student-t confidence interval over seeds (none with one seed)."]
        notes += significance_notes(blocks, TableSpec("selection", "", bold="mean"))
        title = f"{group}: the variant chosen per column by {by}"
        tables.append(Table(f"selection_{group}", title, blocks, notes, tidy_frame(part)))
    return tables



def _text(row, by: str) -> str:
    if row.mixed or not np.isfinite(getattr(row, by)):
        return "mixed" if row.mixed else "–"
    ci = getattr(row, f"{by}_ci", np.nan)
    return fraction(getattr(row, by), 3) + (f"±{fraction(ci, 3)}" if np.isfinite(ci) else "")
