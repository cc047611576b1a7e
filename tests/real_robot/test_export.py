"""Export: TorchScript, ONNX and a C file compiled with the system compiler, against torch; image policies
(TorchScript and ONNX) from a spec and, through `embodied deploy --export`, from a MuJoCo camera env's checkpoint."""

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from embodied import registry
from embodied.cli import deploy_cmd
from embodied.runner import checkpoint
from embodied.specs import Spec
from real_robot.export import Controller, export_c, export_onnx, export_torchscript


@pytest.fixture(params=["elu", "tanh", "relu", "silu"])
def policy(request):
    torch.manual_seed(0)
    p = registry.build("policy", "mlp", {"activation": request.param, "actor_hidden": [32, 16]},
                       observation_spec={"state": Spec((26,))}, action_spec=Spec((4,), low=-1, high=1))
    p.state_norm.update(torch.randn(512, 26) * 3 + 1)  # a non-trivial normalizer
    for m in p.actor:  # weights of trained size, not the tiny init of the last layer
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, std=0.5)
            torch.nn.init.normal_(m.bias, std=0.5)
    return p


def reference(policy, obs):
    return policy.act(TensorDict({"state": obs}, [obs.shape[0]]), deterministic=True).action.detach()


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_c_controller_matches_torch(policy, tmp_path):
    controller = Controller.from_policy(policy)
    src = export_c(controller, tmp_path / "policy.c")
    text = src.read_text()
    assert "#include <math.h>" in text and "static const float policy_w0" in text and "#include <torch" not in text
    lib = tmp_path / "policy.so"
    subprocess.run(["cc", "-std=c99", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(lib), str(src), "-lm"],
                   check=True, capture_output=True)
    forward = ctypes.CDLL(str(lib)).policy_forward
    obs = torch.randn(200, 26) * 3 + 1
    expected = reference(policy, obs).numpy()
    out = np.zeros(4, np.float32)
    for row, exp in zip(obs.numpy().astype(np.float32), expected):
        forward(row.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p))
        np.testing.assert_allclose(out, exp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("policy", ["elu"], indirect=True)  # the exporters are slow (~seconds); one activation
def test_torchscript_and_onnx_match_torch(policy, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    controller = Controller.from_policy(policy)
    obs = torch.randn(64, 26) * 3 + 1
    expected = reference(policy, obs)
    with pytest.warns(DeprecationWarning):  # torch.jit.load is deprecated in torch 2.13; C++ runtimes still load it
        scripted = torch.jit.load(str(export_torchscript(controller, tmp_path / "p.pt")))
    torch.testing.assert_close(scripted(obs), expected, atol=1e-6, rtol=0)
    session = ort.InferenceSession(str(export_onnx(controller, tmp_path / "p.onnx")))
    np.testing.assert_allclose(session.run(None, {"state": obs.numpy()})[0], expected.numpy(), atol=1e-5, rtol=0)


def test_non_mlp_is_a_clear_error():
    with pytest.raises(TypeError, match="no `actor`"):
        Controller.from_policy(torch.nn.Linear(3, 3))


CAMERAS = {"front": (16, 16, 3), "wrist": (12, 20, 3)}  # two cameras, one not square: shapes reach the exporters


@pytest.fixture(params=["spatial_softmax", "avg"])
def image_policy(request):
    torch.manual_seed(0)
    spec = {"state": Spec((7,)), **{f"images/{c}": Spec(s, torch.uint8, 0, 255) for c, s in CAMERAS.items()}}
    p = registry.build("policy", "mlp", {"images": True, "image_pool": request.param, "image_channels": [4, 8, 8],
                                         "image_features": 8, "actor_hidden": [32], "critic_hidden": [8]},
                       observation_spec=spec, action_spec=Spec((3,), low=-1, high=1))
    p.state_norm.update(torch.randn(512, 7) * 3 + 1)
    for m in p.actor:  # trained-size weights: the image features move the action by more than the tolerance
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, std=0.5)
    return p, spec


def random_images(batch, seed):
    g = torch.Generator().manual_seed(seed)
    return {c: torch.randint(0, 256, (batch, *s), dtype=torch.uint8, generator=g) for c, s in CAMERAS.items()}


def test_image_policy_torchscript_and_onnx_match_torch(image_policy, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    policy, spec = image_policy
    controller = Controller.from_policy(policy, spec)
    assert controller.cameras == ["front", "wrist"]
    assert controller.onnx_input_names() == ["state", "image_front", "image_wrist"]
    state, images = torch.randn(5, 7) * 3 + 1, random_images(5, seed=1)
    expected = policy.act(TensorDict({"state": state, "images": images}, [5]), deterministic=True).action.detach()
    with pytest.warns(DeprecationWarning):  # torch.jit.load, as above
        scripted = torch.jit.load(str(export_torchscript(controller, tmp_path / "p.pt")))
    torch.testing.assert_close(scripted(state, images["front"], images["wrist"]), expected, atol=1e-4, rtol=0)
    session = ort.InferenceSession(str(export_onnx(controller, tmp_path / "p.onnx")))
    assert [i.name for i in session.get_inputs()] == ["state", "image_front", "image_wrist"]
    feed = {"state": state.numpy(), "image_front": images["front"].numpy(), "image_wrist": images["wrist"].numpy()}
    action = session.run(None, feed)[0]
    np.testing.assert_allclose(action, expected.numpy(), atol=1e-4, rtol=0)
    # the images are read: a black wrist image in place of the noise alone moves the exported action (10x the tolerance;
    # not another noise image: average pooling barely tells two noise images apart)
    black = torch.zeros_like(images["wrist"])
    moved = session.run(None, {**feed, "image_wrist": black.numpy()})[0]
    assert np.abs(moved - action).max() > 1e-3
    assert (scripted(state, images["front"], black) - torch.from_numpy(action)).abs().max() > 1e-3


def test_image_controller_errors(image_policy, tmp_path):
    policy, spec = image_policy
    with pytest.raises(ValueError, match="observation_spec .*missing: images/front, images/wrist"):
        Controller.from_policy(policy)
    controller = Controller.from_policy(policy, spec)
    with pytest.raises(ValueError, match="C export is state-only.*front, wrist.*export_torchscript or export_onnx"):
        export_c(controller, tmp_path / "p.c")
    with pytest.raises(ValueError, match="2 images .*got 1"):
        controller(torch.zeros(1, 7), torch.zeros(1, 16, 16, 3, dtype=torch.uint8))


def test_deploy_export_of_a_camera_policy(tmp_path, capsys):
    """`embodied deploy <run> --export` on a checkpoint of a pixel policy of the MuJoCo reach env (two 16 px cameras):
    TorchScript and ONNX written, C skipped with a notice."""
    pytest.importorskip("mujoco")
    config = {"env": {"name": "mujoco_reach", "cameras": ["front", "side"], "image_size": 16, "goal_in_state": False},
              "policy": {"name": "mlp", "images": True, "image_channels": [4, 8, 8], "image_features": 8,
                         "actor_hidden": [16], "critic_hidden": [16]},
              "device": "cpu"}  # the keys `export` reads of a run's config, as `embodied train` saves it
    env = registry.build("env", "mujoco_reach", {k: v for k, v in config["env"].items() if k != "name"}, num_envs=1)
    policy = registry.build("policy", "mlp", {k: v for k, v in config["policy"].items() if k != "name"},
                            observation_spec=env.observation_spec, action_spec=env.action_spec)
    checkpoint.save_checkpoint(tmp_path / "run" / "checkpoints" / "final", policy.state_dict(), {}, config)
    assert deploy_cmd([str(tmp_path / "run"), "--export", str(tmp_path / "out")]) == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"policy.pt", "policy.onnx"}
    out = capsys.readouterr().out
    assert "c: skipped: the C export is state-only and this policy reads cameras (front, side)" in out
