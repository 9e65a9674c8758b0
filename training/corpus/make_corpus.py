"""Writes the small corpus the package ships (README.md here): ``python make_corpus.py [FOLDER]``.

Every sentence and problem template below was written for this project; the files are generated
from them with a fixed seed, so running the script again rewrites the same bytes (a test checks it).

    prose.txt     expository paragraphs, one per blank-line-separated block (a stand-in for
                  web text such as FineWeb-Edu)
    math.jsonl    grade-school word problems {"question", "answer"}, the answer a worked solution in
                  GSM8K's format: steps with <<a*b=c>> calculator notes, then "#### <number>"
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 2026
PARAGRAPHS = 240
PROBLEMS = 320

TOPICS = {
    "water": [
        "Water moves between the sea, the air and the land in a cycle that never stops.",
        "Sunlight warms the surface of the sea, and some of the water turns into vapour.",
        "The vapour rises, cools and gathers into tiny droplets that we see as clouds.",
        "When the droplets grow heavy enough, they fall back to the ground as rain or snow.",
        "Rivers carry much of that water back to the sea, and the cycle begins again.",
        "Some rain soaks into the soil and is stored underground for many years.",
        "Plants pull water from the soil and release part of it through their leaves.",
        "Without this cycle, fresh water would soon run out on land.",
    ],
    "plants": [
        "A green plant makes its own food from light, air and water.",
        "The leaves hold a pigment that captures the energy of sunlight.",
        "Roots anchor the plant and take in water and minerals from the soil.",
        "The stem carries water upward and sugars downward through thin tubes.",
        "Many plants grow toward the light, bending their stems as they do.",
        "Seeds can wait for months until the soil is warm and wet enough to sprout.",
        "Bees and other insects carry pollen from one flower to the next.",
        "A single oak tree can produce thousands of acorns in a good year.",
    ],
    "moon": [
        "The Moon circles the Earth about once every twenty-seven days.",
        "It does not make its own light; it reflects the light of the Sun.",
        "As the Moon moves, we see different parts of its lit side, which we call phases.",
        "The pull of the Moon raises the tides of the oceans twice a day.",
        "Its surface is covered with craters left by rocks that struck it long ago.",
        "The same side of the Moon always faces the Earth.",
        "A day on the Moon, from one sunrise to the next, lasts about a month.",
        "People first walked on the Moon in the summer of 1969.",
    ],
    "numbers": [
        "A number is even when it can be split into two equal whole parts.",
        "Multiplying by ten adds a zero to the end of a whole number.",
        "The order of the numbers does not change a sum or a product.",
        "A fraction names a part of a whole, such as three quarters of a cake.",
        "To share a quantity equally, we divide it by the number of groups.",
        "The perimeter of a rectangle is twice the sum of its length and its width.",
        "Checking an answer with a rough estimate catches many mistakes.",
        "A remainder is what is left over when a number does not divide evenly.",
    ],
    "memory": [
        "Memory lets a mind keep what it has seen and use it later.",
        "An associative memory stores pairs, so that a cue can recall what was linked to it.",
        "Recalling a phone number from a name is a simple kind of association.",
        "When too many pairs are stored in a small memory, old ones begin to blur.",
        "Repeating an item at spaced intervals helps it stay in memory longer.",
        "A list is easier to remember when it is grouped into small chunks.",
        "Some memories fade quickly, while others last a lifetime.",
        "Reading a story, we keep track of who did what without noticing the effort.",
    ],
    "weather": [
        "Weather is the state of the air at one place and one time.",
        "Warm air rises, and cooler air flows in to take its place, making wind.",
        "A barometer measures the pressure of the air above it.",
        "Falling pressure often means that clouds and rain are on the way.",
        "Thunder is the sound of air heated suddenly by a flash of lightning.",
        "Fog is a cloud that forms close to the ground on cool, still nights.",
        "Forecasters compare many measurements to guess tomorrow's weather.",
        "Climate describes the weather of a place averaged over many years.",
    ],
    "bridges": [
        "A bridge carries a road or a path across a gap such as a river or a valley.",
        "The simplest bridge is a beam resting on a support at each end.",
        "An arch bridge pushes its load outward and down into the ground at its ends.",
        "Suspension bridges hang their deck from cables slung between tall towers.",
        "Engineers must plan for the weight of traffic, the wind and changes in temperature.",
        "Steel expands in summer heat, so long bridges have joints that let them move.",
        "Old stone bridges have stood for centuries because stone is strong when pressed.",
        "Before building, engineers test small models to see how a design behaves.",
    ],
    "maps": [
        "A map is a small drawing of a large place, seen from above.",
        "The scale of a map tells how a distance on paper compares with one on the ground.",
        "Lines of latitude run east and west, and lines of longitude run north and south.",
        "A compass needle points toward the magnetic north of the Earth.",
        "Contour lines join points of equal height and show the shape of hills.",
        "Sailors once steered by the stars when no coast was in sight.",
        "A legend explains the symbols a map uses for roads, rivers and towns.",
        "Flat maps always stretch some parts of the round Earth.",
    ],
}

NAMES = ["Ada", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonah", "Kemi", "Luca",
         "Maya", "Noor", "Oskar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]
ITEMS = ["notebook", "pencil", "apple", "ticket", "marble", "sticker", "candle", "postcard"]


def paragraph(rng: random.Random) -> str:
    sentences = TOPICS[rng.choice(sorted(TOPICS))]
    return " ".join(rng.sample(sentences, rng.randint(3, 6)))


def _change(rng):
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, p = rng.randint(2, 9), rng.randint(2, 12)
    cost = a * p
    bill = next(b for b in (10, 20, 50, 100) if b > cost)
    return (f"{name} buys {a} {item}s at ${p} each and pays with a ${bill} bill. How much change does {name} get?",
            [f"The {item}s cost {a} * {p} = <<{a}*{p}={cost}>>{cost} dollars.",
             f"The change is {bill} - {cost} = <<{bill}-{cost}={bill - cost}>>{bill - cost} dollars."], bill - cost)


def _pages(rng):
    name, a, d, b = rng.choice(NAMES), rng.randint(5, 30), rng.randint(2, 9), rng.randint(3, 40)
    return (f"{name} reads {a} pages a day for {d} days and then reads {b} more pages. How many pages does {name} "
            f"read in all?",
            [f"In {d} days {name} reads {a} * {d} = <<{a}*{d}={a * d}>>{a * d} pages.",
             f"In all {name} reads {a * d} + {b} = <<{a * d}+{b}={a * d + b}>>{a * d + b} pages."], a * d + b)


def _share(rng):
    item, k, m = rng.choice(ITEMS), rng.randint(2, 8), rng.randint(3, 12)
    g = rng.randint(1, m - 1)
    n = k * m
    return (f"{n} {item}s are shared equally among {k} friends. Then each friend gives away {g} of them. How many "
            f"{item}s does each friend keep?",
            [f"Each friend first gets {n} / {k} = <<{n}/{k}={m}>>{m} {item}s.",
             f"Each friend keeps {m} - {g} = <<{m}-{g}={m - g}>>{m - g} {item}s."], m - g)


def _distance(rng):
    v, h, w = rng.randint(4, 12) * 10, rng.randint(2, 6), rng.randint(5, 60)
    return (f"A train travels at {v} km per hour for {h} hours and then another {w} km. How many kilometres does "
            f"it travel?",
            [f"In {h} hours it covers {v} * {h} = <<{v}*{h}={v * h}>>{v * h} km.",
             f"The whole trip is {v * h} + {w} = <<{v * h}+{w}={v * h + w}>>{v * h + w} km."], v * h + w)


def _savings(rng):
    name, s, w = rng.choice(NAMES), rng.randint(3, 15), rng.randint(4, 12)
    x = rng.randint(1, s * w - 1)
    return (f"{name} saves ${s} every week. After {w} weeks, {name} spends ${x} on a present. How many dollars are "
            f"left?",
            [f"After {w} weeks {name} has {s} * {w} = <<{s}*{w}={s * w}>>{s * w} dollars.",
             f"After the present {s * w} - {x} = <<{s * w}-{x}={s * w - x}>>{s * w - x} dollars are left."],
            s * w - x)


def _fence(rng):
    length, width, c = rng.randint(3, 20), rng.randint(2, 15), rng.randint(2, 9)
    perimeter = 2 * (length + width)
    return (f"A garden is {length} m long and {width} m wide. A fence around it costs ${c} per metre. How much does "
            f"the fence cost?",
            [f"The perimeter is 2 * ({length} + {width}) = <<2*({length}+{width})={perimeter}>>{perimeter} m.",
             f"The fence costs {perimeter} * {c} = <<{perimeter}*{c}={perimeter * c}>>{perimeter * c} dollars."],
            perimeter * c)


def _cookies(rng):
    name, t, k, b = rng.choice(NAMES), rng.randint(2, 6), rng.randint(6, 12), rng.randint(2, 6)
    baked = t * k
    bags = rng.randint(1, baked // b)
    eaten = baked - bags * b
    steps = [f"{name} bakes {t} * {k} = <<{t}*{k}={baked}>>{baked} cookies.",
             f"After eating, {baked} - {eaten} = <<{baked}-{eaten}={baked - eaten}>>{baked - eaten} cookies are left.",
             f"They fill {baked - eaten} / {b} = <<{baked - eaten}/{b}={bags}>>{bags} bags."]
    return (f"{name} bakes {t} trays of {k} cookies and eats {eaten} of them. The rest are packed into bags of {b}. "
            f"How many bags are filled?", steps, bags)


def _walkers(rng):
    d, per = rng.choice([2, 3, 4, 5]), rng.randint(4, 9)
    n = d * per
    return (f"A class has {n} students, and 1/{d} of them walk to school. How many students do not walk to school?",
            [f"{n} / {d} = <<{n}/{d}={per}>>{per} students walk.",
             f"So {n} - {per} = <<{n}-{per}={n - per}>>{n - per} students do not walk."], n - per)


PROBLEM_KINDS = [_change, _pages, _share, _distance, _savings, _fence, _cookies, _walkers]


def problem(rng: random.Random) -> dict:
    question, steps, answer = rng.choice(PROBLEM_KINDS)(rng)
    return {"question": question, "answer": "\n".join(steps) + f"\n#### {answer}"}


def write_corpus(folder: Path) -> None:
    rng = random.Random(SEED)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prose.txt").write_text("\n\n".join(paragraph(rng) for _ in range(PARAGRAPHS)) + "\n")
    (folder / "math.jsonl").write_text("".join(json.dumps(problem(rng)) + "\n" for _ in range(PROBLEMS)))


if __name__ == "__main__":
    write_corpus(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
