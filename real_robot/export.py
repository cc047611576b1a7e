"""Export a trained state-based controller: TorchScript, ONNX, and dependency-free C for small MLPs.

    controller = Controller.from_policy(policy)      # obs normalizer + actor mean, deterministic
    export_torchscript(controller, "policy.pt")
    export_onnx(controller, "policy.onnx")
    export_c(controller, "policy.c")                 # void policy_forward(const float *obs, float *action)

A `Controller` is what runs on the robot: action = actor((obs - mean) * rsqrt(var + eps)), the
deterministic action of a Gaussian MLP policy (`policies/mlp.py` layout: `state_norm`, `actor`),
without clipping (the robot's safety layer clips). The C file holds the weights as `const float`
arrays and a forward pass with the normalizer and activations, in plain C99 with only <math.h>,
as "Learning to Fly in Seconds" (Eschmann et al. 2024) runs its policy on the Crazyflie's MCU.
"""

from __future__ import annotations

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
    """obs [B, D] -> action [B, A]: the normalizer and the actor MLP of a state-based policy."""

    def __init__(self, mean: torch.Tensor, inv_std: torch.Tensor, actor: nn.Sequential):
        super().__init__()
        self.register_buffer("mean", mean.detach().float().clone())
        self.register_buffer("inv_std", inv_std.detach().float().clone())
        self.actor = actor

    @classmethod
    def from_policy(cls, policy: nn.Module) -> Controller:
        """From a policy with `actor` (nn.Sequential of Linear and activations) and `state_norm`."""
        if not isinstance(getattr(policy, "actor", None), nn.Sequential):
            raise TypeError(f"{type(policy).__name__} has no `actor` nn.Sequential; export supports MLP policies")
        actor = _copy_actor(policy.actor)
        norm = policy.state_norm
        dim = actor[0].in_features
        if hasattr(norm, "mean"):
            inv_std = torch.rsqrt(norm.var + norm.eps)  # exactly as RunningNorm.forward computes it
            return cls(norm.mean, inv_std, actor)
        return cls(torch.zeros(dim), torch.ones(dim), actor)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor((obs - self.mean) * self.inv_std)


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
    example = torch.zeros(1, controller.mean.numel())
    with warnings.catch_warnings():  # torch 2.13 marks TorchScript deprecated; it still is what C++ runtimes load
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.trace(controller.eval(), example)
    scripted.save(str(path))
    return Path(path)


def export_onnx(controller: Controller, path: str | Path, dynamo: bool = False) -> Path:
    """ONNX with a dynamic batch dimension; input "obs" [B, D], output "action" [B, A].

    The TorchScript-based exporter by default: 0.7 s for a small MLP against 13.5 s cold for the
    torch.export-based one (measured on 2 loaded cores); it is deprecated, so `dynamo=True` is ready."""
    example = torch.zeros(1, controller.mean.numel())
    names = {"input_names": ["obs"], "output_names": ["action"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if dynamo:
            torch.onnx.export(controller.eval(), (example,), str(path), **names, dynamo=True, verbose=False,
                              dynamic_shapes=({0: torch.export.Dim("batch")},))  # fmt: skip
        else:
            torch.onnx.export(controller.eval(), (example,), str(path), **names, dynamo=False,
                              dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}})  # fmt: skip
    return Path(path)


def _array(name: str, values: torch.Tensor) -> str:
    flat = ", ".join(f"{v:.8e}f" for v in values.detach().float().reshape(-1).tolist())  # 9 significant digits: exact float32
    return f"static const float {name}[{values.numel()}] = {{{flat}}};"


def export_c(controller: Controller, path: str | Path, prefix: str = "policy") -> Path:
    """A C99 source file with `void <prefix>_forward(const float *obs, float *action)` and the sizes as macros."""
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
