"""Write rendered frames to a video file: .mp4 through imageio's ffmpeg plugin, or .gif.

Used by launch/enjoy and launch/match (`--save_video`). imageio is imported only when a video
is asked for (the `video` extra of setup.py); without ffmpeg an .mp4 request becomes a .gif.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
import time
from typing import Any, Optional

import numpy as np

from rl_pbt.extras import install_hint

INSTALL_HINT = install_hint("video")
FORMATS = (".mp4", ".gif")
MIN_WIDTH = 256  # narrower frames (a Doom observation) are scaled up by a whole factor
BLOCK = 16  # frame sizes are padded to a multiple of this (video codecs work in 16-px blocks)


class VideoError(ValueError):
    """A video cannot be written as asked; the message is one line for the user."""


def add_video_flag(parser, what: str, default_name: str) -> None:
    """`--save_video [PATH]` of the play commands: `what` they record, and the file name used
    under {train_dir}/{experiment}/videos/ when PATH is left out."""
    parser.add_argument(
        "--save_video",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help=f"record {what} as .mp4 (or .gif, by the extension); without PATH: "
        f"{{train_dir}}/{{experiment}}/videos/{default_name}_TIME.mp4",
    )


def default_video_path(folder: str, name: str, ext: str = ".mp4") -> str:
    """`{folder}/videos/{name}_{YYYYmmdd_HHMMSS}{ext}`, `name` made safe for a file name."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "video"
    return os.path.join(folder, "videos", f"{safe}_{time.strftime('%Y%m%d_%H%M%S')}{ext}")


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def ffmpeg_available() -> bool:
    if not installed("imageio_ffmpeg"):
        return False
    import imageio_ffmpeg

    try:
        imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError:  # installed without a binary, and none on PATH
        return False
    return True


def check_video_path(path: str, flag: str = "--save_video") -> tuple[str, Optional[str]]:
    """The path a video asked for as `path` will be written to, and a note when it differs
    from what was asked (an .mp4 without ffmpeg becomes a .gif). VideoError when imageio is
    missing, the extension is neither .mp4 nor .gif (no extension: .mp4), or the file cannot
    be written there (`output_file_problem`)."""
    if not installed("imageio"):
        raise VideoError(f"{flag} needs imageio: {INSTALL_HINT}")
    root, ext = os.path.splitext(path)
    if not ext:
        path, ext = path + ".mp4", ".mp4"
    if ext.lower() not in FORMATS:
        raise VideoError(f"{flag}={path}: the file must end in .mp4 or .gif")
    note = None
    if ext.lower() == ".mp4" and not ffmpeg_available():
        path = root + ".gif"
        note = f"{flag}: ffmpeg is not available ({INSTALL_HINT}): writing {path} instead"
    problem = output_file_problem(path)
    if problem:
        raise VideoError(f"{flag}={path}: {problem}; give a file in a folder you can write to")
    return path, note


def output_file_problem(path: str) -> Optional[str]:
    """Why a file cannot be written at `path` (None when it can): the path is a folder, or its
    folder cannot be made or written to. Found out by making the missing folders and a file
    in them; what was made to find out is removed again, so a command that fails later leaves
    nothing behind (the writer makes the folders once it writes)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return "is a folder, not a file"
    folder = os.path.dirname(path)
    missing = []  # the folders to make, deepest first
    parent = folder
    while not os.path.isdir(parent):
        if os.path.lexists(parent):
            return f"{parent} is not a folder"
        missing.append(parent)
        parent = os.path.dirname(parent)
    made = []
    try:
        for d in reversed(missing):
            os.mkdir(d)
            made.append(d)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write_test_")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        what = "make the folder" if len(made) < len(missing) else "write in"
        where = missing[len(missing) - 1 - len(made)] if len(made) < len(missing) else folder
        return f"cannot {what} {where} ({e.strerror})"
    finally:
        for d in reversed(made):
            try:
                os.rmdir(d)
            except OSError:  # something else has appeared there meanwhile: leave it
                break
    return None


def episode_end_frame(env, before: Any) -> Any:
    """The frame of an episode's last state, after the step that ended it: an env that resets
    itself has already begun the next episode, so its render() shows that one; one that keeps
    the end's render in `final_frame` (the built-in multi-agent envs, the PettingZoo adapters,
    single-agent envs through the trainer's wrapper) gives it, any other `before` (the frame
    before the last action)."""
    final = getattr(env, "final_frame", None)
    return before if final is None else final


def render_problem(env, env_name: str) -> Optional[str]:
    """None when `env.render()` (made with render_mode="rgb_array", after a reset) gives an
    image; else one line for `--save_video` saying what the env must do."""
    need = (
        f"--save_video: env {env_name} does not render frames; its render() must return an "
        "HxWx3 uint8 image when the env is made with render_mode='rgb_array'"
    )
    try:
        frame = env.render()
    except NotImplementedError:
        return need
    except Exception as e:  # the env's own error: named, not a traceback
        return f"{need} (render() raised {type(e).__name__}: {e})"
    if frame is None:
        return need
    shape = getattr(frame, "shape", None)
    if shape is None:
        return f"{need} (it returned a {type(frame).__name__})"
    if not (len(shape) == 2 or (len(shape) == 3 and shape[2] in (3, 4))):
        return f"{need} (it returned an array of shape {tuple(shape)})"
    return None


def env_fps(env, default: float = 30.0) -> float:
    """Frames per second that replay `env` at its own pace: `metadata["render_fps"]`, divided
    by the game tics one step covers when the env (or its `settings`) names a `frameskip`.
    Looks through one `.env` layer (a 1-agent env wrapped as a multi-agent one)."""
    inner = getattr(env, "env", env)
    fps = (getattr(inner, "metadata", None) or getattr(env, "metadata", None) or {}).get(
        "render_fps"
    )
    skip = getattr(inner, "frameskip", None) or getattr(
        getattr(inner, "settings", None), "frameskip", None
    )
    return float(fps or default) / max(1, int(skip or 1))


def fit_frame(frame: np.ndarray, min_width: int = MIN_WIDTH, block: int = BLOCK) -> np.ndarray:
    """An HxWx3 uint8 frame at least `min_width` wide (scaled up by a whole factor, pixels
    kept sharp) with both sizes padded with black to a multiple of `block`. Grey frames
    (HxW) become RGB; an alpha channel is dropped."""
    img = np.asarray(frame)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    if img.ndim != 3 or img.shape[2] not in (3, 4):
        raise ValueError(f"expected an HxWx3 frame, got shape {img.shape}")
    img = img[:, :, :3]
    if img.dtype != np.uint8:
        img = np.clip(img, 0, 255).astype(np.uint8)
    scale = max(1, -(-min_width // img.shape[1]))
    if scale > 1:
        img = np.repeat(np.repeat(img, scale, axis=0), scale, axis=1)
    h, w = img.shape[:2]
    pad_h, pad_w = -h % block, -w % block
    if pad_h or pad_w:
        img = np.pad(img, ((0, pad_h), (0, pad_w), (0, 0)))
    return np.ascontiguousarray(img)


class VideoWriter:
    """Frames in, one video file out: `append` each frame, then `close` (or use `with`).

    Frames stream to ffmpeg for an .mp4 (memory stays flat); a .gif is assembled on close.
    The file is written under a temporary name and renamed when complete, so an interrupted
    run leaves no half-written video. Every frame must have the size of the first.
    """

    def __init__(self, path: str, fps: float):
        ext = os.path.splitext(path)[1].lower()
        if ext not in FORMATS:
            raise VideoError(f"video {path}: the file must end in .mp4 or .gif")
        self.path, self.fps, self.ext = path, float(fps), ext
        folder, base = os.path.split(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        self._tmp = os.path.join(folder, f".partial_{base}")
        self._gif_frames: list[np.ndarray] = []
        self._mp4 = None
        self._shape: Optional[tuple[int, ...]] = None
        self.frames = 0

    def append(self, frame: np.ndarray) -> None:
        img = fit_frame(frame)
        if self._shape is None:
            self._shape = img.shape
        elif img.shape != self._shape:
            raise ValueError(f"frame of shape {img.shape} in a video of {self._shape}")
        if self.ext == ".gif":
            self._gif_frames.append(img)
        else:
            if self._mp4 is None:
                import imageio.v2 as imageio

                self._mp4 = imageio.get_writer(
                    self._tmp,
                    format="FFMPEG",
                    mode="I",
                    fps=self.fps,
                    codec="libx264",
                    quality=8,
                    macro_block_size=BLOCK,
                    ffmpeg_log_level="error",
                )
            self._mp4.append_data(img)
        self.frames += 1

    def close(self) -> int:
        """Finishes the file (nothing is written without frames); returns the frame count."""
        try:
            if self._mp4 is not None:
                self._mp4.close()
                self._mp4 = None
            elif self._gif_frames:
                import imageio.v3 as iio

                # GIF timing is in whole hundredths of a second
                duration = max(20, int(round(100.0 / self.fps)) * 10)
                iio.imwrite(
                    self._tmp,
                    np.stack(self._gif_frames),
                    extension=".gif",
                    duration=duration,
                    loop=0,
                )
                self._gif_frames = []
            if self.frames:
                os.replace(self._tmp, self.path)
        finally:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)
        return self.frames

    def abort(self) -> None:
        """Drops the video: no file is left behind."""
        self._gif_frames = []
        self.frames = 0
        self.close()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
