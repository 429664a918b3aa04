"""Videos of arena games (rl_pbt.logging.video, `launch.match --save_video`): frames read back
at the expected count and size, the players visible in their team colours."""

import glob
import os

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401
from launch import match
from launch.match import RandomActor, make_player
from rl_pbt.envs.registry import make_env
from rl_pbt.envs.wrappers import as_multiagent
from rl_pbt.logging import video
from rl_pbt.logging.video import VideoWriter, env_fps, fit_frame

iio = pytest.importorskip("imageio.v3")

BLUE, RED = (50, 110, 255), (235, 55, 45)  # the duel's two players (envs/arena/game.py)
HUD_PX = 32  # the status strip on top of an arena frame, where the colours appear as well


def arena_frames(steps: int) -> list[np.ndarray]:
    """`steps` frames of a scripted chaser against a random player."""
    env = as_multiagent(make_env("arena_duel", None, {"env_id": 0}, render_mode="rgb_array"))
    chaser = make_player("chaser", env, None, 1)()
    rand = RandomActor(env.action_space, 2)
    obs, _ = env.reset(seed=3)
    frames = []
    for _ in range(steps):
        frames.append(env.render())
        obs, *_ = env.step([chaser.act(obs[0]), rand.act(obs[1])])
    assert env_fps(env) == 15
    return frames


def colour_pixels(frame: np.ndarray, colour, tol: int = 40) -> int:
    """Pixels of the floor (below the status strip) within `tol` of `colour` per channel."""
    diff = np.abs(frame[HUD_PX:].astype(np.int32) - np.array(colour))
    return int(np.all(diff <= tol, axis=-1).sum())


@pytest.mark.parametrize("ext", [".mp4", ".gif"])
def test_arena_video_reads_back(tmp_path, ext):
    frames = arena_frames(36)
    path = str(tmp_path / f"duel{ext}")
    with VideoWriter(path, 15) as writer:
        for frame in frames:
            writer.append(frame)
    assert writer.frames == 36 and os.listdir(tmp_path) == [f"duel{ext}"]  # no partial file
    back = iio.imread(path)
    assert back.shape[1:] == (416, 416, 3)
    if ext == ".mp4":
        assert len(back) == 36
    else:  # GIF merges repeated frames into one longer frame: the play time tells the count
        durations = [iio.immeta(path, index=k)["duration"] for k in range(len(back))]
        assert len(back) <= 36 and sum(durations) == 36 * 70
    for k in (0, 17, len(back) - 1):
        assert back[k].std() > 20  # not blank
        assert colour_pixels(back[k], BLUE) > 100 and colour_pixels(back[k], RED) > 100, k


def test_match_save_video(tmp_path, capsys):
    path = tmp_path / "game.gif"
    args = ["--env=arena_duel", "--players", "chaser", "random", "--games=2"]
    assert match.main(args + ["--save_video", str(path)]) == 0
    assert str(path) in capsys.readouterr().out
    assert iio.imread(path).shape[1:] == (416, 416, 3)
    # without a path: under --train_dir (no experiment here), named after the pair
    assert match.main(args + [f"--train_dir={tmp_path}", "--save_video"]) == 0
    (saved,) = glob.glob(str(tmp_path / "videos" / "chaser_vs_random_*.mp4"))
    assert saved in capsys.readouterr().out
    first = iio.imread(saved)[0]
    assert colour_pixels(first, BLUE) > 100 and colour_pixels(first, RED) > 100


def test_missing_imageio_or_ffmpeg(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(video, "ffmpeg_available", lambda: False)
    args = ["--env=arena_duel", "--players", "chaser", "random", "--games=2"]
    assert match.main(args + ["--save_video", str(tmp_path / "g.mp4")]) == 0
    out = capsys.readouterr().out
    assert "ffmpeg" in out and str(tmp_path / "g.gif") in out and (tmp_path / "g.gif").exists()
    monkeypatch.setattr(video, "installed", lambda module: module != "imageio")
    assert match.main(args + ["--save_video"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and 'pip install "rl_pbt[video]"' in err


def test_fit_frame_scales_small_frames_and_pads_to_blocks():
    doom = np.full((72, 128, 3), 7, dtype=np.uint8)  # a Doom observation
    assert fit_frame(doom).shape == (144, 256, 3) and fit_frame(doom).min() == 7
    cartpole = fit_frame(np.ones((400, 600, 3), dtype=np.uint8))
    assert cartpole.shape == (400, 608, 3) and cartpole[:, 600:].max() == 0


class _Renders:
    """An env whose render() does what it is told: `how` is a value to return or an
    exception to raise."""

    def __init__(self, how):
        self.how = how

    def render(self):
        if isinstance(self.how, BaseException):
            raise self.how
        return self.how


@pytest.mark.parametrize(
    "how, words",
    [
        (NotImplementedError(), None),
        (None, None),
        (RuntimeError("no display"), "render() raised RuntimeError: no display"),
        ("a string", "it returned a str"),
        (np.zeros((3, 64, 64), np.uint8), "it returned an array of shape (3, 64, 64)"),
    ],
)
def test_an_env_that_renders_no_frames_is_one_line(how, words):
    problem = video.render_problem(_Renders(how), "my_env")
    assert problem.startswith("--save_video: env my_env does not render frames; its render()")
    assert "render_mode='rgb_array'" in problem and "\n" not in problem
    if words:
        assert problem.endswith(f"({words})")


def test_an_env_that_renders_images_passes():
    assert video.render_problem(_Renders(np.zeros((4, 5, 3), np.uint8)), "my_env") is None
    assert video.render_problem(_Renders(np.zeros((4, 5), np.uint8)), "my_env") is None
    assert video.render_problem(_Renders(np.zeros((4, 5, 4), np.uint8)), "my_env") is None


class Ticker(gym.Env):
    """One agent; every pixel of its frame is 40 x the steps taken in the episode, which lasts
    5 steps: the frame of its last state is all 200."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, render_mode=None):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.render_mode, self.t = render_mode, 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t == 5
        return np.zeros(1, np.float32), 1.0, done, False, {"true_objective": 1.0} if done else {}

    def render(self):
        return np.full((64, 64, 3), 40 * self.t, np.uint8)


class Still:
    def act(self, obs) -> int:
        return 0

    def reset(self) -> None:
        pass


def test_a_video_ends_on_the_last_state_of_the_game(tmp_path):
    """The env resets itself in the step that ends an episode, so its render() afterwards shows
    the next one: before, a video stopped one state early (a connect four game without its
    winning move) and held the state before the last action."""
    env = as_multiagent(Ticker(render_mode="rgb_array"))
    path = tmp_path / "ticker.gif"
    match.save_video(env, ["a", "b"], {"a": Still, "b": Still}, str(path))
    shown = [int(frame[0, 0, 0]) for frame in iio.imread(path, index=None)]
    assert sorted(set(shown)) == [0, 40, 80, 120, 160, 200]
    assert shown[-1] == 200  # held on the end


def test_the_arena_keeps_the_frame_of_a_finished_game():
    env = as_multiagent(make_env("arena_duel", None, {"env_id": 0}, render_mode="rgb_array"))
    chaser = make_player("chaser", env, None, 1)()
    obs, _ = env.reset(seed=3)
    for _ in range(400):
        before = env.render()
        obs, _, term, trunc, _ = env.step([chaser.act(obs[0]), 0])
        if term[0] or trunc[0]:
            break
    assert term[0] or trunc[0]
    end, after = env.final_frame, env.render()
    assert end.shape == before.shape
    assert not np.array_equal(end, after)  # not the next game's start
    assert not np.array_equal(end, before)  # the game's last state, one step on
