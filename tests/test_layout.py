"""The package's structure: imports run one way (down the layers of CONTRIBUTING.md), with no cycle, and
no function-local import of the package's own modules except the CLI's lazy loading of its subcommands."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "fedarena"
LAYERS = [  # lowest first; a module may import its own package and anything in a lower layer
    {"registry", "params", "errors", "plugins", "search_space", "streams", "round_inputs", "round_stages"},  # plugins: imports a user's module under its origin
    {"config", "datasets", "models"},
    {"methods", "attacks"},
    {"privacy", "system"},  # system: the deployment (failures, stragglers, asynchrony); privacy: differential privacy: wraps a server rule (methods), read by the sections and the engine
    {"sections"},
    {"isolation"},  # a submitted rule's sandboxed process and its stand-in (its sandbox imports every component first)
    {"simulation", "contracts"},  # contracts: what a plugin's components are checked against
    {"tracking"},  # logs the engine's registered metrics
    {"suites"},  # the suite language (parse, select, validate, grid, tuned values, labels, order) and the shipped files
    {"bench", "leaderboards", "report", "perf", "examples", "api", "battery", "tuning"},  # api: what the commands call
    {"website"},  # the leaderboard site: the battery's cards and the submissions' reruns
    {"commands", "cli"},
]
LAZY_CLI = {"cli.py", "bench/commands.py", "leaderboards/commands.py", "report/commands.py", "datasets/commands.py",
            "battery/commands.py", "tuning/commands.py", "website/commands.py"}  # keep `fedarena --help` free of Ray and MLflow


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def layer(module: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if part(module) in names)


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(fedarena modules imported at module level, fedarena modules imported inside functions)."""
    top, local = set(), set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedarena"):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("fedarena")]
        found = {n for n in names if n in MODULES}
        (top if node in tree.body else local).update(found)
    return top, local


FILES = sorted(p for p in ROOT.rglob("*.py"))
MODULES = {module_name(p) for p in FILES}
GRAPH = {module_name(p): imports(p) for p in FILES}


def test_every_package_is_in_a_layer():
    assert {part(m) for m in MODULES if m != "fedarena"} <= set().union(*LAYERS)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "fedarena"))
def test_imports_run_down_the_layers(module):
    upward = [t for t in GRAPH[module][0] | GRAPH[module][1]
              if t != "fedarena" and part(t) != part(module) and layer(t) > layer(module)]
    assert not upward, f"{module} imports from a higher layer: {upward}"


def test_no_import_cycle_between_modules():
    edges = {m: {t for t in top if t != m and t != "fedarena"} for m, (top, _) in GRAPH.items()}
    state = {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in edges.get(node, ()):
            if state.get(nxt) == "open":
                raise AssertionError(f"import cycle: {' -> '.join(trail + [nxt])}")
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])


def test_function_local_imports_of_the_package_are_only_the_clis_lazy_ones():
    local = {str(p.relative_to(ROOT)) for p in FILES if GRAPH[module_name(p)][1]}
    assert local <= LAZY_CLI, sorted(local - LAZY_CLI)


def imported_roots(path: Path) -> set[str]:
    """Top-level packages a file imports, at module level or inside functions."""
    tree = ast.parse(path.read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return roots | {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def test_only_tracking_imports_mlflow():
    outside = [str(p.relative_to(ROOT)) for p in FILES
               if "mlflow" in imported_roots(p) and p.relative_to(ROOT).parts[0] != "tracking"]
    assert not outside, f"MLflow is imported outside fedarena/tracking/: {outside}"


def test_no_two_modules_share_a_file_name_but_the_package_conventions():
    # __init__.py, each package's commands.py (its subcommands) and base.py (its kind's contract) are conventions;
    # any other name names one module, so a name says which part of the system a file is
    shared = {"__init__.py", "commands.py", "base.py"}
    seen: dict[str, list[str]] = {}
    for path in FILES:
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1 and name not in shared} == {}


# the registration decorators of the kinds the engine runs (a rule, a pre-aggregator, an attack, a method, a privacy
# mechanism) and the call that imports every module of a package (which registers them all)
REGISTERS = {"aggregator", "pre_aggregator", "attack", "method", "register"}
COMPONENT_PACKAGES = ("attacks", "methods", "privacy")


def registers_components(module: str) -> bool:
    """Whether importing ``module`` itself registers a component: a registration decorator in it, or a call of
    ``import_submodules`` (a package's ``__init__``)."""
    path = ROOT.parent / (module.replace(".", "/") + ".py")
    path = path if path.exists() else ROOT.parent / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        decorators = getattr(node, "decorator_list", [])
        names = {f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                 for f in (d.func for d in decorators if isinstance(d, ast.Call))}
        if names & REGISTERS:
            return True
    return any(isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
               and getattr(node.value.func, "id", None) == "import_submodules" for node in tree.body)


def test_the_simulation_imports_only_the_contracts_of_components():
    # the round loop runs whatever a trial's components declare (round inputs, stages): it imports the contracts
    # of attacks, methods, aggregators and privacy, never a module that registers one of them
    engine = [m for m in MODULES if part(m) == "simulation"]
    imported = {t for m in engine for t in GRAPH[m][0] | GRAPH[m][1] if part(t) in COMPONENT_PACKAGES}
    imported = {t for t in imported if t in MODULES}  # a name imported from a module is not a module
    assert imported and not sorted(t for t in imported if registers_components(t))


def built_in_component_names() -> set[str]:
    from fedarena.attacks.base import ATTACKS
    from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS
    from fedarena.methods.base import METHODS
    from fedarena.privacy.base import NONE, PRIVACY
    from fedarena.round_inputs import INPUTS
    kinds = (AGGREGATORS, PRE_AGGREGATORS, ATTACKS, METHODS, PRIVACY, INPUTS)
    return {name for registry in kinds for name in registry.built_in()} - {NONE}  # "none": no mechanism at all


def test_the_simulation_names_no_component():
    # no string in fedarena/simulation/ (docstrings aside) is a built-in component's name: the engine never
    # branches on which rule, attack, method, mechanism or input a trial has
    names = built_in_component_names()
    found = {}
    for path in sorted((ROOT / "simulation").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and id(n) not in docstrings}
        if strings & names:
            found[path.name] = sorted(strings & names)
    assert len(names) > 60 and found == {}


def test_every_built_in_threat_and_defense_registers_through_the_public_api():
    # a plugin's decorators (``from fedarena import aggregator, pre_aggregator, attack, round_input``) are the only
    # way fedarena's own threats and defenses register: no module but a registry's own base adds to it directly
    import fedarena
    from fedarena.attacks import base as attacks_base
    from fedarena.methods.aggregators import base as aggregators_base
    from fedarena.round_inputs import round_input
    assert (fedarena.aggregator, fedarena.pre_aggregator, fedarena.attack, fedarena.round_input) == (
        aggregators_base.aggregator, aggregators_base.pre_aggregator, attacks_base.attack, round_input)
    registries = {"AGGREGATORS", "PRE_AGGREGATORS", "ATTACKS", "INPUTS"}
    direct = []
    for path in sorted([*(ROOT / "attacks").glob("*.py"), *(ROOT / "methods" / "aggregators").glob("*.py")]):
        if path.name == "base.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("add", "register")
                    and getattr(node.func.value, "id", None) in registries):
                direct.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert direct == []
