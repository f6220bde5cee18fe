"""Renderers of README.md's overview: published vs measured, and the attention sink.

The published column quotes papers (their table or figure, or "no published figure") and is held
here as text; every number in the measured column is read from the data file its benchmark
writes. A row whose measurement has no data file is not rendered here: the README keeps such rows
by hand, in a table of their own below this one.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Callable

from . import METHOD_NAMES, bold, ci, markdown, minus, num, pm, table
from .circuits import AIE_MODELS, EAP_IG_STEPS, aie_groups, published_near, published_source
from .project import framing
from .schemas.circuits import SinkData
from .schemas.editing import EditingTableData, RomeLayersData, SequentialEditingData
from .schemas.knowledge import KnowledgeNeuronsData
from .schemas.probes import CFGProbesData, ProbesData
from .schemas.project import ModelCardsData, PublishedEAPData
from .schemas.representations import ConceptsData, ReadingData
from .schemas.sae import SAEHeldoutData
from .schemas.steering import SteeringCompareData, SteeringData

# ------------------------------------------------------------------------------ attention sink

SINK_LABELS = {
    "default": "sink `<\\|endoftext\\|>` (default)",
    "none": "no sink (`sink=None`)",
    "<|im_start|>": "sink `<\\|im_start\\|>`",
}


def _quoted(text: str) -> str:
    return f'" {text[1:]}"' if text.startswith(" ") else f'"{text}"'


@table("sink")
def sink(data: SinkData) -> str:
    """benchmarks/sink.py: two IOI prompts, the Eiffel prompt and the 24 IOI prompts per sink."""
    runs = data["runs"]
    first = next(iter(runs.values()))
    hand, tour = first["hand_written"], first["tour"]
    n = data["ioi_prompts"]["n"]

    def diff(x: float) -> str:
        return minus(f"{x:+.2f}")

    rows = []
    for label, r in runs.items():
        d = r["ioi_prompts"]
        rows.append([
            SINK_LABELS.get(label, f"sink `{label}`"), diff(r["hand_written"]["logit_diff"]),
            _quoted(r["hand_written"]["top_token"]), diff(r["tour"]["logit_diff"]),
            num(r["p_paris"], 2), f"{minus(pm(d['mean'], d['se'], 2))} ({d['n_positive']} of {d['n']})",
        ])
    return markdown(
        [f'"{hand["prompt"]}"', f"logit({_quoted(hand['io'])}) − logit({_quoted(hand['s'])})",
         "top token", f'tour\'s prompt "{tour["prompt"]}": logit({_quoted(tour["io"])}) − '
         f"logit({_quoted(tour['s'])})", 'p(" Paris") after "The Eiffel Tower is located in the city of"',
         f"{n} IOI prompts of docs/ioi.md: logit(IO) − logit(S), mean ± s.e. (positive)"],
        rows,
    )


# ------------------------------------------------------------------------ published vs measured


def _with_ci(value: float, interval: list[float], digits: int = 1) -> str:
    """``value [low, high]``, or the value alone when the interval is that one point."""
    low, high = interval
    if num(low, digits) == num(high, digits) == num(value, digits):
        return num(value, digits)
    return ci(value, low, high, digits)


def _rome(docs: dict) -> str:
    data: RomeLayersData = docs["rome_layers"]
    layers = data["layers"]
    best = str(data["best_layer_by_S"])
    b = layers[best]
    cells = " / ".join(_with_ci(b[m], b[f"{m}_ci"]) for m in ("ES", "PS", "NS"))
    swept = [int(layer) for layer in layers]
    falls = next((int(layer) for layer, r in layers.items()
                  if int(layer) > int(best) and r["NS"] < b["NS"]), None)
    last = str(max(swept))
    fall = ("" if falls is None else
            f"; NS falls from layer {falls} on ({num(layers[last]['NS'], 1)} at layer {last})")
    u = b["unedited"]
    return (f"{b['n_facts']} facts, one edit at a time, layer {best} (the best S of a layer sweep over "
            f"layers {min(swept)}–{max(swept)}): {cells} ({_with_ci(b['S'], b['S_ci'])}){fall}. "
            f"Unedited: {num(u['ES'], 1)} / {num(u['PS'], 1)} / {num(u['NS'], 1)} (the facts are "
            "ones the model knows)")


METHOD_ORDER = ("memit", "alphaedit", "rome")


def _current(rows: list[dict]) -> list[dict]:
    """The table's rows at today's defaults: the unedited model and the '<method>-before-38' rows
    (the paired comparison's other side, on docs/editing.md) left out."""
    return [r for r in rows if r["model"] != "unedited" and not r["model"].endswith("-before-38")]


def _ordered(names) -> list[str]:
    names = list(names)
    return [m for m in METHOD_ORDER if m in names] + [m for m in names if m not in METHOD_ORDER]


def _batch_what(docs: dict) -> str:
    data: EditingTableData = docs["editing_table"]
    names = _ordered(r["model"] for r in _current(data["rows"]))
    methods = [METHOD_NAMES.get(m, m) for m in names]
    listed = ", ".join(methods[:-1]) + f" and {methods[-1]}" if len(methods) > 1 else methods[0]
    return f"{listed}, edits on one model: ES / PS / NS (S)"


def _batch(docs: dict) -> str:
    data: EditingTableData = docs["editing_table"]
    rows = {r["model"]: r for r in _current(data["rows"])}
    parts, negation = [], []
    for name in _ordered(rows):
        r = rows[name]
        how = ("one batch" if r["n_edits"] == 1 else
               "one fact at a time" if r["n_edits"] == r["n_facts"] else f"{r['n_edits']} batches")
        facts = "" if r["n_facts"] == data["n_facts"] else f", {r['n_facts']} facts"
        m = r["metrics"]
        parts.append(f"{METHOD_NAMES.get(name, name)} ({how}{facts}) {num(m['ES'], 1)} / "
                     f"{num(m['PS'], 1)} / {num(m['NS'], 1)} ({ci(m['S'], *r['ci95']['S'], 1)})")
        if "NEG" in m:
            negation.append(f"{num(m['NEG'], 1)} % ({METHOD_NAMES.get(name, name)})")
    layers = {str(c.get("layers")) for c in data.get("configs", {}).values()}
    where = "the default layers" if layers <= {"None"} else f"layers {', '.join(sorted(layers))}"
    text = f"{data['n_facts']} facts, {where}: " + "; ".join(parts)
    if negation:
        text += (f"; the negated prompt follows the edit on {' and '.join(negation)} of facts "
                 "(the negation curse)")
    return text


def _sequential(docs: dict) -> str:
    data: SequentialEditingData = docs["sequential_editing"]
    methods = data["methods"]
    names = _ordered(methods)
    common = min(max(methods[m]["n_edited"]) for m in names)

    def at(name: str, edits: int) -> int:
        return methods[name]["n_edited"].index(edits)

    def values(metric: str, edits: int) -> str:
        return ", ".join(num(methods[m]["metrics"][metric][at(m, edits)], 1) for m in names)

    def spread(metric: str, edits: int) -> str:
        return num(max(methods[m]["se"][metric][at(m, edits)] for m in names), 1)

    def how(name: str) -> str:
        b = methods[name]["batch_size"]
        return f"{METHOD_NAMES.get(name, name)} " + ("one at a time" if b == 1 else f"in batches of {b}")

    first = methods[names[0]]
    n_ns = first["n"]["NS"][at(names[0], common)]
    unedited = first["metrics"]["GE"][0]
    text = (
        f"SmolLM2, never restored, {', '.join(how(m) for m in names)}: after {common} edits "
        f"ES {values('ES', common)}; NS {values('NS', common)} ({n_ns} neighbour prompts, ± about "
        f"{spread('NS', common)}); the original model's top-1 kept on "
        f"{values('specificity', common)} % of them (± about {spread('specificity', common)}); "
        f"GE {values('GE', common)} (unedited {num(unedited, 1)}), in the order {', '.join(METHOD_NAMES.get(m, m) for m in names)}"
    )
    further = [m for m in names if max(methods[m]["n_edited"]) > common]
    if further:
        parts = []
        for m in further:
            c = methods[m]
            end = max(c["n_edited"])
            i = at(m, end)
            parts.append(f"{METHOD_NAMES.get(m, m)} at {end} ES {num(c['metrics']['ES'][i], 1)}, NS "
                         f"{num(c['metrics']['NS'][i], 1)}, top-1 kept {num(c['metrics']['specificity'][i], 1)} %, "
                         f"GE {num(c['metrics']['GE'][i], 1)}")
        text += ". Further: " + "; ".join(parts)
        ends = {max(methods[m]["n_edited"]) for m in further}
        if len(further) == 2 and len(ends) == 1:
            end = ends.pop()
            kept = [round(methods[m]["metrics"]["specificity"][at(m, end)] / 100 * methods[m]["n"]["specificity"][at(m, end)])
                    for m in further]
            n = methods[further[0]]["n"]["specificity"][at(further[0], end)]
            hi, lo = (0, 1) if kept[0] >= kept[1] else (1, 0)
            text += (f" ({METHOD_NAMES.get(further[hi], further[hi])} keeps the top-1 on "
                     f"{kept[hi] - kept[lo]} more of the {n} prompts)")
    unfinished = [m for m in names if not methods[m].get("complete", True)]
    if unfinished:
        text += "; " + "; ".join(
            f"{METHOD_NAMES.get(m, m)} past {max(methods[m]['n_edited'])} still to run" for m in unfinished
        )
    return text


def _eap(docs: dict) -> str:
    data = docs["edges"]
    fractions = data["fractions"]

    def at(curve: dict, fraction: float) -> int:
        return fractions.index(fraction)

    ig, eap = data["curve_EAP-IG_greedy"], data["curve_EAP_greedy"]
    i1, i5 = at(ig, 1.0), at(ig, 5.0)
    movers = ", ".join(head for head, _ in data["name_movers_dla"])
    inside = "are" if data["eap_ig_5pct"]["has_name_movers"] else "are not both"
    card = docs["model_cards"]["models"][data["model"]]
    heads, total = len(data["eap_ig_5pct"]["heads"]), card["n_layers"] * card["n_heads"]
    return (
        f"SmolLM2, {data['prompts']} prompts, {data['edges']:,} edges: EAP-IG (m = {EAP_IG_STEPS}) greedy "
        f"{num(ig['faithfulness'][i1], 2)} at 1 %, {ci(ig['faithfulness'][i5], *ig['ci95'][i5], 2)} at 5 % "
        f"({ig['kept'][i5]:,} edges), CPR {num(ig['cpr'], 3)}, CMD {num(ig['cmd'], 3)}; EAP "
        f"{num(eap['faithfulness'][i1], 2)} at 1 %, {num(eap['faithfulness'][i5], 2)} at 5 %; the two "
        f"strongest name movers by DLA ({movers}) {inside} in the 5 % circuit, which holds {heads} of the "
        f"{total} heads ({100 * heads / total:.0f} %), so this says little"
    )


def _eap_published(docs: dict) -> str:
    data: PublishedEAPData = docs["published_eap_ig"]
    total = data["total_edges"]

    def at(method: str, fraction: float) -> str:
        edges, value = published_near(data, fraction, method)
        return f"{num(value, 2)} at {edges:,} edges ({100 * edges / total:.1f} %)"

    zero = max((r["edges"]["EAP"] for r in data["rows"] if r["faithfulness"]["EAP"] < 0.005), default=0)
    return (f"GPT-2 small, {data['prompts']:,} prompts, {total:,} edges, greedy: EAP-IG (m = "
            f"{data['integration_steps']}) {at('EAP-IG', 1.0)}, {at('EAP-IG', 5.0)}; EAP 0.00 up to "
            f"{zero:,} edges, {at('EAP', 1.0)}, {at('EAP', 5.0)} (Hanna et al. 2024, the data of the paper's "
            f"Fig. 3, one file: {published_source(data)}; no table)")


def _trace(docs: dict) -> str:
    data = docs["causal_trace_eiffel"]
    s, t = data["summary"], data["target"]
    mid, last, mlp = s["resid_middle_subject"], s["resid_last_subject"], s["mlp_last_subject"]
    return (
        f"SmolLM2, one prompt, {data['noise_samples']} noise samples (± s.e. over them): "
        f'p("{t}") clean {num(data["clean_prob"], 3)}, noised {pm(data["corrupted_prob"], data["corrupted_se"], 3)}; '
        f"restoring the residual at the subject's middle token (`{mid['token']}`) gives back up to "
        f"{pm(mid['value'], mid['se'], 2)} (after layer {mid['layer']}); the last subject token "
        f"(`{last['token']}`) at most {pm(last['value'], last['se'], 3)}; no mid-layer MLP peak at the last "
        f"subject token (at most {pm(mlp['value'], mlp['se'], 3)}). One prompt: the same question over a fact "
        "set, with standard errors, is the AIE row below"
    )


def _aie(docs: dict) -> str:
    """SmolLM2 (STR, Gaussian) and Gemma 3 (STR) at the narrowest window traced, single layers
    once those runs exist; the wider windows are on the page."""
    parts = []
    for runs in aie_groups(docs["aie"]).values():
        r = runs[-1]
        loc, d = r["localisation"], 1 if r["metric"] == "logit_diff" else 2
        unit, peak, w0 = (" logits" if d == 1 else " in p"), loc["mlp_peak"], loc["mlp_peak_without_layer_0"]
        at = "layer" if r["window"] == 1 else "window centre"
        parts.append(
            f"{AIE_MODELS.get(r['model'], r['model'])}, {'STR' if r['corruption'] == 'str' else 'Gaussian noise'}, "
            f"{r['n_facts']} facts, MLP window {r['window']}: largest at {at} {peak['layer']} "
            f"({pm(peak['aie'], peak['band95'], d)}{unit}, {round(100 * peak['of_gap'])} % of the gap), "
            f"at most {round(100 * w0['of_gap'])} % without layer 0, "
            + ("a mid-layer peak" if loc["mlp_middle_bump"] else "no mid-layer peak")
        )
    widths = sorted({r["window"] for runs in aie_groups(docs["aie"]).values() for r in runs})
    return "; ".join(parts) + f". Windows {', '.join(map(str, widths))} side by side on the page"


def _kn_ours(t: dict) -> str:
    """The row from our measure alone: what the data has before Dai et al.'s protocol is run."""
    c = t["cells"]
    refined = [f for f in t["facts"] if f["neurons"]]
    medians = " / ".join(minus(f"{100 * statistics.median(f['knowledge'][k] for f in refined):+.1f} %")
                         for k in ("suppress", "enhance"))
    falls = sum(f["knowledge"]["enhance"] < 0 for f in refined)

    def rel(cell: dict) -> str:
        low, high = cell["ci95"]
        return minus(f"{100 * cell['mean']:+.1f} % [{100 * low:+.1f}, {100 * high:+.1f}]")

    def pct(cell: dict) -> str:
        return minus(f"{100 * cell['mean']:+.1f} %")

    return (f"SmolLM2, {t['n_facts']} facts, {t['prompts_per_fact']} prompts each: means "
            f"{rel(c['knowledge']['suppress'])} / {rel(c['knowledge']['enhance'])}, medians {medians} "
            f"({falls} of {len(refined)} facts lose probability when enhanced; means of per-prompt ratios); "
            f"random neurons {pct(c['random']['suppress'])}; other facts "
            f"{pct(c['other_facts']['suppress'])} under suppression; Dai et al.'s "
            "measure and baseline: not yet run (`benchmarks/knowledge_neurons.py --table`)")


def _kn(docs: dict) -> str:
    data: KnowledgeNeuronsData = docs["knowledge_neurons"]
    t = data["table"]
    if "protocol" not in data:
        return _kn_ours(t)
    proto = data["protocol"]
    rows = {row["neurons"]: row for row in proto["rows"]}

    def est(cell: dict) -> str:
        return minus(f"{100 * cell['estimate']:+.1f} %")

    def interval(cell: dict) -> str:
        low, high = cell["ci95"]
        return minus(f"{100 * cell['estimate']:+.1f} % [{100 * low:+.1f}, {100 * high:+.1f}]")

    def both(group: str, stat: str, show: Callable[[dict], str] = est) -> str:
        return f"{show(rows[group]['suppress'][stat])} / {show(rows[group]['enhance'][stat])}"

    know = rows["knowledge"]
    counts = Counter(tuple(n) for f in t["facts"] for n in {tuple(x) for x in f["neurons"]})
    (layer, neuron), k = counts.most_common(1)[0]
    act_sizes = rows["activation"]["neurons_per_fact"]
    return (f"SmolLM2, {proto['n_facts']} facts ({len(proto['relations'])} relations), {t['prompts_per_fact']} "
            f"prompts each. Dai et al.'s measure (ratio of means per relation, averaged over relations): "
            f"knowledge neurons {both('knowledge', 'dai', interval)}; their activation-selected baseline "
            f"({statistics.fmean(act_sizes):.1f} neurons per fact) {both('activation', 'dai')}; as many "
            f"top-activation neurons as knowledge neurons {both('activation_top', 'dai')}. Ours (mean over "
            f"facts of per-prompt ratios): means {both('knowledge', 'mean', interval)}, medians "
            f"{both('knowledge', 'median')} ({know['enhance']['n_negative']} of {know['enhance']['mean']['n']} "
            f"facts lose probability when enhanced); random neurons {both('random', 'mean')}; other facts "
            f"{est(rows['other_facts']['suppress']['dai'])} under suppression by Dai et al.'s measure (not "
            f"specific); L{layer}.N{neuron} is refined for {k} of {t['n_facts_with_neurons']} facts")


def _ioi_logit_diff(docs: dict) -> str:
    data = docs["ioi"]
    r, s = data["runs"][0], data["summary"]
    positive = round(r["fraction_positive"] * r["n_prompts"])
    return (f"{pm(r['logit_diff'], r['logit_diff_se'], 2)} (s.e. over prompts) on {r['n_prompts']} prompts "
            f"({data['templates']} templates, seed {r['seed']}), positive on {positive} of {r['n_prompts']}; "
            f"over {s['n_seeds']} draws of {data['n_prompts']} prompts {pm(s['logit_diff']['mean'], s['logit_diff']['sd'], 2)} "
            f"(s.d. over draws), positive on {100 * s['fraction_positive']['mean']:.0f} ± "
            f"{100 * s['fraction_positive']['sd']:.0f} %")


IOI_CLASS_WORDS = {
    "name_mover": ("name mover", "name movers"),
    "negative_name_mover": ("negative name mover", "negative name movers"),
    "s_inhibition": ("S-inhibition", "S-inhibition"),
    "induction": ("induction", "induction"),
    "duplicate_token": ("duplicate-token", "duplicate-token"),
    "previous_token": ("previous-token", "previous-token"),
}
# GPT-2 small's order of classes through depth (Wang et al. 2022, Fig. 2): the early classes, then
# induction, S-inhibition, name movers and negative name movers.
GPT2_ORDER = (("previous_token", "duplicate_token"), ("induction",), ("s_inhibition",),
              ("name_mover",), ("negative_name_mover",))


def _ioi_tour(docs: dict) -> str:
    data = docs["ioi"]
    t, seeds = data["tour"], data["summary"]["n_seeds"]
    by_class = data["summary"]["heads_by_class"]
    unsure = [f"{h} ({by_class.get(role, {}).get(h, 0)})" for role, heads in t["classes"].items()
              for h in heads if by_class.get(role, {}).get(h, 0) < seeds]
    missed = [f"{h} ({role.replace('_', ' ')})" for role, counts in by_class.items()
              for h, n in counts.items() if n == seeds and h not in t["classes"].get(role, [])]
    text = (f"The tour's own draw ({t['n_prompts']} prompts, one template, {t['config']}): logit difference "
            f"{pm(t['logit_diff'], t['logit_diff_se'], 2)} (s.e. over prompts), name movers remove "
            f"{t['name_mover_removed']:.0%}, faithfulness {t['faithfulness']:.0%}; each of its "
            f"{t['n_heads']} heads is in the same class in the {seeds} seeded draws of the docs")
    if unsure:
        text += f" except {', '.join(unsure)} of {seeds}"
    if missed:
        text += f"; it misses {', '.join(missed)}, which every seeded draw has"
    return text


def _layer(head: str) -> int:
    return int(head.split(".")[0][1:])


def _ioi_circuit(docs: dict) -> str:
    data = docs["ioi"]
    r, s = data["runs"][0], data["summary"]
    classes = r["classes"]
    counts = ", ".join(f"{len(heads)} {IOI_CLASS_WORDS.get(role, (role, role))[1]}"
                       for role, heads in classes.items())
    medians = [statistics.median(_layer(h) for role in group for h in classes.get(role, []))
               for group in GPT2_ORDER if any(classes.get(role) for role in group)]
    in_order = all(a <= b for a, b in itertools.pairwise(medians))
    order = ("the classes' median layers come in GPT-2's order through depth" if in_order
             else "the classes' median layers do not all come in GPT-2's order")
    breaks = []
    induction = min(classes.get("induction", []), key=_layer, default=None)
    previous = max(classes.get("previous_token", []), key=_layer, default=None)
    if induction and previous and _layer(induction) < _layer(previous):
        breaks.append(f"the induction head {induction} sits below the previous-token head {previous}")
    mover = max(classes.get("name_mover", []), key=_layer, default=None)
    negative = classes.get("negative_name_mover", [])
    below = [h for h in negative if _layer(h) < _layer(mover)] if mover else []
    if below:
        breaks.append(f"the name mover {mover} above {len(below)} of the {len(negative)} negative movers")
    if breaks:
        order += f"; single heads break it ({', '.join(breaks)})"
    f, nm = s["faithfulness"], s["name_mover_removed"]
    lowest = ", seed 0 the lowest" if r["faithfulness"] == f["min"] else ""
    return (
        f"{r['n_heads']} heads: {counts} (no backup step); {order}; the circuit keeps "
        f"{100 * r['faithfulness']:.0f}% (seed {r['seed']}; {100 * f['mean']:.0f} ± {100 * f['sd']:.0f} % over "
        f"{s['n_seeds']} draws of {data['n_prompts']} prompts, s.d. over draws{lowest}) with every other head "
        "mean-ablated at every position (Wang et al. keep circuit heads only at their class's positions, a "
        f"stricter test); mean-ablating the name movers removes {100 * r['name_mover_removed']:.0f}% "
        f"({100 * nm['mean']:.0f} ± {100 * nm['sd']:.0f} % over the {s['n_seeds']} draws)"
    )


def _induction(docs: dict) -> str:
    data = docs["induction"]
    s, first = data["summary"], data["runs"][0]
    top = s["top_heads_of_seed_0"]
    sds = [x["sd"] for x in top.values()]
    same = sum(set(sorted(r["scores"], key=lambda h: -r["scores"][h])[:len(top)]) == set(top)
               for r in data["runs"])
    n_runs = len(data["runs"])
    stable = (f"the same {len(top)} top every draw" if same == n_runs
              else f"the same {len(top)} top in {same} of {n_runs} draws")
    heads = ", ".join(f"{h} {num(first['scores'][h], 2)}" for h in top)

    def spread(key: str) -> str:
        return pm(s[key]["mean"], s[key]["sd"], 2)

    return (
        f"{heads} on {data['sequences']['n']} repeated-token sequences (± {num(min(sds), 2)}–{num(max(sds), 2)} "
        f"s.d. over {n_runs} draws of {data['sequences']['n']}; {stable}); mean-ablating the "
        f"{len(first['heads_above'])} heads above {data['threshold']:g} raises the second-half loss from "
        f"{num(first['loss_clean'], 2)} to {num(first['loss_ablated'], 2)} nats (over the {n_runs} draws: "
        f"{spread('loss_clean')} → {spread('loss_ablated')}; as many random heads: {spread('loss_random')})"
    )


def _steer(docs: dict) -> str:
    data: SteeringCompareData = docs["steering_compare"]
    b = data["at_budget"]["lm_steer"]
    curve = data["curves"]["lm_steer"]
    shift = minus(f"{b['sentiment']:+.2f}")
    return (f"the shipped steer on {data['prompts']['test']} held-out prompts: "
            f"{shift} ± {num(b['sentiment_se'], 2)} at s = +{b['strength']:g} "
            f"against {pm(curve['unsteered'][0], curve['unsteered_se'][0], 2)} unsteered (s.e. over prompts; "
            "`benchmarks/steering_compare.py`)")


PROBE_WORDS = {
    "country": ("country of a city", " test sentences about unseen cities"),
    "subject_number": ("subject number", ""),
    "bracket_depth": ("bracket depth", ""),
}
PROBE_NOTES = {"bracket_depth": " (24 identifier types make the control trivial)"}


def _probes(docs: dict) -> str:
    probes: ProbesData = docs["probes"]
    tasks = sorted(probes["tasks"].items(), key=lambda kv: -kv[1]["selectivity"])
    parts = []
    for i, (name, t) in enumerate(tasks):
        label, unit = PROBE_WORDS.get(name, (name, ""))
        sel = minus(f"{t['selectivity']:+.3f}")
        parts.append(f"{label} {ci(t['accuracy'], *t['ci95'], 3)} at layer {t['peak_layer']} "
                     f"({t['n_test']}{unit if i == 0 else ''}), {'selectivity ' if i == 0 else ''}{sel}"
                     f"{PROBE_NOTES.get(name, '')}")
    return "test accuracy [95% bootstrap CI] on held-out examples: " + "; ".join(parts)


def _gemma(docs: dict) -> str:
    """Gemma 3 270M's weights in a few words ("4-bit Q4_K_M, base"), from its card."""
    card = docs["model_cards"]["models"]["gemma3-270m"]
    return f"{card['bits']}-bit {card['quantisation']}, {card['variant']}"


def _concepts(docs: dict) -> str:
    small: ConceptsData = docs["concepts_smollm2-135m"]
    gemma: ConceptsData = docs["concepts_gemma3-270m"]
    c = small["inner_products"]["mean_abs_cosine_between_concepts"]
    g = gemma["inner_products"]["mean_abs_cosine_between_concepts"]
    sizes = [r["effect_size"] for r in small["concepts"]]
    return (f"{len(small['concepts'])} concepts, mean absolute cosine between distinct concepts: SmolLM2 "
            f"causal {ci(c['causal'], *c['causal_ci95'], 3)} vs Euclidean {ci(c['euclidean'], *c['euclidean_ci95'], 3)}; "
            f"Gemma 3 270M ({_gemma(docs)}) {num(g['causal'], 3)} vs {num(g['euclidean'], 3)}; every concept's held-out pairs "
            f"project {num(min(sizes), 1)}–{num(max(sizes), 1)} random-pair s.d. above random pairs (SmolLM2)")


def _reading(docs: dict) -> str:
    reading: ReadingData = docs["reading_smollm2-135m"]
    t = reading["contrasts"]["truth"]
    m = t["methods"]
    pca = m["pca"]
    return (f"SmolLM2, {t['n_pairs']} pairs of a true and a counterfactual statement of the editing facts, "
            f"{t['n_test']} test pairs, layer chosen on dev: PC1 {ci(pca['chosen_test_pairwise'], *pca['chosen_test_pairwise_ci95'], 2)} "
            f"at layer {pca['chosen_layer']}, probe direction {num(m['probe']['chosen_test_pairwise'], 2)}, "
            f"random directions {num(m['random']['chosen_test_pairwise'], 2)}")


def _sae(docs: dict) -> str:
    data: SAEHeldoutData = docs["sae_heldout"]
    w, a, m = data["without_massive"], data["all"], data["massive"]
    layer = data["hook"].split(".")[1]
    share = 100 * m["n_tokens"] / a["n_tokens"]
    return (f"layer {layer}, held-out texts: explained variance {bold(num(w['explained_variance'], 3))} "
            f"[{num(w['ci95'][0], 3)}, {num(w['ci95'][1], 3)}] (95% bootstrap CI over {w['n_texts']} held-out "
            f"texts) on the held-out tokens without the {m['n_tokens']} massive-activation tokens ({share:.2f}% "
            f"of {a['n_tokens']:,}); {num(a['explained_variance'], 3)} with them, because those "
            f"{m['n_tokens']} tokens hold {100 * m['variance_share']:.1f}% of the variance; L0 {w['l0']:g}. "
            "Loss and dead features: the next row")


def _sae_loss(docs: dict) -> str:
    data: SAEHeldoutData = docs["sae_heldout"]
    o, sae = data["other"], data["sae"]
    loss = o["loss"]
    layer = data["hook"].split(".")[1]

    def signed(x: float) -> str:
        return minus(f"{x:+.3f}")

    low, high = loss["increase_ci95"]
    return (f"the shipped layer-{layer} SAE (d_sae {sae['d_sae']:,}, L0 {o['l0']:g}), {o['n_texts']} held-out texts "
            f"(95% bootstrap CI over them): next-token loss {bold(signed(loss['increase']) + ' nats')} "
            f"[{signed(low)}, {signed(high)}] with the SAE spliced in ({num(loss['clean'], 3)} → "
            f"{num(loss['sae'], 3)}; {100 * loss['fraction_recovered']:.1f}% of the zero-ablation loss "
            f"recovered); dead fraction {num(o['dead_fraction'], 3)} ({o['dead_features']:,} of "
            f"{sae['d_sae']:,} features never fire on the {o['n_tokens']:,} held-out tokens)")


def _steer_curve(docs: dict) -> str:
    data: SteeringData = docs["steering"]
    s, rows = data["curve"]["summary"], data["curve"]["rows"]
    ends = [r["sentiment"] for r in rows if r["setting"]["topic"] == 0.0]
    values = [r["setting"]["sentiment"] for r in rows if r["setting"]["topic"] == 0.0]
    ev = data["evaluation"]
    shape = "rising" if s["monotone_whole_grid"] else "not strictly rising"
    un = data["curve"]["unsteered"]
    def signed(x: float) -> str:
        return minus(f"{x:+.3f}")

    return (
        f"VADER compound of {ev['max_new_tokens']}-token continuations of {ev['prompts']} neutral prompts "
        f"(one sample each): {signed(ends[0])} … {signed(ends[-1])} over s ∈ [{minus(f'{values[0]:g}')}, "
        f"{values[-1]:g}], {shape}; gap between s = ±{s['s']:g}: {signed(s['gap']['value'])} ± "
        f"{num(s['gap']['se'], 3)} (unsteered {signed(un['sentiment'])} ± {num(un['sentiment_se'], 3)}; ± s.e. "
        f"over prompts), perplexity {s['perplexity_ratio_minus']:.2f}× / {s['perplexity_ratio_plus']:.2f}× the "
        f"unsteered model's at −/+{s['s']:g}"
    )


def _steer_transfer(docs: dict) -> str:
    steering: SteeringData = docs["steering"]
    tr = steering["transfer"]
    return (
        f"SmolLM2 → Gemma 3 270M ({_gemma(docs)}), sentiment, {tr['n_shared']:,} shared tokens (map R² {num(tr['r2'], 3)}): "
        f"the ±{tr['value']:g} gap is {pm(tr['gap']['value'], tr['gap']['se'], 3)} on Gemma against "
        f"{pm(tr['source_gap']['value'], tr['source_gap']['se'], 3)} on SmolLM2, so "
        f"{pm(tr['fraction_kept'], tr['fraction_kept_se'], 2)} of the control is kept (s.e. over "
        f"{steering['evaluation']['prompts']} prompts)"
    )


def pct(x: float) -> str:
    """An accuracy in percent, one decimal."""
    return f"{100 * x:.1f}%"


def _cfg(docs: dict) -> str:
    data: CFGProbesData = docs["cfg_probes"]
    m, g = data["model"], data["grammar"]
    cells = {(c["level"], c["target"]): c for c in data["probes"]["cells"]}

    def cell(level: int, target: str) -> str:
        c = cells[(level, target)]
        tr = c["linear_trained"]
        return (f"{pct(tr['best'])} [{pct(tr['ci95'][0])}, {pct(tr['ci95'][1])}] (random weights "
                f"{pct(c['linear_random']['best'])})")

    n = next(iter(cells.values()))["n_test_strings"]
    return (f"Project GPT ({m['n_layers']} layers, d_model {m['d_model']}, {m['steps']} steps) on a "
            f"grammar of a root and {len(g['nts_per_level']) - 1} NT levels, best-layer linear probe, {n} held-out strings "
            f"(95% bootstrap CI over strings): NT boundary level 1 {cell(1, 'boundary')}, level 2 "
            f"{cell(2, 'boundary')}; NT ancestor level 1 {cell(1, 'ancestor')}, level 2 {cell(2, 'ancestor')} "
            f"against a {pct(cells[(2, 'ancestor')]['bayes'])} ceiling for a causal reader")


def _cfg_deep(docs: dict) -> str:
    data: CFGProbesData = docs["cfg_probes_deep_1700steps"]
    m, g = data["model"], data["grammar"]
    cells = {(c["level"], c["target"]): c for c in data["probes"]["cells"]}
    deepest = len(g["nts_per_level"]) - 1

    def ancestor(level: int) -> str:
        c = cells[(level, "ancestor")]
        tr = c["linear_trained"]
        return (f"level-{level} ancestor {pct(tr['best'])} [{pct(tr['ci95'][0])}, {pct(tr['ci95'][1])}] "
                f"against a {pct(c['bayes'])} ceiling (random weights {pct(c['linear_random']['best'])})")

    bounds = [cells[(level, "boundary")]["linear_trained"]["best"] for level in range(1, deepest + 1)]
    n = next(iter(cells.values()))["n_test_strings"]
    return (f"Project GPT ({m['n_layers']} layers, d_model {m['d_model']}, {m['steps']:,} steps) on a grammar of a "
            f"root and {deepest} NT levels, best-layer linear probe, {n} held-out strings (95% bootstrap CI over "
            f"strings): NT boundaries {pct(min(bounds))}–{pct(max(bounds))} at levels 1–{deepest}; "
            f"{ancestor(deepest)}; {ancestor(deepest - 1)}")


# (method and metric, published, measured, page): published is quoted text, measured a function of
# the data files (and the method a function of them where the data decide which methods ran), in
# the README's order.
PUBLISHED: tuple[tuple[str | Callable[[dict], str], str | Callable[[dict], str], Callable[[dict], str], str], ...] = (
    ("ROME on CounterFact-style facts: ES / PS / NS (S)",
     "GPT-2 XL: 100.0 / 96.4 / 75.4 (89.2); GPT-J: 99.9 / 99.1 / 78.9 (91.5); unedited GPT-2 XL: 22.2 / "
     "24.7 / 78.1 (ROME paper, Table 4; 7,500 records for GPT-2 XL, 2,000 for GPT-J)",
     _rome, "[editing](docs/editing.md)"),
    (_batch_what,
     "no published figure (our notes have MEMIT's CounterFact table only from a secondary summary, "
     "without its table number)", _batch, "[editing](docs/editing.md)"),
    ("Sequential editing: efficacy and specificity as edits accumulate",
     "Llama-3-8B, 2,000 CounterFact edits in batches of 100: MEMIT efficacy 65.65, specificity 51.56; "
     "AlphaEdit 98.90, 67.88 (AlphaEdit paper, Table 1)", _sequential, "[editing](docs/editing.md)"),
    ("EAP-IG circuit on IOI (STR): normalised faithfulness", _eap_published, _eap, "[edges](docs/edges.md)"),
    ("Causal tracing, where the fact sits",
     "no published figure with a table or figure number in our notes (Meng et al. 2022 locate the effect "
     "at the last subject token in GPT-2 XL's middle-layer MLPs; our notes have their averages from the "
     "paper's text only)", _trace, "[circuits](docs/circuits.md)"),
    ("Causal tracing over a fact set (AIE), MLP at the last subject token",
     "no published figure quoted (GPT-2 XL: the MLP effect peaks in the middle layers under Gaussian "
     "noise, Meng et al. 2022, and is much weaker under STR, Zhang & Nanda 2024, their Fig. 2)",
     _aie, "[aie](docs/aie.md)"),
    ("Knowledge neurons: suppress (×0) / enhance (×2)",
     "no published figure quoted: Dai et al. 2022 (BERT-base-cased, PARAREL) measure suppression and "
     "amplification as a ratio of means per relation, (mean p_new − mean p_orig) / mean p_orig, averaged "
     "over relations, against baseline neurons selected by activation (their code, "
     "`Hunter-DDM/knowledge-neurons` `src/2_get_kn.py`, `src/3_modify_activation.py`, "
     "`src/8_plot_fig_erase_enhance.py`); the measured column gives that measure and baseline beside ours. The averages "
     "often quoted for the paper are not in its code (the plotting script prints them, no file keeps "
     "them) and the paper's results section was not reachable, so they are not confirmed", _kn, "[knowledge neurons](docs/knowledge_neurons.md)"),
    ("IOI logit difference logit(IO) − logit(S)",
     "no published figure (the GPT-2 small value usually quoted comes from the TransformerLens demo, "
     "not a paper)", _ioi_logit_diff, "[ioi](docs/ioi.md)"),
    ("IOI circuit: head classes and faithfulness",
     "GPT-2 small: 26 heads in 7 classes (3 name movers, 8 backup, 2 negative, 4 S-inhibition, 4 "
     "induction, 3 duplicate-token, 2 previous-token), Wang et al. 2022's circuit as ACDC's and "
     "auto-circuit's code list it (`acdc/ioi/utils.py::IOI_CIRCUIT`, `ioi_official.py`); faithfulness: "
     "no published figure (our notes have it only second-hand)", _ioi_circuit, "[ioi](docs/ioi.md)"),
    ("IOI circuit: a second draw, the tour's",
     "GPT-2 small: 26 heads in 7 classes (see the row above); faithfulness: no published figure",
     _ioi_tour, "[ioi](docs/ioi.md)"),
    ("Induction heads",
     "no published figure (the GPT-2 small heads usually listed come from the ARENA course and the "
     "TransformerLens demo, not a paper)", _induction, "[ioi](docs/ioi.md)"),
    ("LM-Steer sentiment control: the shipped steer on held-out prompts",
     "no published figure (the paper's sentiment table, SST-2 classifier at steer values ±5, is not in "
     "our notes)", _steer, "[representations](docs/representations.md)"),
    ("LM-Steer sentiment control: the control curve of a freshly trained sentiment+topic steer",
     "no published figure (the paper's sentiment table, SST-2 classifier at steer values ±5, is not in "
     "our notes)", _steer_curve, "[steering](docs/steering.md)"),
    ("LM-Steer transfer to another model",
     "no published figure (our notes have the transfer result only from the authors' poster, without a "
     "table)", _steer_transfer, "[steering](docs/steering.md)"),
    ("CFG probes: NT boundary and NT ancestor accuracy, best layer",
     "no published figure (Allen-Zhu & Li 2023 probe the same kind of grammar; their accuracies are not "
     "in our notes with a table number)", _cfg, "[probes_cfg](docs/probes_cfg.md)"),
    ("CFG probes on a deeper grammar (a root and three NT levels), best layer",
     "no published figure", _cfg_deep, "[probes_cfg](docs/probes_cfg.md)"),
    ("Linear probes with control tasks: accuracy and selectivity at the peak layer",
     "no published figure (other tasks and models; Hewitt & Liang 2019 find linear probes selective and "
     "MLP probes not)", _probes, "[probes](docs/probes.md)"),
    ("Concept directions: inner products between concepts",
     "no published figure quoted (Park et al. 2024, on LLaMA-2-7B: causally separable concepts are "
     "orthogonal under the causal inner product, not under the Euclidean one)", _concepts,
     "[representations](docs/representations.md)"),
    ("Representation reading of truth (held-out pairwise accuracy)",
     "no published figure quoted (Zou et al. report LAT on larger models and other data)", _reading,
     "[representations](docs/representations.md)"),
    ("SAE on the residual stream: explained variance, L0",
     "no published figure (no published SAE for SmolLM2)", _sae, "[sae](docs/sae.md)"),
    ("SAE on the residual stream: next-token loss, dead features",
     "no published figure (no published SAE for SmolLM2)", _sae_loss, "[sae](docs/sae.md)"),
)


@table("published_vs_measured")
def published_vs_measured(docs: dict) -> str:
    """The README's published figures (quoted) beside lmsci-mi's measurements (from the data files)."""
    cards: ModelCardsData = docs["model_cards"]
    return markdown(
        ["method, metric", "published (model)",
         f"measured here (conditions; on SmolLM2-135M-Instruct, a {framing(cards)}, unless the row names "
         "another model)", "page"],
        [[what(docs) if callable(what) else what, published(docs) if callable(published) else published,
          measured(docs), page]
         for what, published, measured, page in PUBLISHED],
    )
