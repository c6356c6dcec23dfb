"""The one Prometheus text parser agrees with prometheus_client's on every real scrape and on
the lines that trip parsers up; bad lines are reported by number, never fatal."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.io import promtext

SCRAPES = ("vllm_metrics_scrape_specdecode_1.txt", "sglang_metrics_scrape_1.txt",
           "sglang_metrics_scrape_2.txt")

TRICKY = r'''# HELP odd_total Label values that hold what a label set is made of.
# TYPE odd_total counter
odd_total{path="/a}b",pair="x,y",quote="say \"hi\"",slash="c:\\d",nl="two\nlines"} 3 1700000000123
odd_total{empty=""} NaN
odd_total{trailing="comma",} +Inf
odd_total -Inf
odd_total{k="v"}	1.5e-05
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0"} 1.7629e+09
odd_total{ spaced = "yes" } 7
'''


def _ours(text):
    return [(s.name, dict(s.labels), s.value, s.timestamp_ms)
            for s in promtext.parse(text).samples]


def _theirs(text):
    from prometheus_client.parser import text_string_to_metric_families

    return [(s.name, dict(s.labels), s.value,
             None if s.timestamp is None else round(s.timestamp * 1000))
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def _same(a, b):
    def norm(rows):
        return [(n, lab, "nan" if math.isnan(v) else v, ts) for n, lab, v, ts in rows]
    return norm(a) == norm(b)


@pytest.mark.parametrize("name", SCRAPES)
def test_agrees_with_prometheus_client_on_real_scrapes(samples, name):
    text = (samples / name).read_text()
    ours = _ours(text)
    assert ours and _same(ours, _theirs(text))
    assert not promtext.parse(text).problems


def test_agrees_on_the_lines_that_trip_parsers_up():
    ours = _ours(TRICKY)
    assert _same(ours, _theirs(TRICKY))
    first = ours[0]
    assert first[1] == {"path": "/a}b", "pair": "x,y", "quote": 'say "hi"', "slash": "c:\\d",
                        "nl": "two\nlines"}
    assert first[3] == 1700000000123
    assert [v for _, _, v, _ in ours[2:4]] == [math.inf, -math.inf]
    assert ours[5][0].endswith("_created")  # reported as a sample; the mapping decides
    assert promtext.parse(TRICKY).types == {"odd_total": "counter",
                                            "vllm:spec_decode_num_drafts_created": "gauge"}


def test_bad_lines_are_reported_by_number_and_the_rest_kept():
    text = 'ok_total 1\n<html>oops</html>\nok_total{a="1" 2\nok_total{a="x"} notanumber\nok_total 4\n'
    page = promtext.parse(text)
    assert [s.value for s in page.samples] == [1.0, 4.0]
    assert [line for line, _ in page.problems] == [2, 3, 4]


_VALUES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(_VALUES, min_size=1, max_size=4), value=st.floats(allow_nan=False))
def test_any_label_value_round_trips_through_the_exporters_escaping(values, value):
    from specscope.exporters.prometheus import _fmt, _pairs

    labels = {f"l{i}": v for i, v in enumerate(values)}
    pairs = _pairs(tuple(labels), tuple(labels.values()))
    line = f"m_total{{{pairs}}} {_fmt(value) if math.isfinite(value) else repr(value)}"
    (sample,) = promtext.parse(line).samples
    assert dict(sample.labels) == labels and sample.value == value


@pytest.mark.parametrize("name", SCRAPES)
def test_parse_families_gives_what_the_full_parse_gives_for_those_families(samples, name):
    text = (samples / name).read_text() + TRICKY
    everything = promtext.parse(text).samples
    for families in ({s.name for s in everything}, {"odd_total", "vllm:spec_decode_num_drafts_total",
                                                    "sglang:generation_tokens_total"}, set()):
        picked = promtext.parse_families(text, families).samples
        assert [repr(s) for s in picked] == [repr(s) for s in everything if s.name in families]
