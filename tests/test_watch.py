"""Watching and comparing runs: videos of the agent (evaluate --video, --video-every), TensorBoard's
HParams dashboard, and W&B's offline mode (--track). Real runs, real encoders, files read back."""

from __future__ import annotations

import glob
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, evaluate_cli, read_scalars

av = pytest.importorskip("av")


def decode(path: Path) -> list:
    """Every frame of a video file, as (H, W, 3) arrays."""
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def evaluate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return evaluate_cli([*args], timeout=300, env=env)


def test_evaluate_films_each_episode_of_the_first_agent(train, tmp_path):
    r = train("--agents", "2", "--total-steps", "6000", "--run-name", "film")
    assert r.returncode == 0, r.stderr[-2000:]
    e = evaluate(str(train.logdir / "film"), "--episodes", "2", "--video", str(tmp_path / "v"))
    assert e.returncode == 0, e.stderr[-2000:]
    assert "XDG_RUNTIME_DIR" not in e.stderr  # pygame looks for no display
    files = sorted((tmp_path / "v").iterdir())
    assert [f.name for f in files] == ["episode_000.mp4", "episode_001.mp4"]
    agent_0 = next(line for line in e.stdout.splitlines() if line.startswith("agent_0:"))
    low, high = float(agent_0.split("min")[1].split("|")[0]), float(agent_0.split("max")[1].split("|")[0])
    lengths = []
    for f in files:
        frames = decode(f)
        assert frames[0].shape == (400, 600, 3)  # CartPole's rgb_array frame
        lengths.append(len(frames) - 1)  # the reset's frame, then one per step
    assert sorted(lengths) == [low, high]  # CartPole pays 1 per step: agent 0's returns are its episodes' lengths
    gif = evaluate(str(train.logdir / "film"), "--episodes", "1", "--video", str(tmp_path / "g"), "--video-format", "gif")
    assert gif.returncode == 0, gif.stderr[-2000:]
    from PIL import Image

    with Image.open(tmp_path / "g" / "episode_000.gif") as im:
        assert im.is_animated and im.size == (600, 400)
        durations = []  # Pillow merges a run of equal frames into one that lasts as long
        for i in range(im.n_frames):
            im.seek(i)
            durations.append(im.info["duration"])
    # 1000/30 ms a frame, which GIF's hundredths of a second store rounded: 30 ms for one frame, 70 for
    # two merged, 330 for ten. Rounded by less than half a frame, so each duration gives back its count.
    assert sum(round(d * 30 / 1000) for d in durations) == lengths[0] + 1

    # Without the extra, one line that names it.
    blocked = {**os.environ, "PYTHONPATH": str(tmp_path / "no_av")}
    (tmp_path / "no_av").mkdir()
    (tmp_path / "no_av" / "av.py").write_text("raise ImportError('no PyAV here')\n")
    e = evaluate(str(train.logdir / "film"), "--video", str(tmp_path / "x"), env=blocked)
    assert e.returncode == 2 and "pip install -e '.[video]'" in e.stderr and "Traceback" not in e.stderr


def test_training_films_coop_nav_and_fills_the_hparams_dashboard(train):
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    r = train("--env", "pettingzoo:envs.coop_nav", "--total-steps", "6000", "--video-every", "2", "--eval-every", "3",
              "--eval-episodes", "4", "--run-name", "nav")
    assert r.returncode == 0, r.stderr[-2000:]
    run = train.logdir / "nav"
    iterations = int([line for line in r.stdout.splitlines() if line.startswith("iter ")][-1].split()[1])
    videos = sorted((run / "videos").iterdir(), key=lambda p: int(p.stem.split("_")[1]))
    assert [p.name for p in videos] == [f"iter_{i}.mp4" for i in range(2, iterations + 1, 2)]
    frames = decode(videos[-1])
    assert len(frames) == 26 and frames[0].shape == (400, 400, 3)  # 25 cycles + the reset's frame
    assert (frames[0] != frames[-1]).any()  # the agents moved

    acc = EventAccumulator(str(run), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    images = acc.Images("videos/episode")
    assert len(images) == len(videos)
    with Image.open(io.BytesIO(images[-1].encoded_image_string)) as gif:
        assert gif.format == "GIF" and gif.is_animated and gif.size == (320, 320)  # shrunk for the event file

    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["env"].string_value == "pettingzoo:envs.coop_nav"
    assert start.hparams["learning_rate"].number_value == pytest.approx(1e-2)
    assert "logdir" not in start.hparams and "run_name" not in start.hparams
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert {m.name.tag for m in experiment.metric_infos} == {
        "hparams/final_mean_return", "hparams/steps_to_target", "hparams/wall_seconds", "hparams/SPS"}
    scalars = read_scalars(run)
    result = json.loads((run / "result.json").read_text())
    assert scalars["hparams/final_mean_return"][-1][1] == pytest.approx(result["mean_return"], rel=1e-6)
    assert "hparams/steps_to_target" not in scalars  # no target reached: the column stays empty
    assert scalars["hparams/wall_seconds"][-1][1] == pytest.approx(result["seconds"], rel=1e-5)  # one world: its time
    assert len(scalars["perf/video_seconds"]) == len(videos)
    assert len(scalars["eval/episodic_return"]) == iterations // 3  # --eval-every on a game that is not turn-based
    assert all(-200 < v < 0 for _, v in scalars["eval/episodic_return"])


def test_an_env_that_cannot_render_is_refused_before_training(train):
    r = train("--env", "pettingzoo:tests.pz_envs", "--video-every", "1", "--run-name", "blind")
    assert r.returncode == 2 and "--video-every: pettingzoo:tests.pz_envs cannot be filmed" in r.stderr
    assert "Traceback" not in r.stderr and not (train.logdir / "blind").exists()


def wandb_records(path: str) -> list:
    """The records of a W&B offline run file: LevelDB's log format (32 KiB blocks, each record a
    7-byte header of crc, length and type, then its part of a protobuf Record) after W&B's 7-byte header."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, parts, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        parts += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            out.append(record)
            parts = b""
    return out


def wandb_history(run_file: str) -> list[dict]:
    """Every history row (one W&B log call) of an offline run file."""
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item}
            for rec in wandb_records(run_file) if rec.WhichOneof("record_type") == "history"]


def test_track_logs_each_tensorboard_point_once_to_wandb_offline_beside_the_default_logdir(train, tmp_path):
    """As a user runs it: `runs` relative to the working directory, W&B's own folder beside it (as W&B's
    default ./wandb beside the default ./runs). W&B's folder inside the run's event folder had its sync copy
    the event files into itself, again and again (41 points a step)."""
    pytest.importorskip("wandb")
    env = {**train.env(), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "--agents", "2", "--total-steps", "6000", "--track",
                        "--target-return", "1e9", "--run-name", "tracked"], env={**env, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list((tmp_path / "runs").rglob("wandb"))  # TensorBoard's `--logdir runs` sees no copies
    files = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    records = wandb_records(files[0])
    run = next(rec.run for rec in records if rec.WhichOneof("record_type") == "run")
    assert run.display_name == "tracked" and run.project == "marl"
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["learning_rate"] == pytest.approx(1e-2) and config["agents"] == 2
    returns = [(h["global_step"], h["charts/episodic_return"]) for h in wandb_history(files[0])
               if "charts/episodic_return" in h]
    logged = read_scalars(tmp_path / "runs" / "tracked")["charts/episodic_return"]
    assert len(logged) >= 3 and [s for s, _ in returns] == [s for s, _ in logged]  # each point once, at its step
    assert [v for _, v in returns] == pytest.approx([v for _, v in logged])


def test_track_without_wandb_names_the_extra(train, tmp_path):
    (tmp_path / "no_wandb").mkdir()
    (tmp_path / "no_wandb" / "wandb.py").write_text("raise ImportError('no wandb here')\n")
    train.extra_env = {"PYTHONPATH": str(tmp_path / "no_wandb")}
    r = train("--track", "--run-name", "untracked")
    assert r.returncode == 2 and "--track needs wandb: pip install -e '.[wandb]'" in r.stderr
    assert "Traceback" not in r.stderr
