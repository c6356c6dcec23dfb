"""The probe's designed workload: sampling classes and prompts. Stdlib only.

Prompts are chosen so that drafts run long (copying, lists, code edits: the answer repeats the
prompt, where prompt lookup and draft models accept most) and so does the open-ended text (a
story, an explanation: many positions where honest sampling rarely picks the top-1, which is
what lets a check see verify committing the argmax).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import sampling
from .ngram import NgramSettings
from .penalties import FIELDS as PENALTY_FIELDS, PENALTIES
from .limit import LIMIT
from .prefix import PREFIX
from .rescore import RESCORE
from .seed import SEED
from .stops import STOPS

#: the sampling classes the probe sends, by name (``specscope.sampling``): each class's request
#: fields (temperature 0.8, top-p 0.9, top-k 20 where the class holds them)
CLASSES: dict[str, dict[str, Any]] = {
    sampling.name(c): sampling.fields(c, temperature=0.8, top_p=0.9, top_k=20)
    for c in (sampling.GREEDY, sampling.SAMPLED, sampling.SAMPLED | sampling.TOP_P,
              sampling.SAMPLED | sampling.TOP_K)}
#: the suffix of a class sent with its temperature left out: the engine's own default applies
#: (``sampling.DEFAULTS``, or ``ProbePlan.default_temperature``). An engine that normalises
#: such a request to its greedy sentinel under speculation decodes it deterministically.
UNSET_T = "/unset-t"
CLASSES.update({"top-p" + UNSET_T: {"top_p": 0.9}, "top-k" + UNSET_T: {"top_k": 20}})
#: greedy with presence and frequency penalties (``penalties.py``)
CLASSES[PENALTIES] = dict(PENALTY_FIELDS)
#: temperature with a min-p floor: only the truncation check reads it (the temperature checks
#: do not model min-p, which raises the top-1's share)
MIN_P = "min-p"
CLASSES[MIN_P] = {"temperature": 0.8, "min_p": 0.1}
#: the classes most likely to bring an engine down, sent after every other class's requests
#: (vLLM 0.32's CPU build crashes its engine core on top-k under speculation, every later
#: request answered HTTP 500): what the other classes show is in before the risk is taken
RISKY = ("top-k", "top-k" + UNSET_T)
#: every class the probe knows (``--classes all``), the risky ones sent last whatever the order
#: the classes sent apart from the rounds, each once (``senders.py``)
APART = (STOPS, PREFIX, SEED, RESCORE, LIMIT)
ALL_CLASSES = (*CLASSES, *APART)


def class_code(cls: str) -> int:
    """A probe class's sampling code (``specscope.sampling``): an unset-temperature class
    samples (every engine's default temperature is above 0); the penalties class is greedy, the
    min-p class samples."""
    if cls == PENALTIES:
        return sampling.GREEDY
    if cls == MIN_P:
        return sampling.SAMPLED
    return sampling.of_name(cls[:-len(UNSET_T)] if cls.endswith(UNSET_T) else cls)


def default_temperature(engine: str, given: float | None = None) -> float:
    """The temperature ``engine`` applies where a request leaves it out: ``given``, else its
    defaults table's (``sampling.DEFAULTS``; 1.0 for an unknown engine)."""
    if given is not None:
        return given
    return sampling.DEFAULTS.get(engine, sampling.DEFAULTS[""])[0]

REPETITIVE = (
    "Repeat the following text exactly, word for word:\nThe committee met on Tuesday to review "
    "the budget for the new library. After a long discussion, the members agreed to fund the "
    "reading room, the children's corner and the archive, and to postpone the café until spring.",
    "Copy these lines exactly:\nalpha, bravo, charlie, delta, echo, foxtrot, golf, hotel, india, "
    "juliett, kilo, lima, mike, november, oscar, papa, quebec, romeo, sierra, tango",
    "Rename the variable `total` to `subtotal` in this function and print the whole function:\n"
    "def add_items(items):\n    total = 0\n    for item in items:\n        total += item.price * "
    "item.quantity\n    if total > 100:\n        total = total * 0.9\n    return total",
    "List the numbers from 1 to 30, one per line, each followed by its square, like `4: 16`.",
    "Repeat the following text exactly:\nTo reset the router, unplug it, wait thirty seconds, "
    "plug it back in and wait until the light turns green. If the light stays red, hold the "
    "reset button for ten seconds and repeat the steps above.",
    "Add type hints to this function and print it:\ndef merge(a, b):\n    out = dict(a)\n    for "
    "key, value in b.items():\n        out[key] = value\n    return out",
)
OPEN_ENDED = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Describe a walk through a busy market on a summer morning.",
    "Explain to a child why the sky changes colour at sunset.",
    "Write a letter to a friend about a trip to the mountains.",
    "Invent a new board game and explain its rules.",
    "Describe your ideal weekend in a few paragraphs.",
)


@dataclass
class ProbePlan:
    """What the probe sends: classes, prompts, and its bounds."""

    classes: tuple[str, ...] = ("greedy", "temperature", "top-p", "top-k")
    requests: int = 24  #: requests in all, spread over the classes in turn
    max_tokens: int = 64
    concurrency: int = 4
    token_budget: int = 4096  #: no request is sent once this many output tokens came back
    timeout_s: float = 120.0  #: per request
    deadline_s: float = 120.0  #: the whole probe, every round
    #: keep asking until it knows: after the plan's requests, more rounds for the classes whose
    #: checks are still INCONCLUSIVE and could be settled by more positions, until every check
    #: has decided or the deadline passes (``token_budget`` bounds each round). The risky
    #: classes (``RISKY``) are sent only once every other class has decided.
    until_decided: bool = True
    #: requests per class sent in earlier rounds: a later round takes the next prompts
    offset: int = 0
    endpoint: str = "chat"  #: "chat", "completions" or "generate" (SGLang's native API)
    seed: int = 0
    #: more fields for every request; never a logit bias (``ignore_eos`` is one): the checks
    #: read the distribution before it, so a biased token would look like a verify fault
    extra: dict[str, Any] = field(default_factory=dict)
    #: send no more requests once a check has failed (the verdict cannot change); those in
    #: flight finish and count
    fail_fast: bool = True
    #: prompt lookup's settings on the engine (``--ngram K:MIN:MAX``): the proposer is replayed
    #: over each response's token ids to find the tokens verify produced
    ngram: NgramSettings | None = None
    #: the engine's temperature where a request leaves it out (the unset-temperature classes);
    #: None: its defaults table's (``default_temperature``)
    default_temperature: float | None = None

    def requests_to_send(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(class, prompt, sampling fields) per request: classes in turn, the risky ones
        (``RISKY``) after all the others; greedy requests take the repetitive prompts first,
        sampled ones alternate repetitive and open-ended."""
        unknown = [c for c in self.classes if c not in CLASSES and c not in APART]
        if unknown:
            raise ValueError(f"unknown probe class(es) {', '.join(unknown)}; known: "
                             f"{', '.join(ALL_CLASSES)}")
        out = []
        classes = tuple(c for c in self.classes if c not in APART)
        if not classes:
            return []
        for i in range(self.requests):
            cls = classes[i % len(classes)]
            j = i // len(classes) + self.offset
            if cls == "greedy":  # the repetitive prompts, then the open-ended ones, in turn
                pool = REPETITIVE if (j // len(REPETITIVE)) % 2 == 0 else OPEN_ENDED
                prompt = pool[j % len(pool)]
            else:
                pool = REPETITIVE if j % 2 == 0 else OPEN_ENDED
                prompt = pool[(j // 2) % len(pool)]
            out.append((cls, prompt, dict(CLASSES[cls])))
        return sorted(out, key=lambda r: r[0] in RISKY)  # stable: the turn order otherwise
