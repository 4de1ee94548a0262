"""The console's progress line: returns printed with the decimals the target's scale needs."""

from __future__ import annotations

import io

from marl.config import Config
from marl.logging import RunLogger, format_return


def test_a_return_keeps_the_digits_its_target_needs():
    assert format_return(0.8895, 0.9) == "0.889"  # MiniGrid: one decimal read 0.9, as if solved
    assert format_return(0.8895, 1.0) == "0.889"
    assert format_return(480.5, 475.0) == "480.5"  # CartPole keeps its one decimal
    assert format_return(-16.84, -20.0) == "-16.8"
    assert format_return(0.05, None) == "0.0500"  # no target: the value's own scale
    assert format_return(None, 475.0) == "n/a"


def test_the_progress_line_shows_minigrid_returns_to_three_decimals(tmp_path):
    out = io.StringIO()
    logger = RunLogger(Config(logdir=str(tmp_path), run_name="grid", target_return=0.9), ("agent_0",), out=out)
    try:
        logger.progress(12, 40960, 1234.5, 0.8895, 100, 33.2)
        logger.progress(1, 512, 99.0, None, 0, 0.5)
    finally:
        logger.close()
    first, second = out.getvalue().splitlines()
    assert first == "iter   12 | step     40,960 |     1,234 steps/s | return   0.889 (last 100) |   33.2s"
    assert second == "iter    1 | step        512 |        99 steps/s | return     n/a (last 0) |    0.5s"
