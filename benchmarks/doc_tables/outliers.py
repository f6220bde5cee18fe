"""Renderers of docs/outliers.md (issue 40), from docs/data/outliers_anatomy_<model>.json
(benchmarks/outliers_anatomy.py) and docs/data/outliers_length_<model>.json
(benchmarks/outliers_length.py), and of the short-context LM (docs/data/short_context_lm.json,
benchmarks/short_context_lm.py). Every block lists one file per model; a file not written yet
renders as "not yet: <the command that writes it>", so the page shows what is measured and what
is still to run."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from . import MODEL_NAMES, ci, markdown, num, table
from .schemas.outliers import Estimate, OutliersAnatomyData, OutliersLengthData, RiseRecord, Spread
from .schemas.short_context_lm import Difference, ShortLMData

ANATOMY = "PYTHONPATH=. python benchmarks/outliers_anatomy.py --model {model} --threads 1"
LENGTH = "PYTHONPATH=. python benchmarks/outliers_length.py --model {model} --threads 1{extra}"
LENGTH_EXTRA = {"gemma3-270m": " --max-length 16384"}
"""Flags a model's length run needs: twice Gemma 3's 32,768 trained tokens is days at one thread here."""


def runs(data: Any) -> list[tuple[str, Any]]:
    """``(model, document or None)`` per file of a block: one document, or several keyed by their
    file stems (``outliers_anatomy_<model>``); a file not written yet is None."""
    if isinstance(data, dict) and all(str(k).startswith("outliers_") for k in data):
        return [(stem.split("_", 2)[2], doc) for stem, doc in data.items()]
    return [(data["model"], data)]


def model_name(model: str) -> str:
    return MODEL_NAMES.get(model, model)


def command_for(command: str, model: str) -> str:
    return command.format(model=model, extra=LENGTH_EXTRA.get(model, ""))


def not_yet(command: str, model: str, cells: int) -> list[str]:
    return [model_name(model), f"not yet: `{command_for(command, model)}`", *[""] * (cells - 2)]


def per_model(data: Any, header: list[str], needs: str | None, command: str,
              rows_of: Callable[[str, Any], list[list[str]]]) -> str:
    """A table of each model's rows, or its "not yet" row when its file lacks ``needs`` (None: any file)."""
    rows: list[list[str]] = []
    for model, doc in runs(data):
        if doc is None or (needs is not None and needs not in doc):
            rows.append(not_yet(command, model, len(header)))
        else:
            rows += rows_of(model, doc)
    return markdown(header, rows)


def per_model_lines(data: Any, needs: str | None, command: str, lines_of: Callable[[str, Any], list[str]]) -> str:
    """Bullet lines of each model, or its "not yet" line when its file lacks ``needs``."""
    lines: list[str] = []
    for model, doc in runs(data):
        if doc is None or (needs is not None and needs not in doc):
            lines.append(f"- {model_name(model)}: not yet: `{command_for(command, model)}`")
        else:
            lines += lines_of(model, doc)
    return "\n".join(lines)


def token(text: str) -> str:
    """A token as code, its whitespace escaped (``\\n``) and a table's ``|`` too."""
    shown = json.dumps(text, ensure_ascii=False)[1:-1].replace("|", "\\|").replace("`", "'")
    return f"`{shown}`" if shown.strip() else f"`{shown}` (space)"


def interval(e: Estimate | None, digits: int = 3) -> str:
    return "–" if e is None else ci(e["estimate"], e["low"], e["high"], digits)


def spread(s: Spread, digits: int = 3) -> str:
    """A control's mean and range over its draws."""
    if len(s["draws"]) == 1:
        return f"{s['mean']:.{digits}f} (1 draw)"
    return f"{s['mean']:.{digits}f} ({s['low']:.{digits}f}–{s['high']:.{digits}f}, {len(s['draws'])} draws)"


def big(x: float) -> str:
    """A size across orders of magnitude: 3 significant digits, thousands separated."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


# ----------------------------------------------------------------------------- massive activations


@table("outliers_massive", missing_ok=True)
def outliers_massive(data: Any) -> str:
    """Per model, each massive dimension at each kind of position: its layers, its peak layer's mean
    value and the largest |value| / median there, and in how many texts it is there."""
    header = ["model", "dim", "where (token)", "layers", "peak layer", "value at peak", "× median", "texts"]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        m = doc["massive"]
        if not m["rows"]:
            rows.append([model_name(model), "none", f"no entry reaches {m['config']['ratio']:g} × the median",
                         "", "", "", "", ""])
        for r in m["rows"]:
            layers = r["layers"]
            span = f"{layers[0]}–{layers[-1]}" if len(layers) > 1 else str(layers[0])
            where = f"{r['role']} ({token(r['token'])}" + (f", {r['n_tokens']} tokens)" if r["n_tokens"] > 1 else ")")
            rows.append([model_name(model), str(r["dim"]), where, span, str(r["peak_layer"]), big(r["value"]),
                         big(r["ratio"]), f"{r['n_texts']} of {r['n_role_texts']}"])
        return rows

    return per_model(data, header, "massive", ANATOMY, rows_of)


def _massive_finding(model: str, doc: OutliersAnatomyData) -> str:
    m = doc["massive"]
    rule = f"|a| > {m['config']['threshold']:g} and ≥ {m['config']['ratio']:,.0f} × the median"
    head = (f"- {model_name(model)} ({m['n_texts']} texts of {m['seq_len']} tokens; the sink "
            f"{token(m['sink']) if m['sink'] else '(none)'} at position 0 in {m['sink_at_zero']} of them): ")
    if m["rule_used"] == "none":
        largest = max(layer["top"][0] / max(layer["median"], 1e-30) for layer in m["layers"])
        return head + f"no activation reaches {m['config']['ratio']:,.0f} × its median (the largest: {big(largest)} ×)."
    top = m["largest"]
    where = ", ".join(f"{role} in {hit} of {having}" for role, (hit, having) in m["roles"].items() if hit)
    if m["rule_used"] == "paper":
        count = f"{m['n_paper']} entries meet the paper's rule ({rule}), {m['n_ratio_only']} the ratio alone"
    else:
        count = (f"no entry meets the paper's rule ({rule}): its |a| > {m['config']['threshold']:g} never holds "
                 f"with the ratio, so the ratio alone is used ({m['n_ratio_only']} entries)")
    return (head + f"{count}. The largest is layer {top['layer']}, dimension {top['dim']}, at {token(top['token'])} "
            f"({top['role']}): {big(top['value'])}, {big(top['ratio'])} × the median. Texts with an entry: {where}.")


@table("outliers_massive_findings", missing_ok=True)
def outliers_massive_findings(data: Any) -> str:
    """One sentence per model: how many entries meet which rule, the largest, and where they sit."""
    return per_model_lines(data, "massive", ANATOMY, lambda model, doc: [_massive_finding(model, doc)])


# ----------------------------------------------------------------------------- super weights


@table("outliers_super_weights", missing_ok=True)
def outliers_super_weights(data: Any) -> str:
    """The candidates in Yu et al.'s coordinates with their spikes, the rule that found them and the
    pass (0: the unedited model)."""
    header = ["model", "(layer, row, col)", "weight", "input spike", "output spike", "at token (position)",
              "rule", "pass"]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        s = doc["super_weights"]
        if not s["candidates"]:
            rows.append([model_name(model), "none", "", "", "", "", f"threshold {s['threshold']:g} and ratio "
                         f"{s['ratio']:g}: {s['stop_reason']}", ""])
        for c in s["candidates"]:
            rule = (f"|spikes| > {s['threshold']:g}" if s["rule_used"] == "threshold"
                    else f"spikes ≥ {s['ratio']:g} × median")
            rows.append([model_name(model), f"({c['layer']}, {c['row']}, {c['col']})", f"{c['weight']:.4g}",
                         big(c["input_spike"]), big(c["output_spike"]), f"{token(c['token'])} ({c['position']})",
                         rule, str(c["iteration"])])
        return rows

    return per_model(data, header, "super_weights", ANATOMY, rows_of)


# ----------------------------------------------------------------------------- ablations


@table("outliers_ablations", missing_ok=True)
def outliers_ablations(data: Any) -> str:
    """Each ablation's perplexity ratio (paired bootstrap over texts) and fact / IOI accuracy
    (Wilson), beside its random control's mean and range over the draws; the clean model first."""
    header = ["model", "ablation", "perplexity ratio [95% CI]", "random control", "facts top-1", "control",
              "IOI IO > S", "control"]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        a = doc["ablations"]
        clean = a["clean"]
        rows.append([model_name(model), f"clean ({a['n_texts']} texts of {a['seq_len']} tokens; perplexity "
                     f"{interval(clean['perplexity'], 2)})", "1", "", interval(clean["fact_accuracy"], 2), "",
                     interval(clean["ioi_accuracy"], 2), ""])
        for r in a["rows"]:
            rows.append([model_name(model), r["intervention"], interval(r["perplexity_ratio"]), spread(r["control_ratio"]),
                         interval(r["fact_accuracy"], 2), spread(r["control_fact_accuracy"], 2),
                         interval(r["ioi_accuracy"], 2), spread(r["control_ioi_accuracy"], 2)])
        return rows

    return per_model(data, header, "ablations", ANATOMY, rows_of)


def _against(r: dict) -> str:
    """How an ablation's perplexity interval sits against its control draws."""
    e, c = r["perplexity_ratio"], r["control_ratio"]
    if e["low"] > c["high"]:
        return "above every control draw"
    if e["high"] < c["low"]:
        return "below every control draw"
    return "not apart from its controls"


def _ablation_finding(model: str, doc: OutliersAnatomyData) -> list[str]:
    a = doc["ablations"]
    lines = [f"- {model_name(model)} ({a['n_texts']} held-out texts):"]
    sweep = [r for r in a["rows"] if r["group"] == "scale sweep"]
    for r in a["rows"]:
        if r["group"] != "scale sweep":
            e = r["perplexity_ratio"]
            lines.append(f"  - {r['intervention']}: perplexity × {big(e['estimate'])} [{big(e['low'])}, "
                         f"{big(e['high'])}], {_against(r)} (mean × {big(r['control_ratio']['mean'])}); facts "
                         f"{num(r['fact_accuracy']['estimate'], 2)} against {num(a['clean']['fact_accuracy']['estimate'], 2)} clean.")
    if sweep:
        steps = ", ".join(f"{r['intervention'].rsplit(' ', 1)[-1]} → × {big(r['perplexity_ratio']['estimate'])}"
                          for r in sweep)
        lines.append(f"  - Yu et al.'s sweep of the top candidate (scale → perplexity ratio): {steps}.")
    return lines


@table("outliers_ablation_findings", missing_ok=True)
def outliers_ablation_findings(data: Any) -> str:
    """Per model and ablation: the perplexity ratio and where it sits against the control draws."""
    return per_model_lines(data, "ablations", ANATOMY, _ablation_finding)


# ----------------------------------------------------------------------------- sinks


@table("outliers_sink_heads", missing_ok=True)
def outliers_sink_heads(data: Any) -> str:
    """The top sink heads: attention mass on the first k positions with the sink token and without
    it (the same rows, the sink column removed), and the paired difference ± its standard error."""
    header = ["model", "head", "mass on the first k, with the sink", "without it", "difference ± s.e."]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        s = doc["sinks"]
        for h in s["top"]:
            rows.append([f"{model_name(model)} (k = {s['k']}, {s['n_texts']} texts)", h["head"], num(h["with_sink"], 3),
                         num(h["without_sink"], 3), f"{h['difference']:+.3f} ± {h['se']:.3f}"])
        return rows

    return per_model(data, header, "sinks", ANATOMY, rows_of)


@table("outliers_first_token_mask", missing_ok=True)
def outliers_first_token_mask(data: Any) -> str:
    """Held-out NLL change (nats per token) when heads cannot attend to the first k tokens."""
    header = ["model", "masked", "NLL change [95% CI]"]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        mask = doc["sinks"]["mask"]
        name = f"{model_name(model)} (clean NLL {interval(mask['clean'])}, {mask['n_texts']} texts)"
        n = len(mask["heads"])
        entries = [*mask["each_head"].items(), (f"the {n} heads together", mask["together"]),
                   (f"{n} random heads (mean of {len(mask['random_heads'])} draws)", mask["random"]),
                   ("together − random", mask["together_minus_random"]), ("every head", mask["every_head"])]
        rows += [[name, label, interval(e)] for label, e in entries if e is not None]
        return rows

    return per_model(data, header, "sinks", ANATOMY, rows_of)


# ----------------------------------------------------------------------------- consequences


def _picked(items: Sequence[Any], n: int = 5) -> list[Any]:
    """About ``n`` items spread evenly, the first and the last included."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


@table("outliers_consequences", missing_ok=True)
def outliers_consequences(data: Any) -> str:
    """The SAE's explained variance and the logit lens's KL over every position and without the
    massive activations' positions, with paired bootstrap intervals over texts (the lens: five
    layers spread over the depth)."""
    header = ["model", "measure", "all positions", "without the massive ones", "difference"]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        for key, what in (("sae", "SAE explained variance"), ("lens", "logit-lens KL, layer")):
            c = doc["consequences"][key]
            if "not_run" in c:
                rows.append([model_name(model), what.split(",")[0], f"not measured: {c['not_run']}", "", ""])
                continue
            chosen = c["rows"] if key == "sae" else _picked(c["rows"])
            for r in chosen:
                label = what if key == "sae" else f"{what} {r['item']}"
                rows.append([model_name(model), label, interval(r["all"]), interval(r["kept"]),
                             interval(r["difference"])])
        return rows

    return per_model(data, header, "consequences", ANATOMY, rows_of)


# ----------------------------------------------------------------------------- length


@table("outliers_context", missing_ok=True)
def outliers_context(data: Any) -> str:
    """Each model's trained context length and the facts around it, with their source."""
    header = ["model", "trained length", "declared context", "TransformerLens n_ctx", "rotary base (global / local)",
              "sliding window", "source"]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        c = doc["trained_context"]
        bases = " / ".join(f"{b:,.0f}" for b in (c["rotary_base"], c["rotary_base_local"]) if b is not None)
        rows.append([model_name(model), f"{c['trained_length']:,}", "–" if c["max_position_embeddings"] is None
                     else f"{c['max_position_embeddings']:,}", f"{c['n_ctx']:,}", bases or "–",
                     "–" if c["sliding_window"] is None else f"{c['sliding_window']:,}", c["source"]])
        return rows

    return per_model(data, header, None, LENGTH, rows_of)


def _rise(r: RiseRecord, limit: int) -> str:
    if not r.get("applied", True):
        return "not tested (one text; the rule's standard error is over texts)"
    if not r["window_ends"]:
        return "– (no window past the in-context range)"
    return f"{r['length']:,}" if r["length"] is not None else f"no rise up to {limit:,}"


@table("outliers_nll_rise", missing_ok=True)
def outliers_nll_rise(data: Any) -> str:
    """Where the NLL starts to rise (the first window past the in-context range whose mean exceeds
    the in-context mean by n_se standard errors over texts), without and with the Λ-mask."""
    header = ["model", "texts × tokens", "trained length", "in-context NLL", "NLL rises at, no mask",
              "with the Λ-mask", "last window's NLL, no mask / mask"]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        if "nll" not in doc:  # a run with --n-texts 0
            return [[model_name(model), f"not run: this model's file holds the attention curves alone "
                     f"(--n-texts 0); the NLL takes two passes of {doc['max_length']:,} tokens per text"]
                    + [""] * (len(header) - 2)]
        n, trained = doc["nll"], doc["trained_context"]["trained_length"]
        w, m = n["without"], n["with_mask"]
        mask = n["mask"]
        last = (f"{w['window_mean'][-1]:.3f} / {m['window_mean'][-1]:.3f}" if w["window_mean"] else "–")
        rows.append([model_name(model), f"{n['n_texts']} × {n['max_length']:,}", f"{trained:,}",
                     f"{w['in_context_mean']:.3f} (positions {w['in_context'][0]}–{w['in_context'][1] - 1})",
                     _rise(w, n["max_length"]), f"{_rise(m, n['max_length'])} (window {mask['local_window']:,}, "
                     f"first {mask['n_global']}, cap {mask['distance_cap']:,})", last])
        return rows

    return per_model(data, header, None, LENGTH, rows_of)


def _at(curve: dict, layer: int, x: int) -> float:
    """The curve's mean at the grid point nearest ``x``."""
    i = min(range(len(curve["x"])), key=lambda k: abs(curve["x"][k] - x))
    return curve["mean"][layer][i]


def _nll_finding(n: Any, length: int) -> str:
    """Where the NLL starts to rise; with one text (the rule not tested), how far above the
    in-context mean its windows lie."""
    w, m = n["without"], n["with_mask"]
    if w.get("applied", True):
        return (f"- NLL by position ({n['n_texts']} texts): it starts to rise at {_rise(w, length)} without the "
                f"mask and at {_rise(m, length)} with the Λ-mask (rule: a {w['window']}-token window's mean above "
                f"the in-context mean by {w['n_se']:g} standard errors over texts).")
    if not w["excess"]:
        return "- NLL by position (one text): no window past the in-context range."

    def mean(r: Any) -> float:
        return sum(r["excess"]) / len(r["excess"])

    return (f"- NLL by position (one text, so the rise rule, whose standard error is over texts, is not tested): "
            f"past the trained length its {len(w['excess'])} windows of {w['window']} tokens lie on average "
            f"{mean(w):+.3f} nats from the in-context mean ({w['in_context_mean']:.3f}) without the mask and "
            f"{mean(m):+.3f} with the Λ-mask; the last window {w['excess'][-1]:+.3f} and {m['excess'][-1]:+.3f}.")


def _length_finding(model: str, doc: OutliersLengthData) -> list[str]:
    trained, length = doc["trained_context"]["trained_length"], doc["max_length"]
    logit, entropy = doc["curves"]["max_logit"], doc["curves"]["entropy"]
    n_layers = len(logit["layers"])
    grows = [_at(logit, i, length) - _at(logit, i, trained) for i in range(n_layers)]
    more = [_at(entropy, i, length) - _at(entropy, i, trained) for i in range(n_layers)]
    texts = f"{logit['n_texts']} text{'s' if logit['n_texts'] != 1 else ''}"
    lines = [f"- {model_name(model)}, {texts} of {length:,} tokens (trained length {trained:,}): "
             f"between distance {trained:,} and {length - 1:,} the running maximum attention logit grows in "
             f"{sum(g > 0 for g in grows)} of {n_layers} layers (by at most {max(grows):.2f}); the attention "
             f"entropy of the last window is above that at {trained:,} in {sum(m > 0 for m in more)} of {n_layers} "
             f"layers (by at most {max(more):.2f} nats)."]
    if "nll" in doc:
        lines.append(_nll_finding(doc["nll"], length))
    return lines


@table("outliers_length_findings", missing_ok=True)
def outliers_length_findings(data: Any) -> str:
    """Per model: do the max logit and the entropy grow past the trained length, and where the NLL
    starts to rise with and without the mask."""
    return per_model_lines(data, None, LENGTH, _length_finding)


@table("outliers_curves", missing_ok=True)
def outliers_curves(data: Any) -> str:
    """Per layer (about eight spread over the depth): the running max attention logit at the trained
    length and at the longest distance, the entropy there, and the first tokens' separation."""
    header = ["model", "layer", "max logit at trained length", "at the longest", "entropy at trained length",
              "at the longest", "first tokens' separation"]
    def rows_of(model: str, doc: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        trained, length = doc["trained_context"]["trained_length"], doc["max_length"]
        logit, entropy, sep = doc["curves"]["max_logit"], doc["curves"]["entropy"], doc["separation"]
        for i in _picked(range(len(logit["layers"])), 8):
            separation = sep["mean"][i] if i < len(sep["mean"]) else math.nan
            rows.append([model_name(model), logit["layers"][i], num(_at(logit, i, trained), 2),
                         num(_at(logit, i, length), 2), num(_at(entropy, i, trained), 2),
                         num(_at(entropy, i, length), 2), num(separation, 2)])
        return rows

    return per_model(data, header, None, LENGTH, rows_of)


# ----------------------------------------------------------------------------- figures

FIGURE_TEXT = {
    "massive": "the largest |activations| and the median per layer, log scale (Sun et al.'s Fig. 2 layout)",
    "super_weights": "the largest down-projection input and output per layer, and with the candidates removed",
    "ablations": "perplexity ratio of each ablation (95% bootstrap) and its random control draws",
    "attention": "running max attention logit by distance and attention entropy by position per layer, "
                 "the trained length dashed; the first tokens' separation by layer",
    "nll": "NLL by position without and with the Λ-mask, the trained length dashed, each rise dotted",
}


def _figures(data: Any, command: str) -> str:
    """Each figure of each model as an image (paths relative to docs/), a blank line apart."""

    def images(model: str, doc: Any) -> list[str]:
        return [f"![{model_name(model)}: {FIGURE_TEXT.get(key, key)}]({path.removeprefix('docs/')})\n"
                for key, path in doc["figures"].items()]

    return per_model_lines(data, "figures", command, images).rstrip("\n")


@table("outliers_anatomy_figures", missing_ok=True)
def outliers_anatomy_figures(data: Any) -> str:
    """The anatomy benchmark's figures, each model's once its data file names them."""
    return _figures(data, ANATOMY)


@table("outliers_length_figures", missing_ok=True)
def outliers_length_figures(data: Any) -> str:
    """The length benchmark's figures, each model's once its data file names them."""
    return _figures(data, LENGTH)


def _gap(d: Difference) -> str:
    return ci(d["estimate"], d["ci95"][0], d["ci95"][1], 3)


def _span(d: Difference) -> str:
    return f"{d['first'][0]:,}–{d['first'][1] - 1:,} minus {d['second'][0]:,}–{d['second'][1] - 1:,}"


@table("short_context_lm")
def short_context_lm(data: ShortLMData) -> str:
    """The short-context LM: what it is, what its training cost, and what its held-out NLL shows
    inside and beyond the trained length (paired differences over the same rows)."""
    c, t = data["config"], data["training"]
    rows = [
        ["model", f"{c['n_layers']} layers, d_model {c['d_model']}, {c['n_heads']} heads "
                  f"({c['n_key_value_heads']} key-value), rotary base {c['rotary_base']:,.0f}; bytes as tokens"],
        ["training", f"{t['steps']:,} steps of {c['batch_size']} rows × {data['trained_context']} tokens "
                     f"({t['tokens']:,} tokens) of `{data['data']}`; AdamW lr {c['lr']}, seed {c['seed']}"],
        ["cost", f"{t['seconds'] / 60:,.0f} min wall, {t['cpu_seconds'] / 60:,.0f} min CPU ({t['label']})"],
        ["final training loss", f"{t['final_loss']:.3f} nats per byte (mean of the last 100 steps)"],
        ["held-out rows", f"{data['n_rows']} rows of {data['eval_length']:,} tokens (8× the trained length)"],
        ["in-context gain (NLL, positions " + _span(data["in_context_gain"]) + ")", _gap(data["in_context_gain"])],
        ["long-context gain (" + _span(data["long_context_gain"]) + ")", _gap(data["long_context_gain"])],
        ["beyond the trained length (" + _span(data["beyond_training"]) + ")", _gap(data["beyond_training"])],
    ]
    return markdown(["", "short-context LM"], rows)
