"""The package's layers, read from the source (every import statement of every module, at module
level or inside a function; nothing is imported): core modules import no feature package, the
cluster imports none, viz only the ground floor, features use each other only along the table
below, and the chain of package imports stays short.

A unit is a top-level module (``lmsci_mi/model.py``: a core module) or a subpackage
(``lmsci_mi/circuits``). Two kinds of import are left out, each for a reason:

- imports under ``if TYPE_CHECKING:``: annotations only, never run;
- the deprecated aliases in :data:`DEPRECATED`: an old name kept importable from where it used to
  live, resolved only when a user asks for it, and removed with it.

Run this file as a script to print every unit's level and the longest chain.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "lmsci_mi"

INFRASTRUCTURE = ("cluster",)
"""Below the features, above the core: it runs their analyses by name and imports none."""

DRAWING = "viz"
"""Ground-floor drawing helpers: they draw tensors and results they are given."""

TOP = ("cli",)
"""The command line (and the report page): above everything, may use anything."""

USES: dict[tuple[str, str], str] = {
    ("circuits", "data"): "the AIE traces the shipped fact sets; induction heads read repeated "
    "tokens; IOI and edge scores read the IOI prompts",
    ("circuits", "lenses"): "IOI uses the lenses' direct logit attribution to find name movers",
    ("editing", "circuits"): "editing uses circuits' causal trace to pick ROME's layer",
    ("icl", "probes"): "the in-context regression transformer's probes fit the probes' ridge probe",
    ("editing", "data"): "an edit request is the fact record, and the shipped facts; the key "
    "statistics read the text corpus",
    ("icl", "data"): "ICL prompt sets are drawn from the shipped ICL tasks and fact relations",
    ("icl", "steering"): "a function vector is a steering vector added after one block (issue 39: "
    "reuse the activation-intervention code)",
    ("knowledge", "data"): "trigger search reads the text corpus; knowledge neurons take the "
    "fact record",
    ("lenses", "data"): "the tuned lens trains on the text corpus",
    ("outliers", "circuits"): "the sink score registers as a head score (circuits' HEAD_SCORES), "
    "its random-head control draws from circuits' all_heads, and outlier ablations read IOI "
    "accuracy through circuits' LogitDiff",
    ("outliers", "data"): "sink scores, the first-token mask's NLL, the lenses' KL and the outlier "
    "ablations the length diagnostics and the short-context LM read the text corpus; the ablations also the shipped facts and "
    "IOI prompts",
    ("outliers", "lenses"): "massive activations' consequences report the lenses' KL without them",
    ("probes", "data"): "probing tasks and the CFG probes read their datasets",
    ("representations", "data"): "concept pairs and contrasts come from the shipped data",
    ("representations", "probes"): "representation reading fits the probes' linear probe",
    ("sae", "data"): "SAE training reads the text corpus",
    ("steering", "data"): "steers train and are evaluated on the shipped steering texts",
    ("transcoders", "data"): "transcoders train on the text corpus and on the CFG grammar's "
    "sentences",
    ("transcoders", "probes"): "the CFG GPT's shipped transcoders are trained on the probes' shipped CFG GPT "
                               "(transcoders.shipped loads it)",
    ("transcoders", "sae"): "transcoder metrics splice through the SAE statistics' loss loop "
    "(spliced_token_losses: clean, spliced, zero-ablated)",
}
"""The documented one-way uses between feature packages: (user, used) -> why. A feature package
imports the core, the cluster and viz, its own modules, and the features listed here, nothing else.
A new use is one more row, with its reason; a use in both directions is a circle and fails."""

DEPRECATED: dict[tuple[str, str], str] = {
    ("lmsci_mi.viz.report", "cli"): "the report page, now lmsci_mi.cli.report (it renders "
    "results, so it sits above them)",
}
"""Deprecated aliases: (module, the unit it imports back up) -> what moved where."""

MOVED: dict[str, str] = {
    "lmsci_mi.circuits.graph": "lmsci_mi.circuits.edges.graph",
    "lmsci_mi.circuits.eap": "lmsci_mi.circuits.edges.eap",
    "lmsci_mi.circuits.edge_patching": "lmsci_mi.circuits.edges.patching",
    "lmsci_mi.circuits.pruning": "lmsci_mi.circuits.edges.pruning",
    "lmsci_mi.circuits.faithfulness": "lmsci_mi.circuits.edges.faithfulness",
}
"""Modules that moved inside their unit, old path -> new home (issue 36: the edge files into
``circuits/edges/``). The old path stays a deprecated alias: each of the new home's names, with a
DeprecationWarning; nothing in the package imports it."""

BASEMENT = ("errors",)
"""Below the ground floor: the library's exceptions (UserInputError, UnknownNameError), which any
module may raise. They import nothing of lmsci_mi, so importing them adds no floor to a unit."""

BACK_UP: dict[tuple[str, str], str] = {}
"""At most one import may run back up (from a unit to one above it), named here with its reason;
today there is none."""

MAX_LEVELS = 11


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. "lmsci_mi.circuits.ioi"
    target: str  # the imported module, e.g. "lmsci_mi.lenses.dla"
    line: int

    @property
    def source_unit(self) -> str:
        return unit_of(self.module)

    @property
    def target_unit(self) -> str:
        return unit_of(self.target)

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def unit_of(module: str) -> str:
    """``lmsci_mi.circuits.ioi`` -> ``circuits``; ``lmsci_mi.model`` -> ``model``; the package's
    front door ``lmsci_mi`` -> ``lmsci_mi``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``tree`` but the bodies of ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                stack.extend(child.orelse)
                continue
            yield child
            if not isinstance(child, (ast.expr, ast.Import, ast.ImportFrom)):
                stack.append(child)  # an import sits in a statement, never in an expression


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        source = node.module or ""
    else:
        base = module.split(".")
        base = base if is_package else base[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, *([node.module] if node.module else [])])
    # ``from lmsci_mi import readout`` imports the submodule lmsci_mi.readout, not the package's
    # curated API; any other name comes from the module itself.
    submodules = [f"{source}.{alias.name}" for alias in node.names if _is_module(f"{source}.{alias.name}")]
    return submodules + ([source] if len(submodules) < len(node.names) else [])


def _is_module(name: str) -> bool:
    """Whether ``name`` (dotted, under lmsci_mi) is a module or package of the source tree."""
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@functools.cache
def all_imports() -> tuple[Import, ...]:
    """Every ``lmsci_mi`` import of every module under ``lmsci_mi/``, TYPE_CHECKING ones left out."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _walk(tree):
            for target in _targets(node, module, path.name == "__init__.py"):
                if target == "lmsci_mi" or target.startswith("lmsci_mi."):
                    found.append(Import(module, target, node.lineno))  # type: ignore[attr-defined]
    return tuple(found)


def _is_deprecated_alias(imp: Import) -> bool:
    return (imp.module, imp.target_unit) in DEPRECATED


def layered_imports() -> list[Import]:
    """The imports between different units that the layers must respect (those of the
    :data:`BASEMENT` left out)."""
    return [
        imp
        for imp in all_imports()
        if imp.source_unit != imp.target_unit
        and not _is_deprecated_alias(imp)
        and imp.target_unit not in BASEMENT
    ]


def core_modules() -> set[str]:
    return {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}


def packages() -> set[str]:
    return {p.parent.name for p in ROOT.glob("*/__init__.py")}


def feature_packages() -> set[str]:
    return packages() - {*INFRASTRUCTURE, DRAWING, *TOP}


def ground_floor() -> set[str]:
    """Core modules that import nothing of lmsci_mi (the site table, configs, the cache paths...)."""
    importing = {imp.source_unit for imp in layered_imports()}
    return core_modules() - importing


def _violations(units: set[str], allowed: set[str]) -> list[str]:
    return [
        str(imp)
        for imp in layered_imports()
        if imp.source_unit in units and imp.target_unit not in allowed
    ]


def graph() -> dict[str, set[str]]:
    """unit -> the units it imports (back-up imports in :data:`BACK_UP` left out)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in layered_imports():
        if (imp.source_unit, imp.target_unit) not in BACK_UP:
            edges[imp.source_unit].add(imp.target_unit)
    return edges


def levels() -> dict[str, int]:
    """Each unit's level: 1 for a unit that imports none, else one above the highest it imports.

    Raises:
        ValueError: a circle of imports (the message shows it).
    """
    edges = graph()
    units = set(edges) | {u for targets in edges.values() for u in targets}
    found: dict[str, int] = {}

    def level(unit: str, path: tuple[str, ...]) -> int:
        if unit in path:
            circle = " -> ".join([*path[path.index(unit):], unit])
            raise ValueError(f"a circle of package imports: {circle}")
        if unit not in found:
            found[unit] = 1 + max((level(u, (*path, unit)) for u in edges.get(unit, ())), default=0)
        return found[unit]

    for unit in sorted(units):
        level(unit, ())
    return found


def longest_chain() -> list[str]:
    """The longest chain of package imports, from the top down."""
    edges, found = graph(), levels()
    unit = max(sorted(found), key=found.__getitem__)
    chain = [unit]
    while edges.get(unit):
        unit = max(sorted(edges[unit]), key=found.__getitem__)
        chain.append(unit)
    return chain


# ---------------------------------------------------------------------- the tests


def test_the_reader_finds_the_imports_it_should() -> None:
    # Guards the AST reader itself: imports at module level, in a function, relative and under
    # TYPE_CHECKING are each seen (or left out) as they should be.
    imports = {(imp.module, imp.target) for imp in all_imports()}
    assert ("lmsci_mi.circuits.shards", "lmsci_mi.cluster.shardable") in imports
    assert ("lmsci_mi.circuits.aie", "lmsci_mi.cluster") in imports  # inside a function
    assert ("lmsci_mi.circuits.aie", "lmsci_mi.model") not in imports  # TYPE_CHECKING only
    # training is the core's home of small-model training, below circuits/ and probes/ that use it
    assert {"model", "hooks", "sites", "collect", "training", "positions"} <= core_modules()
    assert {"circuits", "data", "editing", "steering"} <= feature_packages()
    assert ground_floor() >= {"config", "sites", *BASEMENT}


def test_the_basement_imports_nothing_of_the_package() -> None:
    assert [str(imp) for imp in all_imports() if imp.source_unit in BASEMENT] == []


def test_the_core_imports_no_feature_package() -> None:
    allowed = core_modules() | {*INFRASTRUCTURE, DRAWING}
    assert _violations(core_modules() | {"lmsci_mi"}, allowed) == []


def test_the_cluster_imports_no_feature_package() -> None:
    assert _violations(set(INFRASTRUCTURE), core_modules()) == []


def test_viz_imports_only_the_ground_floor() -> None:
    assert _violations({DRAWING}, ground_floor()) == []


def test_features_use_each_other_only_along_the_table() -> None:
    base = core_modules() | {*INFRASTRUCTURE, DRAWING}
    wrong = [
        f"{imp} (not in USES: say why in the table, or move the shared part into the core)"
        for imp in layered_imports()
        if imp.source_unit in feature_packages()
        and imp.target_unit not in base
        and (imp.source_unit, imp.target_unit) not in USES
    ]
    assert wrong == []
    used = {(imp.source_unit, imp.target_unit) for imp in layered_imports()}
    assert [use for use in USES if use not in used] == [], "a use in USES that no import makes"
    assert all((b, a) not in USES for a, b in USES), "a use in both directions is a circle"


def test_the_chain_of_packages_is_short_and_at_most_one_import_runs_back_up() -> None:
    assert len(BACK_UP) <= 1, f"more than one import runs back up: {sorted(BACK_UP)}"
    chain = longest_chain()  # raises on a circle, naming it
    assert len(chain) <= MAX_LEVELS, " -> ".join(chain)


def test_deprecated_aliases_are_deprecated_and_still_there() -> None:
    by_module = defaultdict(set)
    for imp in all_imports():
        by_module[imp.module].add(imp.target_unit)
    for module, unit in DEPRECATED:
        assert unit in by_module[module], f"{module} no longer imports {unit}: drop it from DEPRECATED"
        path = ROOT.parent / (module.replace(".", "/") + ".py")
        path = path if path.exists() else path.with_suffix("") / "__init__.py"
        assert "DeprecationWarning" in path.read_text(encoding="utf-8"), module


def test_each_builtin_shardable_lives_with_its_feature() -> None:
    # The cluster names the modules of its built-in analyses as text, imported on first use; each
    # must be a feature's (or the core's) module that registers that name.
    from lmsci_mi.cluster.shardable import BUILTIN_HOMES

    for name, module in BUILTIN_HOMES.items():
        assert unit_of(module) not in {*INFRASTRUCTURE, DRAWING, *TOP}, module
        path = ROOT.parent / (module.replace(".", "/") + ".py")
        assert f'SHARDABLE.register("{name}"' in path.read_text(encoding="utf-8"), (name, module)


def test_deprecated_aliases_resolve_to_the_new_homes() -> None:
    import importlib
    import sys

    import lmsci_mi.viz
    import lmsci_mi.viz.attention
    from lmsci_mi.circuits import attention
    from lmsci_mi.circuits.metrics import LogitDiff
    from lmsci_mi.cli import report
    from lmsci_mi.data.ioi import TextPairs

    # The viz -> circuits aliases are gone (they made a circle); the error names the new home.
    with pytest.raises(AttributeError, match=r"circuits\.attention\.save_attention_html"):
        lmsci_mi.viz.save_attention_html  # noqa: B018
    with pytest.raises(AttributeError, match=r"circuits\.attention\.head_patterns"):
        lmsci_mi.viz.attention.head_patterns  # noqa: B018
    assert attention.head_patterns is not None
    with pytest.raises(AttributeError):
        lmsci_mi.viz.attention.no_such_name  # noqa: B018
    sys.modules.pop("lmsci_mi.viz.report", None)  # so that importing it runs it again
    with pytest.warns(DeprecationWarning, match="cli.report"):
        old = importlib.import_module("lmsci_mi.viz.report")
    assert old.write_report is report.write_report
    pairs = TextPairs(("a",), ("b",), (3,), (4,), "demo")
    with pytest.raises(AttributeError, match=r"LogitDiff\.of_pairs"):
        pairs.metric()
    assert LogitDiff.of_pairs(pairs) is not None


@pytest.mark.parametrize("old", sorted(MOVED))
def test_moved_modules_are_deprecated_aliases_of_their_new_homes(old: str) -> None:
    import importlib

    new = importlib.import_module(MOVED[old])
    alias = importlib.import_module(old)
    assert alias.__all__ == new.__all__ and new.__all__
    for name in new.__all__:
        with pytest.warns(DeprecationWarning, match=rf"use {MOVED[old]}\.{name}$"):
            assert getattr(alias, name) is getattr(new, name)
    with pytest.raises(AttributeError):
        alias.no_such_name  # noqa: B018
    assert [str(imp) for imp in all_imports() if imp.target == old] == []


@pytest.mark.parametrize("unit", sorted(TOP))
def test_nothing_imports_the_top(unit: str) -> None:
    assert [str(imp) for imp in layered_imports() if imp.target_unit == unit] == []


if __name__ == "__main__":
    found = levels()
    for unit in sorted(found, key=lambda u: (found[u], u)):
        print(f"{found[unit]:>3}  {unit:<16} imports {sorted(graph().get(unit, ()))}")
    chain = longest_chain()
    print(f"longest chain: {len(chain)} levels: {' -> '.join(chain)}")
