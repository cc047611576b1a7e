"""Export a trained MLP controller: TorchScript, ONNX, and dependency-free C for state-only MLPs.

    controller = Controller.from_policy(policy)      # obs normalizer + actor mean, deterministic
    export_torchscript(controller, "policy.pt")
    export_onnx(controller, "policy.onnx")           # inputs "state" [B, D] (+ images), output "action" [B, A]
    export_c(controller, "policy.c")                 # void policy_forward(const float *obs, float *action)

A `Controller` is what runs on the robot: action = actor((obs - mean) * rsqrt(var + eps)), the
deterministic action of a Gaussian MLP policy (`policies/mlp.py` layout: `state_norm`, `actor`),
without clipping (the robot's safety layer clips). The C file holds the weights as `const float`
arrays and a forward pass with the normalizer and activations, in plain C99 with only <math.h>,
as "Learning to Fly in Seconds" (Eschmann et al. 2024) runs its policy on the Crazyflie's MCU.

An image policy (`policy.images=true`: a CNN per camera in `image_encoder`) exports with its CNNs:
`Controller.from_policy(policy, env.observation_spec)` (the spec gives each camera's image shape) is
called as controller(state, *images), one uint8 image [B, H, W, 3] per camera in `controller.cameras`
order (sorted names, as the policy concatenates their features), and its actor reads
cat(normalized state, CNN features), as `MLPPolicy.act` does. The TorchScript and ONNX files take the
same inputs; the ONNX ones are named "state" and "image_<camera>" (`onnx_input_names`: characters of
the camera name outside [A-Za-z0-9_] become "_"). The C export stays state-only and refuses an image
controller: a CNN wants a runtime with convolutions (TorchScript, ONNX Runtime).
"""

from __future__ import annotations

import copy
import re
import warnings
from pathlib import Path

import torch
from torch import nn

_C_ACTIVATIONS = {
    nn.ELU: "x > 0.0f ? x : expm1f(x)",  # alpha = 1, torch's default
    nn.Tanh: "tanhf(x)",
    nn.ReLU: "x > 0.0f ? x : 0.0f",
    nn.SiLU: "x / (1.0f + expf(-x))",
}


class Controller(nn.Module):
    """(state [B, D], *images uint8 [B, H, W, 3], one per camera) -> action [B, A]: the normalizer, the camera
    CNNs (none for a state policy) and the actor MLP of an MLP policy."""

    def __init__(self, mean: torch.Tensor, inv_std: torch.Tensor, actor: nn.Sequential,
                 image_encoders: dict[str, nn.Module] | None = None,
                 image_shapes: dict[str, tuple[int, int, int]] | None = None):
        super().__init__()
        self.register_buffer("mean", mean.detach().float().clone())
        self.register_buffer("inv_std", inv_std.detach().float().clone())
        self.actor = actor
        self.image_encoders = nn.ModuleDict(image_encoders or {})
        self.cameras = list(self.image_encoders)
        self.image_shapes = {cam: tuple(image_shapes[cam]) for cam in self.cameras}  # example inputs of the exporters

    @classmethod
    def from_policy(cls, policy: nn.Module, observation_spec: dict | None = None) -> Controller:
        """From a policy with `actor` (nn.Sequential of Linear and activations), `state_norm` and, when it reads
        images, `image_encoder` (policies/common/nets.CameraEncoder); then `observation_spec` (the env's) must give
        each `images/<camera>` shape."""
        if not isinstance(getattr(policy, "actor", None), nn.Sequential):
            raise TypeError(f"{type(policy).__name__} has no `actor` nn.Sequential; export supports MLP policies")
        actor = _copy_actor(policy.actor)
        encoders, shapes = {}, {}
        camera_encoder = getattr(policy, "image_encoder", None)
        if camera_encoder is not None:
            specs = {cam: (observation_spec or {}).get(f"images/{cam}") for cam in camera_encoder.cameras}
            missing = [f"images/{cam}" for cam, spec in specs.items() if spec is None]
            if missing:
                raise ValueError(f"{type(policy).__name__} reads camera images; Controller.from_policy needs the env's "
                                 f"observation_spec with their shapes (missing: {', '.join(missing)})")
            encoders = {cam: copy.deepcopy(camera_encoder[cam]).eval() for cam in camera_encoder.cameras}
            shapes = {cam: spec.shape for cam, spec in specs.items()}
        norm = policy.state_norm
        if hasattr(norm, "mean"):
            inv_std = torch.rsqrt(norm.var + norm.eps)  # exactly as RunningNorm.forward computes it
            return cls(norm.mean, inv_std, actor, encoders, shapes)
        dim = actor[0].in_features - (camera_encoder.dim if camera_encoder is not None else 0)
        return cls(torch.zeros(dim), torch.ones(dim), actor, encoders, shapes)

    def forward(self, state: torch.Tensor, *images: torch.Tensor) -> torch.Tensor:
        if len(images) != len(self.cameras):
            raise ValueError(f"Controller takes the state and {len(self.cameras)} images (cameras {self.cameras}); "
                             f"got {len(images)} images")
        x = (state - self.mean) * self.inv_std
        if self.cameras:  # as MLPPolicy._actor_input: state first, then the features in camera order
            x = torch.cat([x, *(self.image_encoders[cam](image) for cam, image in zip(self.cameras, images))], -1)
        return self.actor(x)

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """Zeros of the input shapes, batch 1: what the exporters trace."""
        images = (torch.zeros(1, *self.image_shapes[cam], dtype=torch.uint8) for cam in self.cameras)
        return (torch.zeros(1, self.mean.numel()), *images)

    def onnx_input_names(self) -> list[str]:
        """The ONNX input names: `state`, then `image_<camera>` per camera, characters outside [A-Za-z0-9_] replaced
        by `_` ("All names MUST adhere to C90 identifier syntax rules", ONNX docs/IR.md, Names Within a Graph)."""
        names = ["state", *(f"image_{re.sub(r'[^A-Za-z0-9_]', '_', cam)}" for cam in self.cameras)]
        if len(set(names)) < len(names):
            raise ValueError(f"cameras {self.cameras} give the same ONNX input name twice: {names}; rename a camera")
        return names


def _copy_actor(actor: nn.Sequential) -> nn.Sequential:
    layers = []
    for layer in actor:
        if isinstance(layer, nn.Linear):
            new = nn.Linear(layer.in_features, layer.out_features)
            new.load_state_dict(layer.state_dict())
            layers.append(new)
        elif type(layer) in _C_ACTIVATIONS:
            layers.append(type(layer)())  # not in place: TorchScript and ONNX prefer pure ops
        else:
            raise TypeError(f"cannot export layer {layer!r}; supported: Linear, {', '.join(a.__name__ for a in _C_ACTIVATIONS)}")
    return nn.Sequential(*layers).eval()


def export_torchscript(controller: Controller, path: str | Path) -> Path:
    """A traced module called as the controller is: (state [B, D], *images [B, H, W, 3] uint8) -> action [B, A]."""
    with warnings.catch_warnings():  # torch 2.13 marks TorchScript deprecated; it still is what C++ runtimes load
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.trace(controller.eval(), controller.example_inputs())
    scripted.save(str(path))
    return Path(path)


def export_onnx(controller: Controller, path: str | Path, dynamo: bool = False) -> Path:
    """ONNX with a dynamic batch dimension; inputs "state" [B, D] and, for an image controller, "image_<camera>"
    uint8 [B, H, W, 3] per camera (`Controller.onnx_input_names`), output "action" [B, A].

    The TorchScript-based exporter by default: 0.7 s for a small MLP against 13.5 s cold for the
    torch.export-based one (measured on 2 loaded cores); it is deprecated, so `dynamo=True` is ready."""
    example = controller.example_inputs()
    inputs = controller.onnx_input_names()
    names = {"input_names": inputs, "output_names": ["action"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if dynamo:
            batch = torch.export.Dim("batch")
            images = tuple({0: batch} for _ in controller.cameras)
            # torch.export binds forward(state, *images): the images as one tuple, absent when there are none
            dynamic = ({0: batch}, images) if images else ({0: batch},)
            torch.onnx.export(controller.eval(), example, str(path), **names, dynamo=True, verbose=False,
                              dynamic_shapes=dynamic)  # fmt: skip
        else:
            torch.onnx.export(controller.eval(), example, str(path), **names, dynamo=False,
                              dynamic_axes={name: {0: "batch"} for name in [*inputs, "action"]})  # fmt: skip
    return Path(path)


def _array(name: str, values: torch.Tensor) -> str:
    flat = ", ".join(f"{v:.8e}f" for v in values.detach().float().reshape(-1).tolist())  # 9 significant digits: exact float32
    return f"static const float {name}[{values.numel()}] = {{{flat}}};"


def export_c(controller: Controller, path: str | Path, prefix: str = "policy") -> Path:
    """A C99 source file with `void <prefix>_forward(const float *obs, float *action)` and the sizes as macros.
    State controllers only: an image controller is refused (its CNNs need TorchScript or ONNX)."""
    if controller.cameras:
        raise ValueError(f"export_c: the C export is state-only (Linear layers and activations), and this controller "
                         f"also reads camera images ({', '.join(controller.cameras)}) through a CNN; export it with "
                         f"export_torchscript or export_onnx (embodied deploy --export writes both)")
    linears = [m for m in controller.actor if isinstance(m, nn.Linear)]
    acts = [m for m in controller.actor if not isinstance(m, nn.Linear)]
    width = max(max(m.out_features for m in linears), linears[0].in_features)
    up = prefix.upper()
    lines = [
        f"/* {prefix}: exported by real_robot.export; obs [{linears[0].in_features}] -> action "
        f"[{linears[-1].out_features}]. Plain C99, needs only <math.h> (link with -lm). */",
        "#include <math.h>", "",
        f"#define {up}_OBS_DIM {linears[0].in_features}", f"#define {up}_ACTION_DIM {linears[-1].out_features}", "",
        _array(f"{prefix}_obs_mean", controller.mean), _array(f"{prefix}_obs_inv_std", controller.inv_std),
    ]  # fmt: skip
    for i, m in enumerate(linears):
        lines += [_array(f"{prefix}_w{i}", m.weight), _array(f"{prefix}_b{i}", m.bias)]
    lines += ["", f"void {prefix}_forward(const float *obs, float *action) {{",
              f"    float a[{width}], b[{width}];", "    int i, j;",
              f"    for (i = 0; i < {up}_OBS_DIM; i++) a[i] = (obs[i] - {prefix}_obs_mean[i]) * {prefix}_obs_inv_std[i];"]  # fmt: skip
    src, dst = "a", "b"
    for i, m in enumerate(linears):
        last = i == len(linears) - 1
        out = "action" if last else dst
        lines += [f"    for (i = 0; i < {m.out_features}; i++) {{",
                  f"        float s = {prefix}_b{i}[i];",
                  f"        for (j = 0; j < {m.in_features}; j++) s += {prefix}_w{i}[i * {m.in_features} + j] * {src}[j];"]  # fmt: skip
        if last:
            lines.append(f"        {out}[i] = s;")
        else:
            expr = _C_ACTIVATIONS[type(acts[i])]
            lines.append(f"        {{ float x = s; {out}[i] = {expr}; }}")
        lines.append("    }")
        src, dst = dst, src
    lines.append("}")
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)
