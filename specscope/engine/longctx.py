"""Long-context prompts: a question about one entry of a long register of facts.

Acceptance can fall as context grows (a drafter whose window is too short), so the shipped
workload needs prompts across context lengths, several per length. Each ``long`` prompt in the
prompt set names its size (``context_tokens``, about; the bucket is placed by the real token
count) and a seed; the register is generated from it: numbered entries, each a different shop,
street, opening hour, staff count and founding year, so no entry repeats another verbatim (a
structured document, as logs and tables are; prompt lookup finds the template, not the facts).
The question asks for one entry's founding year, which is the prompt's ``answer``.
"""

from __future__ import annotations

import random
from typing import Any

CHARS_PER_TOKEN = 2.75  #: the register in SmolLM2's tokenizer (a digit is a token), measured

_SHOPS = ("bakery", "bookshop", "pharmacy", "bicycle shop", "tea room", "hardware store",
          "flower stall", "barber", "cheese shop", "print shop", "toy shop", "repair café",
          "butcher", "fishmonger", "music shop", "tailor", "framer", "pottery studio")
_STREETS = ("Mill Street", "Elm Road", "Harbour Lane", "Station Road", "Church Walk",
            "Orchard Way", "Bridge Street", "Market Square", "Canal Row", "Hill Terrace",
            "Queen's Parade", "Garden Close", "Foundry Yard", "Lark Avenue", "Castle Hill")
_OWNERS = ("Ada", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hiro", "Ines",
           "Jonas", "Kemi", "Luca", "Mina", "Noor", "Oskar", "Priya", "Rosa", "Sven")


def _entries(rng: random.Random, n: int) -> list[dict[str, Any]]:
    seen: set[tuple[str, str]] = set()
    out: list[dict[str, Any]] = []
    while len(out) < n:
        shop, street = rng.choice(_SHOPS), rng.choice(_STREETS)
        if (shop, street) in seen and len(seen) < len(_SHOPS) * len(_STREETS):
            continue
        seen.add((shop, street))
        out.append({"shop": shop, "street": street, "owner": rng.choice(_OWNERS),
                    "opens": rng.randint(6, 10), "closes": rng.randint(16, 21),
                    "staff": rng.randint(1, 14), "year": rng.randint(1901, 2019)})
    return out


def _line(i: int, e: dict[str, Any]) -> str:
    return (f"Entry {i}: the {e['shop']} on {e['street']}, run by {e['owner']}, opens at "
            f"{e['opens']} and closes at {e['closes']}, has {e['staff']} staff and was founded "
            f"in {e['year']}.")


def expand(spec: dict[str, Any]) -> dict[str, Any]:
    """A ``long`` prompt-set entry with its ``prompt`` and ``answer`` filled in."""
    size = int(spec["context_tokens"])
    rng = random.Random(f"{spec['id']}:{spec.get('seed', 0)}")
    n = max(2, round(size * CHARS_PER_TOKEN / 120))  # an entry is about 120 characters
    entries = _entries(rng, n)
    needle = rng.randrange(n)
    target = entries[needle]
    register = "\n".join(_line(i + 1, e) for i, e in enumerate(entries))
    question = (f"In which year was the {target['shop']} on {target['street']} founded? "
                "Answer with the year only.")
    return {**spec, "prompt": f"Town register of shops.\n{register}\n\nQuestion: {question}",
            "answer": str(target["year"]), "answer_format": r"\b(19|20)\d\d\b"}
