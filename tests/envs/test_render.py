"""``funrl.envs.render`` and ``write_video``: clear errors always; frames where an OpenGL backend works.

MuJoCo picks its OpenGL backend from ``MUJOCO_GL`` when it is first imported, so the tests that
need a real backend run in a fresh interpreter with the variable set; the rest replace
``mujoco.Renderer`` by a recording double (no OpenGL) to check what ``render`` asks it to draw.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
import torch

import funrl.envs as E
from funrl import random
from funrl import tree as ftree
from funrl.envs.wrappers import EpisodeStatistics

# funrl.envs.render is the function; the module is reached by its full name.
render_module = importlib.import_module("funrl.envs.render")


class RecordingRenderer:
    """Stands in for ``mujoco.Renderer``: each frame is filled with the drawn state's time (in ms)."""

    def __init__(self, model, height: int, width: int) -> None:
        self.height, self.width = height, width
        self.closed = False
        self.cameras: list = []

    def update_scene(self, data, camera) -> None:
        self.value = round(data.time * 1000) % 256
        self.cameras.append(camera)

    def render(self) -> np.ndarray:
        return np.full((self.height, self.width, 3), self.value, dtype=np.uint8)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> list[RecordingRenderer]:
    made: list[RecordingRenderer] = []

    def make(model, height: int, width: int) -> RecordingRenderer:
        made.append(RecordingRenderer(model, height, width))
        return made[-1]

    monkeypatch.setattr(render_module.mujoco, "Renderer", make)
    return made


def hopper_states(times: list[int]) -> tuple[E.Environment, object, object]:
    """A Hopper and a batch of its reset states whose physics time is ``times`` milliseconds."""
    env, params = E.make("Hopper-v5")
    _, state = E.vmap(env, len(times)).reset(random.key(0), params)
    physics = state.physics.clone()
    physics[:, 0] = torch.tensor(times, dtype=torch.float64) / 1000
    return env, params, state._replace(physics=physics)


# -- clear errors -------------------------------------------------------------------------------


def test_a_non_mujoco_env_is_refused_by_name() -> None:
    env, params = E.make("CartPole-v1")
    _, state = env.reset(random.key(0), params)
    with pytest.raises(TypeError, match=r"env: expected a MuJoCo environment.*'CartPole-v1'"):
        E.render(env, state, params)


def test_a_state_without_mujoco_physics_is_refused() -> None:
    env, params = E.make("Hopper-v5")
    with pytest.raises(TypeError, match=r"state: expected a tree holding one .*MujocoState.*found 0"):
        E.render(env, {"obs": torch.zeros(11)}, params)
    _, state = env.reset(random.key(0), params)
    with pytest.raises(ValueError, match=r"state: expected physics of shape \[\.\.\., 13\].*got \(12,\)"):
        E.render(env, state._replace(physics=state.physics[:-1]), params)
    _, cheetah_state = E.make("HalfCheetah-v5")[0].reset(random.key(0), E.make("HalfCheetah-v5")[1])
    with pytest.raises(ValueError, match=r"\[\.\.\., 13\].*got \(19,\)"):
        E.render(env, cheetah_state, params)


@pytest.mark.parametrize("name, value", [("width", 0), ("height", -3), ("width", 2.5), ("height", True)])
def test_a_bad_size_is_refused(name: str, value: object) -> None:
    env, params = E.make("Hopper-v5")
    _, state = env.reset(random.key(0), params)
    with pytest.raises(ValueError, match=rf"{name}: expected a positive int \(pixels\), got {value!r}"):
        E.render(env, state, params, **{name: value})


def test_a_failing_backend_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_context(model, height: int, width: int):
        raise AttributeError("'NoneType' object has no attribute 'glGetError'")

    monkeypatch.setattr(render_module.mujoco, "Renderer", no_context)
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    env, params = E.make("Hopper-v5")
    _, state = env.reset(random.key(0), params)
    with pytest.raises(
        RuntimeError, match=r"no working OpenGL backend \(MUJOCO_GL='osmesa': AttributeError.*MUJOCO_GL=egl"
    ):
        E.render(env, state, params)


@pytest.mark.parametrize(
    "frames, message",
    [
        (torch.zeros(2, 4, 4, 3), r"frames: expected uint8 frames of shape \[T, H, W, 3\], got float32"),
        (np.zeros((4, 4, 3), np.uint8), r"got uint8 array of shape \(4, 4, 3\)"),
        (np.zeros((2, 4, 4, 4), np.uint8), r"got uint8 array of shape \(2, 4, 4, 4\)"),
        ([[0]], r"got list"),
        (np.zeros((0, 4, 4, 3), np.uint8), r"frames: expected at least one frame, got none"),
    ],
)
def test_write_video_refuses_bad_frames(frames: object, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        E.write_video(frames, tmp_path / "v.gif")


def test_write_video_refuses_bad_paths_and_rates(tmp_path: Path) -> None:
    frames = np.zeros((2, 4, 4, 3), np.uint8)
    with pytest.raises(
        ValueError, match=r"path: expected a file name ending in \.gif or \.mp4, got '.*v\.avi'"
    ):
        E.write_video(frames, tmp_path / "v.avi")
    for fps in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match=r"fps: expected a positive number"):
            E.write_video(frames, tmp_path / "v.gif", fps=fps)


def test_mp4_without_ffmpeg_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import then raises ImportError
    with pytest.raises(RuntimeError, match=r"needs the imageio-ffmpeg package"):
        E.write_video(np.zeros((2, 4, 4, 3), np.uint8), tmp_path / "v.mp4")


# -- what render draws (a recording renderer, no OpenGL) ----------------------------------------


def test_one_frame_per_state_in_order_with_the_batch_shape(recording: list[RecordingRenderer]) -> None:
    env, params, state = hopper_states([5, 17, 42, 99, 123, 200])
    frames = E.render(env, state, params, width=8, height=6)
    assert frames.dtype == torch.uint8 and frames.shape == (6, 6, 8, 3)
    assert frames[:, 0, 0, 0].tolist() == [5, 17, 42, 99, 123, 200]
    grid = ftree.map(lambda x: x.reshape(2, 3, *x.shape[1:]), state)
    assert E.render(env, grid, params, width=8, height=6).shape == (2, 3, 6, 8, 3)
    single = ftree.map(lambda x: x[2], state)
    frame = E.render(env, single, params, width=8, height=6)
    assert frame.shape == (6, 8, 3) and int(frame[0, 0, 0]) == 42
    assert all(r.closed for r in recording)


def test_batched_and_wrapped_envs_and_their_states(recording: list[RecordingRenderer]) -> None:
    env, params, state = hopper_states([7, 9])
    batched = E.vmap(env, 2)
    assert E.render(batched, state, params, width=4, height=4)[:, 0, 0, 0].tolist() == [7, 9]
    wrapped = EpisodeStatistics(env)
    _, wrapped_state = wrapped.reset(random.key(1), params)
    wrapped_state = wrapped_state._replace(env_state=ftree.map(lambda x: x[1], state))
    assert int(E.render(wrapped, wrapped_state, params, width=4, height=4)[0, 0, 0]) == 9


def test_the_camera_is_gymnasiums_tracking_the_robot(recording: list[RecordingRenderer]) -> None:
    import gymnasium.envs.mujoco.hopper_v5 as hopper_v5
    import mujoco

    env, params, state = hopper_states([1])
    E.render(env, state, params, width=4, height=4)
    camera = recording[-1].cameras[0]
    config = hopper_v5.DEFAULT_CAMERA_CONFIG
    assert camera.type == mujoco.mjtCamera.mjCAMERA_TRACKING
    assert camera.trackbodyid == config["trackbodyid"] and camera.distance == config["distance"]
    assert camera.elevation == config["elevation"] and np.array_equal(camera.lookat, config["lookat"])


def test_a_frame_larger_than_the_offscreen_buffer_leaves_the_env_model_alone(
    recording: list[RecordingRenderer],
) -> None:
    env, params, state = hopper_states([3])
    offwidth = env.model.vis.global_.offwidth
    frames = E.render(env, state, params, width=offwidth + 160, height=8)
    assert frames.shape == (1, 8, offwidth + 160, 3)
    assert env.model.vis.global_.offwidth == offwidth


def test_write_video_gif_round_trip(tmp_path: Path) -> None:
    colours = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8)
    frames = np.broadcast_to(colours[:, None, None, :], (3, 6, 8, 3)).copy()
    frames[1, :2] = 255  # each frame distinct, few colours, so GIF's palette is exact
    path = E.write_video(torch.from_numpy(frames), tmp_path / "clip.gif", fps=10)
    back = iio.imread(path, index=None)
    assert back.shape[0] == 3 and np.array_equal(back[..., :3], frames)


def test_write_video_mp4(tmp_path: Path) -> None:
    pytest.importorskip("imageio_ffmpeg", reason="MP4 needs imageio-ffmpeg (not installed here)")
    frames = np.zeros((5, 16, 16, 3), np.uint8)
    frames[:, :, :8] = 200
    path = E.write_video(frames, tmp_path / "clip.mp4", fps=5)
    back = iio.imread(path, index=None, plugin="FFMPEG")
    assert back.shape == (5, 16, 16, 3)
    assert np.abs(back.astype(int) - frames).mean() < 8  # lossy codec, same picture


# -- real frames, in a fresh interpreter per backend ----------------------------------------------

RENDER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import funrl.envs as E
    from funrl import random, tree
    env, params = E.make("HalfCheetah-v5")
    _, states = E.vmap(env, 3).reset(random.key(0), params)
    try:
        frames = E.render(env, states, params, width=64, height=48)
    except RuntimeError as err:
        print(json.dumps({"error": str(err)}))
        sys.exit(0)
    again = E.render(env, tree.map(lambda x: x[1], states), params, width=64, height=48)
    np.save(sys.argv[1], np.stack([*frames.numpy(), again.numpy()]))
    print(json.dumps({"error": None}))
    """
)


def run_with_backend(backend: str | None, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")
    }
    if backend is not None:
        env["MUJOCO_GL"] = backend
    return subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_renders_frames_where_a_backend_works(tmp_path: Path) -> None:
    failures = []
    for backend in ("egl", "osmesa"):
        out = tmp_path / f"{backend}.npy"
        result = run_with_backend(backend, RENDER_SCRIPT, str(out))
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            failures.append(f"MUJOCO_GL={backend}: {result.stderr.strip().splitlines()[-1:]}")
            continue
        error = json.loads(lines[-1])["error"]
        if error is not None:
            assert f"MUJOCO_GL={backend!r}" in error
            failures.append(error)
            continue
        frames = np.load(out)
        assert frames.shape == (4, 48, 64, 3) and frames.dtype == np.uint8
        assert frames.std() > 10, "the frames are blank"
        assert np.array_equal(frames[1], frames[3]), "one state renders the same alone and in a batch"
        assert not np.array_equal(frames[0], frames[1]), "two reset states render alike"
        return
    pytest.skip("no OpenGL backend works here: " + " | ".join(failures))


@pytest.mark.slow
def test_without_a_display_glfw_fails_with_the_backend_named() -> None:
    script = textwrap.dedent(
        """
        import funrl.envs as E
        from funrl import random
        env, params = E.make("Hopper-v5")
        _, state = env.reset(random.key(0), params)
        E.render(env, state, params)
        """
    )
    result = run_with_backend("glfw", script)
    assert result.returncode != 0
    assert (
        "RuntimeError: render: mujoco.Renderer found no working OpenGL backend (MUJOCO_GL='glfw'"
        in result.stderr
    )
