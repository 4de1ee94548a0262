"""Filming an env: a copy built to render rgb_array frames, and the check, before a run starts,
that it gives one (train.py --video-every, evaluate --video)."""

from __future__ import annotations

import dataclasses

from marl.recorders import FrameRecorder, RenderError


def rendering_batch(info, groups: list[list[int]]):
    """One copy of the env, built to give frames (render_mode="rgb_array"); RenderError if it won't build so."""
    from envs import make_agent_batch
    from marl.video import headless

    headless()
    filmed = dataclasses.replace(info, env_kwargs=tuple(sorted({**info.kwargs, "render_mode": "rgb_array"}.items())))
    try:
        return make_agent_batch(filmed, 1, groups)
    except (TypeError, ValueError) as e:
        raise RenderError(f"it does not build with render_mode='rgb_array' ({' '.join(str(e).split())})") from None


def _one_frame(info, reply) -> None:
    """In a child process: build the env to render, reset it, grab a frame; send "" or why not."""
    env = None
    try:
        groups = [list(range(len(info.agent_ids)))] if info.homogeneous else [[i] for i in range(len(info.agent_ids))]
        env = rendering_batch(info, groups)
        env.reset(seed=0)
        FrameRecorder(env, 1).grab()
        reply.send("")
    except RenderError as e:
        reply.send(str(e))
    finally:
        if env is not None:
            env.close()


def check_filmable(info, flag: str) -> None:
    """UsageError (one line) unless the env builds with render_mode="rgb_array" and gives a frame.
    Tried in a forked child: the process that asks forks the run's ranks next, and an OpenGL context
    (MuJoCo's EGL) made before a fork hangs the child that uses it."""
    import multiprocessing

    from marl.config import UsageError

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_one_frame, args=(info, send), daemon=True)
    child.start()
    send.close()
    try:
        why = receive.recv() if receive.poll(120) else "no frame within 120 s"
    except EOFError:
        why = "the renderer crashed"
    child.join(5)
    if child.is_alive():
        child.kill()
    if why:
        raise UsageError(f"{flag}: {info.env_id} cannot be filmed: {why}")
