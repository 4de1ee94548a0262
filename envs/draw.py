"""A few numpy raster shapes, enough for the first-party envs' `render_mode="rgb_array"` frames
(no pygame, no display)."""

from __future__ import annotations

import numpy as np


def canvas(height: int, width: int, color=(255, 255, 255)) -> np.ndarray:
    """(height, width, 3) uint8 filled with `color`."""
    return np.full((height, width, 3), color, dtype=np.uint8)


def disc(img: np.ndarray, cx: float, cy: float, radius: float, color) -> None:
    """Fill the pixels whose centres lie within `radius` of (cx, cy), in pixel units (x right, y down)."""
    h, w = img.shape[:2]
    y, x = np.ogrid[:h, :w]
    img[(x + 0.5 - cx) ** 2 + (y + 0.5 - cy) ** 2 <= radius ** 2] = color


def cells(values: np.ndarray, size: int = 32, gap: int = 2) -> np.ndarray:
    """A row of square cells, cell i coloured values[i] (an RGB triple), on a dark background."""
    n = len(values)
    img = canvas(size, n * size, (40, 40, 40))
    for i, color in enumerate(values):
        img[gap:size - gap, i * size + gap:(i + 1) * size - gap] = color
    return img
