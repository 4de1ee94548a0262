"""Episodes as pictures: MP4 files (PyAV), animated GIFs (Pillow), and GIFs in TensorBoard.

The encoders are the optional extra `pip install -e '.[video]'`; `require()` says so in one line
when they are missing, before anything is played. Frames are (H, W, 3) uint8, as Gymnasium's and
PettingZoo's `render_mode="rgb_array"` give them.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from marl.config import UsageError

FPS = 30
FORMATS = ("mp4", "gif")
TB_WIDTH = 320  # TensorBoard's GIFs are shrunk to this width at most: an event file is not a video store


def require(flag: str) -> None:
    """UsageError naming the extra when PyAV or Pillow is missing."""
    missing = [name for name, module in (("PyAV", "av"), ("Pillow", "PIL")) if not _imports(module)]
    if missing:
        raise UsageError(f"{flag} needs {' and '.join(missing)} to encode videos: pip install -e '.[video]'")


def _imports(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def headless() -> None:
    """With no display: MuJoCo renders through EGL (off-screen) instead of a GLFW window, and pygame
    (Gymnasium's classic control, MPE) through SDL's dummy driver, which does not look for one."""
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def _even(frame: np.ndarray) -> np.ndarray:
    """H.264 in yuv420p wants even sides: an odd side gets one more row or column, its last repeated."""
    h, w = frame.shape[:2]
    if h % 2 or w % 2:
        frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    return frame


def write_mp4(path: Path, frames: list[np.ndarray], fps: int = FPS) -> None:
    """H.264 (libx264, yuv420p: what browsers and players take) at `fps` frames per second."""
    import av

    first = _even(frames[0])
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = first.shape[:2]
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(_even(frame)), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():  # flush the encoder's delayed frames
            container.mux(packet)


def gif_bytes(frames: list[np.ndarray], fps: int = FPS, max_width: int | None = None) -> bytes:
    """An endlessly looping GIF, each frame with its own palette; shrunk to `max_width` if wider."""
    from PIL import Image

    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    if max_width is not None and images[0].width > max_width:
        size = (max_width, max(1, round(images[0].height * max_width / images[0].width)))
        images = [im.resize(size, Image.Resampling.BILINEAR) for im in images]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    return out.getvalue()


def write(path: Path, frames: list[np.ndarray], fps: int = FPS) -> None:
    """MP4 or GIF, as the path's suffix says."""
    if path.suffix == ".gif":
        path.write_bytes(gif_bytes(frames, fps))
    else:
        write_mp4(path, frames, fps)


def tensorboard_summary(tag: str, frames: list[np.ndarray], fps: int = FPS):
    """A TensorBoard image summary holding an animated GIF (what `SummaryWriter.add_video` writes,
    without its moviepy dependency): the Images tab plays it."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    data = gif_bytes(frames[::2], fps // 2, TB_WIDTH)  # half the frame rate: half the encoding time and size
    from PIL import Image

    h, w = Image.open(io.BytesIO(data)).size[::-1]
    image = Summary.Image(height=h, width=w, colorspace=3, encoded_image_string=data)
    return Summary(value=[Summary.Value(tag=tag, image=image)])
