"""Shared fixtures: tiny, fast experiment configs on offline data."""

import numpy as np
import pytest
import scipy.io

from fedarena.config import ExperimentConfig


@pytest.fixture
def small_config():
    """A digits run that takes about a second: 20 clients, 5 per round, 3 local steps."""

    def make(**overrides) -> ExperimentConfig:
        data = {"dataset": {"name": "digits", "num_clients": 20}, "rounds": 8, "clients_per_round": 5,
                "local_steps": 3, "batch_size": 16, "lr": 0.05, "eval_every": 4, "seed": 3}
        data.update(overrides)
        return ExperimentConfig.from_dict(data)

    return make


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray of 2 CPUs, no dashboard, for one test module (started on first use)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(autouse=True, scope="session")
def isolation_key():
    """The isolated rules' secret for the whole session (``fedarena.isolation.pseudonyms``): the tests never make a
    key file in the home folder. Subprocesses (the CLI, Ray's workers, the site's reruns) inherit it."""
    import os

    previous = os.environ.get("FEDARENA_ISOLATION_KEY")
    os.environ["FEDARENA_ISOLATION_KEY"] = "5e" * 32
    yield
    if previous is None:
        os.environ.pop("FEDARENA_ISOLATION_KEY", None)
    else:
        os.environ["FEDARENA_ISOLATION_KEY"] = previous


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tiny models on 2 cores: intra-op threads only add contention (tests ran 10x slower under load)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def write_linear_vehicle(root, sizes=(60, 80, 70, 90), dim=5):
    """A tiny vehicle.mat (MOCHA's format: cells X, Y) whose labels are the sign of a device's own linear
    score (devices 0-1 and 2-3 share a direction), so a per-device linear SVM separates them."""
    gen = np.random.default_rng(1)
    directions = [np.eye(dim)[0], np.eye(dim)[0], np.eye(dim)[1], np.eye(dim)[1]]
    cells_x, cells_y = np.empty((len(sizes), 1), dtype=object), np.empty((len(sizes), 1), dtype=object)
    for k, n in enumerate(sizes):
        x = gen.normal(size=(n, dim))
        cells_x[k, 0], cells_y[k, 0] = x, np.where(x @ directions[k % len(directions)] > 0, 1.0, -1.0)[:, None]
    path = root / "vehicle" / "vehicle.mat"
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(path, {"X": cells_x, "Y": cells_y})
    return root


@pytest.fixture
def linear_vehicle(tmp_path):
    """A data directory holding a tiny learnable vehicle.mat (a binary -1/+1 task for the linear SVM)."""
    return write_linear_vehicle(tmp_path)


@pytest.fixture(scope="session")
def report(tmp_path_factory):
    """The report of the store of ``store_for_views`` (built once; its users only read it, and ``fedarena
    report`` only reads the store): (page text, store URI, page path)."""
    from store_for_views import NAME, fill_store

    from fedarena.report.compose import build_report

    folder = tmp_path_factory.mktemp("report")
    uri = fill_store(folder)
    path = build_report(NAME, uri, folder / "out")
    return path.read_text(encoding="utf-8"), uri, path


def pytest_collection_modifyitems(config, items):
    """Files with real processes (integration) first, then slow ones, then the rest, each file's tests together
    and in their order: the two workers (``--dist loadfile``, with ``--no-loadscope-reorder``) take files in this
    order, so the long files start at once and the short ones fill in at the end. xdist's own order (most tests
    first) started the longest files, which hold few tests, last: one worker ran them alone at the end."""

    def weight(item) -> int:
        return 0 if item.get_closest_marker("integration") else 1 if item.get_closest_marker("slow") else 2

    rank: dict[str, int] = {}
    for item in items:
        rank[item.nodeid.split("::")[0]] = min(rank.get(item.nodeid.split("::")[0], 2), weight(item))
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: files and tests keep their order


@pytest.fixture(autouse=True)
def built_in_components_only(request):
    """An exact test (``*_exact.py``) sees fedarena's own components only: a plugin that an earlier test of the same
    worker loaded (``test_plugins``, the battery's ``evaluate``) stays registered for the process and would join
    the lists these tests pin (which methods, attacks and rules a mechanism composes with). The registries are
    restored after the test."""
    if not request.path.name.endswith("_exact.py"):
        yield
        return
    from fedarena.registry import Registry

    saved = [(registry, {key: dict(value) for key, value in vars(registry).items() if isinstance(value, dict)})
             for registry in list(Registry.instances)]
    for registry, _ in saved:
        for name in [name for name in registry.registered() if registry.origin(name) is not None]:
            registry.remove(name)
    yield
    for registry, tables in saved:
        vars(registry).update(tables)


@pytest.fixture(autouse=True, scope="module")
def plugins_unloaded_after_each_file():
    """A test file that loads plugins into this process (the site's submissions, the battery's ``evaluate``,
    ``test_plugins``) unloads them when it ends: a worker runs files in any order, and a plugin left registered
    joins what later files check (every rule's docstring, a recipe registering the same name)."""
    from fedarena import isolation, plugins

    before = {source.digest for source in plugins.loaded()}
    isolated_before = {plugin.digest for plugin in isolation.shipped()}
    yield
    for source in plugins.loaded():
        if source.digest not in before:
            plugins.unload(source)
    if {plugin.digest for plugin in isolation.shipped()} - isolated_before:
        isolation.unload_isolated()  # the submitted rules' stand-ins and their sandboxed processes
