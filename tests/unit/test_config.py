"""CLI flags built from configs: one flag per field, the config's own defaults, and the config back
from the parsed arguments (`cli.common.add_config_args` / `config_from_args`); the bounds that
fields declare, checked by the base for every config and shown in ``--help``."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import math
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

import pytest

import lmsci_mi
from lmsci_mi.cli import main
from lmsci_mi.cli.common import add_config_args, config_from_args
from lmsci_mi.cli.core import TourConfig
from lmsci_mi.config import Config, _Rule, _rules, config
from lmsci_mi.generation import GenerationConfig


@config
class DemoConfig(Config):
    noise: float = field(default=3.0, metadata={"help": "noise scale"})
    n_samples: int = field(default=10, metadata={"help": "samples", "ge": 1})
    window: int | None = None
    layers: tuple[int, ...] = (0, 1)
    kind: Literal["resid", "mlp"] = "resid"
    normalise: bool = False
    metric: object = field(default=None, metadata={"cli": False})


def _parser(**kwargs: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_config_args(parser, DemoConfig, **kwargs)  # type: ignore[arg-type]
    return parser


def test_no_flags_give_the_configs_defaults() -> None:
    assert config_from_args(DemoConfig, _parser().parse_args([])) == DemoConfig()


def test_each_field_type_parses() -> None:
    args = _parser().parse_args(
        ["--noise", "0.5", "--n-samples", "3", "--window", "4", "--layers", "2,5",
         "--kind", "mlp", "--normalise"]
    )
    assert config_from_args(DemoConfig, args) == DemoConfig(
        noise=0.5, n_samples=3, window=4, layers=(2, 5), kind="mlp", normalise=True
    )
    assert config_from_args(DemoConfig, _parser().parse_args(["--window", "none"])).window is None


def test_fields_off_the_cli_and_skipped_fields_come_as_overrides() -> None:
    parser = _parser(skip=("noise",))
    flags = {s for a in parser._actions for s in a.option_strings}
    assert "--metric" not in flags and "--noise" not in flags and "--n-samples" in flags
    built = config_from_args(DemoConfig, parser.parse_args([]), noise=1.0, metric="kl")
    assert (built.noise, built.metric) == (1.0, "kl")


def test_malformed_values_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--n-samples", "x"], ["--kind", "attn"], ["--layers", "1,a"]):
        with pytest.raises(SystemExit) as stop:
            _parser().parse_args(argv)
        assert stop.value.code == 2
    with pytest.raises(SystemExit) as stop:
        _parser().parse_args(["--n-samples", "0"])
    assert stop.value.code == 2
    assert "argument --n-samples: must be >= 1, not 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^DemoConfig\.n_samples must be >= 1, not 0$"):
        DemoConfig(n_samples=0)


def test_tour_flags_come_from_its_config(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_config_args(parser, TourConfig)
    assert config_from_args(TourConfig, parser.parse_args([])) == TourConfig()
    assert config_from_args(TourConfig, parser.parse_args(["--quick"])).quick is True
    assert main(["tour", "--out-dir", " ", "--model", "toy-2l", "--device", "cpu"]) == 2
    assert "out_dir must name a folder" in capsys.readouterr().err


# ---------------------------------------------------------------------- declared bounds

PACKAGE = Path(lmsci_mi.__file__).parent


def _all_configs() -> list[type[Config]]:
    """Every Config subclass defined in the package (each module imported once)."""
    for module in pkgutil.walk_packages(lmsci_mi.__path__, "lmsci_mi."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: list[type[Config]] = []
    todo = list(Config.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("lmsci_mi.") and cls not in found:
            found.append(cls)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def _inside(rule: _Rule) -> Any:
    """A value the rule accepts (an element, for a tuple's rule)."""
    if rule.choices:
        return rule.choices[0]
    low = rule.ge if rule.ge is not None else rule.gt
    high = rule.le if rule.le is not None else rule.lt
    if low is not None and high is not None:
        return (low + high) / 2
    if low is not None:
        return low if rule.ge is not None else low + 1
    return 0 if high is None else high - 1


def _outside(rule: _Rule) -> Iterator[Any]:
    """Values (elements, for a tuple's rule) the rule refuses: one past each bound, and NaN."""
    if rule.choices:
        yield "not a choice" if isinstance(rule.choices[0], str) else max(rule.choices) + 1
    for bound, step in ((rule.gt, 0), (rule.ge, -1), (rule.lt, 0), (rule.le, 1)):
        if bound is not None:
            yield bound + step
    if any(b is not None for b in (rule.gt, rule.ge, rule.lt, rule.le)):
        yield math.nan


def _violations() -> Iterator[tuple[type[Config], str, Any]]:
    for cls in _all_configs():
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for rule in _rules(cls):
            if not rule.each:
                for value in _outside(rule):
                    yield cls, rule.name, value
                continue
            default = defaults[rule.name]
            good = tuple(default) if isinstance(default, tuple) and default else (_inside(rule),)
            good *= max(1, rule.min_length or 1)
            for item in _outside(rule):
                yield cls, rule.name, (item, *good[1:])
            if rule.min_length:
                yield cls, rule.name, good[: rule.min_length - 1]
            if rule.max_length is not None:
                yield cls, rule.name, (good * (rule.max_length + 1))[: rule.max_length + 1]


VIOLATIONS = list(_violations())


def test_the_configs_of_the_package_are_found_and_declare_bounds() -> None:
    names = {cls.__name__ for cls, _, _ in VIOLATIONS}
    assert {"PatchingConfig", "GenerationConfig", "ROMEConfig", "SAETrainConfig"} <= names
    assert len(VIOLATIONS) > 150


@pytest.mark.parametrize(
    ("cls", "name", "value"), VIOLATIONS, ids=[f"{c.__name__}.{n}={v!r}" for c, n, v in VIOLATIONS]
)
def test_the_base_refuses_a_value_outside_a_declared_bound(
    cls: type[Config], name: str, value: Any
) -> None:
    with pytest.raises(ValueError) as error:
        cls(**{name: value})
    message = str(error.value)
    assert message.startswith(f"{cls.__name__}.{name} must "), message
    assert message.endswith(f", not {value!r}"), message


def test_a_value_on_an_inclusive_bound_and_none_for_an_optional_field_pass() -> None:
    from lmsci_mi.generation import GenerationConfig

    GenerationConfig(top_p=1.0, top_k=1, temperature=0.0, max_new_tokens=1, batch_size=1)
    GenerationConfig(top_p=None, top_k=None)
    with pytest.raises(ValueError, match=r"^GenerationConfig\.top_p must be in \(0, 1\], not 0\."):
        GenerationConfig(top_p=0.0)
    with pytest.raises(ValueError, match=r"^GenerationConfig\.top_k must be >= 1, not True$"):
        GenerationConfig(top_k=True)  # a bool is not a count


def _help(cls: type[Config]) -> str:
    parser = argparse.ArgumentParser()
    cls.add_arguments(parser)
    return " ".join(parser.format_help().split())


def test_help_shows_each_bound_next_to_the_default() -> None:
    from lmsci_mi.circuits import TraceConfig
    from lmsci_mi.generation import GenerationConfig

    text = _help(GenerationConfig)
    assert "(default: 32; >= 1)" in text and "(default: None; in (0, 1])" in text
    trace = "(default: ('resid', 'mlp', 'attn'); each one of resid, mlp, attn, sever_mlp, sever_attn, at least 1 value)"
    assert trace in _help(TraceConfig)
    for cls in _all_configs():
        on_cli = {f.name for f in dataclasses.fields(cls) if f.metadata.get("cli", True)}
        shown = [rule for rule in _rules(cls) if rule.name in on_cli and rule.summary()]
        text = _help(cls) if shown else ""
        for rule in shown:
            assert f"; {rule.summary()})" in text, (cls.__name__, rule.name)


def test_a_flag_outside_its_bound_is_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lmsci_mi.circuits import PatchingConfig, TraceConfig
    from lmsci_mi.generation import GenerationConfig

    for cls, argv, message in [
        (GenerationConfig, ["--batch-size", "0"], "argument --batch-size: must be >= 1, not 0"),
        (GenerationConfig, ["--top-p", "1.5"], "argument --top-p: must be in (0, 1], not 1.5"),
        (PatchingConfig, ["--site", "resid"], "argument --site: must be one of ['resid_pre'"),
        (TraceConfig, ["--kinds", "mlp,embed"], "argument --kinds: must hold values from"),
    ]:
        parser = argparse.ArgumentParser()
        cls.add_arguments(parser)
        with pytest.raises(SystemExit) as stop:
            parser.parse_args(argv)
        assert stop.value.code == 2 and message in capsys.readouterr().err, argv
    parser = argparse.ArgumentParser()
    GenerationConfig.add_arguments(parser)
    assert GenerationConfig.from_args(parser.parse_args(["--top-p", "none"])).top_p is None


def test_a_nested_config_gives_its_fields_as_flags_with_the_outer_defaults() -> None:
    from lmsci_mi.steering import SteerEvalConfig

    parser = argparse.ArgumentParser()
    add_config_args(parser, SteerEvalConfig, defaults={"seed": 7})
    default = config_from_args(SteerEvalConfig, parser.parse_args([]))
    assert default == SteerEvalConfig(generation=SteerEvalConfig().generation.replace(seed=7))
    argv = ["--max-new-tokens", "5", "--top-p", "none", "--n-prompts", "3"]
    given = config_from_args(SteerEvalConfig, parser.parse_args(argv))
    assert given.n_prompts == 3
    assert given.generation == GenerationConfig(max_new_tokens=5, top_p=None, seed=7, batch_size=64)

    @config
    class Clash(Config):
        seed: int = 0
        generation: GenerationConfig = field(default_factory=GenerationConfig)

    with pytest.raises(TypeError, match=r"Clash and its nested GenerationConfig both have \['seed'\]"):
        Clash.add_arguments(argparse.ArgumentParser())


def test_moved_fields_still_work_as_deprecated_keywords_and_attributes() -> None:
    from lmsci_mi.sae import FrequencyConfig
    from lmsci_mi.steering import SteerEvalConfig

    with pytest.warns(DeprecationWarning, match=r"max_new_tokens -> generation\.max_new_tokens"):
        old = SteerEvalConfig(max_new_tokens=4, seed=3, n_prompts=2)
    sampling = GenerationConfig(max_new_tokens=4, top_p=0.9, seed=3, batch_size=64)
    assert old == SteerEvalConfig(n_prompts=2, generation=sampling)
    with pytest.warns(DeprecationWarning, match="top_p -> generation.top_p"):
        assert old.replace(top_p=0.5).generation == sampling.replace(top_p=0.5)
    with pytest.warns(DeprecationWarning, match="seed -> generation.seed"):
        assert old.seed == 3
    with pytest.warns(DeprecationWarning, match=r"new_tokens -> generation\.max_new_tokens"):
        frequency = FrequencyConfig(new_tokens=6, coefficient=8.0)
    assert frequency.generation == GenerationConfig(max_new_tokens=6, top_p=0.9, batch_size=64)
    with pytest.raises(TypeError, match="max_tokens"):  # a name that never was a field
        SteerEvalConfig(max_tokens=4)  # type: ignore[call-arg]


# ---------------------------------------------------------------------- no range check by hand

_RANGE = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _reads_a_field(node: ast.AST, loop_names: set[str]) -> bool:
    """``self.x``, ``getattr(self, ...)``, or a loop variable (``for name in ...``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and getattr(sub.value, "id", None) == "self":
            return True
        if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "getattr":
            return True
        if isinstance(sub, ast.Name) and sub.id in loop_names:
            return True
    return False


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float))


def _compares_a_field_with_a_number(test: ast.AST, loop_names: set[str]) -> bool:
    for compare in (n for n in ast.walk(test) if isinstance(n, ast.Compare)):
        sides = [compare.left, *compare.comparators]
        for op, a, b in zip(compare.ops, sides, sides[1:], strict=False):
            if isinstance(op, _RANGE) and (
                (_reads_a_field(a, loop_names) and _is_number(b))
                or (_is_number(a) and _reads_a_field(b, loop_names))
            ):
                return True
    return False


def _range_checks(source: str, filename: str = "<source>") -> list[str]:
    """Places where a ``validate()`` compares one field with a number and raises, or calls
    ``validate_choice``: a bound or choices the field should declare instead."""
    found = set()
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for method in cls.body:
            if not (isinstance(method, ast.FunctionDef) and method.name == "validate"):
                continue
            loops = (n for n in ast.walk(method) if isinstance(n, (ast.For, ast.comprehension)))
            loop_names = {
                t.id for n in loops for t in ast.walk(n.target) if isinstance(t, ast.Name)
            }
            for node in ast.walk(method):
                if isinstance(node, ast.If):
                    hit = any(isinstance(n, ast.Raise) for n in node.body) and (
                        _compares_a_field_with_a_number(node.test, loop_names)
                    )
                else:
                    hit = isinstance(node, ast.Call) and (
                        getattr(node.func, "id", "") == "validate_choice"
                    )
                if hit:
                    found.add(f"{filename}:{getattr(node, 'lineno', 0)} {cls.name}.validate")
    return sorted(found)


def test_the_detector_finds_range_checks_written_by_hand() -> None:
    old = """
class A(Config):
    def validate(self):
        if self.n < 1:
            raise ValueError("n must be at least 1")
        for name in ("a", "b"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(name)
        if self.layers is not None and any(layer < 0 for layer in self.layers):
            raise ValueError("layers")
        validate_choice("site", self.site, SITES)
        if self.k > self.d_sae:  # across fields: fine
            raise ValueError("k")
"""
    lines = {hit.split()[0] for hit in _range_checks(old)}
    assert lines == {f"<source>:{n}" for n in (4, 7, 9, 11)}


def test_no_config_checks_a_field_range_by_hand() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        for hit in _range_checks(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert not found, f"declare these as bounds in the field's metadata (ge=, choices=...): {found}"
    assert not re.search(r"def check_fit_settings", (PACKAGE / "editing" / "fit.py").read_text())
