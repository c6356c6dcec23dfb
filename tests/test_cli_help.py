"""`--help` that answers: every command's help ends with examples that its own parser accepts,
and `import --help` lists every format it knows."""

from __future__ import annotations

import shlex

import pytest

from specscope.cli import build_parser
from specscope.importers import FORMATS


def _commands():
    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    return p, sub.choices


@pytest.mark.parametrize("name", sorted(_commands()[1]))
def test_every_command_ends_its_help_with_examples_its_parser_accepts(name):
    parser, commands = _commands()
    text = commands[name].format_help()
    tail = text[text.rindex("examples:"):].splitlines()[1:]
    examples = [line.strip() for line in tail if line.strip().startswith("specscope ")]
    assert examples, f"specscope {name} --help shows no example"
    for example in examples:
        args = parser.parse_args(shlex.split(example, comments=True)[1:])  # exits on a flag it does not know
        assert args.command == name or getattr(args, "func", None) is not None


def test_import_help_lists_every_format():
    text = _commands()[1]["import"].format_help()
    for name in FORMATS:
        assert f"\n  {name} " in text, name
