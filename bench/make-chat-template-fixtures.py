"""Writes tests/fixtures/chat_templates.json: each template in tests/fixtures/chat_templates/
(kept in the fixture too) rendered by Python's jinja2 the way Hugging Face transformers renders a model's chat template
(an immutable sandbox, trim_blocks and lstrip_blocks, the loop-controls extension, a
raise_exception function), so tokenscope's minijinja rendering is checked against the engine the
templates are written for. Made once and kept; tests need no Python.

    python3 -m pip install jinja2==3.1.6   # the version the fixture was made with
    python3 bench/make-chat-template-fixtures.py
"""
import json
import pathlib

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tests/fixtures/chat_templates"
OUT = ROOT / "tests/fixtures/chat_templates.json"
BOS, EOS = "<|begin|>", "<|end|>"

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
}


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
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
    OUT.write_text(json.dumps({"jinja2": jinja2.__version__, "templates": sources, "cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}")


main()
