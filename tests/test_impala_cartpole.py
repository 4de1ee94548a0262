"""IMPALA solves CartPole x 8 with --mode async under its preset (configs/cartpole_impala.toml).
With the learner's advantage normalisation it turned deterministic within ~60k steps and stayed at
a return of ~9; under the preset seeds 1-5 solve at 187k-216k steps, so 400k leaves about 2x."""

from __future__ import annotations

import json


def test_impala_preset_solves_cartpole_in_async_mode(train):
    r = train("--config", "configs/cartpole_impala.toml", "--seed", "2", "--total-steps", "400000", "--run-name", "impala")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((train.logdir / "impala" / "result.json").read_text())
    assert result["reason"] == "target", (result, r.stdout[-1500:])
