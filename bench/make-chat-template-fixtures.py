"""Writes tests/fixtures/chat_templates.json: each template in tests/fixtures/chat_templates/
(kept in the fixture too) rendered by Python's jinja2 the way Hugging Face transformers renders a model's chat template
(an immutable sandbox, trim_blocks and lstrip_blocks, the loop-controls extension, a
raise_exception function, strftime_now at a fixed time, the `{% generation %}` tag of its
assistant-mask extension), so tokenscope's minijinja rendering is checked against the engine the
templates are written for. Made once and kept; tests need no Python.

    python3 -m pip install jinja2==3.1.6   # the version the fixture was made with
    python3 bench/make-chat-template-fixtures.py
"""
import datetime
import json
import pathlib

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tests/fixtures/chat_templates"
OUT = ROOT / "tests/fixtures/chat_templates.json"
BOS, EOS = "<|begin|>", "<|end|>"
# The local time strftime_now reports while the fixture renders (the test renders at it too).
NOW = datetime.datetime(2026, 8, 6, 9, 5, 3)

CONVERSATIONS = {
    "one user turn": [{"role": "user", "content": "What is 2+2?"}],
    "system then user": [
        {"role": "system", "content": "  Answer in French.  "},
        {"role": "user", "content": "Hello!"},
    ],
    "empty system": [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}],
    "three turns": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "\t/again please \n"},
    ],
    "hard text": [{"role": "user", "content": "  {{ not a tag }} {% raw %} 日本語 🙂\n\nend\t"}],
    "bad role": [{"role": "tool", "content": "42"}],
    "switches in the system turn": [
        {"role": "system", "content": "/no_think Be brief. "},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "\n\nBecause."},
        {"role": "user", "content": "And?"},
    ],
    "system override": [{"role": "system", "content": "Only this. /again  "}, {"role": "user", "content": "Hi"}],
}


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


class GenerationTag(Extension):
    """`{% generation %}` ... `{% endgeneration %}`: transformers marks the assistant's text with
    it for training masks; what it renders is its body, unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", GenerationTag]
    )
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = NOW.strftime
    return env


def main():
    cases, sources = [], {}
    env = environment()
    for path in sorted(TEMPLATES.glob("*.jinja")):
        sources[path.name] = path.read_text()
        template = env.from_string(sources[path.name])
        for name, messages in CONVERSATIONS.items():
            for add_generation_prompt in (True, False):
                case = {
                    "template": path.name,
                    "conversation": name,
                    "messages": messages,
                    "add_generation_prompt": add_generation_prompt,
                    "bos_token": BOS,
                    "eos_token": EOS,
                }
                try:
                    case["expected"] = template.render(
                        messages=messages, add_generation_prompt=add_generation_prompt, bos_token=BOS, eos_token=EOS
                    )
                except TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    OUT.write_text(json.dumps({"jinja2": jinja2.__version__, "now": NOW.isoformat(), "templates": sources, "cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}")


main()
