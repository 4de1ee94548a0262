"""Gymnasium wrappers named in a config: `--wrappers "AtariPreprocessing(frame_skip=4),FrameStackObservation(stack_size=4)"`.

Each entry is a class of `gymnasium.wrappers` (or `package.module.Class`), called with the env and
the keyword arguments written after it, which must be literals. `atari` names the standard Atari
preprocessing (Mnih et al. 2015, as everyone runs it): the base env made with `frameskip=1`, then
`AtariPreprocessing` (frame skip 4, 30 no-ops, grayscale 84x84) and `FrameStackObservation(4)`.
For `ALE/` ids, `atari` alone takes ale_py's own C++ vector env instead, which does the same
preprocessing in threads of its own (see `ALE_VECTOR`).
"""

from __future__ import annotations

import ast
import importlib
from typing import Callable

ATARI = "atari"
ATARI_WRAPPERS = ("AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)",
                  "FrameStackObservation(stack_size=4)")
# ale_py's AtariVectorEnv set to what ATARI_WRAPPERS do over an ALE/...-v5 env: v5's sticky actions
# (0.25), rewards as they are (no clipping), no FIRE on reset, a life lost is not an episode end.
ALE_VECTOR = {"frameskip": 4, "noop_max": 30, "img_height": 84, "img_width": 84, "grayscale": True, "stack_num": 4,
              "repeat_action_probability": 0.25, "reward_clipping": False, "use_fire_reset": False, "episodic_life": False}


class WrapperError(ValueError):
    """A --wrappers entry that cannot be built; the message is one line."""


def expand(wrappers: tuple[str, ...]) -> tuple[str, ...]:
    """`atari` written out as the wrappers it stands for."""
    return tuple(w for entry in wrappers for w in (ATARI_WRAPPERS if entry.strip() == ATARI else (entry,)))


def parse(entry: str) -> tuple[type, dict]:
    """`Name(key=literal, ...)` or `Name` -> (the wrapper class, its keyword arguments)."""
    try:
        node = ast.parse(entry.strip(), mode="eval").body
    except SyntaxError:
        raise WrapperError(f"--wrappers entry {entry!r} is not Name or Name(key=value, ...)") from None
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call is not None else node
    name = ast.unparse(target)
    if call is not None and call.args:
        raise WrapperError(f"--wrappers entry {entry!r}: give the arguments by name, e.g. FrameStackObservation(stack_size=4)")
    try:
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in (call.keywords if call is not None else [])}
    except ValueError:
        raise WrapperError(f"--wrappers entry {entry!r}: arguments must be literals (numbers, strings, tuples)") from None
    module, _, cls_name = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module or "gymnasium.wrappers"), cls_name)
    except (ImportError, AttributeError):
        raise WrapperError(f"--wrappers entry {entry!r}: no wrapper {name!r} in "
                           f"{module or 'gymnasium.wrappers'}") from None
    return cls, kwargs


def wrapper_fns(wrappers: tuple[str, ...]) -> list[Callable]:
    """One `env -> wrapped env` function per entry, for `gymnasium.make_vec(..., wrappers=...)`."""
    fns = []
    for entry in expand(wrappers):
        cls, kwargs = parse(entry)
        fns.append(lambda env, cls=cls, kwargs=kwargs: cls(env, **kwargs))
    return fns


def needs_frameskip_1(wrappers: tuple[str, ...]) -> bool:
    """AtariPreprocessing skips frames itself and refuses a base env that skips too."""
    return any(parse(e)[0].__name__ == "AtariPreprocessing" for e in expand(wrappers))
