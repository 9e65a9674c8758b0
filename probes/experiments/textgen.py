"""Procedural English-like text for byte-level experiments: no download, no licence, any size.

``procedural_text(num_chars, seed)`` writes paragraphs of a small story grammar: each paragraph
picks a cast (two or three names), a place and a season, then draws sentences from the templates
below, reusing the cast, so a model can learn spelling and word order (local structure) and copy
names, places and numbers from earlier in the paragraph (in-context structure). The same seed
gives the same text on every machine (Python's ``random.Random``).
"""
from __future__ import annotations

import random

NAMES = ["Ada", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Luca",
         "Mira", "Nils", "Olga", "Pablo", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wim", "Yara", "Zeno"]
PLACES = ["harbour", "market", "library", "mill", "orchard", "bridge", "station", "garden", "forge", "bakery",
          "lighthouse", "school", "chapel", "meadow", "workshop", "tavern"]
THINGS = ["lamp", "basket", "ladder", "kettle", "rope", "lantern", "barrel", "map", "compass", "drum", "sack",
          "clock", "anchor", "bucket", "saddle", "blanket", "hammer", "violin", "jar", "cart"]
ADJECTIVES = ["old", "red", "heavy", "small", "broken", "shiny", "wooden", "green", "quiet", "bright", "narrow",
              "warm", "strange", "crooked", "golden", "plain"]
VERBS = ["carried", "mended", "painted", "sold", "found", "lost", "counted", "polished", "hid", "borrowed"]
SEASONS = ["spring", "summer", "autumn", "winter"]
NUMBERS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve"]

TEMPLATES = [
    "{a} went to the {place} with {n} {things}.",
    "At the {place}, {a} {verb} a {adj} {thing}.",
    "{a} gave {b} the {adj} {thing} that {c} had {verb}.",
    "The {thing} was {adj}, so {a} {verb} it again.",
    "In {season}, the {place} smelled of {things2} and rain.",
    "{b} asked {a}: where is the {adj} {thing}?",
    "{a} said the {thing} cost {num} coins at the {place}.",
    "By evening {b} had {verb} {n} {things2}, and {a} had {verb2} {n2}.",
    "Nobody at the {place} knew why {c} {verb} the {thing}.",
]


def _plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def _sentence(rng: random.Random, cast: list[str], place: str, season: str) -> str:
    a, b = rng.sample(cast, 2)
    c = rng.choice(cast)
    thing, thing2 = rng.choice(THINGS), rng.choice(THINGS)
    return rng.choice(TEMPLATES).format(
        a=a, b=b, c=c, place=place, season=season, thing=thing, things=_plural(thing), things2=_plural(thing2),
        adj=rng.choice(ADJECTIVES), verb=rng.choice(VERBS), verb2=rng.choice(VERBS), n=rng.choice(NUMBERS),
        n2=rng.choice(NUMBERS), num=rng.randint(2, 99))


def _paragraph(rng: random.Random) -> str:
    cast = rng.sample(NAMES, rng.randint(2, 3))
    place, season = rng.choice(PLACES), rng.choice(SEASONS)
    return " ".join(_sentence(rng, cast, place, season) for _ in range(rng.randint(3, 7)))


def procedural_text(num_chars: int, seed: int) -> str:
    """At least ``num_chars`` characters of paragraphs (separated by blank lines), cut at a paragraph end."""
    if num_chars < 1:
        raise ValueError(f"num_chars must be >= 1, got {num_chars}")
    rng = random.Random(seed)
    paragraphs, size = [], 0
    while size < num_chars:
        paragraphs.append(_paragraph(rng))
        size += len(paragraphs[-1]) + 2
    return "\n\n".join(paragraphs) + "\n"
