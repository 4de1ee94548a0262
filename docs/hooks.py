"""MkDocs hook (mkdocs.yml `hooks:`): the pages' generated parts, made from the code at every build.

A page asks for one with an HTML comment on a line of its own, which this hook replaces:

    <!-- flags -->                          every flag of `python train.py --help`, grouped as --help groups
                                            them (marl.config.build_parser()), with its default and help text
    <!-- presets -->                        configs/*.toml: the env and algorithm each one trains, and the
                                            first sentence of its header comment
    <!-- api NAME FILE:QUALNAME -->         a function's or class's signature and docstring, read from the
                                            source with `ast` (no import: nothing here imports torch)
    <!-- docstring FILE -->                 a module's docstring

and `<!-- github -->` ... `<!-- /github -->` around a note for readers of the Markdown file on GitHub, where
nothing is generated, leaves the note out of the site.

So the flag reference can never be a hand-copied table that drifts from the code: `tests/test_docs.py`
builds the site and checks the page against the parser.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- (flags|presets|api|docstring)\b(.*?)-->[ \t]*$", re.M)
# A note for readers of the Markdown file itself (on GitHub, where nothing is generated), left out of the site.
GITHUB = re.compile(r"^<!-- github -->\n.*?^<!-- /github -->\n?", re.M | re.S)


def _marl_config():
    """marl.config from this tree (torch-free by design: `train.py --help` needs no torch import)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from marl import config

    return config


def _cell(text: str) -> str:
    """Text for a Markdown table cell: `|` escaped everywhere; outside code spans, HTML's `<`, `>`, `&` and
    Markdown's emphasis (`<env>__<seed>` is not bold)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside backticks
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = re.sub(r"([\\*_])", r"\\\1", parts[i])
    return "`".join(parts).replace("|", "\\|")


def _default_text(f: dataclasses.Field) -> str:
    """A field's default as one writes it on the command line ('' where there is none to show)."""
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if default in ("", None, ()):
        return ""
    if isinstance(default, tuple):
        return ",".join(map(str, default))
    return json.dumps(default) if isinstance(default, (dict, bool)) else str(default)


def flags_markdown() -> str:
    config = _marl_config()
    parser = config.build_parser()
    fields = {f.name: f for f in dataclasses.fields(config.Config)}
    sections = {s.title: s for s in config.SECTIONS}
    out = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.option_strings]
        if not actions:
            continue
        section = sections.get(group.title)
        if section is None:  # argparse's own group: --help, --config
            out += ["## The command", "", "Flags that are not fields of the config.", ""]
        else:
            out += [f"## {section.title}", "", f"In a `--config` file: the table `[{section.key}]`, or the keys at the "
                    f"top level.", ""]
        out += ["| flag | value | default | meaning |", "| --- | --- | --- | --- |"]
        for a in actions:
            f = fields.get(a.dest)
            flags = " / ".join(f"`{o}`" for o in a.option_strings)
            if a.nargs == 0:  # --x / --no-x, or --help
                value = ""
            else:
                value = f"`{a.metavar}`" if a.metavar else f"`{a.dest.upper()}`"
            default = _default_text(f) if f else ""
            text = f.metadata["help"] if f else (a.help or "").replace("%%", "%")
            out.append(f"| {flags} | {value} | {f'`{default}`' if default else ''} | {_cell(text)} |")
        out.append("")
    return "\n".join(out)


def _first_sentence(comment: str) -> str:
    m = re.match(r"(.+?)(?:[.:](?:\s|$)|$)", comment, re.S)
    return m.group(1).strip() if m else comment.strip()


def presets_markdown() -> str:
    config = _marl_config()
    out = ["| preset | env | algorithm | what it is |", "| --- | --- | --- | --- |"]
    for path in sorted((ROOT / "configs").glob("*.toml")):
        lines = path.read_text().splitlines()
        header = []
        for line in lines:
            if not line.startswith("#"):
                break
            header.append(line.lstrip("#").strip())
        values = config.load_toml(str(path))
        cfg = config.Config(**values)
        out.append(f"| `configs/{path.name}` | `{cfg.env}` | {cfg.algo} | {_cell(_first_sentence(' '.join(header)))} |")
    return "\n".join(out) + "\n"


def _find(tree: ast.AST, qualname: str):
    node = tree
    for part in qualname.split("."):
        node = next((n for n in ast.iter_child_nodes(node)
                     if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and n.name == part), None)
        if node is None:
            raise ValueError(f"{qualname}: no such function or class")
    return node


def _comments(source: str) -> dict[int, str]:
    return {tok.start[0]: tok.string.lstrip("#").strip()
            for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}


def api_markdown(name: str, spec: str) -> str:
    file, qualname = spec.split(":")
    source = (ROOT / file).read_text()
    tree = ast.parse(source)
    node = _find(tree, qualname)
    doc = ast.get_docstring(node) or ""
    out = [f"### `{name}`", "", f"Defined in `{file}`.", ""]
    if isinstance(node, ast.ClassDef):
        plain = all(isinstance(b, (ast.Name, ast.Attribute)) for b in node.bases)  # not Config(*reversed(SECTIONS))
        bases = ", ".join(ast.unparse(b) for b in node.bases) if plain else ""
        out += ["```python", f"class {name.rsplit('.', 1)[-1]}{f'({bases})' if bases else ''}", "```", "", doc, ""]
        fields = [n for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
        if fields:
            comments, lines = _comments(source), source.splitlines()
            out += ["| field | type | meaning |", "| --- | --- | --- |"]
            for n in fields:
                said, line = [comments.get(n.lineno, "")], n.end_lineno + 1
                while line <= len(lines) and lines[line - 1].strip().startswith("#"):  # a comment that goes on
                    said.append(comments[line])
                    line += 1
                out.append(f"| `{n.target.id}` | `{_cell(ast.unparse(n.annotation))}` | {_cell(' '.join(s for s in said if s))} |")
            out.append("")
        for n in node.body:
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_") and ast.get_docstring(n):
                out += [_signature(f"{name.rsplit('.', 1)[-1]}.{n.name}", n, method=True), "", ast.get_docstring(n), ""]
    else:
        out += [_signature(name, node), "", doc, ""]
    return "\n".join(out)


def _signature(name: str, node: ast.FunctionDef, method: bool = False) -> str:
    args = node.args
    if method and args.args and args.args[0].arg in ("self", "cls"):
        args = ast.arguments(posonlyargs=args.posonlyargs, args=args.args[1:], vararg=args.vararg,
                             kwonlyargs=args.kwonlyargs, kw_defaults=args.kw_defaults, kwarg=args.kwarg,
                             defaults=args.defaults)
    returns = node.returns
    if isinstance(returns, ast.Constant) and isinstance(returns.value, str):  # a quoted forward reference
        returns = ast.parse(returns.value, mode="eval").body
    returns = f" -> {ast.unparse(returns)}" if returns else ""
    return f"```python\n{name}({ast.unparse(args)}){returns}\n```"


def docstring_markdown(file: str) -> str:
    doc = ast.get_docstring(ast.parse((ROOT / file).read_text()))
    if not doc:
        raise ValueError(f"{file} has no module docstring")
    return doc + "\n"


def render(markdown: str) -> str:
    """The page's Markdown with every marker replaced; an unknown or broken marker raises (the build fails)."""
    def one(m: re.Match) -> str:
        kind, args = m.group(1), m.group(2).split()
        if kind == "flags" and not args:
            return flags_markdown()
        if kind == "presets" and not args:
            return presets_markdown()
        if kind == "api" and len(args) == 2:
            return api_markdown(*args)
        if kind == "docstring" and len(args) == 1:
            return docstring_markdown(args[0])
        raise ValueError(f"bad marker {m.group(0)!r}")

    return MARKER.sub(one, GITHUB.sub("", markdown))


def on_pre_build(config):
    """Forget marl's modules, so that each build (`mkdocs serve` rebuilds on edits) reads the code as it is now."""
    for name in [m for m in sys.modules if m == "marl" or m.startswith("marl.")]:
        del sys.modules[name]


def on_page_markdown(markdown, page, config, files):
    return render(markdown)
