"""A larger editing fact set in the CounterFact shape (Meng et al. 2022), with messy-knowledge probes.

The candidates are written here as data, over thirteen relations; :func:`select_edit_facts` keeps
those the model really knows (rule below) and `edit_facts.json` ships the set selected on SmolLM2;
:func:`build_edit_fact_set` rebuilds it. Beyond CounterFact's fields each fact carries the probes of
"messy" knowledge: the negated prompt, the reverse of a one-to-one fact, a two-hop consequence and
other relations of the same subject. The tables were written at about 1,600 candidates and then
trimmed of every (subject, answer) pair SmolLM2 did not answer top-1 in a first selection; where an
answer was left with fewer than two held-out subjects, editable ones SmolLM2 knows were moved there.
So a rebuild reads few prompts that cannot pass.

The shipped set (SmolLM2-135M): 406 facts of 565 candidates; negated prompts 406, reverse prompts 3
(country -> capital is the only one-to-one relation, and the new capital must be one SmolLM2 names
the country of), two-hop prompts 40, other-relation prompts for 72 facts (103 prompts).

Selection rule (the first token of an answer decides, since that is what the model predicts next):

1. ``target_true`` is top-1 on the rewrite prompt with p ≥ 0.1 and top-1 on at least half of the
   paraphrases, and ``target_new`` starts with another token;
2. neighbourhood prompts (other subjects with the same true answer) are kept where it is top-1 too,
   at most five, and the fact needs two. Their subjects are *held out*: never a candidate subject,
   and no neighbourhood prompt contains a candidate subject, so any subset of the set can be edited
   in one run without a neighbour naming an edited subject;
3. a subject is edited in one fact only (the first relation, in table order, that keeps it);
4. the reverse prompt (one-to-one relations) is kept where ``reverse_target_true`` is top-1; the
   two-hop prompt where ``two_hop_target_true`` is top-1, both bridge facts (true and new object)
   are top-1, the two answers start differently and neither bridge fact is itself an edit of the
   set; each other-relation prompt where its target is top-1. The negated prompt is written for
   every fact (it has no answer to check: it measures whether an edit leaks into it).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmsci_mi.data.facts import RELATIONS as SMALL_SET_RELATIONS
from lmsci_mi.data.facts import _next_token_probs

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "EDIT_FACTS_FILE",
    "EDIT_RELATIONS",
    "EditRelation",
    "build_edit_fact_set",
    "edit_fact_candidates",
    "load_edit_fact_records",
    "select_edit_facts",
]

EDIT_FACTS_FILE = "edit_facts.json"

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EditRelation:
    """One relation's templates and its facts.

    Attributes:
        prompt: rewrite template with ``{}`` for the subject.
        paraphrases: other wordings of the same relation.
        negated: the rewrite template negated.
        answers: answer -> the subjects that may be edited, ``"; "``-separated.
        held_out: answer -> subjects that are only ever neighbours, never edited.
        neighbours_from: the relation whose held-out subjects (same answer) are the neighbours;
            empty for this relation's own (a one-to-one relation has no second subject with the
            same answer, so country -> capital borrows landmarks in that capital).
        reverse: for a one-to-one relation, the template asking back from the object.
        two_hop: template of a consequence through ``bridge``, the relation that takes this
            relation's answers (as subjects) one step further.
        kin: groups of answers too close to stand in for each other as a counterfactual (a
            painter made an "artist" is no edit).
        titles: subjects are titles ("The Hobbit"), whose article stays capitalised.
    """

    prompt: str
    paraphrases: tuple[str, ...]
    negated: str
    answers: Mapping[str, str]
    held_out: Mapping[str, str] = field(default_factory=dict)
    neighbours_from: str = ""
    reverse: str = ""
    two_hop: str = ""
    bridge: str = ""
    kin: tuple[tuple[str, ...], ...] = ()
    titles: bool = False

    def pairs(self, *, held_out: bool = False) -> list[tuple[str, str]]:
        """(subject, answer) pairs in table order, of the editable or of the held-out subjects."""
        table = self.held_out if held_out else self.answers
        return [(s, a) for a, subjects in table.items() for s in _names(subjects)]


def _names(listing: str) -> list[str]:
    # One "; "-separated string per answer keeps the tables one line per answer.
    return [name.strip() for name in listing.split(";") if name.strip()]


def _templates(name: str) -> dict[str, Any]:
    """The small set's wording of a relation both sets share, so one relation reads one way."""
    spec = SMALL_SET_RELATIONS[name]
    return {"prompt": spec["prompt"], "paraphrases": tuple(spec["paraphrases"])}


# Countries: capital, official language, continent. A country is a candidate in all three
# relations (rule 3 keeps it in one); the held-out countries are the language and continent
# neighbours. An empty cell leaves a fact out: a continent where it is disputed (Russia, Turkey)
# or the country is its own (Australia); a language where the country has several official ones
# (another of them would be no counterfactual); a capital named after its country or disputed;
# and every cell SmolLM2 did not answer in the first selection.
_COUNTRIES: dict[str, tuple[str, str, str]] = {
    "France": ("Paris", "French", "Europe"),
    "Germany": ("Berlin", "German", "Europe"),
    "Italy": ("Rome", "Italian", "Europe"),
    "Spain": ("Madrid", "Spanish", "Europe"),
    "England": ("London", "English", "Europe"),
    "Russia": ("Moscow", "Russian", ""),
    "China": ("Beijing", "", "Asia"),
    "Japan": ("Tokyo", "Japanese", "Asia"),
    "Greece": ("Athens", "Greek", "Europe"),
    "Egypt": ("", "Arabic", "Africa"),
    "the United States": ("", "English", ""),
    "the Netherlands": ("Amsterdam", "Dutch", "Europe"),
    "Austria": ("Vienna", "German", "Europe"),
    "the Czech Republic": ("Prague", "Czech", "Europe"),
    "Portugal": ("Lisbon", "Portuguese", "Europe"),
    "Hungary": ("Budapest", "Hungarian", "Europe"),
    "Ireland": ("Dublin", "", "Europe"),
    "India": ("", "", "Asia"),
    "Canada": ("Ottawa", "", "North America"),
    "Thailand": ("Bangkok", "Thai", ""),
    "South Korea": ("Seoul", "Korean", "Asia"),
    "Denmark": ("Copenhagen", "Danish", "Europe"),
    "Sweden": ("Stockholm", "Swedish", "Europe"),
    "Scotland": ("Edinburgh", "", "Europe"),
    "Belgium": ("Brussels", "", "Europe"),
    "Turkey": ("Ankara", "Turkish", ""),
    "Norway": ("Oslo", "Norwegian", "Europe"),
    "Finland": ("Helsinki", "", "Europe"),
    "Poland": ("Warsaw", "Polish", "Europe"),
    "Switzerland": ("Bern", "", "Europe"),
    "Peru": ("Lima", "Spanish", "South America"),
    "Chile": ("Santiago", "Spanish", "South America"),
    "Venezuela": ("Caracas", "Spanish", "South America"),
    "Ecuador": ("", "Spanish", "South America"),
    "Uruguay": ("Montevideo", "Spanish", ""),
    "Paraguay": ("", "Spanish", "South America"),
    "Bolivia": ("", "Spanish", "South America"),
    "Cuba": ("Havana", "Spanish", ""),
    "Panama": ("", "Spanish", ""),
    "Costa Rica": ("San José", "Spanish", ""),
    "Guatemala": ("", "Spanish", ""),
    "Honduras": ("", "Spanish", ""),
    "Nicaragua": ("", "Spanish", "North America"),
    "Kenya": ("Nairobi", "", "Africa"),
    "Nigeria": ("Abuja", "English", "Africa"),
    "Ethiopia": ("Addis Ababa", "", "Africa"),
    "Morocco": ("", "Arabic", ""),
    "Algeria": ("Algiers", "Arabic", ""),
    "Tunisia": ("Tunis", "Arabic", ""),
    "Libya": ("", "Arabic", "Africa"),
    "Sudan": ("Khartoum", "Arabic", "Africa"),
    "Ghana": ("", "", "Africa"),
    "Uganda": ("Kampala", "English", "Africa"),
    "Zimbabwe": ("", "English", "Africa"),
    "Zambia": ("Lusaka", "", "Africa"),
    "Tanzania": ("", "", "Africa"),
    "Mozambique": ("Maputo", "Portuguese", ""),
    "Cameroon": ("Yaoundé", "", "Africa"),
    "Madagascar": ("Antananarivo", "", "Africa"),
    "Somalia": ("Mogadishu", "Somali", "Africa"),
    "Iran": ("", "", "Asia"),
    "Afghanistan": ("Kabul", "Pashto", ""),
    "Pakistan": ("Islamabad", "", "Asia"),
    "Bangladesh": ("Dhaka", "", "Asia"),
    "Vietnam": ("Hanoi", "Vietnamese", ""),
    "Indonesia": ("Jakarta", "", "Asia"),
    "the Philippines": ("Manila", "", "Asia"),
    "Malaysia": ("Kuala Lumpur", "", ""),
    "Nepal": ("Kathmandu", "Nepali", ""),
    "Mongolia": ("", "Mongolian", ""),
    "Lebanon": ("", "Arabic", ""),
    "Kuwait": ("", "Arabic", ""),
    "Qatar": ("", "Arabic", ""),
    "Oman": ("Muscat", "Arabic", ""),
    "Yemen": ("Sanaa", "Arabic", ""),
    "Sri Lanka": ("", "Sinhala", ""),
    "Cambodia": ("", "Khmer", ""),
    "Laos": ("", "Lao", ""),
    "Ukraine": ("", "", "Europe"),
    "Romania": ("Bucharest", "Romanian", "Europe"),
    "Bulgaria": ("Sofia", "", "Europe"),
    "Serbia": ("Belgrade", "Serbian", "Europe"),
    "Croatia": ("Zagreb", "Croatian", "Europe"),
    "Slovakia": ("Bratislava", "Slovak", "Europe"),
    "Slovenia": ("Ljubljana", "", "Europe"),
    "Iceland": ("Reykjavik", "", "Europe"),
    "Estonia": ("Tallinn", "Estonian", "Europe"),
    "Latvia": ("Riga", "Latvian", "Europe"),
    "Lithuania": ("", "Lithuanian", "Europe"),
    "Albania": ("Tirana", "Albanian", "Europe"),
    "Malta": ("", "", "Europe"),
    "Luxembourg": ("", "", "Europe"),
    "Armenia": ("Yerevan", "Armenian", ""),
    # Held out (see _HELD_OUT_COUNTRIES): neighbours of the language and continent facts.
    "Mexico": ("", "Spanish", "North America"),
    "Argentina": ("", "Spanish", "South America"),
    "Colombia": ("", "Spanish", "South America"),
    "the Dominican Republic": ("", "Spanish", ""),
    "Brazil": ("", "Portuguese", ""),
    "Angola": ("", "Portuguese", "Africa"),
    "Senegal": ("", "French", ""),
    "Ivory Coast": ("", "", "Africa"),
    "Monaco": ("", "French", "Europe"),
    "Saudi Arabia": ("", "Arabic", ""),
    "Iraq": ("", "Arabic", ""),
    "Syria": ("", "Arabic", ""),
    "Jordan": ("", "Arabic", ""),
    "the United Arab Emirates": ("", "Arabic", ""),
    "Australia": ("", "English", ""),
    "New Zealand": ("", "English", ""),
    "Jamaica": ("", "English", ""),
    "South Africa": ("", "", "Africa"),
    "Liechtenstein": ("", "German", "Europe"),
    "Belarus": ("", "", "Europe"),
    "Cyprus": ("", "Greek", "Europe"),
    "North Korea": ("", "", "Asia"),
    "Taiwan": ("", "", "Asia"),
    "Singapore": ("", "", "Asia"),
    "Bhutan": ("", "", "Asia"),
    "Rwanda": ("", "", "Africa"),
    "Mali": ("", "French", "Africa"),
    "Botswana": ("", "", "Africa"),
    "Namibia": ("", "", "Africa"),
    "Montenegro": ("", "", "Europe"),
    "Moldova": ("", "", "Europe"),
    "Andorra": ("", "", "Europe"),
    "San Marino": ("", "Italian", "Europe"),
}
_HELD_OUT_COUNTRIES = frozenset(list(_COUNTRIES)[list(_COUNTRIES).index("Mexico") :])


def _country_table(column: int, *, held_out: bool) -> dict[str, str]:
    """answer -> countries for one column of ``_COUNTRIES`` (one-to-one columns give one each)."""
    table: dict[str, list[str]] = {}
    for country, row in _COUNTRIES.items():
        if row[column] and (country in _HELD_OUT_COUNTRIES) == held_out:
            table.setdefault(" " + row[column], []).append(country)
    return {answer: "; ".join(subjects) for answer, subjects in table.items()}


# The order is rule 3's priority: a subject listed in two relations is edited in the first that
# keeps it, and its facts in the others become its other-relation prompts.
EDIT_RELATIONS: dict[str, EditRelation] = {
    "country_capital": EditRelation(
        prompt="The capital of {} is",
        paraphrases=(
            "The capital city of {} is",
            "The government of {} sits in the city of",
            "{}'s capital city is",
        ),
        negated="The capital of {} is not",
        answers=_country_table(0, held_out=False),
        neighbours_from="landmark_city",
        reverse="The city of {} is the capital of",
    ),
    "country_language": EditRelation(
        **_templates("country_language"),
        negated="The official language of {} is not",
        answers=_country_table(1, held_out=False),
        held_out=_country_table(1, held_out=True),
    ),
    "country_continent": EditRelation(
        prompt="{} is a country on the continent of",
        paraphrases=(
            "{} is located on the continent of",
            "{} is a country in the continent of",
            "The continent where {} is located is",
        ),
        negated="{} is not a country on the continent of",
        answers=_country_table(2, held_out=False),
        held_out=_country_table(2, held_out=True),
    ),
    "city_country": EditRelation(
        **_templates("city_country"),
        negated="{} is not a city in the country of",
        # Capitals and the cities of landmarks are held out: they are the objects of other
        # relations (their bridge facts), so editing them would move those facts too. A few more
        # are held out where a country needed two neighbours.
        answers={
            " France": "Lyon; Toulouse; Bordeaux; Lille; Strasbourg; Nantes; Montpellier; Rennes; Grenoble; Dijon; Cannes",
            " Germany": "Hamburg; Frankfurt; Cologne; Stuttgart; Dresden; Düsseldorf; Leipzig; Bremen; Nuremberg; Dortmund; Heidelberg",
            " Italy": "Naples; Bologna; Genoa; Verona; Catania; Siena",
            " Japan": "Osaka; Yokohama; Hiroshima; Nagoya; Fukuoka; Nagasaki; Nara",
            " China": "Guangzhou; Shenzhen; Wuhan; Chengdu; Nanjing; Xi'an; Hangzhou; Tianjin; Chongqing",
            " India": "Kolkata; Chennai; Bangalore; Hyderabad; Pune; Jaipur; Ahmedabad; Varanasi",
            " Canada": "Vancouver; Calgary; Edmonton; Winnipeg; Halifax; Quebec City",
            " Australia": "Melbourne; Gold Coast",
            " Brazil": "São Paulo; Belo Horizonte",
            " Russia": "Novosibirsk; Vladivostok; Murmansk; Omsk",
            " Mexico": "Monterrey; Tijuana; Cancún; Oaxaca",
            " Turkey": "Izmir; Antalya; Konya",
            " England": "Bristol; Oxford",
            " Scotland": "Aberdeen; Dundee",
            " Austria": "Innsbruck; Linz",
            " Poland": "Krakow; Gdansk; Poznan; Lodz",
            " Sweden": "Malmö",
            " Norway": "Trondheim",
            " South Korea": "Incheon",
            " Pakistan": "Karachi; Peshawar",
            " South Africa": "Johannesburg",
            " Morocco": "Marrakech; Fez",
            " Thailand": "Phuket",
            " Indonesia": "Bandung",
            " Ireland": "Cork; Galway",
        },
        held_out={
            " France": "Paris; Marseille",
            " Germany": "Berlin; Munich",
            " Italy": "Rome; Milan; Venice; Florence",
            " Spain": "Madrid; Barcelona; Seville",
            " Japan": "Tokyo; Kyoto",
            " China": "Beijing; Shanghai",
            " India": "Delhi; Mumbai",
            " Canada": "Ottawa; Toronto",
            " Australia": "Sydney; Canberra",
            " Brazil": "Rio de Janeiro; Brasília",
            " Russia": "Moscow; Saint Petersburg",
            " Mexico": "Mexico City; Veracruz",
            " Egypt": "Cairo; Aswan",
            " Turkey": "Istanbul; Ankara",
            " Scotland": "Edinburgh; Glasgow",
            " Greece": "Athens; Thessaloniki",
            " Austria": "Vienna; Salzburg",
            " Poland": "Warsaw; Katowice",
            " Sweden": "Stockholm; Uppsala",
            " Norway": "Tromsø; Bergen",
            " South Korea": "Seoul; Jeju",
            " Pakistan": "Islamabad; Faisalabad",
            " South Africa": "Cape Town; Pretoria",
            " Argentina": "Buenos Aires",
            " Thailand": "Bangkok; Pattaya",
            " Indonesia": "Jakarta; Yogyakarta",
            " Ireland": "Kilkenny; Limerick",
            " Colombia": "Bogotá",
            " Ukraine": "Kyiv",
            " Denmark": "Copenhagen",
            " Singapore": "Singapore",
            " England": "Nottingham; Sheffield",
            " Portugal": "Porto",
            " Morocco": "Tangier; Casablanca",
            " Nigeria": "Kano",
            " Switzerland": "Lausanne",
            " Vietnam": "Ho Chi Minh City",
            " Iran": "Tabriz",
            " New Zealand": "Auckland",
        },
        two_hop="The official language of the country where {} is located is",
        bridge="country_language",
    ),
    "us_city_state": EditRelation(
        prompt="{} is a city in the state of",
        paraphrases=(
            "The city of {} is located in the state of",
            "{} is one of the largest cities in the state of",
            "If you travel to {}, you will be in the state of",
        ),
        negated="{} is not a city in the state of",
        answers={
            " Texas": "Dallas; San Antonio; El Paso; Fort Worth",
            " California": "San Diego; San Jose; Sacramento; Fresno; Oakland; Berkeley",
            " New York": "Rochester; Albany; Syracuse",
            " Pennsylvania": "Pittsburgh; Harrisburg",
            " Arizona": "Phoenix; Tucson; Scottsdale; Flagstaff",
            " Tennessee": "Chattanooga",
            " North Carolina": "Raleigh",
            " Maryland": "Annapolis",
            " Hawaii": "Honolulu",
            " New Jersey": "Newark; Jersey City; Atlantic City; Hoboken",
            " Alabama": "Montgomery",
        },
        held_out={
            " Texas": "Galveston; Houston",
            " California": "Los Angeles; San Francisco",
            " New York": "Brooklyn; Ithaca",
            " Illinois": "Chicago; Rockford",
            " Massachusetts": "Boston",
            " Pennsylvania": "Philadelphia; Scranton",
            " Nevada": "Las Vegas; Reno",
            " Arizona": "Mesa; Sedona",
            " Georgia": "Marietta",
            " Minnesota": "Mankato; Minneapolis",
            " North Carolina": "Asheville; Greensboro",
            " Maryland": "Hagerstown; Baltimore",
            " Alaska": "Sitka; Anchorage",
            " Hawaii": "Kailua; Lahaina",
            " New Jersey": "Princeton; Camden",
            " Alabama": "Selma; Huntsville",
            " Florida": "Miami",
            " Washington": "Spokane",
            " Colorado": "Aspen; Denver",
            " Michigan": "Grand Rapids; Detroit",
            " Louisiana": "Baton Rouge",
            " Tennessee": "Knoxville; Nashville",
            " Missouri": "St. Louis",
            " Wisconsin": "Milwaukee",
            " Indiana": "Indianapolis",
            " Kentucky": "Lexington",
            " New Mexico": "Albuquerque; Santa Fe",
            " South Carolina": "Charleston",
        },
    ),
    "landmark_city": EditRelation(
        **_templates("landmark_city"),
        negated="{} is not located in the city of",
        answers={
            " Paris": "The Eiffel Tower; The Champs-Élysées; The Musée d'Orsay; The Place de la Concorde",
            " London": "The British Museum; The Houses of Parliament; The National Gallery; The Tate Modern; Kensington Palace",
            " Rome": "The Roman Forum; Piazza Navona; The Palatine Hill; Villa Borghese; The Capitoline Hill; St. Peter's Basilica",
            " New York": "Times Square; The Brooklyn Bridge; Wall Street; Rockefeller Center; The Chrysler Building; Broadway; Madison Square Garden; One World Trade Center; Fifth Avenue; The High Line",
            " Berlin": "Alexanderplatz",
            " Beijing": "Beihai Park",
            " Barcelona": "Camp Nou; Casa Batlló",
            " Athens": "The Erechtheion; The Odeon of Herodes Atticus; The Ancient Agora; The Panathenaic Stadium",
            " Washington": "The Jefferson Memorial; The Smithsonian Institution; The Library of Congress; The National Mall",
            " Venice": "The Grand Canal; Murano",
            " Amsterdam": "The Van Gogh Museum; Vondelpark",
            " Dubai": "The Burj Al Arab",
            " Tokyo": "Harajuku; Ueno Park; The Tsukiji Fish Market",
            " Prague": "St. Vitus Cathedral",
            " Los Angeles": "The Getty Center; Universal Studios Hollywood",
        },
        held_out={
            " Paris": "The Louvre; The Moulin Rouge",
            " London": "Buckingham Palace; Trafalgar Square",
            " Rome": "The Colosseum; The Pantheon",
            " New York": "The Statue of Liberty; The Empire State Building; Central Park",
            " Berlin": "The Brandenburg Gate; The Reichstag",
            " Beijing": "The Forbidden City; Tiananmen Square",
            " Barcelona": "The Sagrada Família; The Picasso Museum",
            " Istanbul": "The Hagia Sophia; The Bosphorus Bridge",
            " Athens": "The Parthenon; The Acropolis",
            " San Francisco": "The Golden Gate Bridge; Alcatraz Island",
            " Washington": "The White House; The United States Capitol",
            " Venice": "The Rialto Bridge; The Doge's Palace",
            " Amsterdam": "The Rijksmuseum; The Anne Frank House",
            " Dubai": "The Burj Khalifa; The Palm Jumeirah",
            " Madrid": "The Prado Museum",
            " Tokyo": "Shibuya Crossing; Shinjuku",
            " Rio de Janeiro": "Christ the Redeemer",
            " Florence": "The Uffizi Gallery",
            " Prague": "Wenceslas Square; Petřín Tower",
            " Vienna": "Schönbrunn Palace; The Hofburg Palace",
            " Los Angeles": "The Hollywood Sign; The Hollywood Walk of Fame",
            " Chicago": "The Willis Tower",
            " Delhi": "The Red Fort",
            " Edinburgh": "Holyrood Palace",
            " Budapest": "The Hungarian Parliament Building; Buda Castle",
            " Seville": "The Alcázar of Seville",
            " Seoul": "Changdeokgung Palace",
            " Toronto": "The Royal Ontario Museum",
            " Munich": "The Hofbräuhaus",
        },
        two_hop="{} is located in the country of",
        bridge="city_country",
    ),
    "company_country": EditRelation(
        **_templates("company_country"),
        negated="{} is not a company headquartered in the country of",
        answers={
            " Japan": "Mitsubishi; Nissan; Suzuki; Subaru; Hitachi; Fujitsu",
            " Germany": "Volkswagen; Mercedes-Benz; Bosch; Lufthansa; Deutsche Bank",
            " Italy": "Ferrari; Lamborghini; Gucci; Maserati; Pirelli",
            " China": "Xiaomi",
        },
        # The makers that answer product_company are its bridge facts, so never edited here; the
        # others are held out so that each country has two neighbours.
        held_out={
            " Japan": "Nintendo; Toyota",
            " Germany": "BMW; Porsche",
            " Switzerland": "Swiss International Air Lines; Roche",
            " Italy": "Bulgari; Fiat",
            " South Korea": "Hyundai",
            " France": "Louis Vuitton; Renault",
            " China": "Tencent; Huawei",
        },
    ),
    "product_company": EditRelation(
        prompt="{} is a product made by",
        paraphrases=(
            "{} is made by",
            "{} is manufactured by",
            "{} is developed by the company",
        ),
        negated="{} is not a product made by",
        answers={
            " Apple": "The iPhone; The iPad; The MacBook; iTunes; macOS",
            " Microsoft": "Windows; The Xbox; Internet Explorer; Visual Studio",
            " Google": "Gmail",
            " Nintendo": "The Wii; Super Mario Bros.",
            " Adobe": "Photoshop",
        },
        held_out={
            " Apple": "The iPod; The iMac",
            " Microsoft": "Excel; PowerPoint",
            " Google": "Google Maps; Google Docs",
            " Nintendo": "The Nintendo DS; The Nintendo 64",
            " Adobe": "Illustrator; Lightroom",
            " Sony": "The PlayStation",
            " Amazon": "The Kindle",
            " Boeing": "The 787 Dreamliner",
            " Intel": "The Pentium",
        },
        two_hop="{} is made by a company from the country of",
        bridge="company_country",
    ),
    "club_country": EditRelation(
        prompt="{} is a football club from the country of",
        paraphrases=(
            "{} is a football club based in the country of",
            "{} is a soccer team from",
            "The football club {} is from the country of",
        ),
        negated="{} is not a football club from the country of",
        answers={
            " Spain": "Real Madrid; Atlético Madrid; Sevilla FC",
            " England": "Tottenham Hotspur; Everton; Manchester City",
            " Italy": "Inter Milan; Fiorentina",
            " Germany": "Werder Bremen; VfB Stuttgart; Eintracht Frankfurt",
            " France": "Olympique de Marseille; Girondins de Bordeaux",
        },
        held_out={
            " Spain": "FC Barcelona; Celta Vigo",
            " England": "Chelsea; Newcastle United",
            " Italy": "AC Milan; Lazio",
            " Germany": "Schalke 04; Borussia Dortmund",
            " France": "Paris Saint-Germain; AS Saint-Étienne",
            " Scotland": "Heart of Midlothian",
            " Portugal": "FC Porto",
            " Brazil": "São Paulo FC",
            " Turkey": "Beşiktaş; Fenerbahçe",
        },
    ),
    "athlete_sport": EditRelation(
        prompt="{} is a professional",
        paraphrases=(
            "{} is known as a professional",
            "{} became famous as a professional",
            "{} earns a living as a professional",
        ),
        negated="{} is not a professional",
        answers={
            " soccer": "Lionel Messi; Cristiano Ronaldo; Neymar; Kylian Mbappé; Zinedine Zidane; Diego Maradona; Wayne Rooney; Luka Modrić; Andrés Iniesta",
            " basketball": "Michael Jordan; Kobe Bryant; Kevin Durant",
            " baseball": "Babe Ruth; Derek Jeter; Barry Bonds; Jackie Robinson",
            " football": "Peyton Manning; Jerry Rice",
        },
        held_out={
            " soccer": "Didier Drogba; Sergio Ramos",
            " basketball": "Dennis Rodman; LeBron James",
            " baseball": "Willie Mays; Hank Aaron",
            " football": "John Elway; Tom Brady",
            " boxer": "Joe Frazier; Mike Tyson",
            " tennis": "Roger Federer",
        },
        kin=((" soccer", " football"),),
    ),
    "person_occupation": EditRelation(
        prompt="{} was a famous",
        paraphrases=(
            "{} is remembered as a famous",
            "{} worked as a",
            "{} is best known as a",
        ),
        negated="{} was not a famous",
        answers={
            " physicist": "Albert Einstein; Isaac Newton; Niels Bohr; Max Planck; Stephen Hawking; Richard Feynman; Werner Heisenberg; Enrico Fermi",
            " composer": "Ludwig van Beethoven; Wolfgang Amadeus Mozart; Johann Sebastian Bach; Frédéric Chopin; Richard Wagner; Joseph Haydn; Franz Liszt; Gustav Mahler; Sergei Rachmaninoff",
            " philosopher": "Aristotle; Plato; Socrates; Friedrich Nietzsche; Confucius; John Locke; Baruch Spinoza; Thomas Hobbes; Ludwig Wittgenstein; Epicurus",
            " mathematician": "Euclid; Carl Friedrich Gauss; Leonhard Euler; Bernhard Riemann; David Hilbert; Archimedes; Blaise Pascal; Kurt Gödel",
            " poet": "Lord Byron; Pablo Neruda",
            " inventor": "Nikola Tesla; James Watt",
        },
        held_out={
            " physicist": "Wolfgang Pauli; Ernest Rutherford; Paul Dirac",
            " composer": "Robert Schumann; Felix Mendelssohn; Hector Berlioz",
            " artist": "Roy Lichtenstein",
            " philosopher": "John Stuart Mill; Diogenes; David Hume",
            " mathematician": "Joseph-Louis Lagrange; Georg Cantor; Emmy Noether",
            " poet": "Samuel Taylor Coleridge; Sylvia Plath",
            " explorer": "Henry Hudson",
            " actress": "Katharine Hepburn",
            " economist": "Friedrich Hayek",
            " psychologist": "Abraham Maslow",
            " inventor": "Thomas Edison; Samuel Morse",
        },
        kin=(
            (" physicist", " mathematician", " astronomer", " chemist"),
            (" painter", " artist", " sculptor"),
            (" poet", " writer"),
            (" actor", " actress", " director"),
        ),
    ),
    "person_language": EditRelation(
        prompt="The mother tongue of {} is",
        paraphrases=(
            "The native language of {} is",
            "{}'s mother tongue is",
            "The first language of {} was",
        ),
        negated="The mother tongue of {} is not",
        answers={
            " French": "Victor Hugo; Molière; Voltaire; Honoré de Balzac; Gustave Flaubert; Marcel Proust; Albert Camus; Jean-Paul Sartre; Jules Verne; Alexandre Dumas; Charles de Gaulle; Emmanuel Macron; Napoleon Bonaparte; Claude Monet; Coco Chanel; Jean-Jacques Rousseau; Louis Pasteur; René Descartes; Simone de Beauvoir; Gérard Depardieu",
            " German": "Albert Einstein; Johann Wolfgang von Goethe; Friedrich Nietzsche; Immanuel Kant; Ludwig van Beethoven; Johann Sebastian Bach; Richard Wagner; Sigmund Freud; Karl Marx; Thomas Mann; Hermann Hesse; Franz Kafka; Angela Merkel; Friedrich Schiller",
            " Spanish": "Pablo Picasso; Miguel de Cervantes; Gabriel García Márquez; Pablo Neruda; Salvador Dalí; Federico García Lorca; Antonio Banderas; Penélope Cruz; Diego Velázquez; Rafael Nadal; Lionel Messi; Fidel Castro; Che Guevara; Simón Bolívar",
            " Italian": "Dante Alighieri; Leonardo da Vinci; Michelangelo; Giuseppe Verdi; Umberto Eco; Luciano Pavarotti; Federico Fellini; Niccolò Machiavelli; Giacomo Puccini; Antonio Vivaldi; Benito Mussolini; Marco Polo",
            " Russian": "Leo Tolstoy; Fyodor Dostoevsky; Alexander Pushkin; Anton Chekhov; Vladimir Putin; Vladimir Lenin; Pyotr Ilyich Tchaikovsky; Mikhail Gorbachev; Boris Yeltsin; Yuri Gagarin; Dmitri Mendeleev; Sergei Rachmaninoff; Nikolai Gogol",
            " Polish": "Lech Wałęsa",
            " Japanese": "Hayao Miyazaki; Akira Kurosawa; Emperor Hirohito",
            " Swedish": "Greta Thunberg",
            " Chinese": "Confucius; Mao Zedong; Sun Tzu; Yao Ming",
            " Arabic": "Naguib Mahfouz; Gamal Abdel Nasser; Mohamed Salah",
        },
        held_out={
            " French": "Charles Baudelaire; Émile Zola; Guy de Maupassant",
            " German": "Bertolt Brecht; Heinrich Heine; Günter Grass",
            " Spanish": "Mario Vargas Llosa; Octavio Paz; Isabel Allende",
            " Italian": "Giovanni Boccaccio; Alessandro Manzoni",
            " Russian": "Ivan Turgenev; Mikhail Bulgakov; Boris Pasternak",
            " English": "Geoffrey Chaucer",
            " Polish": "Wisława Szymborska; Henryk Sienkiewicz",
            " Swedish": "Astrid Lindgren; August Strindberg",
            " Chinese": "Deng Xiaoping; Xi Jinping",
            " Arabic": "Khalil Gibran; Umm Kulthum; Yasser Arafat",
            " Japanese": "Yukio Mishima; Haruki Murakami",
        },
    ),
    "book_author": EditRelation(
        prompt="{} was written by",
        paraphrases=(
            "{} is a work written by",
            "{} was authored by",
            "The author of the book {} is",
        ),
        negated="{} was not written by",
        answers={
            " William Shakespeare": "Hamlet; Macbeth; Othello; King Lear; A Midsummer Night's Dream; The Tempest; The Merchant of Venice",
            " J.R.R. Tolkien": "The Lord of the Rings",
            " J.K. Rowling": "Harry Potter and the Philosopher's Stone; Harry Potter and the Chamber of Secrets; Harry Potter and the Prisoner of Azkaban; Harry Potter and the Goblet of Fire",
        },
        held_out={
            " William Shakespeare": "Richard III; The Taming of the Shrew",
            " J.R.R. Tolkien": "The Fellowship of the Ring; The Hobbit",
            " J.K. Rowling": "Harry Potter and the Half-Blood Prince; Harry Potter and the Deathly Hallows",
            " Charles Dickens": "Oliver Twist",
            " Jane Austen": "Pride and Prejudice",
            " Mark Twain": "Adventures of Huckleberry Finn",
            " F. Scott Fitzgerald": "The Great Gatsby",
            " Gabriel García Márquez": "One Hundred Years of Solitude",
            " C.S. Lewis": "The Lion, the Witch and the Wardrobe",
            " Robert Louis Stevenson": "Treasure Island",
        },
        titles=True,
    ),
}

# The order of EditRequest's fields (tests/unit/test_edit_facts.py checks it against the class;
# importing lmsci_mi.editing here would make the data package depend on a feature package).
_FIELDS = (
    "prompt",
    "subject",
    "target_new",
    "target_true",
    "paraphrase_prompts",
    "neighborhood_prompts",
    "relation",
    "negated_prompt",
    "reverse_prompt",
    "reverse_target_new",
    "reverse_target_true",
    "two_hop_prompt",
    "two_hop_target_new",
    "two_hop_target_true",
    "other_relation_prompts",
    "other_relation_targets",
)


def _head(answer: str) -> str:
    """The answer's first run of letters, standing in for its first token (" J.K. Rowling": "J")."""
    match = re.search(r"\w+", answer)
    return match.group(0) if match else answer.strip()


def _fill(template: str, subject: str, *, titles: bool = False) -> str:
    # "Tourists who want to see The Louvre" reads wrong, so a leading article is lower-cased
    # mid-sentence; titles ("The Hobbit") keep theirs.
    if not titles and not template.startswith("{}") and subject.startswith("The "):
        subject = "the " + subject[4:]
    return template.format(subject)


_SUBJECT_ANSWERS: dict[int, tuple[EditRelation, dict[str, str]]] = {}


def _subject_answers(relation: EditRelation) -> dict[str, str]:
    """Every subject of the relation (editable and held out) with its answer, built once per
    relation: :func:`edit_fact_candidates` asks some 100 k times, and rebuilding the table each
    time was most of its 0.7 s."""
    cached = _SUBJECT_ANSWERS.get(id(relation))
    if cached is None or cached[0] is not relation:  # the relation is kept, so its id is not reused
        cached = (relation, dict(relation.pairs() + relation.pairs(held_out=True)))
        _SUBJECT_ANSWERS[id(relation)] = cached
    return cached[1]


def _answer_of(relation: EditRelation, subject: str) -> tuple[str, str] | None:
    """(the subject as the relation spells it, its answer), for a subject given without "the"."""
    pairs = _subject_answers(relation)
    for name in (subject, "the " + subject):
        if name in pairs:
            return name, pairs[name]
    return None


def _candidate_subjects() -> set[str]:
    subjects = {s for r in EDIT_RELATIONS.values() for s, _ in r.pairs()}
    held = {s for r in EDIT_RELATIONS.values() for s, _ in r.pairs(held_out=True)}
    if subjects & held:
        raise ValueError(f"subjects both editable and held out: {sorted(subjects & held)}")
    return subjects


def edit_fact_candidates(seed: int = 0) -> list[dict[str, Any]]:
    """Every candidate fact as a plain dict with EditRequest's fields, in table order.

    ``target_new`` is drawn (seeded) from the relation's other answers whose first word differs
    from the true one's and that are not in the same ``kin`` group. Neighbourhood prompts are
    every held-out subject with the same answer, less those whose prompt contains a candidate
    subject. Candidates with a two-hop prompt also carry ``bridge_prompts``, the bridge facts of
    the true and the new object, which :func:`select_edit_facts` checks and then drops.

    >>> facts = edit_fact_candidates()
    >>> facts[0]["prompt"].format(facts[0]["subject"]), facts[0]["target_true"]
    ('The capital of France is', ' Paris')
    >>> facts == edit_fact_candidates()
    True
    """
    rng = random.Random(seed)
    subjects = _candidate_subjects()
    records: list[dict[str, Any]] = []
    for name, relation in EDIT_RELATIONS.items():
        source = EDIT_RELATIONS[relation.neighbours_from or name]
        neighbours: dict[str, list[str]] = {}
        for subject, answer in source.pairs(held_out=True):
            prompt = _fill(source.prompt, subject, titles=source.titles)
            # The evaluation drops a neighbour that names an edited subject, even inside a longer
            # name ("Nigeria" names "Niger"); leaving those out here keeps every subset whole.
            if not any(s in prompt for s in subjects):
                neighbours.setdefault(answer, []).append(prompt)
        inverse = {answer: subject for subject, answer in relation.pairs()}
        for subject, answer in relation.pairs():
            kin = {a for group in relation.kin if answer in group for a in group}
            others = [a for a in relation.answers if _head(a) != _head(answer) and a not in kin]
            target_new = rng.choice(others)
            record = {
                "prompt": relation.prompt,
                "subject": subject,
                "target_new": target_new,
                "target_true": answer,
                "paraphrase_prompts": [
                    _fill(p, subject, titles=relation.titles) for p in relation.paraphrases
                ],
                "neighborhood_prompts": neighbours.get(answer, []),
                "relation": name,
                "negated_prompt": _fill(relation.negated, subject, titles=relation.titles),
                **_reverse(relation, subject, target_new, inverse),
                **_two_hop(relation, subject, answer, target_new),
                **_other_relations(name, subject),
            }
            records.append(record)
    return records


def _reverse(
    relation: EditRelation, subject: str, target_new: str, inverse: Mapping[str, str]
) -> dict[str, str]:
    """The reverse probe of a one-to-one fact: asked back from the new object, whose unedited
    answer is the subject that object really belongs to."""
    owner = inverse.get(target_new)
    # " the" as a first token would be checked as readily for any country, so it proves nothing.
    if not relation.reverse or owner is None or "the " in (owner[:4], subject[:4]):
        return {"reverse_prompt": "", "reverse_target_new": "", "reverse_target_true": ""}
    return {
        "reverse_prompt": relation.reverse.format(target_new.strip()),
        "reverse_target_new": " " + subject,
        "reverse_target_true": " " + owner,
    }


def _two_hop(relation: EditRelation, subject: str, answer: str, target_new: str) -> dict[str, Any]:
    """The consequence through the bridge relation, when both objects have a bridge fact whose
    answers start differently (an unchanged answer would not show whether the edit rippled)."""
    empty = {"two_hop_prompt": "", "two_hop_target_new": "", "two_hop_target_true": ""}
    if not relation.two_hop:
        return empty
    bridge = EDIT_RELATIONS[relation.bridge]
    true_hop, new_hop = _answer_of(bridge, answer.strip()), _answer_of(bridge, target_new.strip())
    if true_hop is None or new_hop is None or _head(true_hop[1]) == _head(new_hop[1]):
        return empty
    return {
        "two_hop_prompt": _fill(relation.two_hop, subject, titles=relation.titles),
        "two_hop_target_new": new_hop[1],
        "two_hop_target_true": true_hop[1],
        "bridge_prompts": [_fill(bridge.prompt, true_hop[0]), _fill(bridge.prompt, new_hop[0])],
    }


def _other_relations(name: str, subject: str) -> dict[str, list[str]]:
    """The subject's facts in the other relations that list it: an edit should leave them."""
    prompts, targets = [], []
    for other_name, other in EDIT_RELATIONS.items():
        found = _answer_of(other, subject) if other_name != name else None
        if found is not None and found[0] == subject:
            prompts.append(_fill(other.prompt, subject, titles=other.titles))
            targets.append(found[1])
    return {"other_relation_prompts": prompts, "other_relation_targets": targets}


def _top1(lm: LensModel, prompts: Sequence[str], chunk: int = 512) -> dict[str, tuple[int, float]]:
    """Each prompt's top-1 next token and its probability, in chunks so that full-vocabulary
    distributions of thousands of prompts are never held at once."""
    # Similar lengths batch together, so little of each batch is padding.
    ordered = sorted(set(prompts), key=lambda p: (len(p), p))
    out: dict[str, tuple[int, float]] = {}
    for start in range(0, len(ordered), chunk):
        block = ordered[start : start + chunk]
        values, indices = _next_token_probs(lm, block, batch_size=64).max(-1)
        out.update(zip(block, zip(indices.tolist(), values.tolist(), strict=True), strict=True))
    return out


def _probe_prompts(record: Mapping[str, Any]) -> list[str]:
    """The prompts rule 2 and 4 read, asked only of facts that passed rule 1."""
    probes = [*record["neighborhood_prompts"], *record["other_relation_prompts"]]
    probes += record.get("bridge_prompts", [])
    return probes + [record[k] for k in ("reverse_prompt", "two_hop_prompt") if record[k]]


class _Reader:
    """The model's top-1 next token (and its probability) per prompt, each prompt read once, in
    batched rounds; and each target's first token."""

    def __init__(self, lm: LensModel) -> None:
        self.lm = lm
        self.top: dict[str, tuple[int, float]] = {}
        self.first: dict[str, int] = {}

    def read(self, prompts: Iterable[str]) -> None:
        self.top.update(_top1(self.lm, [p for p in prompts if p not in self.top]))

    def token(self, target: str) -> int:
        if target not in self.first:
            self.first[target] = self.lm.continuation_ids(target)[0]
        return self.first[target]

    def answers(self, prompt: str, target: str) -> bool:
        return self.top[prompt][0] == self.token(target)


def _rewrite(record: Mapping[str, Any]) -> str:
    return str(record["prompt"]).format(record["subject"])


def select_edit_facts(
    lm: LensModel,
    records: Sequence[Mapping[str, Any]] | None = None,
    *,
    min_prob: float = 0.1,
    max_neighbors: int = 5,
    min_neighbors: int = 2,
) -> list[dict[str, Any]]:
    """Keep the facts the model really knows, with their verified probes. Reads the model only.

    The rule is the module docstring's. The model reads the prompts in batched rounds, each only
    for the facts still in: rewrite prompts, half the paraphrases, the rest of them where the first
    half did not settle it, then everything else.

    Args:
        lm: the model whose knowledge decides.
        records: candidates (default: :func:`edit_fact_candidates`).
        min_prob: the least probability of the true answer on the rewrite prompt.
        max_neighbors: neighbourhood prompts kept per fact.
        min_neighbors: neighbourhood prompts a fact needs.

    Returns:
        The kept records (dicts with exactly EditRequest's fields), each with ``p_true`` (the
        true answer's probability on the rewrite prompt) added.
    """
    records = list(records) if records is not None else edit_fact_candidates()
    reader = _Reader(lm)
    # Rule 2 can be decided for a fact with too few neighbourhood prompts before any is read.
    records = [r for r in records if len(r["neighborhood_prompts"]) >= min_neighbors]
    records = _known_rewrites(reader, records, min_prob)
    records = _known_paraphrases(reader, records)
    reader.read(p for r in records for p in _probe_prompts(r))
    return _assemble(reader, records, max_neighbors, min_neighbors)


def _known_rewrites(reader: _Reader, records: list, min_prob: float) -> list:
    """The facts whose rewrite prompt the model answers (top-1, at least ``min_prob``) and whose
    new target starts with another token than the true one."""
    reader.read(_rewrite(r) for r in records)
    return [
        r
        for r in records
        if reader.answers(_rewrite(r), r["target_true"])
        and reader.top[_rewrite(r)][1] >= min_prob
        and reader.token(r["target_new"]) != reader.token(r["target_true"])
    ]


def _known_paraphrases(reader: _Reader, records: list) -> list:
    """The facts the model answers on at least half of their paraphrases."""

    def half(record: Mapping[str, Any]) -> int:
        return (len(record["paraphrase_prompts"]) + 1) // 2

    def sure(record: Mapping[str, Any]) -> bool:
        return all(
            reader.answers(p, record["target_true"]) for p in record["paraphrase_prompts"][: half(record)]
        )

    # The first half of the paraphrases decides every fact that answers them all; only the
    # others need the rest read.
    reader.read(p for r in records for p in r["paraphrase_prompts"][: half(r)])
    reader.read(p for r in records if not sure(r) for p in r["paraphrase_prompts"][half(r) :])
    return [
        r
        for r in records
        if sure(r)
        or 2 * sum(reader.answers(p, r["target_true"]) for p in r["paraphrase_prompts"])
        >= len(r["paraphrase_prompts"])
    ]


def _assemble(reader: _Reader, records: list, max_neighbors: int, min_neighbors: int) -> list[dict[str, Any]]:
    """The kept facts with their answered neighbours and verified probes, one fact per subject."""
    kept: list[dict[str, Any]] = []
    bridges: list[list[str]] = []
    taken: set[str] = set()
    for r in records:
        true = r["target_true"]
        near = [p for p in r["neighborhood_prompts"] if reader.answers(p, true)][:max_neighbors]
        if r["subject"] in taken or len(near) < min_neighbors:
            continue
        fact = _with_verified_probes(r, near, reader.answers, reader.token)
        fact["p_true"] = round(reader.top[_rewrite(r)][1], 4)
        taken.add(r["subject"])
        kept.append(fact)
        bridges.append(r.get("bridge_prompts", []) if fact["two_hop_prompt"] else [])
    # A two-hop answer assumes its bridge facts hold; where one is itself an edit of the set,
    # editing both at once would leave the expected answer undefined.
    edited = {_rewrite(f) for f in kept}
    for fact, hops in zip(kept, bridges, strict=True):
        if any(h in edited for h in hops):
            fact.update(two_hop_prompt="", two_hop_target_new="", two_hop_target_true="")
    return kept


def _with_verified_probes(
    r: Mapping[str, Any], near: list[str], answers: Any, token: Any
) -> dict[str, Any]:
    """A kept fact's record with only the probes the model answers as listed (rule 4); ``answers``
    and ``token`` are :func:`select_edit_facts`'s readers of the model's top-1 tokens."""
    fact = {key: r[key] for key in _FIELDS} | {"neighborhood_prompts": near}
    if r["reverse_prompt"] and not (
        answers(r["reverse_prompt"], r["reverse_target_true"])
        and token(r["reverse_target_true"]) != token(r["reverse_target_new"])
    ):
        fact.update(reverse_prompt="", reverse_target_new="", reverse_target_true="")
    hops = r.get("bridge_prompts", [])
    if r["two_hop_prompt"] and not (
        answers(r["two_hop_prompt"], r["two_hop_target_true"])
        and answers(hops[0], r["two_hop_target_true"])
        and answers(hops[1], r["two_hop_target_new"])
        and token(r["two_hop_target_true"]) != token(r["two_hop_target_new"])
    ):
        fact.update(two_hop_prompt="", two_hop_target_new="", two_hop_target_true="")
    others = [
        (p, t)
        for p, t in zip(r["other_relation_prompts"], r["other_relation_targets"], strict=True)
        if answers(p, t)
    ]
    fact["other_relation_prompts"] = [p for p, _ in others]
    fact["other_relation_targets"] = [t for _, t in others]
    return fact


def _counts(facts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The header's counts: facts per relation (table order) and per messy-knowledge kind."""
    relations = Counter(f["relation"] for f in facts)
    return {
        "n_facts": len(facts),
        "relations": {name: relations[name] for name in EDIT_RELATIONS if relations[name]},
        "messy": {
            "negated": sum(bool(f["negated_prompt"]) for f in facts),
            "reverse": sum(bool(f["reverse_prompt"]) for f in facts),
            "two_hop": sum(bool(f["two_hop_prompt"]) for f in facts),
            "other_relation": sum(bool(f["other_relation_prompts"]) for f in facts),
            "other_relation_prompts": sum(len(f["other_relation_prompts"]) for f in facts),
        },
    }


def build_edit_fact_set(
    lm: LensModel, path: str | Path | None = None, **rule: Any
) -> list[dict[str, Any]]:
    """Select the edit facts on ``lm`` and write them as JSON (default: the packaged file).

    The file is written to a temporary name and renamed, so a reader never sees half of it.
    ``python -c "from lmsci_mi import load_model; from lmsci_mi.data.edit_facts import
    build_edit_fact_set; build_edit_fact_set(load_model('smollm2-135m'))"`` rebuilds the
    shipped file.
    """
    start = time.perf_counter()
    candidates = edit_fact_candidates()
    facts = select_edit_facts(lm, candidates, **rule)
    target = Path(path) if path is not None else Path(__file__).with_name(EDIT_FACTS_FILE)
    document = {
        "model": lm.name,
        "rule": "lmsci_mi.data.edit_facts.select_edit_facts " + json.dumps(rule or "defaults"),
        "n_candidates": len(candidates),
        **_counts(facts),
        "facts": facts,
    }
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=target.parent, suffix=".tmp", delete=False
    ) as handle:
        handle.write(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    os.chmod(handle.name, 0o644)  # a temporary file is created private to its owner
    os.replace(handle.name, target)
    logger.info(
        "kept %d of %d candidate facts in %.1f s",
        len(facts),
        len(candidates),
        time.perf_counter() - start,
    )
    return facts


def load_edit_fact_records() -> list[dict[str, Any]]:
    """The shipped editing fact set (selected on SmolLM2-135M) as plain dicts.

    >>> records = load_edit_fact_records()
    >>> len(records) >= 250 and len({r["relation"] for r in records}) >= 6
    True
    """
    text = resources.files("lmsci_mi.data").joinpath(EDIT_FACTS_FILE).read_text(encoding="utf-8")
    return list(json.loads(text)["facts"])
