"""Facts for editing experiments, in the CounterFact shape (Meng et al. 2022), and how the set is chosen.

The candidates are written here as data: cities' countries, landmarks' cities, countries' official
languages, companies' home countries. :func:`select_known_facts` keeps those the model really knows
(rule below) and `facts.json` ships the set selected on SmolLM2; :func:`build_fact_set` rebuilds it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "FACTS_FILE",
    "RELATIONS",
    "build_fact_set",
    "candidate_facts",
    "load_fact_records",
    "select_known_facts",
]

FACTS_FILE = "facts.json"


# Each relation: the rewrite template, paraphrase templates, and answer -> subjects. Subjects that
# share an answer are each other's neighbourhood (CounterFact's "same relation, same true object").
RELATIONS: dict[str, dict[str, Any]] = {
    "city_country": {
        "prompt": "{} is a city in the country of",
        "paraphrases": [
            "The city of {} is located in the country of",
            "{} is one of the largest cities of the country of",
            "If you travel to {}, you will be in the country of",
        ],
        "answers": {
            " France": [
                "Paris",
                "Lyon",
                "Marseille",
                "Toulouse",
                "Nice",
                "Bordeaux",
                "Lille",
                "Strasbourg",
            ],
            " Germany": [
                "Berlin",
                "Munich",
                "Hamburg",
                "Frankfurt",
                "Cologne",
                "Stuttgart",
                "Dresden",
            ],
            " Italy": ["Rome", "Milan", "Naples", "Turin", "Florence", "Venice", "Bologna"],
            " Spain": ["Madrid", "Barcelona", "Seville", "Valencia", "Bilbao", "Malaga"],
            " Japan": ["Tokyo", "Osaka", "Kyoto", "Yokohama", "Hiroshima", "Nagoya"],
            " China": ["Beijing", "Shanghai", "Guangzhou", "Shenzhen", "Wuhan", "Chengdu"],
            " India": ["Mumbai", "Delhi", "Bangalore", "Kolkata", "Chennai", "Hyderabad"],
            " Canada": ["Toronto", "Vancouver", "Montreal", "Calgary", "Ottawa"],
            " Australia": ["Sydney", "Melbourne", "Brisbane", "Perth", "Adelaide"],
            " Brazil": ["Rio de Janeiro", "São Paulo", "Brasília", "Salvador"],
            " Russia": ["Moscow", "Saint Petersburg", "Novosibirsk", "Kazan"],
            " Mexico": ["Mexico City", "Guadalajara", "Monterrey", "Cancún"],
            " Egypt": ["Cairo", "Alexandria", "Luxor"],
            " Turkey": ["Istanbul", "Ankara", "Izmir"],
        },
    },
    "landmark_city": {
        "prompt": "{} is located in the city of",
        "paraphrases": [
            "{} can be found in the city of",
            "{} is a famous landmark in the city of",
            "Tourists who want to see {} travel to the city of",
        ],
        "answers": {
            " Paris": [
                "The Eiffel Tower",
                "The Louvre",
                "Notre-Dame Cathedral",
                "The Arc de Triomphe",
                "The Champs-Élysées",
            ],
            " London": [
                "Big Ben",
                "Buckingham Palace",
                "The Tower of London",
                "Westminster Abbey",
                "The London Eye",
                "Trafalgar Square",
            ],
            " Rome": [
                "The Colosseum",
                "The Pantheon",
                "The Trevi Fountain",
                "The Roman Forum",
                "The Spanish Steps",
            ],
            " New York": [
                "The Statue of Liberty",
                "The Empire State Building",
                "Central Park",
                "Times Square",
                "The Brooklyn Bridge",
                "Wall Street",
            ],
            " Berlin": [
                "The Brandenburg Gate",
                "The Reichstag",
                "Checkpoint Charlie",
                "Alexanderplatz",
            ],
            " Moscow": [
                "The Kremlin",
                "Red Square",
                "Saint Basil's Cathedral",
                "The Bolshoi Theatre",
            ],
            " Sydney": ["The Opera House", "Bondi Beach", "The Harbour Bridge"],
            " Beijing": ["The Forbidden City", "Tiananmen Square", "The Temple of Heaven"],
            " Barcelona": ["The Sagrada Família", "Park Güell", "Camp Nou", "La Rambla"],
            " Istanbul": [
                "The Hagia Sophia",
                "The Blue Mosque",
                "The Grand Bazaar",
                "Topkapi Palace",
            ],
            " Athens": ["The Parthenon", "The Acropolis"],
            " San Francisco": ["The Golden Gate Bridge", "Alcatraz Island", "Fisherman's Wharf"],
            " Washington": ["The White House", "The Lincoln Memorial", "The Washington Monument"],
            " Venice": ["St. Mark's Basilica", "The Rialto Bridge", "The Grand Canal"],
            " Amsterdam": ["The Rijksmuseum", "The Anne Frank House", "The Van Gogh Museum"],
            " Dubai": ["The Burj Khalifa", "The Palm Jumeirah", "The Burj Al Arab"],
        },
    },
    "country_language": {
        "prompt": "The official language of {} is",
        "paraphrases": [
            "The main language spoken in {} is",
            "Most people in {} speak",
            "In {}, the language of the government is",
        ],
        "answers": {
            " Spanish": [
                "Spain",
                "Mexico",
                "Argentina",
                "Colombia",
                "Peru",
                "Chile",
                "Venezuela",
                "Cuba",
            ],
            " French": ["France", "Senegal", "Monaco", "Ivory Coast"],
            " Portuguese": ["Portugal", "Brazil", "Angola", "Mozambique"],
            " German": ["Germany", "Austria", "Liechtenstein"],
            " English": ["England", "Australia", "New Zealand", "Jamaica"],
            " Arabic": ["Saudi Arabia", "Egypt", "Jordan", "Iraq", "Syria", "Libya"],
            " Russian": ["Russia", "Belarus"],
            " Italian": ["Italy", "San Marino"],
            " Dutch": ["the Netherlands", "Suriname"],
            " Greek": ["Greece", "Cyprus"],
            " Korean": ["South Korea", "North Korea"],
            " Japanese": ["Japan"],
            " Swedish": ["Sweden"],
            " Polish": ["Poland"],
            " Turkish": ["Turkey"],
        },
    },
    "company_country": {
        "prompt": "{} is a company headquartered in the country of",
        "paraphrases": [
            "The company {} was founded in the country of",
            "{} is a brand that comes from the country of",
            "The headquarters of {} are in the country of",
        ],
        "answers": {
            " Japan": ["Toyota", "Honda", "Sony", "Nintendo", "Panasonic", "Mitsubishi", "Nissan"],
            " Germany": [
                "BMW",
                "Volkswagen",
                "Siemens",
                "Adidas",
                "Mercedes-Benz",
                "Porsche",
                "Bosch",
            ],
            " South Korea": ["Samsung", "Hyundai", "Kia", "LG Electronics"],
            " France": ["Renault", "Peugeot", "Michelin", "L'Oréal", "Chanel"],
            " Italy": ["Fiat", "Ferrari", "Lamborghini", "Gucci", "Prada"],
            " Sweden": ["Volvo", "IKEA", "Ericsson", "Spotify"],
            " Switzerland": ["Nestlé", "Rolex", "Swatch", "Novartis"],
            " China": ["Huawei", "Alibaba", "Lenovo", "Xiaomi", "Tencent"],
            " Finland": ["Nokia"],
        },
    },
}


def candidate_facts(seed: int = 0) -> list[dict[str, Any]]:
    """Every candidate fact as a CounterFact-shaped record (plain dict, EditRequest's fields).

    ``target_new`` is drawn (seeded) from the relation's other answers whose first word differs
    from the true answer's; neighbourhood prompts are the rewrite prompts of every other subject
    with the same answer (filtered by :func:`select_known_facts`).
    """
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    for relation, spec in RELATIONS.items():
        answers: dict[str, list[str]] = spec["answers"]
        for answer, subjects in answers.items():
            others = [a for a in answers if a.split()[0] != answer.split()[0]]
            for subject in subjects:
                records.append(
                    {
                        "prompt": spec["prompt"],
                        "subject": subject,
                        "target_new": rng.choice(others),
                        "target_true": answer,
                        "paraphrase_prompts": [p.format(subject) for p in spec["paraphrases"]],
                        "neighborhood_prompts": [
                            spec["prompt"].format(s) for s in subjects if s != subject
                        ],
                        "relation": relation,
                    }
                )
    return records


@torch.no_grad()
def _next_token_probs(lm: LensModel, prompts: Sequence[str], batch_size: int = 16) -> torch.Tensor:
    """Next-token distributions after each prompt, ``[prompt, vocab]``.

    Rows are right-padded (``encode_batch``): with causal attention, padding after a prompt's last
    token cannot change it, and rotary positions stay those of an unpadded run. Only each row's
    last position is unembedded, since unembedding every position costs a quarter of the forward.
    """
    out = []
    for start in range(0, len(prompts), batch_size):
        batch = lm.encode_batch(prompts[start : start + batch_size])
        resid = lm.model(batch.tokens, stop_at_layer=lm.cfg.n_layers)
        rows = torch.arange(len(batch.lengths), device=lm.device)
        last = resid[rows, batch.lengths - 1]
        out.append(lm.unembed(last).float().softmax(-1).cpu())
    return torch.cat(out)


def select_known_facts(
    lm: LensModel,
    records: Sequence[dict[str, Any]] | None = None,
    *,
    min_prob: float = 0.1,
    max_neighbors: int = 5,
    min_neighbors: int = 2,
) -> list[dict[str, Any]]:
    """Keep the facts the model really knows. Reads the model only.

    The rule (the first token of ``target_true`` decides, since that is what the model predicts
    next):
      1. on the rewrite prompt it is the top-1 token with probability ≥ ``min_prob``;
      2. it is the top-1 token on at least half of the paraphrases;
      3. neighbourhood prompts are kept only where it is top-1 too (at most ``max_neighbors``),
         and the fact needs ``min_neighbors`` of them;
      4. ``target_new``'s first token differs from it.

    Returns:
        The kept records (dicts), each with ``p_true`` (rule 1's probability) added.
    """
    records = list(records) if records is not None else candidate_facts()
    tokenizer = lm._require_tokenizer()

    def first(text: str) -> int:
        return int(tokenizer(text, add_special_tokens=False)["input_ids"][0])

    prompts = sorted(
        {r["prompt"].format(r["subject"]) for r in records}
        | {p for r in records for p in r["paraphrase_prompts"]}
        | {p for r in records for p in r["neighborhood_prompts"]}
    )
    probs = _next_token_probs(lm, prompts)
    row = {p: i for i, p in enumerate(prompts)}
    top1 = probs.argmax(-1)

    kept = []
    for r in records:
        true_id = first(r["target_true"])
        rewrite = row[r["prompt"].format(r["subject"])]
        if int(top1[rewrite]) != true_id or float(probs[rewrite, true_id]) < min_prob:
            continue
        hits = sum(int(top1[row[p]]) == true_id for p in r["paraphrase_prompts"])
        if 2 * hits < len(r["paraphrase_prompts"]):
            continue
        neighbors = [p for p in r["neighborhood_prompts"] if int(top1[row[p]]) == true_id]
        if len(neighbors) < min_neighbors or first(r["target_new"]) == true_id:
            continue
        kept.append(
            {
                **r,
                "neighborhood_prompts": neighbors[:max_neighbors],
                "p_true": round(float(probs[rewrite, true_id]), 4),
            }
        )
    return kept


def build_fact_set(
    lm: LensModel, path: str | Path | None = None, **rule: Any
) -> list[dict[str, Any]]:
    """Select the known facts on ``lm`` and write them as JSON (default: the packaged facts.json).

    ``python -c "from lmsci_mi import load_model; from lmsci_mi.data.facts import build_fact_set;
    build_fact_set(load_model('smollm2-135m'))"`` rebuilds the shipped file.
    """
    facts = select_known_facts(lm, **rule)
    target = Path(path) if path is not None else Path(__file__).with_name(FACTS_FILE)
    document = {
        "model": lm.name,
        "rule": "lmsci_mi.data.facts.select_known_facts " + json.dumps(rule or "defaults"),
        "n_candidates": len(candidate_facts()),
        "facts": facts,
    }
    target.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    return facts


def load_fact_records() -> list[dict[str, Any]]:
    """The shipped fact set (selected on SmolLM2-135M-Instruct) as plain dicts."""
    text = resources.files("lmsci_mi.data").joinpath(FACTS_FILE).read_text(encoding="utf-8")
    return list(json.loads(text)["facts"])
