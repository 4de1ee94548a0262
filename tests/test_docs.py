"""The documentation: the site builds with `mkdocs build --strict`, its flag reference is the parser's own,
and every command that the README and docs/ show still works and is run by a test or a bench.

A command in a page is read from its fenced shell blocks and its inline code spans. `python train.py ...`
goes through what train.py runs before it starts any process (`marl.config.parse_values`, then
`marl.run.prepare`: flags, values, the env, the network, the batch); `python -m marl.evaluate` and
`python -m marl.export` through their parsers; `python bench/X.py` through the bench's own argparse (stopped
right after it parses, before it runs anything); and the Python examples that call `marl.train` run up to
the launch. A placeholder that a reader fills in (`runs/<run>`, `S` for a seed) is filled in here, by the
rules in `PLACEHOLDERS`; one this file does not know fails the test."""

from __future__ import annotations

import argparse
import html
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
QUICKSTART = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && python train.py --agents 8",
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" && python -m pytest -q -n 2 tests',
)
# Where a test or a bench that runs a page's command lives: a command is run by one of these files if the
# file names everything distinctive about it (see `distinctive`).
RUNNERS = [*sorted(p for p in (ROOT / "tests").glob("*.py") if p.name != Path(__file__).name),
           *sorted((ROOT / "bench").glob("*.py")), *sorted((ROOT / "bench").glob("*.sh"))]
# Commands of the pages that no test or bench runs, each with the reason. Keep it short: a command added to
# the docs belongs in a test (or is changed to one that a test runs).
NOT_RUN = {
    "python train.py --config configs/minigrid.toml":
        "the preset's learning is the documented bench command `python bench/time_to_solve.py --seeds 3 -- --config "
        "configs/minigrid.toml` (results, spaces and networks: about 2 minutes a seed, more than a test's share); "
        "tests/test_config.py validates the preset and tests/test_train_spaces.py trains MiniGrid with the same encoder",
    "python train.py --config configs/simple_spread_qmix.toml --seed 1 --total-steps 300000 --target-network-frequency N":
        "the measurement behind the off-policy results' table of target periods (N = 200 and 1,250, 300k agent-steps "
        "each); bench/multiagent.py runs the preset (1,250) and tests/test_train_off_policy.py trains QMIX",
}
# Benches that the pages show and no test runs (tests/test_bench.py runs the others at tiny sizes), with why.
BENCHES_NOT_RUN = {
    "bench/before_after.py": "it checks out a git revision into a worktree and times the default run there and "
                             "here by turns: minutes at its smallest, and it needs the repository's history",
}
# Placeholders a reader fills in: (pattern in a token, what the check puts there).
PLACEHOLDERS = [
    (re.compile(r"runs/<(?:run|other-run)>"), "{run}"),  # a finished run's directory (a stand-in: see run_dir)
    (re.compile(r"\$lr\b"), "1e-3"),  # the sweep of "TensorBoard, videos, W&B"
    (re.compile(r"\$node\b"), "0"),  # the two-node loop of "Multi-node"
    (re.compile(r"^<flags>$"), ""),  # "flags on top of the defaults": the rows of the table beside it
    (re.compile(r"^\.\.\.$"), ""),  # "python train.py ...": any run
]
# A value that stands for any: the flag before it -> what the check puts there.
ANY_VALUE = {"--seed": ("S", "1"), "--first-seed": ("S", "1"), "--target-network-frequency": ("N", "1250"),
             "--cleanrl": ("PATH", "/path/to/cleanrl.py"), "--opponent": ("X", "random")}


def test_the_site_builds_strict_and_its_flag_reference_is_the_parsers(tmp_path):
    from marl.config import FIELDS, build_parser

    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "WARNING" not in r.stderr, r.stderr[-5000:]
    page = (site / "reference" / "flags" / "index.html").read_text()
    # The first cell of each row: the flag and, for a boolean, its negation.
    shown = [re.findall(r"<code>(-[^<]*)</code>", cell) for cell in re.findall(r"<tr>\s*<td>(.*?)</td>", page, re.S)]
    shown = [flag for cell in shown for flag in cell]
    parser = {o for a in build_parser()._actions for o in a.option_strings}
    assert len(shown) == len(set(shown)) and set(shown) == parser, (set(shown) ^ parser)
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for name, f in FIELDS.items():
        assert " ".join(f.metadata["help"].replace("`", "").split()) in " ".join(text.split()), name
    presets = (site / "getting-started" / "index.html").read_text()
    for path in (ROOT / "configs").glob("*.toml"):
        assert f"configs/{path.name}" in presets, path.name
    for built in site.rglob("*.html"):  # every marker was replaced, every note for GitHub's readers left out
        assert not re.search(r"(<|&lt;)!-- /?(flags|presets|api|docstring|github)|Reading this file on GitHub", built.read_text()), built
    serving = (site / "export" / "index.html").read_text()
    assert "onnxruntime.InferenceSession" in html.unescape(re.sub(r"<[^>]+>", "", serving))  # the example, included


def test_the_readme_is_short_and_keeps_the_quickstart():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    lines = readme.splitlines()
    for command in QUICKSTART:
        assert command in lines, command
    assert "python train.py --agents 8" in readme


def test_relative_links_of_the_readme_and_the_pages_exist():
    """MkDocs checks the links between pages; this checks the README's, and that no page links out of docs/
    (which the site would not have)."""
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)}: {target}"
            if page.parent != ROOT:
                assert DOCS in path.parents, f"{page.relative_to(ROOT)} links out of docs/: {target}"


def test_the_figures_of_the_docs_are_the_bench_figures():
    figures = sorted((DOCS / "figures").iterdir())
    assert figures
    for f in figures:
        assert f.read_bytes() == (ROOT / "bench" / "figures" / f.name).read_bytes(), \
            f"docs/figures/{f.name} differs from bench/figures/{f.name}: cp bench/figures/* docs/figures/"


# ---------------------------------------------------------------------------------------------------------
# The commands of the pages


def code(page: Path) -> list[str]:
    """The shell text of a page: each fenced block in a shell language (or none), then each inline code span."""
    text = page.read_text()
    out = []
    for lang, body in re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.M | re.S):
        if lang in ("", "bash", "sh", "shell", "console"):
            out.append(body)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())
        # `--precision fp32|bf16` in a sentence: the command once with each
        alternatives = re.search(r"(?<=\s)([\w.-]+(?:\|[\w.-]+)+)(?=\s|$)", span)
        if alternatives:
            out += [span[:alternatives.start()] + a + span[alternatives.end():] for a in alternatives.group(1).split("|")]
        else:
            out.append(span)
    return out


def commands(text: str) -> list[list[str]]:
    """The simple commands of shell text: lines joined at `\\`, comments dropped, split at ; && & | and the
    loop keywords, leading VAR=value assignments left out."""
    text = text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lex.whitespace_split = True
        try:
            tokens = list(lex)
        except ValueError:  # an unbalanced quote: not a command
            continue
        tokens.append(";")
        current = []
        for t in tokens:
            if set(t) <= set(";&|()"):
                while current and (current[0] in ("do", "then", "else", "time") or re.match(r"^\w+=", current[0])):
                    current.pop(0)
                if current:
                    out.append(current)
                current = []
            else:
                current.append(t)
    return out


def page_commands() -> list[tuple[str, list[str]]]:
    """(page, argv) of every command in the README and docs/ that runs train.py, a bench, marl.evaluate,
    marl.export or the serving example, deduplicated."""
    seen, out = set(), []
    for page in PAGES:
        for text in code(page):
            for argv in commands(text):
                if argv[0] not in ("python", "python3", "torchrun", "bash") or len(argv) < 2:
                    continue
                key = tuple(argv)
                if key not in seen:
                    seen.add(key)
                    out.append((str(page.relative_to(ROOT)), argv))
    return out


def fill(argv: list[str], run: Path) -> list[str]:
    """argv with its placeholders filled in; a token still holding `<...>` or `$` is a placeholder this file
    does not know."""
    out = []
    for i, token in enumerate(argv):
        for pattern, value in PLACEHOLDERS:
            token = pattern.sub(value.format(run=run), token)
        if i and argv[i - 1] in ANY_VALUE and token == ANY_VALUE[argv[i - 1]][0]:
            token = ANY_VALUE[argv[i - 1]][1]
        if token:
            assert not re.search(r"<[a-z-]+>|\$\w", token), f"unknown placeholder {token!r} in {' '.join(argv)}"
            out.append(token)
    return out


def train_args(argv: list[str]) -> list[str] | None:
    """train.py's arguments in a command (`python train.py ...`, `torchrun ... train.py ...`), or None."""
    if "train.py" not in argv:
        return None
    if argv[0] in ("python", "python3") and argv[1] != "train.py":
        return None
    return argv[argv.index("train.py") + 1:]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A stand-in for `runs/<run>`: a run directory with the resolved config every run saves (enough for
    `--config runs/<run>/config.toml`; the parsers of marl.evaluate and marl.export take any path)."""
    from marl.config import Config, to_toml

    run = tmp_path_factory.mktemp("runs") / "run"
    run.mkdir()
    (run / "config.toml").write_text(to_toml(Config(agents=8, run_name="run")))
    return run


def distinctive(args: list[str]) -> list[str]:
    """What a test or bench running this train.py command must name: each flag, and the values that pick
    what runs (a config file, an env, a network, a choice among modes)."""
    from marl.config import FIELDS

    words = []
    for i, a in enumerate(args):
        if not a.startswith("--"):
            continue
        name = a[2:].split("=")[0].replace("-", "_")
        value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
        if name == "config":
            words.append(Path(value).name)
        elif name in ("env", "model"):
            words.append(value)
        else:
            words.append(f"--{name.replace('_', '-')}|{name}=")
            field = FIELDS.get(name)
            if field and field.metadata.get("choices") and value and value != field.default:  # a mode, not the default
                words.append(value)
    return words


def runs_it(words: list[str]) -> list[str]:
    """The tests and benches that name every word (a|b: either spelling)."""
    found = []
    for path in RUNNERS:
        text = path.read_text()
        if all(any(w in text for w in word.split("|")) for word in words):
            found.append(str(path.relative_to(ROOT)))
    return found


def test_every_train_command_of_the_docs_is_accepted_and_run_by_a_test_or_a_bench(run_dir, tmp_path, monkeypatch,
                                                                                   capsys, request):
    from marl.config import UsageError, parse_values
    from marl.run import prepare

    # `--model my_nets:TwoTowers` is the docs' own example network, saved as the page says.
    page = (DOCS / "guides" / "spaces-and-networks.md").read_text()
    (tmp_path / "my_nets.py").write_text(re.findall(r"```python\n(.*?)```", page[page.index("## Your own network"):], re.S)[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(lambda: sys.modules.pop("my_nets", None))  # forgotten afterwards: other tests write their own
    checked, failures, unrun = [], [], []
    for page, argv in page_commands():
        args = train_args(argv)
        if args is None:
            continue
        command = " ".join(argv)
        args = fill(args, run_dir)
        if "--help" in args:
            continue  # prints the parser's help: the flag reference checks the parser
        try:
            values = parse_values(args)
            if "resume" not in values:  # resuming needs a trained run's checkpoint: the flags are checked
                prepare({**values, "logdir": str(tmp_path / "runs")})
        except UsageError as e:
            failures.append(f"{page}: {command}\n    error: {e}")
        except SystemExit as e:
            failures.append(f"{page}: {command}\n    exit {e.code}")
        checked.append(command)
        if command not in NOT_RUN and not runs_it(distinctive(args)):
            unrun.append(f"{page}: {command}  (needs a test or bench naming {distinctive(args)})")
    capsys.readouterr()
    assert not failures, "commands in the docs that train.py refuses:\n" + "\n".join(failures)
    assert not unrun, "commands in the docs that no test or bench runs (add one, or to NOT_RUN with why):\n" + "\n".join(unrun)
    assert len(checked) >= 30, checked  # the pages hold this many: the reader above did not lose them
    stale = set(NOT_RUN) - set(checked)
    assert not stale, f"NOT_RUN names commands the docs no longer show: {stale}"


class _Parsed(Exception):
    pass


def test_every_bench_evaluate_and_export_command_of_the_docs_parses(run_dir, monkeypatch, capsys):
    """Each bench's own argparse takes the command's flags (the bench is stopped once they parse); the
    evaluate and export CLIs' parsers take theirs; the serving example and gpu_check.sh exist."""
    from marl.config import UsageError, parse_values
    from marl.evaluate.cli import build_parser as evaluate_parser
    from marl.export import build_parser as export_parser

    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    failures, benches = [], set()
    for page, argv in page_commands():
        command, argv = " ".join(argv), fill(argv, run_dir)
        try:
            if argv[:3] in (["python", "-m", "marl.evaluate"], ["python", "-m", "marl.export"]) and len(argv) == 3:
                continue  # the program named in a sentence, not a command
            if argv[:3] in (["python", "-m", "marl.evaluate"], ["python", "-m", "marl.export"]):
                parser = evaluate_parser() if argv[2] == "marl.evaluate" else export_parser()
                _, unknown = parser.parse_known_args(argv[3:])
                assert not unknown, f"unknown arguments {unknown}"
            elif argv[0] == "bash":
                assert (ROOT / argv[1]).is_file(), f"no {argv[1]}"
            elif argv[1].startswith(("bench/", "docs/")):
                script = ROOT / argv[1]
                assert script.is_file(), f"no {argv[1]}"
                if argv[1].startswith("bench/"):
                    benches.add(argv[1])
                    monkeypatch.setattr(sys, "argv", [str(script), *argv[2:]])
                    with pytest.raises(_Parsed):
                        runpy.run_path(str(script), run_name="__main__")
                    if "--" in argv:  # what a bench passes on to train.py
                        parse_values(argv[argv.index("--") + 1:])
        except (AssertionError, UsageError, SystemExit, pytest.fail.Exception) as e:
            failures.append(f"{page}: {command}\n    {type(e).__name__}: {e}")
    capsys.readouterr()
    assert not failures, "commands in the docs that no longer parse:\n" + "\n".join(failures)
    assert len(benches) >= 15, benches
    tests = [p.read_text() for p in RUNNERS if p.parent.name == "tests"]
    unrun = sorted(b for b in benches if b not in BENCHES_NOT_RUN and not any(b in t for t in tests))
    assert not unrun, f"benches the docs show that no test runs (add one to tests/test_bench.py, or to BENCHES_NOT_RUN): {unrun}"
    assert not set(BENCHES_NOT_RUN) - benches, "BENCHES_NOT_RUN names benches the docs no longer show"


def test_the_python_examples_that_train_run_up_to_the_launch(tmp_path, monkeypatch, capsys):
    """The pages' Python blocks that call `train(...)`, run by marl.train itself with the launch replaced:
    every check before a process starts (the fields, the preset files, the env, the network) runs."""
    import marl.launch
    import marl.result
    from marl.result import Result

    launched = []

    def launch(cfg, info, **kw):
        launched.append(cfg)
        return 0

    monkeypatch.setattr(marl.launch, "launch", launch)
    monkeypatch.setattr(marl.result, "load", lambda run_dir: Result("target", 0, 0, 0.0, None, 0, 0, Path(run_dir)))
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # the examples name presets relative to the repository
    monkeypatch.chdir(tmp_path)  # and write their runs under ./runs
    blocks = [b for page in PAGES for b in re.findall(r"^```python\n(.*?)^```", page.read_text(), re.M | re.S)
              if re.search(r"^result = train\(", b, re.M)]
    assert blocks
    for block in blocks:
        calls = len(re.findall(r"\btrain\(", block))
        before = len(launched)
        exec(compile(block, "docs example", "exec"), {})
        assert len(launched) - before == calls
    capsys.readouterr()
    assert launched[0].env == "CartPole-v1" and launched[0].agents == 8
