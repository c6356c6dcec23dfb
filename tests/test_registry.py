"""Every registered engine appears in every table that says something about an engine, and no
table names an engine the registry does not: adding an engine is one registry entry plus its
own modules (``docs/architecture.md``, "Adding an engine")."""

from __future__ import annotations

from pathlib import Path

import pytest

from specscope import registry, sampling
from specscope.cli import build_parser
from specscope.exporters import engine_rules, rules
from specscope.importers import FORMATS, PARSERS
from specscope.importers import metrics
from specscope.probe import client as probe_client
from specscope.probe import seed, stops
from specscope.serving import engines as serving

ROOT = Path(__file__).resolve().parents[1]
NAMES = [e.name for e in registry.ENGINES]


@pytest.mark.parametrize("name", NAMES)
def test_each_engine_is_in_every_table_it_claims(name, tmp_path):
    e = registry.engine(name)
    assert engine_rules.TITLE[name] == e.title
    assert name in rules.ENGINES and rules.alert_rules(name)  # `specscope rules --engine NAME`
    assert _choices("rules", "--engine") >= {name}
    m = metrics.BY_NAME[name]  # its Prometheus families, from importers/metrics/<name>.py
    assert m.engine == name and m.families
    assert (ROOT / "docs" / "engines" / f"{name}.md").is_file()
    assert f"engines/{name}.md" in (ROOT / "mkdocs.yml").read_text()  # in the site's nav
    if e.sampling_defaults is not None:
        assert sampling.DEFAULTS[name] == e.sampling_defaults
        assert sampling.code(0.0, engine=name) == sampling.GREEDY
    if e.log_format:
        assert e.log_format in PARSERS and e.log_format in FORMATS
    if e.owned_by:
        assert registry.served(f"some-{e.owned_by.upper()}-build") == name
        assert probe_client.ENABLE[name] == e.logprobs_enable
        assert probe_client.semantics(name) is not None
        assert name in _choices("probe", "--engine")
        assert (name in seed.PROMISED_BY) == e.seeds_repeat
        assert (name in stops.HELD_ENGINES) == e.takes_stop_fields
    if e.spec_syntax:  # specscope starts its server: a harness, its speculation parsed
        assert name in serving.ENGINES and serving.SPEC_SYNTAX[name] == e.spec_syntax
        assert name in _choices("sweep", "--engine")
        off = serving.parse_speculation(name, "off")
        srv = serving.engine_server(name, off, [], tmp_path, "run-1",
                                    serving.EngineOptions(model=tmp_path / "model"))
        assert srv.proc is None  # built, not started


def test_no_table_names_an_engine_the_registry_does_not():
    known = set(NAMES)
    assert set(engine_rules.TITLE) == known
    assert set(metrics.BY_NAME) == known
    assert set(sampling.DEFAULTS) - {""} <= known
    assert set(serving.ENGINES) <= known and set(serving.SPEC_SYNTAX) <= known
    assert set(probe_client.ENABLE) - {"unknown"} <= known
    assert set(probe_client.DEFAULT_LOGPROBS) | set(probe_client.PENALTY_WINDOW) <= known
    assert set(probe_client.TOKEN_IDS) - {"specscope"} <= known
    assert {p.stem for p in (ROOT / "docs" / "engines").glob("*.md")} == known
    with pytest.raises(ValueError, match="no server harness"):
        serving.engine_server("trtllm", serving.Speculation("trtllm", "off", "off"), [],
                              Path("/nonexistent"), "r", serving.EngineOptions(model=Path("m")))
    with pytest.raises(KeyError, match="known: vllm"):
        registry.engine("tensorrt")


def _choices(command: str, flag: str) -> set[str]:
    """The choices ``specscope COMMAND FLAG`` takes (from the real parser)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and command in a.choices)
    action = next(a for a in sub.choices[command]._actions if flag in a.option_strings)
    return set(action.choices)

