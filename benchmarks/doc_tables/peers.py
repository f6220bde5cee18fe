"""Renderers of the comparisons with peer libraries (TransformerLens's patchers, nnsight,
auto-circuit) in docs/circuits.md, docs/edges.md and the README: every ratio is a ratio of medians
with its bootstrap interval over alternated rounds (benchmarks/timing.py), on a named kind of pair,
with the run's rounds, threads and whether the machine was quiet."""

from __future__ import annotations

from . import bold, markdown, num, sci, table
from .schemas.circuits import EdgesPeersData, PatchingData
from .schemas.timing import RatioRecord, SideTiming, TimingRecord


def pair_words(kind: str, shared: int, tokens: int | None = None) -> str:
    """A kind of prompt pair in the pages' words: ``shares its first 10 of 15 tokens``,
    ``differs from the first token`` (after the sink token, when the model prepends one: the pair
    then shares that one token)."""
    if kind == "shared_prefix":
        return f"shares its first {shared}" + (f" of {tokens}" if tokens else "") + " tokens"
    if kind == "first_token":
        return "differs from the first token" + (" after the sink token" if shared == 1 else "")
    return f"{kind} (shares {shared} tokens)"


def seconds(side: SideTiming, digits: int = 2) -> str:
    """``median (min–max)``."""
    return f"{num(side['median'], digits)} ({num(side['min'], digits)}–{num(side['max'], digits)})"


def ratio(r: RatioRecord, strong: bool = True) -> str:
    """``**4.5×** [3.9, 5.1]``: the peer's median over lmsci-mi's and its interval over rounds."""
    estimate = f"{r['estimate']:.1f}×"
    return f"{bold(estimate, strong)} [{r['low']:.1f}, {r['high']:.1f}]"


def quiet_words(records: list[TimingRecord]) -> str:
    if all(r["quiet"] for r in records):
        return "quiet machine (nothing else running)"
    loads = [x for r in records for x in (r["load_before"], r["load_after"]) if x is not None]
    load = f", load average {min(loads):.1f}–{max(loads):.1f}" if loads else ""
    return f"shared machine (other jobs running{load}), not quiet"


def run_words(records: list[TimingRecord], date: str | None = None) -> str:
    """How a table's rows were timed: protocol, rounds, threads, quiet or not, and the records'
    notes (what the warm-up was, what was built before timing)."""
    first, when = records[0], f"{date}, " if date else ""
    threads = first["machine"]["threads"]
    machines = list(dict.fromkeys(f"{r['machine']['cpu']} ({r['machine']['cores']} cores)" for r in records))
    where = machines[0] if len(machines) == 1 else f"{' and '.join(machines)} (rows from separate runs)"
    warmups = f"{first['warmups']} warm-up" + ("" if first["warmups"] == 1 else "s")
    notes = list(dict.fromkeys(part for r in records for part in r["note"].split("; ") if part))
    return (f"Each side: {warmups}, then {first['rounds']} rounds in alternating "
            f"order; seconds are median (min–max) over the rounds, the interval a 95 % bootstrap over "
            f"rounds. Run {when}{threads} thread{'' if threads == 1 else 's'}, {where}, {quiet_words(records)}."
            + (f" Notes: {'; '.join(notes)}." if notes else ""))


@table("patching_transformer_lens")
def patching_transformer_lens(data: PatchingData) -> str:
    """benchmarks/patching.py (a)-(b): the sweeps against TransformerLens's patchers on both kinds of
    pair, with compute floors."""
    run = data["sections"]["transformer_lens"]
    rows = []
    for r in run["rows"]:
        ours, peer = r["timing"]["sides"]["lmsci_mi"], r["timing"]["sides"]["transformer_lens"]
        rows.append([
            r["sweep"], pair_words(r["pair"], r["shared_prefix"], run["n_tokens"]), seconds(ours), seconds(peer),
            ratio(r["ratio"]), sci(r["max_abs_diff"]),
            f"{num(r['floor_s'], 2)} ({100 * r['floor_s'] / ours['median']:.0f} %)",
            f"{num(r['prefix_floor_s'], 2)} ({100 * r['prefix_floor_s'] / ours['median']:.0f} %)",
            str(r["passes"]),
        ])
    body = markdown(
        ["sweep", "IOI pair", "lmsci-mi s", "TransformerLens s", "TransformerLens / lmsci-mi",
         "max abs diff", "floor s (% of lmsci-mi)", "prefix floor s (%)", "passes"],
        rows,
    )
    return body + "\n\n" + run_words([r["timing"] for r in run["rows"]], run["date"])


@table("patching_nnsight")
def patching_nnsight(data: PatchingData) -> str:
    """benchmarks/patching.py --only nnsight: the head sweep in nnsight's forms against lmsci-mi."""
    run = data["sections"]["nnsight"]
    rows = []
    for pair in run["pairs"]:
        words = pair_words(pair["pair"], pair["shared_prefix"], run["n_tokens"])
        sides = pair["timing"]["sides"]
        rows.append([words, 'lmsci-mi `patch_activations(site="z", positions="all")`',
                     seconds(sides["lmsci_mi"]), "1.0×", "—"])
        rows += [[words, run["forms"][key], seconds(sides[key]), ratio(r), sci(pair["max_abs_diff"][key])]
                 for key, r in pair["ratios"].items()]
    body = markdown(["IOI pair", "form", "s", "form / lmsci-mi", "max abs diff vs lmsci-mi"], rows)
    return body + "\n\n" + run_words([p["timing"] for p in run["pairs"]], run["date"])


@table("edges_auto_circuit")
def edges_auto_circuit(data: EdgesPeersData) -> str:
    """benchmarks/peers_auto_circuit.py: EAP and exact patching against auto-circuit, its prefix
    option on, on pairs that share half their tokens and on pairs that differ from the first."""
    t = data["timing"]
    rows = []
    for pair in t["pairs"]:
        words = pair_words(pair["pair"], pair["shared_prefix"], t["tokens"])
        for label, key in (("EAP over all edges", "eap"), ("exact patching of 10 circuits (MIB budgets, top-n)",
                                                          "patch_10_circuits")):
            compared = pair[key]  # type: ignore[literal-required]
            sides = compared["timing"]["sides"]
            rows.append([label, words, pair["peer_options"], seconds(sides["lmsci_mi"], 1),
                         seconds(sides["auto_circuit"], 1), ratio(compared["ratio"])])
    body = markdown(
        ["measurement", f"pair ({t['prompts']} prompts × {t['tokens']} tokens)",
         f"auto-circuit {t['auto_circuit_version']} options", "lmsci-mi s", "auto-circuit s",
         "auto-circuit / lmsci-mi"],
        rows,
    )
    model = t["model"].split(" (")[0]
    provenance: dict = data.get("provenance", {})  # type: ignore[assignment]
    agree = "; ".join(f"{sci(p['agree_eap'])} ({p['pair']} pairs)" for p in t["pairs"])
    return (body + f"\n\n{model}, {t['edges']:,} edges. Largest |lmsci-mi EAP + auto-circuit's| over "
            f"edges, same inputs: {agree}. "
            + run_words([p[k]["timing"] for p in t["pairs"] for k in ("eap", "patch_10_circuits")],  # type: ignore[literal-required]
                        provenance.get("date")))


def _readme_patching(patching: PatchingData) -> list[list[str]]:
    """TransformerLens's rows, then nnsight's fastest form on each kind of pair."""
    sections, rows = patching["sections"], []
    tl = sections["transformer_lens"]
    for r in tl["rows"]:
        sides = r["timing"]["sides"]
        rows.append([f"TransformerLens `patching`: {r['sweep']}",
                     pair_words(r["pair"], r["shared_prefix"], tl["n_tokens"]),
                     num(sides["lmsci_mi"]["median"], 2), num(sides["transformer_lens"]["median"], 2),
                     ratio(r["ratio"]), _run_cell(r["timing"])])
    nn = sections.get("nnsight")
    for pair in nn["pairs"] if nn else []:
        sides = pair["timing"]["sides"]
        best = min(pair["ratios"], key=lambda key: sides[key]["median"])  # nnsight's fastest form
        rows.append([f"{nn['forms'][best]}: {nn['sweep']}",
                     pair_words(pair["pair"], pair["shared_prefix"], nn["n_tokens"]),
                     num(sides["lmsci_mi"]["median"], 2), num(sides[best]["median"], 2),
                     ratio(pair["ratios"][best]), _run_cell(pair["timing"])])
    return rows


def _readme_edges(edges: EdgesPeersData) -> list[list[str]]:
    t, rows = edges["timing"], []
    for pair in t["pairs"]:
        for label, key in (("EAP", "eap"), ("exact patching of 10 circuits", "patch_10_circuits")):
            compared = pair[key]  # type: ignore[literal-required]
            sides = compared["timing"]["sides"]
            rows.append([f"auto-circuit, {pair['peer_options']}: {label}, {t['model'].split(' (')[0]}",
                         f"{pair_words(pair['pair'], pair['shared_prefix'], t['tokens'])} ({t['prompts']} prompts)",
                         num(sides["lmsci_mi"]["median"], 1), num(sides["auto_circuit"]["median"], 1),
                         ratio(compared["ratio"]), _run_cell(compared["timing"])])
    return rows


def _run_cell(record: TimingRecord) -> str:
    threads = record["machine"]["threads"]
    return (f"{record['rounds']} rounds, {threads} thread{'s' if threads != 1 else ''}, "
            + ("quiet" if record["quiet"] else "not quiet"))


@table("peer_speed")
def peer_speed(docs: dict) -> str:
    """README: every speed ratio against a peer, from patching.json and edges_peers.json."""
    return markdown(
        ["against", "pair", "lmsci-mi s (median)", "peer s (median)", "peer / lmsci-mi [95 % CI]", "run"],
        _readme_patching(docs["patching"]) + _readme_edges(docs["edges_peers"]),
    )
