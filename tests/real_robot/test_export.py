"""Export: TorchScript, ONNX and a C file compiled with the system compiler, against torch."""

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from embodied import registry
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
    np.testing.assert_allclose(session.run(None, {"obs": obs.numpy()})[0], expected.numpy(), atol=1e-5, rtol=0)


def test_non_mlp_is_a_clear_error():
    with pytest.raises(TypeError, match="no `actor`"):
        Controller.from_policy(torch.nn.Linear(3, 3))
